//! A scripted session played against each API: tools, tool calls answered in continuations
//! (one parallel), a system-prompt change, persisting updates, an ephemeral tail, and a
//! compaction; each provider's reply is built in its documented response shape.

use prompt_core::session::ToolResult;
use prompt_core::tools::{ToolSet, ToolSource};
use prompt_core::{
    ApiKind, Component, ComponentId, Extensions, Persist, Placement, PromptPolicy, Request,
    Session, SessionContext,
};
use prompt_wire::{Body, Wire, WireOptions};
use serde_json::{Value, json};

pub const APIS: [ApiKind; 5] = [
    ApiKind::OpenAi,
    ApiKind::OpenAiResponses,
    ApiKind::Anthropic,
    ApiKind::Gemini,
    ApiKind::LlamaCpp,
];

/// The API's fixture folder name.
pub fn folder(api: ApiKind) -> &'static str {
    match api {
        ApiKind::OpenAi => "openai_chat",
        ApiKind::OpenAiResponses => "openai_responses",
        ApiKind::Anthropic => "anthropic",
        ApiKind::Gemini => "gemini",
        ApiKind::LlamaCpp => "llama_cpp",
    }
}

pub struct Todo(pub &'static str);
pub struct Git(pub String);

pub fn id(s: &str) -> ComponentId {
    ComponentId::new(s).unwrap()
}

pub fn tools() -> ToolSet {
    ToolSet::from_openai(&[(
        ToolSource::builtin(),
        &json!([
            {"type": "function", "function": {"name": "read_file", "description": "Read a file.",
             "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
            {"type": "function", "function": {"name": "grep", "description": "Search files.",
             "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}, "required": ["pattern"]}}},
        ]),
    )])
    .unwrap()
}

pub fn components() -> Vec<Component> {
    vec![
        Component::constant(id("house_rules"), "You are a careful coding assistant.")
            .placement(Placement::Prefix),
        Component::turn(id("todo"), |t| {
            t.get::<Todo>().map(|t| format!("Open tasks: {}", t.0))
        }),
        Component::turn(id("git_state"), |t| t.get::<Git>().map(|g| g.0.clone()))
            .persist(Persist::Ephemeral),
    ]
}

/// The policy every session here runs under: `house_rules` in the prefix.
pub fn policy() -> PromptPolicy {
    PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"house_rules\"]\n",
        "agent.toml",
        &components(),
    )
    .unwrap()
    .ignore_warnings()
}

pub fn session(api: ApiKind) -> Session {
    let policy = policy();
    Session::start(
        components(),
        &policy,
        SessionContext::default(),
        prompt_wire::session_options(api, tools()),
    )
    .unwrap()
}

/// The caller's parameters, as each API names them.
pub fn options(api: ApiKind) -> WireOptions {
    let options = WireOptions::new("test-model");
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => options
            .param("max_tokens", &json!(1024))
            .param("temperature", &json!(0.2)),
        ApiKind::OpenAiResponses => options
            .param("max_output_tokens", &json!(1024))
            .param("store", &json!(false)),
        ApiKind::Anthropic => options.param("max_tokens", &json!(4096)).param(
            "thinking",
            &json!({"type": "enabled", "budget_tokens": 1024}),
        ),
        ApiKind::Gemini => options.param(
            "generationConfig",
            &json!({"temperature": 0.2, "maxOutputTokens": 1024}),
        ),
    }
}

pub fn wire(api: ApiKind) -> Wire {
    Wire::new(api, options(api)).unwrap()
}

pub fn values(todo: &'static str, turn: u64) -> Extensions {
    Extensions::new()
        .with(Todo(todo))
        .with(Git(format!("git: {turn} files changed")))
}

/// A reply of `api` holding `text` and `calls` (`(id, name, arguments object)`), in the
/// provider's documented response shape, with the fields a real one has (reasoning,
/// signatures, ids, usage) so that carrying them back byte-for-byte is tested.
pub fn reply(api: ApiKind, n: usize, text: &str, calls: &[(&str, &str, Value)]) -> String {
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .map(|(id, name, args)| {
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
                })
                .collect();
            let mut message = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }, "refusal": null, "annotations": []});
            if !tool_calls.is_empty() {
                message["tool_calls"] = json!(tool_calls);
            }
            let mut body = json!({
                "id": format!("chatcmpl-{n}"), "object": "chat.completion", "created": 1_741_569_952,
                "model": "test-model",
                "choices": [{"index": 0, "message": message, "logprobs": null,
                             "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110,
                          "prompt_tokens_details": {"cached_tokens": 64}},
            });
            if api == ApiKind::LlamaCpp {
                body["timings"] = json!({"cache_n": 64, "prompt_n": 36, "prompt_ms": 12.5, "predicted_n": 10, "predicted_ms": 80.0});
            }
            // Pretty-printed, as some servers send it: whitespace must survive too.
            serde_json::to_string_pretty(&body).unwrap()
        }
        ApiKind::OpenAiResponses => {
            let mut output =
                vec![json!({"type": "reasoning", "id": format!("rs_{n}"), "summary": []})];
            if !text.is_empty() {
                output.push(json!({"type": "message", "id": format!("msg_{n}"), "status": "completed", "role": "assistant",
                                   "content": [{"type": "output_text", "text": text, "annotations": []}]}));
            }
            for (k, (id, name, args)) in calls.iter().enumerate() {
                output.push(json!({"type": "function_call", "id": format!("fc_{n}_{k}"), "call_id": id,
                                   "name": name, "arguments": args.to_string(), "status": "completed"}));
            }
            json!({
                "id": format!("resp_{n}"), "object": "response", "created_at": 1_741_476_542, "status": "completed",
                "model": "test-model", "output": output,
                "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 64},
                          "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 110},
            })
            .to_string()
        }
        ApiKind::Anthropic => {
            let mut content = vec![
                json!({"type": "thinking", "thinking": format!("Step {n}: decide."),
                                          "signature": format!("EqQBCgIYAhIM{n}1gBP5H1kN2UfvJGgwY1tOw")}),
            ];
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for (id, name, args) in calls {
                content.push(json!({"type": "tool_use", "id": id, "name": name, "input": args}));
            }
            // Written with spaces after the separators: the blocks must be kept as sent.
            let content = serde_json::to_string(&content)
                .unwrap()
                .replace("\":", "\": ");
            format!(
                r#"{{"id":"msg_{n}","type":"message","role":"assistant","model":"test-model","content":{content},"stop_reason":"{}","stop_sequence":null,"usage":{{"input_tokens":100,"cache_creation_input_tokens":0,"cache_read_input_tokens":64,"output_tokens":10}}}}"#,
                if calls.is_empty() {
                    "end_turn"
                } else {
                    "tool_use"
                }
            )
        }
        ApiKind::Gemini => {
            let mut parts = Vec::new();
            if !text.is_empty() {
                parts.push(json!({"text": text, "thoughtSignature": format!("CiQB0e2Kb{n}xyz")}));
            }
            for (_, name, args) in calls {
                parts.push(json!({"functionCall": {"name": name, "args": args}}));
            }
            json!({
                "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 10, "totalTokenCount": 110,
                                  "cachedContentTokenCount": 64},
                "modelVersion": "gemini-2.5-flash", "responseId": format!("resp-{n}"),
            })
            .to_string()
        }
    }
}

