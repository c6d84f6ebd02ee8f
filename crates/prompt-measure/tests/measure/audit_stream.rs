//! `cacheline audit` over logs of every API's request bodies, their replies logged whole or
//! as the streamed reply's server-sent events: a conversation logged both ways is audited
//! alike, usage included; llama.cpp's captured replies (a real server's, both ways) too.

use std::path::{Path, PathBuf};

use prompt_core::session::ToolResult;
use prompt_core::tools::{ToolSet, ToolSource};
use prompt_core::{
    ApiKind, Component, ComponentId, Extensions, Placement, PromptPolicy, Session, SessionContext,
};
use prompt_measure::audit::{Cause, CauseKind};
use prompt_measure::synthetic::{Responses, SyntheticLog, write_log};
use prompt_measure::{AuditConfig, Provider, Usage};
use prompt_wire::{Wire, WireOptions, read_reply, stream::read_stream};
use proptest::prelude::*;
use serde_json::json;

use crate::audit::{Audited, audit_bytes};

/// A session of `api` with a prefix component (the system field) and one tool, and its wire.
fn session(api: ApiKind) -> (Session, Wire) {
    let tools = ToolSet::from_openai(&[(
        ToolSource::builtin(),
        &json!([{"name": "read_file", "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}]),
    )])
    .unwrap();
    let components = vec![
        Component::constant(
            ComponentId::new("house_rules").unwrap(),
            "You are a terse coding assistant.",
        )
        .placement(Placement::Prefix),
    ];
    let policy = PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"house_rules\"]",
        "agent.toml",
        &components,
    )
    .unwrap()
    .deny_warnings()
    .unwrap();
    let session = Session::start(
        components,
        &policy,
        SessionContext::default(),
        prompt_wire::session_options(api, tools),
    )
    .unwrap();
    let options = WireOptions::new("model-1")
        .param("max_tokens", &json!(1024))
        .param("stream", &json!(true));
    (session, Wire::new(api, options).unwrap())
}

/// The token counts a reply reports: all input (cached included), cached, output.
#[derive(Debug, Clone, Copy)]
struct Counts {
    input: u64,
    cached: u64,
    output: u64,
}

impl Counts {
    /// The usage every provider's report of these counts reads as.
    fn usage(self) -> Usage {
        Usage {
            input_uncached: self.input - self.cached,
            cache_read: self.cached,
            cache_write: 0,
            output: self.output,
        }
    }
}

#[derive(Debug, Clone)]
struct Reply {
    text: String,
    /// A call to `read_file`: its id and arguments.
    call: Option<(String, String)>,
    counts: Counts,
}

impl Reply {
    fn new(text: &str, call: Option<(&str, &str)>, input: u64, cached: u64, output: u64) -> Self {
        Self {
            text: text.to_owned(),
            call: call.map(|(id, args)| (id.to_owned(), args.to_owned())),
            counts: Counts {
                input,
                cached,
                output,
            },
        }
    }

    fn call(&self) -> Option<(&str, &str)> {
        self.call
            .as_ref()
            .map(|(id, args)| (id.as_str(), args.as_str()))
    }
}

fn q(text: &str) -> String {
    serde_json::to_string(text).unwrap()
}

/// `text` in the pieces a model streams it in (a word each).
fn words(text: &str) -> Vec<&str> {
    text.split_inclusive(' ').collect()
}

/// Arguments in two fragments.
fn halves(arguments: &str) -> [&str; 2] {
    let (a, b) = arguments.split_at(arguments.len() / 2);
    [a, b]
}

/// Server-sent events: each `(event type, data)`.
fn sse(events: &[(Option<&str>, String)]) -> String {
    let mut out = String::new();
    for (kind, data) in events {
        if let Some(kind) = kind {
            out.push_str(&format!("event: {kind}\n"));
        }
        out.push_str(&format!("data: {data}\n\n"));
    }
    out
}

/// The reply as `api` sends it whole, and as it streams it, written from each provider's
/// documented shapes (those of `crates/prompt-wire/tests/fixtures/*/`).
fn render(api: ApiKind, reply: &Reply) -> (String, String) {
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => chat(reply, api == ApiKind::LlamaCpp),
        ApiKind::OpenAiResponses => responses(reply),
        ApiKind::Anthropic => anthropic(reply),
        ApiKind::Gemini => gemini(reply),
    }
}

fn chat(reply: &Reply, llama: bool) -> (String, String) {
    let Counts {
        input,
        cached,
        output,
    } = reply.counts;
    let mut usage = format!(
        r#""usage":{{"prompt_tokens":{input},"completion_tokens":{output},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":{cached}}}}}"#,
        input + output
    );
    if llama {
        usage.push_str(&format!(
            r#","timings":{{"cache_n":{cached},"prompt_n":{},"prompt_ms":31.5,"predicted_n":{output},"predicted_ms":80.25}}"#,
            input - cached
        ));
    }
    let finish = if reply.call().is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    let calls = reply.call().map_or(String::new(), |(id, args)| {
        format!(
            r#","tool_calls":[{{"id":{},"type":"function","function":{{"name":"read_file","arguments":{}}}}}]"#,
            q(id),
            q(args)
        )
    });
    let whole = format!(
        r#"{{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"model-1","choices":[{{"index":0,"message":{{"role":"assistant","content":{}{calls}}},"finish_reason":"{finish}"}}],{usage}}}"#,
        q(&reply.text)
    );
    let chunk = |choices: String| {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"model-1","choices":[{choices}]}}"#
        )
    };
    let delta = |delta: String| {
        chunk(format!(
            r#"{{"index":0,"delta":{delta},"finish_reason":null}}"#
        ))
    };
    let mut events = vec![(
        None,
        delta(r#"{"role":"assistant","content":""}"#.to_owned()),
    )];
    for word in words(&reply.text) {
        events.push((None, delta(format!(r#"{{"content":{}}}"#, q(word)))));
    }
    if let Some((id, args)) = reply.call() {
        events.push((
            None,
            delta(format!(
                r#"{{"tool_calls":[{{"index":0,"id":{},"type":"function","function":{{"name":"read_file","arguments":""}}}}]}}"#,
                q(id)
            )),
        ));
        for fragment in halves(args) {
            events.push((
                None,
                delta(format!(
                    r#"{{"tool_calls":[{{"index":0,"function":{{"arguments":{}}}}}]}}"#,
                    q(fragment)
                )),
            ));
        }
    }
    events.push((
        None,
        chunk(format!(
            r#"{{"index":0,"delta":{{}},"finish_reason":"{finish}"}}"#
        )),
    ));
    events.push((
        None,
        format!(r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","choices":[],{usage}}}"#),
    ));
    events.push((None, "[DONE]".to_owned()));
    (whole, sse(&events))
}

fn responses(reply: &Reply) -> (String, String) {
    let Counts {
        input,
        cached,
        output,
    } = reply.counts;
    let message = format!(
        r#"{{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{{"type":"output_text","text":{},"annotations":[]}}]}}"#,
        q(&reply.text)
    );
    let call = reply.call().map(|(id, args)| {
        format!(
            r#"{{"id":"fc_1","type":"function_call","status":"completed","call_id":{},"name":"read_file","arguments":{}}}"#,
            q(id),
            q(args)
        )
    });
    let output_items = match &call {
        Some(call) => format!("[{message},{call}]"),
        None => format!("[{message}]"),
    };
    let whole = format!(
        r#"{{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"model-1","output":{output_items},"usage":{{"input_tokens":{input},"input_tokens_details":{{"cached_tokens":{cached}}},"output_tokens":{output},"output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":{}}}}}"#,
        input + output
    );
    let mut events: Vec<(Option<&str>, String)> = Vec::new();
    let mut push = |kind: &'static str, fields: String| {
        let n = events.len();
        events.push((
            Some(kind),
            format!(r#"{{"type":"{kind}","sequence_number":{n},{fields}}}"#),
        ));
    };
    push(
        "response.created",
        r#""response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"model-1","output":[],"usage":null}"#.to_owned(),
    );
    push(
        "response.output_item.added",
        r#""output_index":0,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}"#.to_owned(),
    );
    for word in words(&reply.text) {
        push(
            "response.output_text.delta",
            format!(
                r#""item_id":"msg_1","output_index":0,"content_index":0,"delta":{}"#,
                q(word)
            ),
        );
    }
    push(
        "response.output_item.done",
        format!(r#""output_index":0,"item":{message}"#),
    );
    if let (Some((id, args)), Some(call)) = (reply.call(), &call) {
        push(
            "response.output_item.added",
            format!(
                r#""output_index":1,"item":{{"id":"fc_1","type":"function_call","status":"in_progress","call_id":{},"name":"read_file","arguments":""}}"#,
                q(id)
            ),
        );
        for fragment in halves(args) {
            push(
                "response.function_call_arguments.delta",
                format!(
                    r#""item_id":"fc_1","output_index":1,"delta":{}"#,
                    q(fragment)
                ),
            );
        }
        push(
            "response.output_item.done",
            format!(r#""output_index":1,"item":{call}"#),
        );
    }
    push("response.completed", format!(r#""response":{whole}"#));
    (whole, sse(&events))
}

fn anthropic(reply: &Reply) -> (String, String) {
    let Counts {
        input,
        cached,
        output,
    } = reply.counts;
    let usage = |output: u64| {
        format!(
            r#"{{"input_tokens":{},"cache_creation_input_tokens":0,"cache_read_input_tokens":{cached},"output_tokens":{output}}}"#,
            input - cached
        )
    };
    let stop = if reply.call().is_some() {
        "tool_use"
    } else {
        "end_turn"
    };
    let call = reply.call().map_or(String::new(), |(id, args)| {
        format!(
            r#",{{"type":"tool_use","id":{},"name":"read_file","input":{args}}}"#,
            q(id)
        )
    });
    let whole = format!(
        r#"{{"id":"msg_1","type":"message","role":"assistant","model":"model-1","content":[{{"type":"text","text":{}}}{call}],"stop_reason":"{stop}","stop_sequence":null,"usage":{}}}"#,
        q(&reply.text),
        usage(output)
    );
    let mut events = vec![
        (
            Some("message_start"),
            format!(
                r#"{{"type":"message_start","message":{{"id":"msg_1","type":"message","role":"assistant","model":"model-1","content":[],"stop_reason":null,"stop_sequence":null,"usage":{}}}}}"#,
                usage(1)
            ),
        ),
        (
            Some("content_block_start"),
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
                .to_owned(),
        ),
        (Some("ping"), r#"{"type":"ping"}"#.to_owned()),
    ];
    for word in words(&reply.text) {
        events.push((
            Some("content_block_delta"),
            format!(
                r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":{}}}}}"#,
                q(word)
            ),
        ));
    }
    events.push((
        Some("content_block_stop"),
        r#"{"type":"content_block_stop","index":0}"#.to_owned(),
    ));
    if let Some((id, args)) = reply.call() {
        events.push((
            Some("content_block_start"),
            format!(
                r#"{{"type":"content_block_start","index":1,"content_block":{{"type":"tool_use","id":{},"name":"read_file","input":{{}}}}}}"#,
                q(id)
            ),
        ));
        for fragment in halves(args) {
            events.push((
                Some("content_block_delta"),
                format!(
                    r#"{{"type":"content_block_delta","index":1,"delta":{{"type":"input_json_delta","partial_json":{}}}}}"#,
                    q(fragment)
                ),
            ));
        }
        events.push((
            Some("content_block_stop"),
            r#"{"type":"content_block_stop","index":1}"#.to_owned(),
        ));
    }
    events.push((
        Some("message_delta"),
        format!(
            r#"{{"type":"message_delta","delta":{{"stop_reason":"{stop}","stop_sequence":null}},"usage":{{"output_tokens":{output}}}}}"#
        ),
    ));
    events.push((
        Some("message_stop"),
        r#"{"type":"message_stop"}"#.to_owned(),
    ));
    (whole, sse(&events))
}

fn gemini(reply: &Reply) -> (String, String) {
    let Counts {
        input,
        cached,
        output,
    } = reply.counts;
    let usage = format!(
        r#"{{"promptTokenCount":{input},"cachedContentTokenCount":{cached},"candidatesTokenCount":{output},"totalTokenCount":{}}}"#,
        input + output
    );
    let call = reply
        .call()
        .map(|(_, args)| format!(r#"{{"functionCall":{{"name":"read_file","args":{args}}}}}"#));
    let mut parts = format!(r#"{{"text":{}}}"#, q(&reply.text));
    if let Some(call) = &call {
        parts.push(',');
        parts.push_str(call);
    }
    let chunk = |parts: String, finish: &str, usage: &str| {
        format!(
            r#"{{"candidates":[{{"content":{{"parts":[{parts}],"role":"model"}}{finish},"index":0}}],"usageMetadata":{usage},"modelVersion":"model-1","responseId":"r1"}}"#
        )
    };
    let finish = r#","finishReason":"STOP""#;
    let whole = chunk(parts, finish, &usage);
    let partial = format!(r#"{{"promptTokenCount":{input},"totalTokenCount":{input}}}"#);
    let pieces = words(&reply.text);
    let mut events = Vec::new();
    for (i, word) in pieces.iter().enumerate() {
        let part = format!(r#"{{"text":{}}}"#, q(word));
        let last = i + 1 == pieces.len() && call.is_none();
        events.push((
            None,
            if last {
                chunk(part, finish, &usage)
            } else {
                chunk(part, "", &partial)
            },
        ));
    }
    if let Some(call) = call {
        events.push((None, chunk(call, finish, &usage)));
    }
    (whole, sse(&events))
}

/// The scripted conversation: a tool call and its result, the continuation, another turn.
fn scripted() -> Vec<Reply> {
    vec![
        Reply::new(
            "Let me read it.",
            Some(("call_1", r#"{"path":"main.rs"}"#)),
            1210,
            0,
            21,
        ),
        Reply::new("It prints hello.", None, 1262, 1152, 9),
        Reply::new("You're welcome.", None, 1290, 1280, 5),
    ]
}

/// The conversation of `api` answered by `replies` (after a tool call its result and the
/// continuation, else another turn), each request logged with its reply: whole, and
/// streamed.
fn logs(api: ApiKind, replies: &[Reply]) -> (String, String) {
    let (mut session, mut wire) = session(api);
    let (mut whole_log, mut streamed_log) = (String::new(), String::new());
    let mut called = false;
    for (i, reply) in replies.iter().enumerate() {
        let request = match (i, called) {
            (0, _) => session.turn(Extensions::new(), "Read main.rs").unwrap(),
            (_, true) => session.continuation(Extensions::new()).unwrap(),
            (_, false) => session
                .turn(Extensions::new(), format!("And then {i}?"))
                .unwrap(),
        };
        let body = String::from_utf8(wire.body(&request).unwrap().to_bytes()).unwrap();
        let (whole, stream) = render(api, reply);
        // The renderings are the same reply: what the wire reads of both agrees.
        let (a, b) = (
            read_reply(api, whole.as_bytes()).unwrap(),
            read_stream(api, stream.as_bytes()).unwrap(),
        );
        assert_eq!(
            (&a.text, &a.tool_calls, &a.usage),
            (&b.text, &b.tool_calls, &b.usage),
            "{api:?}"
        );
        whole_log.push_str(&format!("{{\"request\":{body},\"response\":{whole}}}\n"));
        streamed_log.push_str(&format!(
            "{{\"request\":{body},\"response\":{}}}\n",
            q(&stream)
        ));
        let recorded = wire.record_reply(&mut session, whole.as_bytes()).unwrap();
        called = false;
        for call in &recorded.tool_calls {
            session
                .record_tool(&ToolResult::text(
                    &call.id,
                    "fn main() { println!(\"hello\"); }",
                ))
                .unwrap();
            called = true;
        }
    }
    (whole_log, streamed_log)
}

fn provider(api: ApiKind) -> Provider {
    match api {
        ApiKind::OpenAi | ApiKind::OpenAiResponses => Provider::OpenAi,
        ApiKind::Anthropic => Provider::Anthropic,
        ApiKind::Gemini => Provider::Gemini,
        ApiKind::LlamaCpp => Provider::LlamaCpp,
    }
}

fn shape(api: ApiKind) -> ApiKind {
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => ApiKind::OpenAi,
        ApiKind::OpenAiResponses => ApiKind::OpenAiResponses,
        ApiKind::Anthropic => ApiKind::Anthropic,
        ApiKind::Gemini => ApiKind::Gemini,
    }
}

/// Audits the conversation of `api` logged both ways and checks that both audits are the
/// same, every figure, and that each request reports its reply's usage.
fn check_both_ways(api: ApiKind, replies: &[Reply]) {
    let (whole_log, streamed_log) = logs(api, replies);
    let whole = audit_bytes("whole.jsonl", whole_log.as_bytes(), AuditConfig::default());
    let streamed = audit_bytes(
        "streamed.jsonl",
        streamed_log.as_bytes(),
        AuditConfig::default(),
    );
    assert!(
        whole.skipped.is_empty() && streamed.skipped.is_empty(),
        "{api:?}"
    );
    assert_eq!(whole.requests.len(), replies.len(), "{api:?}");
    // The same audit, request by request and in the summary: every figure.
    assert_eq!(streamed.requests, whole.requests, "{api:?}");
    assert_eq!(streamed.summary, whole.summary, "{api:?}");
    for (r, reply) in streamed.requests.iter().zip(replies) {
        assert_eq!(r.shape, shape(api), "{api:?} line {}", r.line);
        assert_eq!(r.reported_error, None, "{api:?} line {}", r.line);
        let reported = r
            .reported
            .unwrap_or_else(|| panic!("{api:?} line {}: no usage", r.line));
        assert_eq!(
            (reported.provider, reported.usage),
            (provider(api), reply.counts.usage()),
            "{api:?} line {}",
            r.line
        );
    }
    let reported = streamed
        .summary
        .reported
        .unwrap_or_else(|| panic!("{api:?}"));
    assert_eq!(reported.requests, replies.len() as u64, "{api:?}");
    assert!(
        streamed
            .summary
            .hit_rate_source
            .starts_with("reported usage"),
        "{api:?}: {}",
        streamed.summary.hit_rate_source
    );
}

#[test]
fn audit_of_streamed_replies_reports_what_their_whole_replies_report_for_every_api() {
    for api in ApiKind::ALL {
        check_both_ways(api, &scripted());
    }
}

fn reply_strategy() -> impl Strategy<Value = Reply> {
    (
        "[a-zA-Z0-9é✓\"\\\\]{1,8}( [a-zA-Z0-9é✓]{1,8}){0,6}",
        prop::option::of(("[a-z0-9]{4,8}", "[a-z/]{1,12}")),
        0u64..200_000,
        0u64..200_000,
        0u64..4_000,
    )
        .prop_map(|(text, call, a, b, output)| Reply {
            text,
            call: call
                .map(|(id, path)| (format!("call_{id}"), format!(r#"{{"path":"{path}.rs"}}"#))),
            counts: Counts {
                input: a.max(b),
                cached: a.min(b),
                output,
            },
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random replies (text, a call or none, any counts), every API: a log of their streams
    /// audits as the log of their whole replies.
    #[test]
    fn audit_of_random_streamed_replies_reports_what_their_whole_replies_report(
        replies in prop::collection::vec(reply_strategy(), 1..5)
    ) {
        for api in ApiKind::ALL {
            check_both_ways(api, &replies);
        }
    }
}

#[test]
fn audit_reads_every_api_s_request_bodies_and_finds_a_rewritten_system_field() {
    for api in ApiKind::ALL {
        let (whole_log, _) = logs(api, &scripted());
        let lines: Vec<&str> = whole_log.lines().collect();
        // The third request with its system prompt rewritten.
        let edited = lines[2].replace("terse coding", "careful coding");
        assert_ne!(edited, lines[2], "{api:?}");
        let log = format!("{}\n{}\n{edited}\n", lines[0], lines[1]);
        let a = audit_bytes("edited.jsonl", log.as_bytes(), AuditConfig::default());
        assert!(a.skipped.is_empty(), "{api:?}");
        let continuation = &a.requests[1].verdict;
        assert_eq!(
            (
                continuation.predecessor.as_ref().map(|p| p.tag),
                continuation.tokens_lost
            ),
            (Some(1), 0),
            "{api:?}"
        );
        assert!(
            continuation
                .changes
                .iter()
                .all(|c| c.cause == Cause::SerializationOnly),
            "{api:?}: {:?}",
            continuation.changes
        );
        let v = &a.requests[2].verdict;
        assert_eq!(
            v.cause.as_ref().map(Cause::kind),
            Some(CauseKind::SystemChanged),
            "{api:?}"
        );
        assert!(v.tokens_lost > 0, "{api:?}");
        let d = &v.changes[0];
        assert!(
            d.divergence.excerpt.earlier.contains("terse")
                && d.divergence.excerpt.later.contains("careful"),
            "{api:?}: {:?}",
            d.divergence.excerpt
        );
        let expected_path = match shape(api) {
            // Its system prompt is message 0.
            ApiKind::OpenAi | ApiKind::LlamaCpp => "messages[0]",
            ApiKind::Anthropic => "system[0]",
            ApiKind::OpenAiResponses => "instructions",
            ApiKind::Gemini => "systemInstruction.parts[0]",
        };
        assert_eq!(d.json_path, expected_path, "{api:?}");
    }
}

fn llama_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../prompt-wire/tests/fixtures/llama_cpp/stream")
        .join(name)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `fixtures/audit/llama_cpp_whole.jsonl` and `llama_cpp_streamed.jsonl`: llama.cpp's
/// captured requests (`crates/prompt-wire/tests/fixtures/llama_cpp/stream/`, a real server's), each
/// logged with its whole reply, and with its streamed reply as the text it came as.
#[test]
fn the_llama_cpp_audit_logs_are_the_captured_requests_and_replies() {
    let whole = read(&crate::audit::fixture("llama_cpp_whole.jsonl"));
    let streamed = read(&crate::audit::fixture("llama_cpp_streamed.jsonl"));
    let (mut whole, mut streamed) = (whole.lines(), streamed.lines());
    for case in ["tools", "reasoning", "text"] {
        for endpoint in ["chat", "responses", "messages"] {
            let request = json(&read(&llama_fixture(&format!(
                "requests/{case}-{endpoint}.json"
            ))));
            let reply = json(&read(&llama_fixture(&format!(
                "{case}/{endpoint}.whole.json"
            ))));
            let stream = read(&llama_fixture(&format!("{case}/{endpoint}.sse")));
            let (w, s) = (json(whole.next().unwrap()), json(streamed.next().unwrap()));
            assert_eq!((&w["request"], &w["response"]), (&request, &reply));
            assert_eq!(
                (&s["request"], s["response"].as_str()),
                (&request, Some(stream.as_str()))
            );
        }
    }
    assert_eq!((whole.next(), streamed.next()), (None, None));
}

#[test]
fn audit_of_llama_cpp_captured_streams_reports_what_their_whole_replies_report() {
    let (whole, streamed): (Audited, Audited) = (
        crate::audit::audit("llama_cpp_whole.jsonl"),
        crate::audit::audit("llama_cpp_streamed.jsonl"),
    );
    assert!(whole.skipped.is_empty() && streamed.skipped.is_empty());
    assert_eq!(streamed.requests.len(), 9);
    assert_eq!(streamed.requests, whole.requests);
    assert_eq!(streamed.summary, whole.summary);
    for r in &streamed.requests {
        assert_eq!(r.reported_error, None, "line {}", r.line);
        let reported = r.reported.unwrap_or_else(|| panic!("line {}", r.line));
        assert!(reported.usage.input() > 0, "line {}", r.line);
    }
}

const CHAT_REQUEST: &str = r#"{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}],"stream":true}"#;

/// The audit of one line, and that line's audit.
fn audit_line(line: &str) -> (Audited, Option<prompt_measure::RequestAudit>) {
    let a = audit_bytes(
        "line.jsonl",
        format!("{line}\n").as_bytes(),
        AuditConfig::default(),
    );
    let r = a.requests.first().cloned();
    (a, r)
}

/// The scripted first reply of `api`, whole and streamed.
fn first_reply(api: ApiKind) -> (String, String) {
    render(api, &scripted()[0])
}

#[test]
fn audit_reports_a_stream_cut_off_and_still_audits_its_request() {
    for api in ApiKind::ALL {
        let (_, stream) = first_reply(api);
        let cut = &stream[..stream.len() * 2 / 3];
        let (whole_log, _) = logs(api, &scripted()[..1]);
        let request = whole_log.trim_end();
        let request = &request[..request.find(",\"response\":").unwrap()];
        let (a, r) = audit_line(&format!("{request},\"response\":{}}}", q(cut)));
        assert!(a.skipped.is_empty(), "{api:?}");
        let r = r.unwrap_or_else(|| panic!("{api:?}"));
        assert_eq!(r.reported, None, "{api:?}");
        let error = r.reported_error.unwrap_or_default();
        assert!(
            error.starts_with("the response stream: ") && error.contains("cut off"),
            "{api:?}: {error}"
        );
        assert_eq!(a.summary.reported, None, "{api:?}");
    }
}

#[test]
fn audit_says_how_to_get_a_chat_stream_s_usage_when_it_carries_none() {
    let stream = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let (_, r) = audit_line(&format!(
        "{{\"request\":{CHAT_REQUEST},\"response\":{}}}",
        q(stream)
    ));
    let r = r.unwrap();
    assert_eq!(r.reported, None);
    assert!(
        r.reported_error
            .as_deref()
            .unwrap_or_default()
            .contains("stream_options: {\"include_usage\": true}"),
        "{:?}",
        r.reported_error
    );
}

#[test]
fn audit_reads_a_reply_and_a_request_logged_as_text() {
    let (whole, _) = first_reply(ApiKind::OpenAi);
    let as_objects = format!("{{\"request\":{CHAT_REQUEST},\"response\":{whole}}}");
    let as_text = format!(
        "{{\"request\":{},\"response\":{}}}",
        q(CHAT_REQUEST),
        q(&whole)
    );
    let (_, a) = audit_line(&as_objects);
    let (_, b) = audit_line(&as_text);
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a.reported.is_some());
    assert_eq!(a, b);
}

#[test]
fn audit_reads_a_response_beside_the_request_body_s_keys() {
    // LiteLLM's spend logs keep `messages` and `response` side by side.
    let (whole, stream) = first_reply(ApiKind::OpenAi);
    let wrapped = format!("{{\"request\":{CHAT_REQUEST},\"response\":{whole}}}");
    let beside = format!(
        "{},\"response\":{}}}",
        CHAT_REQUEST.trim_end_matches('}'),
        q(&stream)
    );
    let (_, a) = audit_line(&wrapped);
    let (_, b) = audit_line(&beside);
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        b.reported.map(|r| r.usage),
        Some(scripted()[0].counts.usage())
    );
    // The same audit: the request's tokens are its tools and messages, not the response.
    assert_eq!(a, b);
}

#[test]
fn audit_refuses_a_response_of_another_kind_naming_the_accepted_shapes() {
    let (_, r) = audit_line(&format!(
        "{{\"request\":{CHAT_REQUEST},\"response\":[1,2]}}"
    ));
    let r = r.unwrap();
    assert_eq!(r.reported, None);
    assert_eq!(
        r.reported_error.as_deref(),
        Some(
            "the response is an array: expected the whole reply (an object) or the response body as text (a string: the reply's JSON, or a stream's server-sent events)"
        )
    );
}

#[test]
fn audit_reads_an_anthropic_stream_logged_with_a_request_that_reads_as_chat() {
    // Nothing in this Messages body is Anthropic's alone: the guard reads it as Chat.
    let request = r#"{"model":"claude","max_tokens":64,"messages":[{"role":"user","content":"hi"}],"stream":true}"#;
    let (whole, stream) = first_reply(ApiKind::Anthropic);
    let (_, a) = audit_line(&format!("{{\"request\":{request},\"response\":{whole}}}"));
    let (_, b) = audit_line(&format!(
        "{{\"request\":{request},\"response\":{}}}",
        q(&stream)
    ));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(b.shape, ApiKind::OpenAi);
    assert_eq!(b.reported_error, None);
    assert_eq!(b.reported.map(|r| r.provider), Some(Provider::Anthropic));
    assert_eq!(a, b);
}

#[test]
fn audit_of_a_blocked_gemini_stream_reports_the_usage_its_whole_reply_reports() {
    let request = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
    let blocked = r#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":1200,"cachedContentTokenCount":1024,"totalTokenCount":1200},"modelVersion":"gemini-2.5-flash"}"#;
    let (_, a) = audit_line(&format!("{{\"request\":{request},\"response\":{blocked}}}"));
    let (_, b) = audit_line(&format!(
        "{{\"request\":{request},\"response\":{}}}",
        q(&format!("data: {blocked}\r\n\r\n"))
    ));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(b.reported_error, None);
    assert_eq!(
        b.reported
            .map(|r| (r.provider, r.usage.cache_read, r.usage.input())),
        Some((Provider::Gemini, 1024, 1200))
    );
    assert_eq!(a, b);
}

#[test]
fn audit_reports_a_stream_s_error_event_with_its_number() {
    let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let request = r#"{"model":"claude","system":"Be brief.","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
    let (_, r) = audit_line(&format!(
        "{{\"request\":{request},\"response\":{}}}",
        q(stream)
    ));
    let r = r.unwrap();
    assert_eq!(r.shape, ApiKind::Anthropic);
    assert_eq!(r.reported, None);
    let error = r.reported_error.unwrap_or_default();
    assert!(
        error.contains("event 2") && error.contains("Overloaded"),
        "{error}"
    );
}

#[test]
fn audit_skips_a_request_of_no_known_shape_with_the_guard_s_reason() {
    let (a, r) = audit_line(r#"{"request":{"model":"m","prompt":"hi"},"response":null}"#);
    assert!(r.is_none());
    assert_eq!(a.skipped, vec![1]);
    let (a, _) = audit_line(r#"{"request":5}"#);
    assert_eq!(a.skipped, vec![1]);
}

#[test]
fn a_synthetic_log_of_streamed_replies_audits_as_the_log_of_its_whole_replies() {
    let log = |responses| {
        let mut out = Vec::new();
        let spec = SyntheticLog {
            target_bytes: 1 << 20,
            responses,
            ..SyntheticLog::default()
        };
        write_log(&mut out, &spec).unwrap();
        out
    };
    let (whole, streamed) = (log(Responses::Whole), log(Responses::Streamed));
    // The same requests: as many lines as the shorter log (streams take more bytes).
    let lines = |log: &[u8]| log.iter().filter(|&&b| b == b'\n').count();
    let n = lines(&whole).min(lines(&streamed));
    let first = |log: Vec<u8>| -> Vec<u8> {
        log.split_inclusive(|&b| b == b'\n')
            .take(n)
            .flatten()
            .copied()
            .collect()
    };
    let (whole, streamed) = (first(whole), first(streamed));
    assert!(n > 30 && streamed.len() > whole.len(), "{n}");
    let whole = audit_bytes("whole.jsonl", &whole, AuditConfig::default());
    let streamed = audit_bytes("streamed.jsonl", &streamed, AuditConfig::default());
    assert!(whole.skipped.is_empty() && streamed.skipped.is_empty());
    assert_eq!(streamed.requests, whole.requests);
    assert_eq!(streamed.summary, whole.summary);
    let reported = streamed.summary.reported.unwrap();
    assert_eq!(reported.requests, streamed.summary.requests);
}
