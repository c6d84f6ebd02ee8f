//! # prompt-wire
//!
//! The exact body each provider receives for a [`Session`](prompt_core::Session)'s request, the provider's reply
//! read back into the history, and a guard over two consecutive bodies built by anyone.
//!
//! - [`Wire::body`] turns a [`Request`](prompt_core::Request) into the body of OpenAI Chat
//!   Completions, OpenAI Responses, Anthropic Messages, Gemini `generateContent` or
//!   llama.cpp's server. Each history node is converted into the API's shape once; the
//!   tools field, the system field and the keys around the messages array are written once
//!   per session; a body is a view over those bytes ([`Body::chunks`]). Within a cache
//!   epoch the stable part of a body is a byte prefix of the next body, except for
//!   Anthropic, whose breakpoints move: there every content block before the stable end is
//!   identical, ignoring `cache_control` ([`Body::stable_blocks`]).
//! - [`Wire::record_reply`] reads the provider's reply and records the assistant message
//!   the next request must carry, byte-for-byte (thinking blocks with their signatures,
//!   Responses output items, Gemini parts); it returns the tool calls to run and the raw
//!   usage object for the meter; [`UsageFigures`] reads that usage, of any API, into the
//!   engine's own figures (prompt tokens re-processed, cached, generated).
//! - [`stream`] reads a streamed reply as its bytes come, sans-IO: events to show at once,
//!   and at the end the message recorded and the `Reply` that `record_reply` gives for the
//!   whole reply the stream amounts to, byte-for-byte.
//! - [`compare`] takes two consecutive bodies of any of these shapes and says whether the
//!   later one extends the earlier one, or names the first differing tool, system block,
//!   message or content block and why (tools changed, system rewritten, hoisting, a
//!   message edited, inserted, removed, reordered).
//!   [`body_parts`] reads one body of any shape into its parts as sent (what
//!   `cacheline audit` counts).
//!
//! - A provider profile ([`WireOptions::profile`], `prompt_core::profile`) makes the bodies
//!   the provider's: no `role: "system"` message after the first where the provider moves or
//!   refuses it (DeepSeek), Claude Opus 4.8's system messages inside `messages`, the 1-hour
//!   TTL and `prompt_cache_retention` in the frozen part, Anthropic's cache diagnostics
//!   ([`Wire::cache_diagnostics_header`]; the provider's verdict read and reconciled with the
//!   engine's in [`prompt_engine::provider`]).
//!
//! Key orders, where each API's stable part ends, where Anthropic's breakpoints go, how
//! updates are delivered and what each profile changes: `docs/wire.md`.
//!
//! ```
//! use prompt_core::{Component, ComponentId, Extensions, Placement, PromptPolicy, Session, SessionContext};
//! use prompt_core::session::ToolResult;
//! use prompt_core::tools::{ToolSet, ToolSource};
//! use prompt_core::ApiKind;
//! use prompt_wire::{compare, Wire, WireOptions};
//! use serde_json::json;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tools = ToolSet::from_openai(&[(ToolSource::builtin(), &json!([
//!     {"name": "read_file", "description": "Read a file.",
//!      "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
//! ]))])?;
//! let components = vec![Component::constant(ComponentId::new("house_rules")?, "You are terse.")
//!     .placement(Placement::Prefix)];
//! let policy = PromptPolicy::from_agent_toml("[prompt]\nprefix_allow = [\"house_rules\"]",
//!     "agent.toml", &components)?.deny_warnings()?;
//! let options = prompt_wire::session_options(ApiKind::Anthropic, tools);
//! let mut session = Session::start(components, &policy, SessionContext::default(), options)?;
//! let mut wire = Wire::new(ApiKind::Anthropic,
//!     WireOptions::new("claude-sonnet-4-5").param("max_tokens", &json!(1024)))?;
//!
//! let first = wire.body(&session.turn(Extensions::new(), "Read main.rs")?)?.stable_body();
//! // The provider answers with a tool call; the reply is recorded as it came.
//! let reply = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5",
//!   "content":[{"type":"tool_use","id":"toolu_1","name":"read_file","input":{"path":"main.rs"}}],
//!   "stop_reason":"tool_use","usage":{"input_tokens":12,"output_tokens":8}}"#;
//! let reply = wire.record_reply(&mut session, reply)?;
//! assert_eq!(reply.tool_calls[0].name, "read_file");
//! session.record_tool(&ToolResult::text(&reply.tool_calls[0].id, "fn main() {}"))?;
//! let second = wire.body(&session.continuation(Extensions::new())?)?.to_bytes();
//!
//! assert!(compare(&first, &second)?.extends());
//! let body: serde_json::Value = serde_json::from_slice(&second)?;
//! assert_eq!(body["messages"][1]["content"][0]["type"], "tool_use");
//! assert_eq!(body["messages"][2]["content"][0]["type"], "tool_result");
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod conversation;
mod convert;
mod error;
mod options;
mod raw;
mod reply;
pub mod stream;
mod usage;
mod wire;

pub use conversation::{
    CONVERSATION_FORMAT, CONVERSATION_VERSION, Conversation, ConversationError,
    ConversationSnapshot, Next, RestoredConversation,
};
pub use error::WireError;
pub use options::{DEFAULT_ROUTING_HEADER, WireOptions};
/// The comparison engine ([`prompt_engine`]), at its old path: the guard's [`compare`],
/// the body reader and the engine over a stream of requests live there.
pub use prompt_engine as engine;
#[allow(deprecated)]
pub use prompt_engine::Shape;
pub use prompt_engine::provider::{
    MAX_DIAGNOSTICS_BYTES, MAX_REPLY_ID, MissReason, ProviderDiagnosis, reply_id,
};
pub use prompt_engine::{
    BodyParts, Break, Cause, CauseKind, GuardError, MAX_AUDIT_BODY_BYTES, Place, ToolChange,
    Verdict, Which, body_parts, compare, without_cache_control,
};
#[allow(deprecated)]
pub use reply::UsageProvider;
pub use reply::{MAX_REPLY_BYTES, Reply, ToolCall, UsageReport, read_reply};
pub use usage::{UsageError, UsageFigures};
pub use wire::{
    ANTHROPIC_LOOKBACK_BLOCKS, Block, Body, CACHE_DIAGNOSIS_BETA, MAX_KEPT_CACHE_KEY, ResumePoint,
    Wire, prompt_cache_key,
};

use prompt_core::tools::ToolSet;
use prompt_core::{ApiKind, SessionOptions};

/// The session options for `api`: its delivery style (a system message for the OpenAI APIs
/// and llama.cpp, a `system-reminder` user message for Anthropic and Gemini) and the tools.
///
/// ```
/// use prompt_core::{ApiKind, delivery::UpdateRole, tools::ToolSet};
/// let options = prompt_wire::session_options(ApiKind::Gemini, ToolSet::empty());
/// assert_eq!(options.delivery().role, UpdateRole::UserReminder);
/// ```
pub fn session_options(api: ApiKind, tools: ToolSet) -> SessionOptions {
    SessionOptions::for_api(api).with_tools(tools)
}

/// The API's name in messages ([`ApiKind::name`]).
pub(crate) fn api_name(api: ApiKind) -> &'static str {
    api.name()
}
