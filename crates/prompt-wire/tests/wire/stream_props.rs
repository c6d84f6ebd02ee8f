//! The stream property: for every API, a random reply (text, parallel tool calls,
//! reasoning or thinking with signatures, empty content) rendered both as the whole reply and
//! as the event stream the provider sends for it, fed in random pieces, records the same
//! bytes and returns the same `Reply`; the events show the reply's text and calls; and the
//! next body of the session extends the previous one.
//!
//! The renderers follow each provider's documented shapes (llama.cpp's: its server source,
//! `tools/server/server-task.cpp` and `common/chat.cpp` of the version the live suite
//! builds), written here independently of the readers.

use prompt_core::session::ToolResult;
use prompt_core::{ApiKind, Extensions, Session, SessionContext};
use prompt_wire::stream::StreamEvent;
use prompt_wire::{Wire, compare};
use proptest::prelude::*;
use proptest::sample::Index;

use crate::common::{components, policy, tools, values, wire};

/// A session of `api` after its first turn (every one with the same session id, so that
/// their bodies can be compared), its wire, and that turn's stable body.
pub fn started(api: ApiKind) -> (Session, Wire, Vec<u8>) {
    let mut s = Session::start(
        components(),
        &policy(),
        SessionContext::default(),
        prompt_wire::session_options(api, tools()).with_session_id("stream-props"),
    )
    .unwrap();
    let mut w = wire(api);
    let first = w
        .body(&s.turn(values("a", 1), "Check the weather.").unwrap())
        .unwrap()
        .stable_body();
    (s, w, first)
}

#[derive(Debug, Clone)]
enum Arg {
    Text(String),
    Number(i64),
}

#[derive(Debug, Clone)]
struct Call {
    id: String,
    name: &'static str,
    args: Vec<(String, Arg)>,
}

impl Call {
    /// The arguments as the model writes them, with or without spaces.
    fn arguments(&self, spaced: bool) -> String {
        let (colon, comma) = if spaced { (": ", ", ") } else { (":", ",") };
        let fields: Vec<String> = self
            .args
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Arg::Text(t) => q(t),
                    Arg::Number(n) => n.to_string(),
                };
                format!("{}{colon}{v}", q(k))
            })
            .collect();
        format!("{{{}}}", fields.join(comma))
    }
}

#[derive(Debug, Clone)]
struct Spec {
    reasoning: Option<String>,
    signature: String,
    text: String,
    calls: Vec<Call>,
    cuts: Vec<Index>,
    spaced: bool,
    /// Variations a provider may choose: Anthropic blocks all open at once (llama.cpp),
    /// Responses items named by `item_id` only and a completed response without `output`,
    /// Gemini signatures.
    style: u8,
    eol: &'static str,
    chunking: Vec<Index>,
}