/// One body sent, with what the tests look at.
pub struct Sent {
    pub label: String,
    pub epoch: u64,
    pub bytes: Vec<u8>,
    pub chunks: Vec<u8>,
    pub len: usize,
    pub stable: Vec<u8>,
    pub stable_body: Vec<u8>,
    pub blocks: Vec<String>,
    pub new_chunks: Vec<u8>,
    pub breakpoints: usize,
    pub cache_key: String,
    /// The provider reply recorded after this body (its stored message).
    pub reply: Option<String>,
    /// The ephemeral text of this request, JSON-escaped as in a body.
    pub ephemeral: Vec<String>,
}

fn sent(label: &str, request: &Request<'_>, body: &Body<'_>) -> Sent {
    Sent {
        label: label.to_owned(),
        epoch: request.epoch(),
        bytes: body.to_bytes(),
        chunks: body.chunks().concat(),
        len: body.len(),
        stable: body.stable_bytes(),
        stable_body: body.stable_body(),
        blocks: body
            .stable_blocks()
            .iter()
            .map(|b| format!("{}:{}", b.role.unwrap_or("-"), b.json))
            .collect(),
        new_chunks: body.new_chunks().concat(),
        breakpoints: body.breakpoint_count(),
        cache_key: prompt_wire::prompt_cache_key(request),
        reply: None,
        ephemeral: request
            .ephemeral()
            .iter()
            .map(|(_, m)| {
                // As it appears in a body: the JSON string's inside.
                let text = serde_json::from_str::<Value>(m).unwrap()["content"].to_string();
                text[1..text.len() - 1].to_owned()
            })
            .collect(),
    }
}

/// Plays the script against `api`; every body, in order.
pub fn play(api: ApiKind) -> Vec<Sent> {
    play_with(api, wire(api))
}

/// [`play`] through `w`.
pub fn play_with(api: ApiKind, w: Wire) -> Vec<Sent> {
    play_in(api, session(api), w)
}

/// [`play`] for a session and wire of a provider profile: the session delivers updates as
/// the profile says, the wire applies it; the model is the profile's.
pub fn play_profile(api: ApiKind, profile: &prompt_core::profile::Profile) -> Vec<Sent> {
    play_in(api, profile_session(profile), profile_wire(api, profile))
}

