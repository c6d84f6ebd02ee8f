//! A deterministic synthetic request log, for the audit benchmark and the bounded-memory
//! test: interleaved agent sessions, each a different kind of client.
//!
//! | session % 4 | client |
//! |---|---|
//! | 0 | append-only: fixed system prompt and tools |
//! | 1 | today's date inside the system prompt: a head rewrite when it rolls over (mid-session) |
//! | 2 | a per-turn context message injected before the user message, dropped the next turn |
//! | 3 | tools re-sorted every ten turns (a tool-schema change) |
//!
//! By default every second line is `{"request": …, "response": …}`; the responses carry no
//! usage (a generator cannot know what a provider would have counted), so an audit of this
//! log reports the configured rule's figures. [`Responses::Whole`] and
//! [`Responses::Streamed`] log every request with the same reply — a text streamed a word per
//! chunk, then a tool call whose arguments come in fragments — whole, or as the Chat
//! Completions stream's server-sent events, with placeholder usage (the request's bytes / 4
//! as its prompt tokens, none cached): for the throughput of reading either, not for figures
//! of a cache.

use std::io::{self, Write};

use serde_json::{Value, json};

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntheticLog {
    /// Sessions running at once (their requests interleave).
    pub concurrent: usize,
    /// Turns per session.
    pub turns: usize,
    /// Stop after the line that reaches this many bytes.
    pub target_bytes: u64,
    /// Seed of the filler text.
    pub seed: u64,
    /// How responses are logged.
    pub responses: Responses,
}

/// How a [`SyntheticLog`] logs responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Responses {
    /// Every second line carries a response without usage.
    #[default]
    WithoutUsage,
    /// Every line carries its reply whole, with usage.
    Whole,
    /// Every line carries its reply as the text of its Chat Completions stream, with usage.
    Streamed,
}

impl Default for SyntheticLog {
    fn default() -> Self {
        Self {
            concurrent: 4,
            turns: 30,
            target_bytes: 8 << 20,
            seed: 1,
            responses: Responses::WithoutUsage,
        }
    }
}

/// What was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Written {
    /// Lines (requests).
    pub lines: u64,
    /// Bytes.
    pub bytes: u64,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn words(&mut self, n: usize) -> String {
        const WORDS: [&str; 32] = [
            "cache", "prefix", "token", "request", "history", "session", "compose", "policy",
            "tail", "update", "render", "frozen", "append", "message", "system", "tool", "result",
            "schema", "return", "error", "value", "struct", "impl", "fn", "let", "match", "Some",
            "None", "Ok", "self", "vec", "string",
        ];
        let mut out = String::with_capacity(n * 7);
        for i in 0..n {
            if i > 0 {
                out.push(if i % 13 == 0 { '\n' } else { ' ' });
            }
            out.push_str(WORDS[(self.next() % 32) as usize]);
        }
        out
    }
}

