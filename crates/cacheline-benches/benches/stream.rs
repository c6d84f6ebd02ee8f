//! A reply with N parallel tool calls, streamed and whole, for N = 250, 1,000 and 4,000.
//!
//! Run: `cargo bench -p cacheline-benches --bench stream`. Reading and recording must stay
//! linear in N: argument fragments are appended, never re-copied, calls are found by index,
//! and the session keeps its open calls as results come (answering N calls was quadratic).
//! Per sample, on a fresh session after its first turn (built outside the timing):
//! - `stream_<api>`: the stream's bytes fed in 16 KiB pieces, every event taken, the reply
//!   recorded ([`StreamReader::finish`]);
//! - `whole_<api>`: the whole reply it amounts to, read and recorded (`Wire::record_reply`);
//! - `answer_calls`: after the whole Chat Completions reply, every call answered
//!   (`Session::record_tool`) and the continuation's body composed.

use prompt_core::session::ToolResult;
use prompt_core::{ApiKind, Extensions, PromptPolicy, Session, SessionContext};
use prompt_wire::stream::StreamReader;
use prompt_wire::{Wire, WireOptions};

fn main() {
    divan::main();
}

const CALLS: [usize; 3] = [250, 1_000, 4_000];

/// The bytes a network read gives at once, about.
const PIECE: usize = 16 << 10;