/// A session delivering updates as `profile` says, over the test components and tools.
pub fn profile_session(profile: &prompt_core::profile::Profile) -> Session {
    Session::start(
        components(),
        &policy(),
        SessionContext::default(),
        prompt_core::SessionOptions::for_profile(profile).with_tools(tools()),
    )
    .unwrap()
}

/// A wire for `api` with the test parameters and `profile`.
pub fn profile_wire(api: ApiKind, profile: &prompt_core::profile::Profile) -> Wire {
    let mut options = WireOptions::for_profile(profile);
    for (key, value) in self::options(api).params() {
        options = options.param_raw(key, value).unwrap();
    }
    Wire::new(api, options).unwrap()
}

/// The script as it plays: each step sends the next body or records the reply to the last
/// one, so the script below reads as its steps.
struct Script {
    api: ApiKind,
    s: Session,
    w: Wire,
    out: Vec<Sent>,
    requests: u64,
}

impl Script {
    /// Sends the next request (a turn, or a continuation after tool results) as `label`.
    fn send(&mut self, label: &str, todo: &'static str, continuation: bool) {
        self.requests += 1;
        let n = self.requests;
        let values = values(todo, n);
        let request = if continuation {
            self.s.continuation(values).unwrap()
        } else {
            self.s
                .turn(values, format!("Request {n}: please look at the parser."))
                .unwrap()
        };
        let body = self.w.body(&request).unwrap();
        self.out.push(sent(label, &request, &body));
    }

    /// Records reply `n` to the last body through the wire; returns its tool calls.
    fn answer(
        &mut self,
        n: usize,
        text: &str,
        calls: &[(&str, &str, Value)],
    ) -> Vec<prompt_wire::ToolCall> {
        let api = self.api;
        let body = reply(api, n, text, calls);
        let reply = self.w.record_reply(&mut self.s, body.as_bytes()).unwrap();
        assert!(reply.usage.is_some(), "{api:?}: usage");
        if let Some(last) = self.out.last_mut() {
            last.reply = Some(reply.message.clone());
        }
        reply.tool_calls
    }
}

/// [`play`] of session `s` through `w`.
pub fn play_in(api: ApiKind, s: Session, w: Wire) -> Vec<Sent> {
    let mut p = Script {
        api,
        s,
        w,
        out: Vec::new(),
        requests: 0,
    };

    // Turn 1: a tool call, answered in a continuation.
    p.send("1", "a", false);
    let calls = p.answer(
        1,
        "Reading it.",
        &[("call_1", "read_file", json!({"path": "src/main.rs"}))],
    );
    p.s.record_tool(&ToolResult::text(&calls[0].id, "fn main() {}").name("read_file"))
        .unwrap();
    p.send("1.1", "a", true);
    p.answer(2, "main.rs is empty.", &[]);

    // Turn 2: the system prompt changes; two parallel calls, one failing; the todo list
    // changes meanwhile, so its update follows the results.
    p.s.set_system_prompt("Answer in English.");
    p.send("2", "a", false);
    let calls = p.answer(
        3,
        "",
        &[
            ("call_2", "grep", json!({"pattern": "fn parse"})),
            ("call_3", "read_file", json!({"path": "missing.rs"})),
        ],
    );
    p.s.record_tool(&ToolResult::text(
        &calls[0].id,
        "src/parser.rs:12: fn parse",
    ))
    .unwrap();
    p.s.record_tool(&ToolResult::text(&calls[1].id, "no such file").error())
        .unwrap();
    p.send("2.1", "b", true);
    p.answer(4, "The parser is in src/parser.rs.", &[]);

    // Turn 3: the todo list changes again.
    p.send("3", "c", false);
    p.answer(5, "Done.", &[]);

    // Compaction: keep the last two nodes.
    let cut = p.s.history().safe_cut(0, 2);
    p.s.compact(0..cut, "Summary: the parser lives in src/parser.rs.")
        .unwrap();

    // Turns 4 and 5, the second with a tool call.
    p.send("4", "c", false);
    p.answer(6, "Noted.", &[]);
    p.send("5", "c", false);
    let calls = p.answer(
        7,
        "",
        &[("call_4", "read_file", json!({"path": "src/parser.rs"}))],
    );
    p.s.record_tool(&ToolResult::text(&calls[0].id, "pub fn parse() {}"))
        .unwrap();
    p.send("5.1", "c", true);
    p.answer(8, "It is a stub.", &[]);
    p.out
}

/// The body parsed.
pub fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

/// The raw bytes of a top-level key's value.
pub fn raw_field<'a>(bytes: &'a [u8], key: &str) -> Option<&'a str> {
    let map: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_slice(bytes).unwrap();
    map.get(key).map(|r| r.get())
}