fn tools(session: usize, turn: usize) -> Vec<Value> {
    let names = [
        "read_file",
        "write_file",
        "edit_file",
        "grep",
        "glob",
        "run_tests",
        "run_command",
        "git_diff",
    ];
    let mut tools: Vec<Value> = names
        .iter()
        .map(|n| {
            json!({"type": "function", "function": {"name": n,
                "description": format!("{n}: operate on the project. {}", "Paths are relative to the project root; outputs are truncated at 30,000 characters; errors are returned as text. ".repeat(3)),
                "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "Path relative to the project root."}, "pattern": {"type": "string"}}, "required": ["path"]}}})
        })
        .collect();
    if session % 4 == 3 && (turn / 10) % 2 == 1 {
        tools.reverse();
    }
    tools
}

fn system_prompt(session: usize, turn: usize, turns: usize) -> String {
    let mut s = format!(
        "You are a coding agent working in repository number {session}. {}",
        "Read code before changing it. Keep changes small. Run the tests after each change and report failures verbatim. ".repeat(24)
    );
    if session % 4 == 1 {
        s.push_str(if turn < turns / 2 {
            "\nToday's date is 2026-11-30."
        } else {
            "\nToday's date is 2026-12-01."
        });
    }
    s
}

/// Writes the log to `out` until `spec.target_bytes` is reached.
pub fn write_log(out: &mut dyn Write, spec: &SyntheticLog) -> io::Result<Written> {
    let mut rng = Rng(spec.seed);
    let concurrent = spec.concurrent.max(1);
    let turns = spec.turns.max(1);
    // Per running slot: (session id, turn, history).
    let mut slots: Vec<(usize, usize, Vec<Value>)> =
        (0..concurrent).map(|i| (i, 0, Vec::new())).collect();
    let mut next_session = concurrent;
    let mut written = Written::default();
    while written.bytes < spec.target_bytes {
        for (session, turn, history) in slots.iter_mut() {
            let mut messages =
                vec![json!({"role": "system", "content": system_prompt(*session, *turn, turns)})];
            messages.extend(history.iter().cloned());
            let user =
                json!({"role": "user", "content": format!("Step {turn}: {}", rng.words(30))});
            if *session % 4 == 2 {
                let context = json!({"role": "system", "content": format!("Context for this step: {}", rng.words(40))});
                messages.push(context);
            }
            messages.push(user.clone());
            let body =
                json!({"model": "gpt-4.1", "messages": messages, "tools": tools(*session, *turn)});
            let call = format!("call_{session}_{turn}");
            let arguments = format!("{{\"path\":\"src/m{turn}.rs\"}}");
            let line = if spec.responses != Responses::WithoutUsage {
                let body = body.to_string();
                let (whole, stream) = reply(
                    written.lines,
                    &rng.words(40),
                    &call,
                    &arguments,
                    body.len() as u64 / 4,
                );
                let response = match spec.responses {
                    Responses::Streamed => Value::String(stream),
                    _ => whole,
                };
                format!(r#"{{"request":{body},"response":{response}}}"#)
            } else if written.lines % 2 == 1 {
                json!({"request": body, "response": {"id": format!("chatcmpl-{}", written.lines), "object": "chat.completion",
                    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null}}]}})
                .to_string()
            } else {
                body.to_string()
            };
            out.write_all(line.as_bytes())?;
            out.write_all(b"\n")?;
            written.lines += 1;
            written.bytes += line.len() as u64 + 1;

            history.push(user);
            history.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": call, "type": "function", "function": {"name": "read_file", "arguments": arguments}}]}));
            history.push(json!({"role": "tool", "tool_call_id": call, "content": rng.words(260)}));
            history.push(json!({"role": "assistant", "content": rng.words(50)}));
            *turn += 1;
            if *turn >= turns {
                *session = next_session;
                next_session += 1;
                *turn = 0;
                history.clear();
            }
            if written.bytes >= spec.target_bytes {
                break;
            }
        }
    }
    Ok(written)
}

/// A Chat Completions reply — `text`, then a call of `read_file` — whole, and as the
/// server-sent events of its stream (a word per chunk, the arguments in four fragments, the
/// usage chunk, `[DONE]`), both with the same placeholder usage.
fn reply(
    line: u64,
    text: &str,
    call: &str,
    arguments: &str,
    prompt_tokens: u64,
) -> (Value, String) {
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    let completion_tokens = words.len() as u64 + 8;
    let usage = json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens, "prompt_tokens_details": {"cached_tokens": 0}});
    let id = format!("chatcmpl-{line}");
    let whole = json!({"id": id, "object": "chat.completion", "created": 1, "model": "gpt-4.1",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": text,
            "tool_calls": [{"id": call, "type": "function", "function": {"name": "read_file", "arguments": arguments}}]}}],
        "usage": usage});
    let mut stream = String::new();
    let mut event = |choices: Value, usage: Option<&Value>| {
        let mut chunk = json!({"id": id, "object": "chat.completion.chunk", "created": 1, "model": "gpt-4.1", "choices": choices});
        if let (Some(usage), Some(chunk)) = (usage, chunk.as_object_mut()) {
            chunk.insert("usage".to_owned(), usage.clone());
        }
        stream.push_str(&format!("data: {chunk}\n\n"));
    };
    let delta = |delta: Value| json!([{"index": 0, "delta": delta, "finish_reason": null}]);
    event(delta(json!({"role": "assistant", "content": ""})), None);
    for word in words {
        event(delta(json!({"content": word})), None);
    }
    event(
        delta(
            json!({"tool_calls": [{"index": 0, "id": call, "type": "function", "function": {"name": "read_file", "arguments": ""}}]}),
        ),
        None,
    );
    let quarter = arguments.len().div_ceil(4).max(1);
    for fragment in arguments.as_bytes().chunks(quarter) {
        let fragment = String::from_utf8_lossy(fragment);
        event(
            delta(json!({"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]})),
            None,
        );
    }
    event(
        json!([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]),
        None,
    );
    event(json!([]), Some(&usage));
    stream.push_str("data: [DONE]\n\n");
    (whole, stream)
}
