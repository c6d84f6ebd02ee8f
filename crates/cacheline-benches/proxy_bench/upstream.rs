//! The scripted upstream: a provider that answers at once, so that the proxy in front of it is
//! what a run measures.
//!
//! Routes (matched on the end of the path, so a proxy that keeps a prefix still reaches them):
//!
//! * `…/chat/completions` (OpenAI Chat Completions): a whole `chat.completion` object, or with
//!   `"stream": true` an SSE stream of `chat.completion.chunk` events (a role chunk, one content
//!   chunk per [`UpstreamConfig::events`], a finish chunk carrying `usage`, then `data: [DONE]`);
//!   the shapes of `scripts/agents/upstream.py`.
//! * `…/messages` (Anthropic Messages): a whole `message` object, or an SSE stream
//!   `message_start`, `content_block_start`, `ping`, one `content_block_delta` per event,
//!   `content_block_stop`, `message_delta`, `message_stop`.
//! * anything else: `404` with an OpenAI-style error object.
//!
//! A request body is read whole (at most [`MAX_BODY`] bytes, else `413`); whether it streams is
//! read from its top-level `"stream"` member. Between two stream events the upstream waits
//! [`UpstreamConfig::event_delay`] (zero by default: every event is written at once, each as its
//! own body frame).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::channel::Channel;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// The largest request body the upstream reads (16 MiB); a longer one is answered `413`.
pub const MAX_BODY: usize = 16 << 20;

/// How the scripted upstream streams.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamConfig {
    /// Content deltas in a streamed reply (at least one is sent).
    pub events: usize,
    /// Pause between two stream events.
    pub event_delay: Duration,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            events: 3,
            event_delay: Duration::ZERO,
        }
    }
}

/// What went wrong serving.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The listening socket could not be bound.
    #[error("scripted upstream: cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
    /// Accepting a connection failed.
    #[error("scripted upstream: accept failed: {0}")]
    Accept(std::io::Error),
}

/// Binds `addr` (port 0 picks one); the caller passes the listener to [`serve`].
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, UpstreamError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| UpstreamError::Bind { addr, source })
}

/// Serves HTTP/1.1 on `listener` until the task is dropped or accepting fails.
pub async fn serve(listener: TcpListener, config: UpstreamConfig) -> Result<(), UpstreamError> {
    loop {
        let (stream, _) = listener.accept().await.map_err(UpstreamError::Accept)?;
        // Small writes are the point of a stream: no Nagle delay.
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(req, config));
            // A client that goes away mid-request is its own business.
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

type ReplyBody = Either<Full<Bytes>, Channel<Bytes>>;

/// Which provider a path speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    OpenAi,
    Anthropic,
}

async fn handle(
    req: Request<Incoming>,
    config: UpstreamConfig,
) -> Result<Response<ReplyBody>, Infallible> {
    let path = req.uri().path();
    let wire = if path.ends_with("/chat/completions") {
        Wire::OpenAi
    } else if path.ends_with("/messages") {
        Wire::Anthropic
    } else {
        return Ok(whole(StatusCode::NOT_FOUND, error_json("no such route")));
    };
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return Ok(whole(
                StatusCode::PAYLOAD_TOO_LARGE,
                error_json("body unreadable or over 16 MiB"),
            ));
        }
    };
    if !says_stream(&body) {
        let reply = match wire {
            Wire::OpenAi => OPENAI_WHOLE,
            Wire::Anthropic => ANTHROPIC_WHOLE,
        };
        return Ok(whole(StatusCode::OK, Bytes::from_static(reply.as_bytes())));
    }
    let events = stream_events(wire, config.events);
    let (mut tx, channel) = Channel::<Bytes>::new(4);
    let delay = config.event_delay;
    tokio::spawn(async move {
        for (i, event) in events.into_iter().enumerate() {
            if i > 0 && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if tx.send_data(event).await.is_err() {
                return;
            }
        }
    });
    let mut response = Response::new(Either::Right(channel));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response
        .headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-cache"));
    Ok(response)
}

fn whole(status: StatusCode, body: Bytes) -> Response<ReplyBody> {
    let mut response = Response::new(Either::Left(Full::new(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn error_json(message: &str) -> Bytes {
    Bytes::from(
        serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}})
            .to_string(),
    )
}

/// Whether the body's top-level `"stream"` member is `true` (a body that is not a JSON object
/// does not stream).
pub fn says_stream(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Flag {
        #[serde(default)]
        stream: bool,
    }
    serde_json::from_slice::<Flag>(body).is_ok_and(|f| f.stream)
}

const OPENAI_WHOLE: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"Scripted reply."},"finish_reason":"stop","logprobs":null}],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":0}}}"#;

const ANTHROPIC_WHOLE: &str = r#"{"id":"msg_bench","type":"message","role":"assistant","model":"bench","content":[{"type":"text","text":"Scripted reply."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":3}}"#;

/// The events of one streamed reply, each a complete SSE event.
fn stream_events(wire: Wire, deltas: usize) -> Vec<Bytes> {
    let deltas = deltas.max(1);
    let mut out = Vec::with_capacity(deltas + 6);
    match wire {
        Wire::OpenAi => {
            let chunk = |choices: &str, extra: &str| {
                Bytes::from(format!(
                    "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"bench\",\"choices\":{choices}{extra}}}\n\n"
                ))
            };
            out.push(chunk(
                r#"[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]"#,
                "",
            ));
            for i in 0..deltas {
                out.push(chunk(
                    &format!(
                        r#"[{{"index":0,"delta":{{"content":"word{i} "}},"finish_reason":null}}]"#
                    ),
                    "",
                ));
            }
            out.push(chunk(
                r#"[{"index":0,"delta":{},"finish_reason":"stop"}]"#,
                r#","usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}"#,
            ));
            out.push(Bytes::from_static(b"data: [DONE]\n\n"));
        }
        Wire::Anthropic => {
            let event =
                |name: &str, data: &str| Bytes::from(format!("event: {name}\ndata: {data}\n\n"));
            out.push(event(
                "message_start",
                r#"{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"bench","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}"#,
            ));
            out.push(event(
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
            ));
            out.push(event("ping", r#"{"type":"ping"}"#));
            for i in 0..deltas {
                out.push(event(
                    "content_block_delta",
                    &format!(r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"word{i} "}}}}"#),
                ));
            }
            out.push(event(
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ));
            out.push(event(
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":3}}"#,
            ));
            out.push(event("message_stop", r#"{"type":"message_stop"}"#));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_top_level_true_stream_member_streams() {
        assert!(says_stream(br#"{"model":"m","stream": true}"#));
        assert!(!says_stream(br#"{"model":"m","stream":false}"#));
        assert!(!says_stream(
            br#"{"model":"m","messages":[{"stream":true}]}"#
        ));
        assert!(!says_stream(b"not json"));
    }

    #[test]
    fn every_scripted_event_is_one_sse_event_of_json() {
        for wire in [Wire::OpenAi, Wire::Anthropic] {
            let events = stream_events(wire, 2);
            for event in &events {
                let text = std::str::from_utf8(event).unwrap();
                assert!(text.ends_with("\n\n"), "{text}");
                let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
                if data != "[DONE]" {
                    serde_json::from_str::<serde_json::Value>(data).unwrap();
                }
            }
        }
        serde_json::from_str::<serde_json::Value>(OPENAI_WHOLE).unwrap();
        serde_json::from_str::<serde_json::Value>(ANTHROPIC_WHOLE).unwrap();
    }
}
