//! A scripted provider that answers at once, so that a proxy in front of it is what a
//! benchmark measures.
//!
//! Routes (matched on the end of the path, so a proxy that keeps a prefix still reaches them):
//!
//! * `…/chat/completions` (OpenAI Chat Completions): a whole `chat.completion` object, or with
//!   `"stream": true` an SSE stream of `chat.completion.chunk` events (a role chunk, one content
//!   chunk per [`ProviderConfig::events`], a finish chunk carrying `usage`, then `data: [DONE]`);
//!   the shapes of `scripts/agents/upstream.py`.
//! * `…/messages` (Anthropic Messages): a whole `message` object, or an SSE stream
//!   `message_start`, `content_block_start`, `ping`, one `content_block_delta` per event,
//!   `content_block_stop`, `message_delta`, `message_stop`.
//! * anything else: `404` with an OpenAI-style error object.
//!
//! Whether a request streams is read from its body's top-level `"stream"` member. A stream is
//! chunked, each event its own chunk, [`ProviderConfig::event_delay`] apart (zero by default:
//! every event is written at once).

use std::sync::Arc;
use std::time::Duration;

use crate::{LAST_CHUNK, Script, Step, chunk, chunked, split_request, whole};

/// How the scripted provider streams.
#[derive(Debug, Clone, Copy)]
pub struct ProviderConfig {
    /// Content deltas in a streamed reply (at least one is sent).
    pub events: usize,
    /// Pause between two stream events.
    pub event_delay: Duration,
}

impl Default for ProviderConfig {
    fn default() -> Self {
        Self {
            events: 3,
            event_delay: Duration::ZERO,
        }
    }
}

/// The script of a provider streaming as `config` says.
pub fn script(config: ProviderConfig) -> Script {
    Arc::new(move |_, request| reply(request, config))
}

/// Which provider a path speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    OpenAi,
    Anthropic,
}

const JSON: [(&str, &str); 1] = [("content-type", "application/json")];

fn reply(request: &[u8], config: ProviderConfig) -> Vec<Step> {
    let (head, body) = split_request(request);
    let path = head
        .split(' ')
        .nth(1)
        .map_or("", |target| target.split('?').next().unwrap_or(target));
    let wire = if path.ends_with("/chat/completions") {
        Wire::OpenAi
    } else if path.ends_with("/messages") {
        Wire::Anthropic
    } else {
        return vec![Step::Send(whole(
            "404 Not Found",
            &JSON,
            &error_json("no such route"),
        ))];
    };
    if !says_stream(&body) {
        let reply = match wire {
            Wire::OpenAi => OPENAI_WHOLE,
            Wire::Anthropic => ANTHROPIC_WHOLE,
        };
        return vec![Step::Send(whole("200 OK", &JSON, reply.as_bytes()))];
    }
    let sse = [
        ("content-type", "text/event-stream"),
        ("cache-control", "no-cache"),
    ];
    let mut steps = vec![Step::Send(chunked("200 OK", &sse))];
    for (i, event) in stream_events(wire, config.events).iter().enumerate() {
        if i > 0 && !config.event_delay.is_zero() {
            steps.push(Step::Sleep(config.event_delay));
        }
        steps.push(Step::Send(chunk(event)));
    }
    steps.push(Step::Send(LAST_CHUNK.to_vec()));
    steps
}

fn error_json(message: &str) -> Vec<u8> {
    serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}})
        .to_string()
        .into_bytes()
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
fn stream_events(wire: Wire, deltas: usize) -> Vec<Vec<u8>> {
    let deltas = deltas.max(1);
    let mut out = Vec::with_capacity(deltas + 6);
    match wire {
        Wire::OpenAi => {
            let chunk = |choices: &str, extra: &str| {
                format!(
                    "data: {{\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"bench\",\"choices\":{choices}{extra}}}\n\n"
                )
                .into_bytes()
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
            out.push(b"data: [DONE]\n\n".to_vec());
        }
        Wire::Anthropic => {
            let event =
                |name: &str, data: &str| format!("event: {name}\ndata: {data}\n\n").into_bytes();
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
