//! The generator: the captured sessions, extended append-only in each API's own shape, and
//! the changes injected into them. Everything is drawn from one seeded [`Rng`].

use prompt_core::ApiKind;
use serde_json::{Map, Value, json};

/// A small deterministic generator (SplitMix64): the same seed, the same benchmark.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x5eed_cafe_f00d_d00d)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// A number in `lo..=hi`, `None` when there is none.
    pub fn pick(&mut self, lo: usize, hi: Option<usize>) -> Option<usize> {
        let hi = hi?;
        (lo <= hi).then(|| self.range(lo, hi))
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

const WORDS: [&str; 24] = [
    "the",
    "build",
    "fails",
    "in",
    "module",
    "cache",
    "tests",
    "passed",
    "rename",
    "function",
    "config",
    "error",
    "line",
    "file",
    "src/lib.rs",
    "cargo",
    "check",
    "fixed",
    "next",
    "step",
    "output",
    "value",
    "returns",
    "None",
];

/// Random prose of about `bytes` bytes.
pub fn text(rng: &mut Rng, bytes: usize) -> String {
    let mut s = String::with_capacity(bytes + 16);
    while s.len() < bytes.max(1) {
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(WORDS[rng.below(WORDS.len())]);
    }
    s
}

/// A random size, mostly small, sometimes large (the sizes agents' turns have).
pub fn size(rng: &mut Rng) -> usize {
    match rng.below(10) {
        0..=5 => rng.range(8, 200),
        6..=8 => rng.range(200, 2_000),
        _ => rng.range(2_000, 8_000),
    }
}

/// The body's messages key in an API's shape (llama.cpp's server speaks Chat).
pub fn messages_key(api: ApiKind) -> &'static str {
    match api {
        ApiKind::Anthropic | ApiKind::OpenAi | ApiKind::LlamaCpp => "messages",
        ApiKind::OpenAiResponses => "input",
        ApiKind::Gemini => "contents",
    }
}

/// One request of a session: what a log line carries.
#[derive(Debug, Clone)]
pub struct Request {
    /// The URL path.
    pub path: String,
    /// The captured headers.
    pub headers: Map<String, Value>,
    /// The body.
    pub body: Value,
    /// Seconds since the epoch; `None` writes no `ts`.
    pub ts: Option<f64>,
    /// The logger's session.
    pub session: String,
    /// The body's text, when it is not `body` serialized (a serialization-only injection).
    pub text: Option<String>,
    /// The usage the response reports: (input, cached) in the benchmark's tokens.
    pub usage: Option<(u64, u64)>,
    /// The launch (of a proxy, of the agent) that logged it; `None` writes no `launch`.
    pub launch: Option<String>,
}

impl Request {
    /// The body as sent.
    pub fn body_text(&self) -> String {
        self.text
            .clone()
            .unwrap_or_else(|| serde_json::to_string(&self.body).unwrap_or_default())
    }

    /// The benchmark's token estimate of the whole body (a quarter of its bytes).
    pub fn tokens(&self) -> u64 {
        (self.body_text().len() / 4) as u64
    }

    /// The body's messages (empty when it has none).
    pub fn messages(&self, api: ApiKind) -> &[Value] {
        self.body
            .get(messages_key(api))
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The body's messages, to change.
    pub fn messages_mut(&mut self, api: ApiKind) -> &mut Vec<Value> {
        let body = object(&mut self.body);
        let v = body
            .entry(messages_key(api))
            .or_insert_with(|| Value::Array(Vec::new()));
        if !v.is_array() {
            *v = Value::Array(Vec::new());
        }
        match v {
            Value::Array(a) => a,
            _ => unreachable!("made an array above"),
        }
    }

    /// The log line: `path`, `headers`, `ts`, `session`, `request` (the body as text) and a
    /// whole reply with the usage, in the audit's log format.
    pub fn line(&self, api: ApiKind) -> String {
        let mut line = Map::new();
        line.insert("path".into(), json!(self.path));
        line.insert("headers".into(), Value::Object(self.headers.clone()));
        if let Some(ts) = self.ts {
            line.insert("ts".into(), json!(ts));
        }
        line.insert("session".into(), json!(self.session));
        if let Some(launch) = &self.launch {
            line.insert("launch".into(), json!(launch));
        }
        line.insert("request".into(), Value::String(self.body_text()));
        if let Some((input, cached)) = self.usage {
            line.insert("response".into(), reply(api, input, cached));
        }
        serde_json::to_string(&Value::Object(line)).unwrap_or_default()
    }
}

/// A whole reply carrying `input` tokens of which `cached` were read, in the API's usage
/// shape (Anthropic's `usage` with `cache_read_input_tokens`, OpenAI's
/// `prompt_tokens_details.cached_tokens` / `input_tokens_details.cached_tokens`, Gemini's
/// `usageMetadata.cachedContentTokenCount`; the providers' documented reply shapes).
fn reply(api: ApiKind, input: u64, cached: u64) -> Value {
    let cached = cached.min(input);
    match api {
        ApiKind::Anthropic => json!({
            "id": "msg_bench", "type": "message", "role": "assistant", "content": [],
            "usage": {"input_tokens": input - cached, "cache_read_input_tokens": cached,
                      "cache_creation_input_tokens": 0, "output_tokens": 12}
        }),
        ApiKind::OpenAiResponses => json!({
            "id": "resp_bench", "object": "response", "output": [],
            "usage": {"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
                      "output_tokens": 12, "total_tokens": input + 12}
        }),
        ApiKind::OpenAi | ApiKind::LlamaCpp => json!({
            "id": "chatcmpl-bench", "object": "chat.completion", "choices": [],
            "usage": {"prompt_tokens": input, "prompt_tokens_details": {"cached_tokens": cached},
                      "completion_tokens": 12, "total_tokens": input + 12}
        }),
        ApiKind::Gemini => json!({
            "candidates": [],
            "usageMetadata": {"promptTokenCount": input, "cachedContentTokenCount": cached,
                              "candidatesTokenCount": 12, "totalTokenCount": input + 12}
        }),
    }
}

/// `v` as an object (made one if it is not).
pub fn object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(o) => o,
        _ => unreachable!("made an object above"),
    }
}