fn q(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// `text` cut into pieces at the spec's cut points (character boundaries); at least one.
fn pieces(text: &str, cuts: &[Index]) -> Vec<String> {
    let bounds: Vec<usize> = text.char_indices().map(|(i, _)| i).skip(1).collect();
    let mut at: Vec<usize> = cuts
        .iter()
        .filter(|_| !bounds.is_empty())
        .map(|c| bounds[c.index(bounds.len())])
        .collect();
    at.sort_unstable();
    at.dedup();
    let mut out = Vec::new();
    let mut from = 0;
    for cut in at {
        out.push(text[from..cut].to_owned());
        from = cut;
    }
    out.push(text[from..].to_owned());
    out
}

fn text_strategy() -> impl Strategy<Value = String> {
    "[a-z A-Z0-9\"\\\\\n\t\u{1}é✓😀/]{0,24}"
}

fn spec() -> impl Strategy<Value = Spec> {
    let call = (
        "[a-zA-Z0-9]{4,12}",
        prop_oneof![Just("read_file"), Just("grep")],
        prop::collection::vec(
            (
                "[a-z]{1,6}",
                prop_oneof![
                    text_strategy().prop_map(Arg::Text),
                    any::<i64>().prop_map(Arg::Number)
                ],
            ),
            0..3,
        ),
    )
        .prop_map(|(id, name, mut args)| {
            args.sort_by(|a, b| a.0.cmp(&b.0));
            args.dedup_by(|a, b| a.0 == b.0);
            Call {
                id: format!("call_{id}"),
                name,
                args,
            }
        });
    (
        prop::option::of(text_strategy()),
        "[A-Za-z0-9+/=]{0,16}",
        text_strategy(),
        prop::collection::vec(call, 0..4),
        prop::collection::vec(any::<Index>(), 0..4),
        any::<bool>(),
        any::<u8>(),
        prop_oneof![Just("\n"), Just("\r\n"), Just("\r")],
        prop::collection::vec(any::<Index>(), 0..12),
    )
        .prop_map(
            |(reasoning, signature, text, mut calls, cuts, spaced, style, eol, chunking)| {
                for (i, call) in calls.iter_mut().enumerate() {
                    call.id = format!("{}_{i}", call.id);
                }
                Spec {
                    reasoning,
                    signature,
                    text,
                    calls,
                    cuts,
                    spaced,
                    style,
                    eol,
                    chunking,
                }
            },
        )
}

/// Server-sent events: each `(event type, data)` as the stream carries it.
fn sse(events: &[(Option<&str>, String)], eol: &str) -> String {
    let mut out = String::new();
    for (kind, data) in events {
        if let Some(kind) = kind {
            out.push_str(&format!("event: {kind}{eol}"));
        }
        out.push_str(&format!("data: {data}{eol}{eol}"));
    }
    out
}

/// OpenAI Chat Completions (`llama`: llama.cpp's server): the whole reply and its stream.
fn chat(spec: &Spec, llama: bool) -> (String, String) {
    let usage = r#"{"prompt_tokens":100,"completion_tokens":10,"total_tokens":110,"prompt_tokens_details":{"cached_tokens":64}}"#;
    let timings =
        r#"{"cache_n":64,"prompt_n":36,"prompt_ms":12.5,"predicted_n":10,"predicted_ms":80.25}"#;
    let finish = if spec.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let args: Vec<String> = spec
        .calls
        .iter()
        .map(|c| c.arguments(spec.spaced))
        .collect();
    // The whole reply's message.
    let mut message = String::from(r#"{"role":"assistant","content":"#);
    let content_is_text = !spec.text.is_empty() || spec.calls.is_empty();
    let reasoning = spec.reasoning.as_deref();
    if llama {
        message.push_str(&q(&spec.text));
        if let Some(r) = reasoning.filter(|r| !r.is_empty()) {
            message.push_str(&format!(r#","reasoning_content":{}"#, q(r)));
        }
    } else {
        message.push_str(&if content_is_text {
            q(&spec.text)
        } else {
            "null".to_owned()
        });
        if let Some(r) = reasoning {
            message.push_str(&format!(r#","reasoning_content":{}"#, q(r)));
        }
    }
    if !spec.calls.is_empty() {
        let calls: Vec<String> = spec
            .calls
            .iter()
            .zip(&args)
            .map(|(c, a)| {
                if llama {
                    format!(
                        r#"{{"type":"function","function":{{"name":{},"arguments":{}}},"id":{}}}"#,
                        q(c.name),
                        q(a),
                        q(&c.id)
                    )
                } else {
                    format!(
                        r#"{{"id":{},"type":"function","function":{{"name":{},"arguments":{}}}}}"#,
                        q(&c.id),
                        q(c.name),
                        q(a)
                    )
                }
            })
            .collect();
        message.push_str(&format!(r#","tool_calls":[{}]"#, calls.join(",")));
    }
    if !llama {
        message.push_str(r#","refusal":null,"annotations":[]"#);
    }
    message.push('}');
    let whole = if llama {
        format!(
            r#"{{"choices":[{{"finish_reason":"{finish}","index":0,"message":{message}}}],"created":1,"model":"m","system_fingerprint":"b1","object":"chat.completion","usage":{usage},"id":"chatcmpl-1","timings":{timings}}}"#
        )
    } else {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{{"index":0,"message":{message},"logprobs":null,"finish_reason":"{finish}"}}],"usage":{usage},"service_tier":"default"}}"#
        )
    };
    // The stream.
    let chunk = |delta: String, finish: Option<&str>| -> (Option<&str>, String) {
        let finish = finish.map_or("null".to_owned(), |f| format!("\"{f}\""));
        let data = if llama {
            format!(
                r#"{{"choices":[{{"finish_reason":{finish},"index":0,"delta":{delta}}}],"created":1,"id":"chatcmpl-1","model":"m","system_fingerprint":"b1","object":"chat.completion.chunk"}}"#
            )
        } else {
            format!(
                r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]}}"#
            )
        };
        (None, data)
    };
    let mut events = Vec::new();
    if llama {
        events.push(chunk(
            r#"{"role":"assistant","content":null}"#.to_owned(),
            None,
        ));
    } else {
        let content = if content_is_text { r#""""# } else { "null" };
        events.push(chunk(
            format!(r#"{{"role":"assistant","content":{content},"refusal":null}}"#),
            None,
        ));
    }
    if let Some(r) = reasoning {
        for p in pieces(r, &spec.cuts) {
            if !llama || !p.is_empty() {
                events.push(chunk(format!(r#"{{"reasoning_content":{}}}"#, q(&p)), None));
            }
        }
    }
    for p in pieces(&spec.text, &spec.cuts)
        .into_iter()
        .filter(|p| !p.is_empty())
    {
        events.push(chunk(format!(r#"{{"content":{}}}"#, q(&p)), None));
    }
    for (k, (call, a)) in spec.calls.iter().zip(&args).enumerate() {
        let fragments = pieces(a, &spec.cuts);
        let (first, rest) = fragments.split_first().unwrap();
        events.push(chunk(
            format!(
                r#"{{"tool_calls":[{{"index":{k},"id":{},"type":"function","function":{{"name":{},"arguments":{}}}}}]}}"#,
                q(&call.id),
                q(call.name),
                q(first)
            ),
            None,
        ));
        for f in rest {
            events.push(chunk(
                format!(
                    r#"{{"tool_calls":[{{"index":{k},"function":{{"arguments":{}}}}}]}}"#,
                    q(f)
                ),
                None,
            ));
        }
    }
    events.push(chunk("{}".to_owned(), Some(finish)));
    let last = if llama {
        format!(
            r#"{{"choices":[],"created":1,"id":"chatcmpl-1","model":"m","system_fingerprint":"b1","object":"chat.completion.chunk","usage":{usage},"timings":{timings}}}"#
        )
    } else {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","system_fingerprint":"fp","choices":[],"usage":{usage}}}"#
        )
    };
    events.push((None, last));
    events.push((None, "[DONE]".to_owned()));
    (whole, sse(&events, spec.eol))
}

/// OpenAI Responses: the whole response and its events.
fn responses(spec: &Spec) -> (String, String) {
    let by_item_id = spec.style & 1 == 1;
    let completed_without_output = spec.style & 2 == 2;
    let usage = r#"{"input_tokens":100,"input_tokens_details":{"cached_tokens":64},"output_tokens":10,"output_tokens_details":{"reasoning_tokens":4},"total_tokens":110}"#;
    let mut items: Vec<String> = Vec::new();
    let mut events: Vec<(Option<&str>, String)> = Vec::new();
    let mut ev = |kind: &'static str, body: String| {
        events.push((Some(kind), format!(r#"{{"type":"{kind}",{body}}}"#)));
    };
    ev(
        "response.created",
        r#""response":{"id":"resp_1","object":"response","status":"in_progress","output":[]}"#
            .to_owned(),
    );
    let at = |index: usize, id: &str| -> String {
        if by_item_id {
            format!(r#""item_id":{}"#, q(id))
        } else {
            format!(r#""output_index":{index},"item_id":{}"#, q(id))
        }
    };
    if let Some(r) = &spec.reasoning {
        let index = items.len();
        let item = format!(
            r#"{{"id":"rs_1","type":"reasoning","summary":[{{"type":"summary_text","text":{}}}],"encrypted_content":{}}}"#,
            q(r),
            q(&spec.signature)
        );
        ev(
            "response.output_item.added",
            format!(
                r#""output_index":{index},"item":{{"id":"rs_1","type":"reasoning","summary":[]}}"#
            ),
        );
        for p in pieces(r, &spec.cuts) {
            ev(
                "response.reasoning_summary_text.delta",
                format!(
                    r#"{},"summary_index":0,"delta":{}"#,
                    at(index, "rs_1"),
                    q(&p)
                ),
            );
        }
        ev(
            "response.output_item.done",
            format!(r#""output_index":{index},"item":{item}"#),
        );
        items.push(item);
    }
    if !spec.text.is_empty() || spec.calls.is_empty() {
        let index = items.len();
        let item = format!(
            r#"{{"id":"msg_1","type":"message","status":"completed","content":[{{"type":"output_text","annotations":[],"logprobs":[],"text":{}}}],"role":"assistant"}}"#,
            q(&spec.text)
        );
        ev(
            "response.output_item.added",
            format!(
                r#""output_index":{index},"item":{{"id":"msg_1","type":"message","status":"in_progress","content":[],"role":"assistant"}}"#
            ),
        );
        ev(
            "response.content_part.added",
            format!(
                r#"{},"content_index":0,"part":{{"type":"output_text","annotations":[],"text":""}}"#,
                at(index, "msg_1")
            ),
        );
        for p in pieces(&spec.text, &spec.cuts) {
            ev(
                "response.output_text.delta",
                format!(
                    r#"{},"content_index":0,"delta":{}"#,
                    at(index, "msg_1"),
                    q(&p)
                ),
            );
        }
        ev(
            "response.output_text.done",
            format!(
                r#"{},"content_index":0,"text":{}"#,
                at(index, "msg_1"),
                q(&spec.text)
            ),
        );
        ev(
            "response.output_item.done",
            format!(r#""output_index":{index},"item":{item}"#),
        );
        items.push(item);
    }
    for (k, call) in spec.calls.iter().enumerate() {
        let index = items.len();
        let id = format!("fc_{k}");
        let args = call.arguments(spec.spaced);
        let item = format!(
            r#"{{"id":"{id}","type":"function_call","status":"completed","arguments":{},"call_id":{},"name":{}}}"#,
            q(&args),
            q(&call.id),
            q(call.name)
        );
        ev(
            "response.output_item.added",
            format!(
                r#""output_index":{index},"item":{{"id":"{id}","type":"function_call","status":"in_progress","arguments":"","call_id":{},"name":{}}}"#,
                q(&call.id),
                q(call.name)
            ),
        );
        for f in pieces(&args, &spec.cuts) {
            ev(
                "response.function_call_arguments.delta",
                format!(r#"{},"delta":{}"#, at(index, &id), q(&f)),
            );
        }
        ev(
            "response.function_call_arguments.done",
            format!(r#"{},"arguments":{}"#, at(index, &id), q(&args)),
        );
        ev(
            "response.output_item.done",
            format!(r#""output_index":{index},"item":{item}"#),
        );
        items.push(item);
    }
    let whole = format!(
        r#"{{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[{}],"usage":{usage}}}"#,
        items.join(",")
    );
    let completed = if completed_without_output {
        format!(
            r#"{{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[],"usage":{usage}}}"#
        )
    } else {
        whole.clone()
    };
    ev("response.completed", format!(r#""response":{completed}"#));
    (whole, sse(&events, spec.eol))
}

/// Anthropic Messages: the whole message and its events.
fn anthropic(spec: &Spec) -> (String, String) {
    let all_open = spec.style & 1 == 1;
    let stop = if spec.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    let mut blocks: Vec<String> = Vec::new();
    // Per block: its start, its deltas.
    let mut streamed: Vec<(String, Vec<String>)> = Vec::new();
    if let Some(r) = &spec.reasoning {
        blocks.push(format!(
            r#"{{"type":"thinking","thinking":{},"signature":{}}}"#,
            q(r),
            q(&spec.signature)
        ));
        let mut deltas: Vec<String> = pieces(r, &spec.cuts)
            .iter()
            .map(|p| format!(r#"{{"type":"thinking_delta","thinking":{}}}"#, q(p)))
            .collect();
        deltas.push(format!(
            r#"{{"type":"signature_delta","signature":{}}}"#,
            q(&spec.signature)
        ));
        streamed.push((r#"{"type":"thinking","thinking":""}"#.to_owned(), deltas));
    }
    if !spec.text.is_empty() || spec.calls.is_empty() {
        blocks.push(format!(r#"{{"type":"text","text":{}}}"#, q(&spec.text)));
        let deltas = pieces(&spec.text, &spec.cuts)
            .iter()
            .map(|p| format!(r#"{{"type":"text_delta","text":{}}}"#, q(p)))
            .collect();
        streamed.push((r#"{"type":"text","text":""}"#.to_owned(), deltas));
    }
    for call in &spec.calls {
        blocks.push(format!(
            r#"{{"type":"tool_use","id":{},"name":{},"input":{}}}"#,
            q(&call.id),
            q(call.name),
            call.arguments(false)
        ));
        let deltas = pieces(&call.arguments(spec.spaced), &spec.cuts)
            .iter()
            .map(|p| format!(r#"{{"type":"input_json_delta","partial_json":{}}}"#, q(p)))
            .collect();
        streamed.push((
            format!(
                r#"{{"type":"tool_use","id":{},"name":{},"input":{{}}}}"#,
                q(&call.id),
                q(call.name)
            ),
            deltas,
        ));
    }
    let start_usage = r#"{"input_tokens":100,"cache_creation_input_tokens":0,"cache_read_input_tokens":64,"output_tokens":1}"#;
    let whole = format!(
        r#"{{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{}],"stop_reason":"{stop}","stop_sequence":null,"usage":{{"input_tokens":100,"cache_creation_input_tokens":0,"cache_read_input_tokens":64,"output_tokens":10}}}}"#,
        blocks.join(",")
    );
    let mut events: Vec<(Option<&str>, String)> = Vec::new();
    let mut ev = |kind: &'static str, body: String| {
        events.push((Some(kind), format!(r#"{{"type":"{kind}"{body}}}"#)));
    };
    ev(
        "message_start",
        format!(
            r#","message":{{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{start_usage}}}"#
        ),
    );
    ev("ping", String::new());
    for (index, (start, deltas)) in streamed.iter().enumerate() {
        ev(
            "content_block_start",
            format!(r#","index":{index},"content_block":{start}"#),
        );
        for d in deltas {
            ev(
                "content_block_delta",
                format!(r#","index":{index},"delta":{d}"#),
            );
        }
        if !all_open {
            ev("content_block_stop", format!(r#","index":{index}"#));
        }
    }
    if all_open {
        for index in 0..streamed.len() {
            ev("content_block_stop", format!(r#","index":{index}"#));
        }
    }
    ev(
        "message_delta",
        format!(
            r#","delta":{{"stop_reason":"{stop}","stop_sequence":null}},"usage":{{"output_tokens":10}}"#
        ),
    );
    ev("message_stop", String::new());
    (whole, sse(&events, spec.eol))
}

/// Gemini: the whole `generateContent` response and its `streamGenerateContent` chunks.
fn gemini(spec: &Spec) -> (String, String) {
    let signed_text = spec.style & 1 == 1;
    let signed_call = spec.style & 2 == 2;
    let mut whole_parts: Vec<String> = Vec::new();
    let mut streamed: Vec<String> = Vec::new();
    if let Some(r) = &spec.reasoning {
        whole_parts.push(format!(r#"{{"text":{},"thought":true}}"#, q(r)));
        for p in pieces(r, &spec.cuts) {
            streamed.push(format!(r#"{{"text":{},"thought":true}}"#, q(&p)));
        }
    }
    if !spec.text.is_empty() || spec.calls.is_empty() {
        let sig = if signed_text {
            format!(r#","thoughtSignature":{}"#, q(&spec.signature))
        } else {
            String::new()
        };
        whole_parts.push(format!(r#"{{"text":{}{sig}}}"#, q(&spec.text)));
        let texts = pieces(&spec.text, &spec.cuts);
        let last = texts.len() - 1;
        for (i, p) in texts.iter().enumerate() {
            let sig = if i == last { sig.as_str() } else { "" };
            streamed.push(format!(r#"{{"text":{}{sig}}}"#, q(p)));
        }
    }
    for (k, call) in spec.calls.iter().enumerate() {
        let sig = if signed_call && k == 0 {
            format!(r#","thoughtSignature":{}"#, q(&spec.signature))
        } else {
            String::new()
        };
        let part = format!(
            r#"{{"functionCall":{{"name":{},"args":{}}}{sig}}}"#,
            q(call.name),
            call.arguments(spec.spaced)
        );
        whole_parts.push(part.clone());
        streamed.push(part);
    }
    let usage = r#"{"promptTokenCount":100,"candidatesTokenCount":10,"totalTokenCount":110,"cachedContentTokenCount":64}"#;
    let whole = format!(
        r#"{{"candidates":[{{"content":{{"parts":[{}],"role":"model"}},"finishReason":"STOP","index":0}}],"usageMetadata":{usage},"modelVersion":"g"}}"#,
        whole_parts.join(",")
    );
    let last = streamed.len() - 1;
    let events: Vec<(Option<&str>, String)> = streamed
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let (finish, usage) = if i == last {
                (r#","finishReason":"STOP""#, usage)
            } else {
                ("", r#"{"promptTokenCount":100,"totalTokenCount":100}"#)
            };
            (
                None,
                format!(
                    r#"{{"candidates":[{{"content":{{"parts":[{part}],"role":"model"}}{finish},"index":0}}],"usageMetadata":{usage},"modelVersion":"g"}}"#
                ),
            )
        })
        .collect();
    (whole, sse(&events, spec.eol))
}

fn render(api: ApiKind, spec: &Spec) -> (String, String) {
    match api {
        ApiKind::OpenAi => chat(spec, false),
        ApiKind::LlamaCpp => chat(spec, true),
        ApiKind::OpenAiResponses => responses(spec),
        ApiKind::Anthropic => anthropic(spec),
        ApiKind::Gemini => gemini(spec),
    }
}

/// `bytes` in the pieces the spec's chunking cuts.
fn chunks<'b>(bytes: &'b [u8], chunking: &[Index]) -> Vec<&'b [u8]> {
    let mut cuts: Vec<usize> = chunking.iter().map(|i| i.index(bytes.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut from = 0;
    for cut in cuts {
        out.push(&bytes[from..cut]);
        from = cut;
    }
    out.push(&bytes[from..]);
    out
}

/// Answers the reply's calls (or takes a turn) and returns the next body.
fn next_body(s: &mut Session, w: &mut Wire, calls: &[prompt_wire::ToolCall]) -> Vec<u8> {
    for call in calls {
        s.record_tool(&ToolResult::text(&call.id, "ok")).unwrap();
    }
    let request = if calls.is_empty() {
        s.turn(Extensions::new(), "Thanks.").unwrap()
    } else {
        s.continuation(Extensions::new()).unwrap()
    };
    w.body(&request).unwrap().to_bytes()
}

fn check(api: ApiKind, spec: &Spec) -> Result<(), TestCaseError> {
    let (whole, stream) = render(api, spec);
    let (mut ws, mut ww, first) = started(api);
    let whole_reply = ww
        .record_reply(&mut ws, whole.as_bytes())
        .map_err(|e| TestCaseError::fail(format!("{api:?} whole: {e}\n{whole}")))?;

    let (mut ss, mut sw, _) = started(api);
    let mut reader = sw.stream_reader();
    let mut events = Vec::new();
    for piece in chunks(stream.as_bytes(), &spec.chunking) {
        reader
            .feed(piece)
            .map_err(|e| TestCaseError::fail(format!("{api:?} stream: {e}\n{stream}")))?;
        events.extend(std::iter::from_fn(|| reader.next_event()));
    }
    prop_assert!(reader.is_done());
    let before = ss.history().len();
    let stream_reply = reader
        .finish(&mut ss)
        .map_err(|e| TestCaseError::fail(format!("{api:?} finish: {e}\n{stream}")))?;
    prop_assert_eq!(ss.history().len(), before + 1);

    // The same bytes recorded, the same reply.
    let recorded = |s: &Session| s.history().nodes().last().unwrap().bytes().to_owned();
    prop_assert_eq!(
        recorded(&ss),
        recorded(&ws),
        "{:?}\n{}\n{}",
        api,
        whole,
        stream
    );
    prop_assert_eq!(
        &stream_reply,
        &whole_reply,
        "{:?}\n{:?}\n{:?}",
        api,
        stream_reply,
        whole_reply
    );

    // The events show the reply as it came.
    let text = StreamEvent::shown_text(&events);
    prop_assert_eq!(&text, &stream_reply.text);
    let finished: Vec<(&str, &str)> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::ToolCallFinished {
                name, arguments, ..
            } => Some((name.as_str(), arguments.as_str())),
            _ => None,
        })
        .collect();
    let calls: Vec<(&str, &str)> = stream_reply
        .tool_calls
        .iter()
        .map(|c| (c.name.as_str(), c.arguments.as_str()))
        .collect();
    prop_assert_eq!(finished, calls);
    if spec.reasoning.as_deref().is_some_and(|r| !r.is_empty()) {
        let reasoned = events
            .iter()
            .any(|e| matches!(e, StreamEvent::ReasoningDelta { .. }));
        prop_assert!(reasoned);
    }
    let metered = events.iter().any(|e| matches!(e, StreamEvent::Usage(_)));
    prop_assert!(metered);

    // The next body is the whole reply's, and extends the previous one.
    let streamed_next = next_body(&mut ss, &mut sw, &stream_reply.tool_calls);
    let whole_next = next_body(&mut ws, &mut ww, &whole_reply.tool_calls);
    prop_assert_eq!(&streamed_next, &whole_next);
    prop_assert!(compare(&first, &streamed_next).unwrap().extends());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn openai_chat_stream_records_the_bytes_and_reply_of_the_whole_reply(spec in spec()) {
        check(ApiKind::OpenAi, &spec)?;
    }

    #[test]
    fn llama_cpp_stream_records_the_bytes_and_reply_of_the_whole_reply(spec in spec()) {
        check(ApiKind::LlamaCpp, &spec)?;
    }

    #[test]
    fn openai_responses_stream_records_the_bytes_and_reply_of_the_whole_reply(spec in spec()) {
        check(ApiKind::OpenAiResponses, &spec)?;
    }

    #[test]
    fn anthropic_stream_records_the_bytes_and_reply_of_the_whole_reply(spec in spec()) {
        check(ApiKind::Anthropic, &spec)?;
    }

    #[test]
    fn gemini_stream_records_the_bytes_and_reply_of_the_whole_reply(spec in spec()) {
        check(ApiKind::Gemini, &spec)?;
    }
}