/// A session of `api` after its first turn, and its wire.
fn started(api: ApiKind) -> (Session, Wire) {
    let options = prompt_wire::session_options(api, prompt_core::tools::ToolSet::empty());
    let mut s = Session::start(
        Vec::new(),
        &PromptPolicy::default(),
        SessionContext::default(),
        options,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut w = Wire::new(
        api,
        WireOptions::new("m").param("max_tokens", &serde_json::json!(1024)),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    match s.turn(Extensions::new(), "Read every file.") {
        Ok(request) => {
            if let Err(e) = w.body(&request) {
                panic!("{e}");
            }
        }
        Err(e) => panic!("{e}"),
    }
    (s, w)
}

/// Call `k`'s arguments and the fragments the model writes them in.
fn arguments(k: usize) -> (String, [String; 3]) {
    let whole = format!(r#"{{"path":"src/module_{k}.rs","line":{k}}}"#);
    let (a, rest) = whole.split_at(9);
    let (b, c) = rest.split_at(rest.len() / 2);
    (whole.clone(), [a.to_owned(), b.to_owned(), c.to_owned()])
}

fn q(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_else(|e| panic!("{e}"))
}

fn sse(out: &mut String, kind: Option<&str>, data: &str) {
    if let Some(kind) = kind {
        out.push_str("event: ");
        out.push_str(kind);
        out.push('\n');
    }
    out.push_str("data: ");
    out.push_str(data);
    out.push_str("\n\n");
}

/// The whole reply with `n` calls and its stream, for `api`.
fn reply(api: ApiKind, n: usize) -> (String, String) {
    let mut stream = String::new();
    let mut items = Vec::with_capacity(n);
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => {
            let chunk = |delta: &str, finish: &str| {
                format!(
                    r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":{finish}}}]}}"#
                )
            };
            sse(
                &mut stream,
                None,
                &chunk(
                    r#"{"role":"assistant","content":null,"refusal":null}"#,
                    "null",
                ),
            );
            for k in 0..n {
                let (whole, fragments) = arguments(k);
                items.push(format!(
                    r#"{{"id":"call_{k}","type":"function","function":{{"name":"read_file","arguments":{}}}}}"#,
                    q(&whole)
                ));
                sse(
                    &mut stream,
                    None,
                    &chunk(
                        &format!(
                            r#"{{"tool_calls":[{{"index":{k},"id":"call_{k}","type":"function","function":{{"name":"read_file","arguments":""}}}}]}}"#
                        ),
                        "null",
                    ),
                );
                for f in fragments {
                    sse(
                        &mut stream,
                        None,
                        &chunk(
                            &format!(
                                r#"{{"tool_calls":[{{"index":{k},"function":{{"arguments":{}}}}}]}}"#,
                                q(&f)
                            ),
                            "null",
                        ),
                    );
                }
            }
            sse(&mut stream, None, &chunk("{}", r#""tool_calls""#));
            sse(&mut stream, None, "[DONE]");
            let whole = format!(
                r#"{{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":null,"tool_calls":[{}],"refusal":null,"annotations":[]}},"logprobs":null,"finish_reason":"tool_calls"}}]}}"#,
                items.join(",")
            );
            (whole, stream)
        }
        ApiKind::Anthropic => {
            sse(
                &mut stream,
                Some("message_start"),
                r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}"#,
            );
            for k in 0..n {
                let (whole, fragments) = arguments(k);
                items.push(format!(
                    r#"{{"type":"tool_use","id":"toolu_{k}","name":"read_file","input":{whole}}}"#
                ));
                sse(
                    &mut stream,
                    Some("content_block_start"),
                    &format!(
                        r#"{{"type":"content_block_start","index":{k},"content_block":{{"type":"tool_use","id":"toolu_{k}","name":"read_file","input":{{}}}}}}"#
                    ),
                );
                for f in fragments {
                    sse(
                        &mut stream,
                        Some("content_block_delta"),
                        &format!(
                            r#"{{"type":"content_block_delta","index":{k},"delta":{{"type":"input_json_delta","partial_json":{}}}}}"#,
                            q(&f)
                        ),
                    );
                }
                sse(
                    &mut stream,
                    Some("content_block_stop"),
                    &format!(r#"{{"type":"content_block_stop","index":{k}}}"#),
                );
            }
            sse(
                &mut stream,
                Some("message_delta"),
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":100}}"#,
            );
            sse(
                &mut stream,
                Some("message_stop"),
                r#"{"type":"message_stop"}"#,
            );
            let whole = format!(
                r#"{{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{}],"stop_reason":"tool_use","stop_sequence":null,"usage":{{"input_tokens":10,"output_tokens":100}}}}"#,
                items.join(",")
            );
            (whole, stream)
        }
        ApiKind::OpenAiResponses => {
            for k in 0..n {
                let (whole, fragments) = arguments(k);
                let item = format!(
                    r#"{{"id":"fc_{k}","type":"function_call","status":"completed","arguments":{},"call_id":"call_{k}","name":"read_file"}}"#,
                    q(&whole)
                );
                sse(
                    &mut stream,
                    Some("response.output_item.added"),
                    &format!(
                        r#"{{"type":"response.output_item.added","output_index":{k},"item":{{"id":"fc_{k}","type":"function_call","status":"in_progress","arguments":"","call_id":"call_{k}","name":"read_file"}}}}"#
                    ),
                );
                for f in fragments {
                    sse(
                        &mut stream,
                        Some("response.function_call_arguments.delta"),
                        &format!(
                            r#"{{"type":"response.function_call_arguments.delta","item_id":"fc_{k}","output_index":{k},"delta":{}}}"#,
                            q(&f)
                        ),
                    );
                }
                sse(
                    &mut stream,
                    Some("response.output_item.done"),
                    &format!(
                        r#"{{"type":"response.output_item.done","output_index":{k},"item":{item}}}"#
                    ),
                );
                items.push(item);
            }
            let whole = format!(
                r#"{{"id":"resp_1","object":"response","created_at":1,"status":"completed","model":"m","output":[{}],"usage":{{"input_tokens":10,"output_tokens":100,"total_tokens":110}}}}"#,
                items.join(",")
            );
            sse(
                &mut stream,
                Some("response.completed"),
                &format!(r#"{{"type":"response.completed","response":{whole}}}"#),
            );
            (whole, stream)
        }
        ApiKind::Gemini => {
            // Gemini streams each call whole: one chunk per call.
            for k in 0..n {
                let (whole, _) = arguments(k);
                let part = format!(r#"{{"functionCall":{{"name":"read_file","args":{whole}}}}}"#);
                let finish = if k + 1 == n {
                    r#","finishReason":"STOP""#
                } else {
                    ""
                };
                sse(
                    &mut stream,
                    None,
                    &format!(
                        r#"{{"candidates":[{{"content":{{"parts":[{part}],"role":"model"}}{finish},"index":0}}],"usageMetadata":{{"promptTokenCount":10,"totalTokenCount":10}}}}"#
                    ),
                );
                items.push(part);
            }
            let whole = format!(
                r#"{{"candidates":[{{"content":{{"parts":[{}],"role":"model"}},"finishReason":"STOP","index":0}}],"usageMetadata":{{"promptTokenCount":10,"totalTokenCount":10}}}}"#,
                items.join(",")
            );
            (whole, stream)
        }
    }
}

fn bench_stream(bencher: divan::Bencher, api: ApiKind, n: usize) {
    let (_, stream) = reply(api, n);
    bencher
        .with_inputs(|| started(api).0)
        .bench_local_values(|mut session| {
            let mut reader = StreamReader::new(api);
            let mut events = 0usize;
            for piece in stream.as_bytes().chunks(PIECE) {
                if let Err(e) = reader.feed(piece) {
                    panic!("{e}");
                }
                while reader.next_event().is_some() {
                    events += 1;
                }
            }
            match reader.finish(&mut session) {
                Ok(reply) => (reply.tool_calls.len(), events, session),
                Err(e) => panic!("{e}"),
            }
        });
}

fn bench_whole(bencher: divan::Bencher, api: ApiKind, n: usize) {
    let (whole, _) = reply(api, n);
    bencher
        .with_inputs(|| started(api))
        .bench_local_values(|(mut session, wire)| {
            match wire.record_reply(&mut session, whole.as_bytes()) {
                Ok(reply) => (reply.tool_calls.len(), session),
                Err(e) => panic!("{e}"),
            }
        });
}

#[divan::bench(args = CALLS, sample_count = 20, sample_size = 1)]
fn stream_openai_chat(bencher: divan::Bencher, n: usize) {
    bench_stream(bencher, ApiKind::OpenAi, n);
}

#[divan::bench(args = CALLS, sample_count = 20, sample_size = 1)]
fn whole_openai_chat(bencher: divan::Bencher, n: usize) {
    bench_whole(bencher, ApiKind::OpenAi, n);
}

#[divan::bench(args = CALLS, sample_count = 20, sample_size = 1)]
fn stream_openai_responses(bencher: divan::Bencher, n: usize) {
    bench_stream(bencher, ApiKind::OpenAiResponses, n);
}

#[divan::bench(args = CALLS, sample_count = 20, sample_size = 1)]
fn whole_openai_responses(bencher: divan::Bencher, n: usize) {
    bench_whole(bencher, ApiKind::OpenAiResponses, n);
}

#[divan::bench(args = CALLS, sample_count = 20, sample_size = 1)]
fn stream_anthropic(bencher: divan::Bencher, n: usize) {
    bench_stream(bencher, ApiKind::Anthropic, n);
}

#[divan::bench(args = CALLS, sample_count = 20, sample_size = 1)]
fn whole_anthropic(bencher: divan::Bencher, n: usize) {
    bench_whole(bencher, ApiKind::Anthropic, n);
}

#[divan::bench(args = CALLS, sample_count = 20, sample_size = 1)]
fn stream_gemini(bencher: divan::Bencher, n: usize) {
    bench_stream(bencher, ApiKind::Gemini, n);
}

#[divan::bench(args = CALLS, sample_count = 20, sample_size = 1)]
fn whole_gemini(bencher: divan::Bencher, n: usize) {
    bench_whole(bencher, ApiKind::Gemini, n);
}

/// Every call of the whole Chat Completions reply answered, then the continuation's body.
#[divan::bench(args = CALLS, sample_count = 20, sample_size = 1)]
fn answer_calls(bencher: divan::Bencher, n: usize) {
    let (whole, _) = reply(ApiKind::OpenAi, n);
    bencher
        .with_inputs(|| {
            let (mut session, wire) = started(ApiKind::OpenAi);
            match wire.record_reply(&mut session, whole.as_bytes()) {
                Ok(reply) => (session, wire, reply.tool_calls),
                Err(e) => panic!("{e}"),
            }
        })
        .bench_local_values(|(mut session, mut wire, calls)| {
            for call in &calls {
                if let Err(e) = session.record_tool(&ToolResult::text(&call.id, "fn main() {}")) {
                    panic!("{e}");
                }
            }
            let len = match session.continuation(Extensions::new()) {
                Ok(request) => match wire.body(&request) {
                    Ok(body) => body.len(),
                    Err(e) => panic!("{e}"),
                },
                Err(e) => panic!("{e}"),
            };
            (len, session, wire)
        });
}