/// The names of the body's tools, in order (Gemini's function declarations flattened).
pub fn tool_names(api: ApiKind, body: &Value) -> Vec<String> {
    tools_of(api, body)
        .iter()
        .map(|t| {
            let name = match api {
                ApiKind::OpenAi | ApiKind::LlamaCpp => t.pointer("/function/name"),
                _ => t.get("name"),
            };
            name.and_then(Value::as_str)
                .or_else(|| t.get("type").and_then(Value::as_str))
                .unwrap_or("tool")
                .to_owned()
        })
        .collect()
}

fn tools_of(api: ApiKind, body: &Value) -> Vec<Value> {
    match api {
        ApiKind::Gemini => body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .flat_map(|t| {
                t.get("functionDeclarations")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            })
            .collect(),
        _ => body
            .get("tools")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    }
}

/// The body's tools, to change (Gemini's first `functionDeclarations`).
pub fn tools_mut(api: ApiKind, body: &mut Value) -> Option<&mut Vec<Value>> {
    let tools = body.get_mut("tools")?.as_array_mut()?;
    match api {
        ApiKind::Gemini => tools
            .get_mut(0)?
            .get_mut("functionDeclarations")?
            .as_array_mut(),
        _ => Some(tools),
    }
}

/// How many leading messages are the system field (Chat's system messages, Responses'
/// developer and system items); Anthropic and Gemini keep it apart.
pub fn system_messages(api: ApiKind, messages: &[Value]) -> usize {
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp | ApiKind::OpenAiResponses => messages
            .iter()
            .take_while(|m| {
                matches!(
                    m.get("role").and_then(Value::as_str),
                    Some("system" | "developer")
                ) && m
                    .get("type")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t == "message")
            })
            .count(),
        ApiKind::Anthropic | ApiKind::Gemini => 0,
    }
}

/// One turn's messages as the agent's own look: the model's reply (text, or text and a tool
/// call) and what comes back (the tool's result, or the user's next message).
pub fn turn(api: ApiKind, rng: &mut Rng, tools: &[String], n: u64) -> Vec<Value> {
    let tool = tools
        .get(rng.below(tools.len()))
        .cloned()
        .unwrap_or_else(|| "shell".to_owned());
    let said = {
        let n = size(rng);
        text(rng, n)
    };
    let command = {
        let n = rng.range(8, 120);
        text(rng, n)
    };
    let result = {
        let n = size(rng);
        text(rng, n)
    };
    let with_tool = rng.chance(0.7);
    let id = format!("call_bench_{n}");
    match (api, with_tool) {
        (ApiKind::Anthropic, true) => vec![
            json!({"role": "assistant", "content": [
                {"type": "text", "text": said},
                {"type": "tool_use", "id": id, "name": tool, "input": {"command": command}}]}),
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": id, "content": result}]}),
        ],
        (ApiKind::Anthropic, false) => vec![
            json!({"role": "assistant", "content": [{"type": "text", "text": said}]}),
            json!({"role": "user", "content": [{"type": "text", "text": result}]}),
        ],
        (ApiKind::OpenAiResponses, true) => vec![
            json!({"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": said}]}),
            json!({"type": "function_call", "name": tool, "call_id": id,
                   "arguments": json!({"command": command}).to_string()}),
            json!({"type": "function_call_output", "call_id": id, "output": result}),
        ],
        (ApiKind::OpenAiResponses, false) => vec![
            json!({"type": "message", "role": "assistant",
                   "content": [{"type": "output_text", "text": said}]}),
            json!({"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": result}]}),
        ],
        (ApiKind::Gemini, true) => vec![
            json!({"role": "model", "parts": [
                {"text": said}, {"functionCall": {"name": tool, "args": {"command": command}}}]}),
            json!({"role": "user", "parts": [
                {"functionResponse": {"name": tool, "response": {"output": result}}}]}),
        ],
        (ApiKind::Gemini, false) => vec![
            json!({"role": "model", "parts": [{"text": said}]}),
            json!({"role": "user", "parts": [{"text": result}]}),
        ],
        (ApiKind::OpenAi | ApiKind::LlamaCpp, true) => vec![
            json!({"role": "assistant", "content": said, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": tool,
                 "arguments": json!({"command": command}).to_string()}}]}),
            json!({"role": "tool", "tool_call_id": id, "content": result}),
        ],
        (ApiKind::OpenAi | ApiKind::LlamaCpp, false) => vec![
            json!({"role": "assistant", "content": said}),
            json!({"role": "user", "content": result}),
        ],
    }
}

