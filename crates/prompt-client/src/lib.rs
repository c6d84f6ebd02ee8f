//! # prompt-client
//!
//! An async client for cacheline conversations, on reqwest and tokio: it sends a
//! [`Conversation`](prompt_wire::Conversation)'s next body to the API's endpoint as the exact
//! bytes the wire wrote, streams the reply as [`StreamEvent`](prompt_wire::stream::StreamEvent)s
//! a UI shows as they come, and records the reply into the conversation when the stream
//! ends.
//!
//! - [`Client::stream`] composes the next request ([`Next`](prompt_wire::Next): a turn, the
//!   continuation after tool results, a resend) and returns a [`ReplyStream`], a
//!   [`futures_core::Stream`] that borrows the conversation until it ends. Its reply is read
//!   by the sans-IO reader of `prompt_wire::stream` and recorded through the same step as a
//!   whole reply: the same bytes. Dropping the stream before its end records nothing, and
//!   neither does an error, so the same request can be sent again.
//! - [`Client::send`] does the same for a whole (non-streamed) reply, read up to
//!   [`MAX_REPLY_BYTES`](prompt_wire::MAX_REPLY_BYTES).
//! - Each API's URL and headers ([`Endpoint`]): `Authorization: Bearer` (OpenAI, llama.cpp),
//!   `x-api-key` and `anthropic-version` (Anthropic), `x-goog-api-key` and the model in the
//!   path (Gemini), the conversation's routing header, `content-type: application/json`.
//! - A request is sent again only while nothing of its reply has been shown
//!   ([`RetryPolicy`]). A reply whose body breaks off after it began is
//!   [`ClientError::Cut`] (what was shown, where it stopped), apart from
//!   [`ClientError::Transport`] (no response at all).
//! - What the client measures of a stream ([`StreamTiming`]: time to the response, to the
//!   first token, to the end; [`ReplyStream::finish_timed`]); the engine's own figures are
//!   in the reply's usage ([`Reply::figures`](prompt_wire::Reply::figures)).
//! - [`ScriptedServer`]: a loopback server answering with scripted responses, for an
//!   agent's tests offline (and the example below).
//!
//! Bodies never pass through `serde_json::Value`: reqwest's `.json(&value)` sorts a
//! `Value`'s keys, and two consecutive bodies then no longer share their stable part.
//!
//! ```
//! use prompt_client::{Client, Endpoint, ScriptedResponse, ScriptedServer};
//! use prompt_core::session::ToolResult;
//! use prompt_core::tools::{ToolSet, ToolSource};
//! use prompt_core::{ApiKind, Extensions, PromptPolicy, SessionContext};
//! use prompt_wire::stream::StreamEvent;
//! use prompt_wire::{Conversation, Next, WireOptions, compare};
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Two streamed replies, as OpenAI sends them: a tool call, then text.
//! let server = ScriptedServer::start(vec![
//!     ScriptedResponse::sse(concat!(
//!         r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"read_file","arguments":""}}]},"finish_reason":null}]}"#, "\n\n",
//!         r#"data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":\"main.rs\"}"}}]},"finish_reason":"tool_calls"}]}"#, "\n\n",
//!         "data: [DONE]\n\n")),
//!     ScriptedResponse::sse(concat!(
//!         r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"It prints"},"finish_reason":null}]}"#, "\n\n",
//!         r#"data: {"choices":[{"index":0,"delta":{"content":" hello."},"finish_reason":"stop"}]}"#, "\n\n",
//!         "data: [DONE]\n\n")),
//! ])?;
//! let client = Client::new(Endpoint::new(format!("{}/v1", server.url())).key("sk-test"))?;
//!
//! let tools = ToolSet::from_openai(&[(ToolSource::builtin(), &json!([{"name": "read_file",
//!     "description": "Read a file.", "parameters": {"type": "object", "properties": {}}}]))])?;
//! let api = ApiKind::OpenAi;
//! let mut chat = Conversation::start(vec![], &PromptPolicy::default(), SessionContext::default(),
//!     prompt_wire::session_options(api, tools), api,
//!     WireOptions::new("gpt-4.1").param("stream", &json!(true)))?;
//!
//! let mut stream = client.stream(&mut chat, Next::turn(Extensions::new(), "What does main.rs print?"))?;
//! while let Some(event) = stream.next_event().await {
//!     if let StreamEvent::ToolCallFinished { name, arguments, .. } = event? {
//!         println!("calling {name} {arguments}");
//!     }
//! }
//! let reply = stream.finish().await?; // recorded when the stream ended
//! chat.record_tool(&ToolResult::text(&reply.tool_calls[0].id, "fn main() { println!(\"hello\") }"))?;
//!
//! let mut stream = client.stream(&mut chat, Next::continuation(Extensions::new()))?;
//! let mut shown = String::new();
//! while let Some(event) = stream.next_event().await {
//!     if let StreamEvent::TextDelta { text } = event? {
//!         shown.push_str(&text); // as it arrives
//!     }
//! }
//! assert_eq!(stream.finish().await?.text, "It prints hello.");
//! assert_eq!(shown, "It prints hello.");
//!
//! // What the server received: the wire's bytes, each body extending the one before.
//! let sent = server.requests();
//! assert_eq!(sent[0].target, "/v1/chat/completions");
//! assert_eq!(sent[0].header("authorization"), Some("Bearer sk-test"));
//! assert!(compare(&sent[0].body, &sent[1].body)?.extends());
//! assert_eq!(chat.session().history().len(), 4); // user, call, result, answer
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod client;
mod endpoint;
mod error;
mod retry;
mod scripted;

pub use client::{Client, ReplyStream, StreamTiming};
pub use endpoint::{
    ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_VERSION, Endpoint, GEMINI_BASE_URL, OPENAI_BASE_URL,
};
pub use error::{ClientError, ERROR_EXCERPT_BYTES, MAX_ERROR_BODY_BYTES};
pub use retry::RetryPolicy;
pub use scripted::{
    MAX_REQUEST_BODY_BYTES, MAX_REQUEST_HEAD_BYTES, ReceivedRequest, ScriptedResponse,
    ScriptedServer,
};