/// Anthropic: the `cache_control` markers on the messages moved to the last `n` messages'
/// last blocks, as Claude Code (the last one) and opencode (the last two) place theirs.
pub fn move_markers(messages: &mut [Value], n: usize) {
    for m in messages.iter_mut() {
        if let Some(blocks) = m.get_mut("content").and_then(Value::as_array_mut) {
            for b in blocks {
                if let Some(b) = b.as_object_mut() {
                    b.remove("cache_control");
                }
            }
        }
    }
    let len = messages.len();
    for m in messages.iter_mut().skip(len.saturating_sub(n)) {
        mark(m);
    }
}

/// Puts a marker on a message's last block (a string content becomes its one block).
pub fn mark(m: &mut Value) {
    let Some(content) = m.get_mut("content") else {
        return;
    };
    if let Some(s) = content.as_str() {
        *content = json!([{"type": "text", "text": s}]);
    }
    if let Some(last) = content.as_array_mut().and_then(|a| a.last_mut())
        && let Some(o) = last.as_object_mut()
    {
        o.insert("cache_control".into(), json!({"type": "ephemeral"}));
    }
}

/// Markers on the messages of an Anthropic body.
pub fn message_markers(messages: &[Value]) -> usize {
    messages
        .iter()
        .filter(|m| {
            m.get("content")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|b| b.get("cache_control").is_some()))
        })
        .count()
}

/// The string leaves of a message that hold what was said (not its role, type or ids), by
/// their JSON pointer, and the content block each is in (`None` for a string content).
pub fn text_leaves(api: ApiKind, m: &Value) -> Vec<(String, Option<usize>)> {
    let mut out = Vec::new();
    let content_key = if api == ApiKind::Gemini {
        "parts"
    } else {
        "content"
    };
    fn walk(v: &Value, at: String, key: &str, out: &mut Vec<String>) {
        match v {
            Value::String(_)
                if !matches!(
                    key,
                    "type" | "role" | "id" | "call_id" | "tool_use_id" | "tool_call_id" | "name"
                ) =>
            {
                out.push(at);
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(x, format!("{at}/{i}"), key, out);
                }
            }
            Value::Object(o) => {
                for (k, x) in o {
                    if k == "cache_control" {
                        continue;
                    }
                    walk(x, format!("{at}/{k}"), k, out);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk(m, String::new(), "", &mut found);
    for p in found {
        let prefix = format!("/{content_key}/");
        let block = p
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split('/').next())
            .and_then(|i| i.parse().ok());
        let string_content = p == format!("/{content_key}");
        out.push((p, if string_content { None } else { block }));
    }
    out
}

/// `s` with a random span replaced by random text of a random size (never left the same,
/// never only extended at its end).
pub fn edit_text(rng: &mut Rng, s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return {
            let n = size(rng);
            text(rng, n)
        };
    }
    let at = rng.below(chars.len());
    let cut = rng.range(1, (chars.len() - at).min(400));
    let mut out: String = chars[..at].iter().collect();
    let mut new = {
        let n = rng.range(1, 600);
        text(rng, n)
    };
    let old: String = chars[at..at + cut].iter().collect();
    // Never the same text, and never the old text extended at its end (that is hoisting,
    // not an edit).
    if new == old || new.starts_with(&old) {
        new.insert(0, '~');
    }
    out.push_str(&new);
    out.extend(&chars[at + cut..]);
    out
}
