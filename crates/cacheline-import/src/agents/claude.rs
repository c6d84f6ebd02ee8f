//! Claude Code: `~/.claude/projects/<project>/<session>.jsonl`, one JSON record a line.
//!
//! Requests are the `assistant` records (one per reply content block, deduplicated by the
//! provider's `message.id`, the `<synthetic>` model skipped), usage in `message.usage`. A new
//! process shows as a `queue-operation` enqueue (before 2.1.332) or an `api-request` with no
//! `base` (2.1.332+); a compaction as a `system` `compact_boundary`. From 2.1.332 the
//! `api-request-shape`, `api-request-blob` and `api-request` records rebuild each request
//! (byte for byte: see `docs/import.md`).

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;

use prompt_measure::{Provider, Usage};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{JsonLines, ReadContext, Sessions, SessionsById, keep_first, keep_last, name_of};
use crate::error::ImportError;
use crate::json::{Members, hash, with_member};
use crate::store::{Agent, StoredRequest};
use crate::time::parse_iso;

const AGENT: Agent = Agent::ClaudeCode;

/// Record types read or knowingly passed over.
const KNOWN: &[&str] = &[
    "user",
    "assistant",
    "attachment",
    "system",
    "queue-operation",
    "last-prompt",
    "mode",
    "summary",
    "file-history-snapshot",
    "atis-latch",
    "tools-used",
    "cost-state",
    "custom-title",
    "api-request-shape",
    "api-request-blob",
    "api-request",
];

/// The usage counts read: the four of [`Usage`] (input uncached, written, read, output).
const USAGE_READ: [&str; 4] = [
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "output_tokens",
];

/// Usage fields passed over knowingly.
const USAGE_KNOWN: &[&str] = &[
    "server_tool_use",
    "service_tier",
    "cache_creation",
    "inference_geo",
    "iterations",
    "speed",
    "output_tokens_details",
    "fallback_credit",
];

#[derive(Deserialize)]
struct Record<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(rename = "sessionId", borrow)]
    session_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(borrow)]
    cwd: Option<Cow<'a, str>>,
    #[serde(borrow)]
    entrypoint: Option<Cow<'a, str>>,
    #[serde(borrow)]
    subtype: Option<Cow<'a, str>>,
    #[serde(borrow)]
    operation: Option<Cow<'a, str>>,
    #[serde(rename = "isSidechain")]
    is_sidechain: Option<bool>,
    #[serde(rename = "isMeta")]
    is_meta: Option<bool>,
    #[serde(rename = "isCompactSummary")]
    is_compact_summary: Option<bool>,
    #[serde(borrow)]
    message: Option<&'a RawValue>,
    #[serde(rename = "requestRef", borrow)]
    request_ref: Option<Cow<'a, str>>,
    // api-request-shape, api-request-blob, api-request
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(rename = "shapeHash", borrow)]
    shape_hash: Option<Cow<'a, str>>,
    #[serde(borrow)]
    hash: Option<Cow<'a, str>>,
    #[serde(borrow)]
    shape: Option<&'a RawValue>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    base: Option<Cow<'a, str>>,
    keep: Option<usize>,
    #[serde(borrow)]
    tail: Option<Vec<Cow<'a, str>>>,
    #[serde(rename = "cacheControl", borrow)]
    cache_control: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
}

/// The device and account ids a home's `~/.claude.json` names (empty when it cannot be
/// read): what a rebuilt request's `metadata` carries.
pub type Device = (String, String);

/// Markers seen since the last request.
#[derive(Debug, Default)]
struct Pending {
    new_process: bool,
    compaction: bool,
    prompt: bool,
}

/// Reads one session file.
pub fn read(
    path: &Path,
    cx: &mut ReadContext<'_>,
    device: &Device,
) -> Result<Sessions, ImportError> {
    let mut lines = JsonLines::open(path, AGENT, cx.limits)?;
    let subagent = path
        .components()
        .any(|c| c.as_os_str() == "subagents")
        .then(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .flatten();
    let mut seen: HashSet<String> = HashSet::new();
    let mut sessions = SessionsById::default();
    let mut version = String::new();
    let mut project = String::new();
    let mut pending = Pending::default();
    let mut rebuild = Rebuild::new(cx.limits.max_rebuild_bytes);
    while let Some((at, text)) = lines.next_text(cx, &version)? {
        let Some(record) = cx.record::<Record<'_>>(at, &version, text) else {
            continue;
        };
        keep_last(&mut version, record.version.as_deref());
        keep_last(&mut rebuild.entrypoint, record.entrypoint.as_deref());
        keep_first(&mut project, record.cwd.as_deref());
        let kind = record.kind.as_deref().unwrap_or("");
        match kind {
            "queue-operation" => {
                if record.operation.as_deref() == Some("enqueue") && !rebuild.used {
                    pending.new_process = true;
                }
            }
            "system" => {
                if record.subtype.as_deref() == Some("compact_boundary") {
                    pending.compaction = true;
                }
            }
            "user" => {
                if record.is_compact_summary == Some(true) {
                    pending.compaction = true;
                } else if record.is_meta != Some(true)
                    && record.is_sidechain != Some(true)
                    && record.message.is_some_and(is_prompt)
                {
                    pending.prompt = true;
                }
            }
            "api-request-shape" => {
                rebuild.used = true;
                if let (Some(h), Some(shape)) = (&record.shape_hash, record.shape) {
                    rebuild.shape(h, shape);
                }
            }
            "api-request-blob" => {
                rebuild.used = true;
                if let (Some(h), Some(message)) = (&record.hash, record.message) {
                    rebuild.blob(h, message);
                }
            }
            "api-request" => {
                rebuild.used = true;
                if record.base.is_none() {
                    pending.new_process = true;
                }
                let session = record.session_id.as_deref().unwrap_or_default();
                rebuild.request(&record, session, device);
            }
            "assistant" => {
                let Some(raw) = record.message else { continue };
                let Some(message) =
                    cx.parsed(at, &version, serde_json::from_str::<Message<'_>>(raw.get()))
                else {
                    continue;
                };
                let Some(id) = message.id.as_deref() else {
                    continue;
                };
                if rebuild.used {
                    rebuild.reply_block(id, message.content);
                }
                let model = message.model.as_deref().unwrap_or_default();
                if model == "<synthetic>" {
                    continue;
                }
                let Some(usage_raw) = message.usage else {
                    continue;
                };
                let Some(usage) = usage_of(usage_raw, cx, &version) else {
                    cx.skip(at, &version, "usage without counts");
                    continue;
                };
                // A reply is counted once: its id with its counts (a resumed or forked
                // session file repeats its history's records, counts and all).
                let key = format!(
                    "{id} {} {} {} {}",
                    usage.input_uncached, usage.cache_read, usage.cache_write, usage.output
                );
                if seen.contains(&key) {
                    continue;
                }
                seen.insert(key.clone());
                let reply = Some(key);
                let sid = record.session_id.as_deref().unwrap_or_default();
                let slot_key = match (&subagent, record.is_sidechain) {
                    (Some(agent), _) => format!("{sid}/{agent}"),
                    (None, Some(true)) => format!("{sid}/sidechain"),
                    _ => sid.to_owned(),
                };
                let rebuilt = record
                    .request_ref
                    .as_deref()
                    .and_then(|r| rebuild.take_body(r));
                let (body, headers) = match rebuilt {
                    Some(r) => {
                        let mut headers = vec![
                            ("x-claude-code-session-id".to_owned(), sid.to_owned()),
                            (
                                "user-agent".to_owned(),
                                format!("claude-cli/{version} (external, sdk-cli)"),
                            ),
                        ];
                        if !r.betas.is_empty() {
                            headers.push(("anthropic-beta".to_owned(), r.betas));
                        }
                        (Some(r.body), headers)
                    }
                    None => (None, Vec::new()),
                };
                let request = StoredRequest {
                    time: record.timestamp.as_deref().and_then(parse_iso),
                    model: prompt_measure::logged::bounded_field(model),
                    new_process: std::mem::take(&mut pending.new_process),
                    after_compaction: std::mem::take(&mut pending.compaction),
                    new_prompt: std::mem::take(&mut pending.prompt),
                    body,
                    headers,
                    reply,
                    ..StoredRequest::counted(Provider::Anthropic, usage, at.origin())
                };
                sessions.push(AGENT, &slot_key, request);
            }
            k if KNOWN.contains(&k) => {}
            other => cx.skips.unknown_record(AGENT, &version, other),
        }
    }
    if project.is_empty() {
        project = name_of(path.parent());
    }
    Ok(sessions.finish(&version, &project))
}

/// The text the billing fingerprint is taken from: the first message's prompt (its content
/// if a string, else its first text block that is no `<system-reminder>`, else its last).
fn prompt_text(message: &str) -> String {
    let Ok(value) = serde_json::from_str::<Value>(message) else {
        return String::new();
    };
    match &value["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter(|b| b["type"] == "text")
                .filter_map(|b| b["text"].as_str())
                .collect();
            texts
                .iter()
                .find(|t| !t.starts_with("<system-reminder>"))
                .or(texts.last())
                .map(|t| (*t).to_owned())
                .unwrap_or_default()
        }
        _ => String::new(),
    }
}

/// Whether a `user` record's message is a prompt (text), not only tool results.
fn is_prompt(message: &RawValue) -> bool {
    #[derive(Deserialize)]
    struct M<'a> {
        #[serde(borrow)]
        content: Option<&'a RawValue>,
    }
    let Ok(m) = serde_json::from_str::<M<'_>>(message.get()) else {
        return false;
    };
    let Some(content) = m.content else {
        return false;
    };
    let text = content.get().trim_start();
    if text.starts_with('"') {
        return true;
    }
    !text.contains("\"tool_result\"")
}

/// The four counts of a Claude usage object; the fields it does not know are counted.
fn usage_of(raw: &RawValue, cx: &mut ReadContext<'_>, version: &str) -> Option<Usage> {
    let [input, write, read, output] = cx.counts(raw, USAGE_READ, USAGE_KNOWN, AGENT, version)?;
    Some(Usage {
        input_uncached: input?,
        cache_read: read.unwrap_or(0),
        cache_write: write.unwrap_or(0),
        output: output.unwrap_or(0),
    })
}

/// The device and account ids `home`'s `~/.claude.json` holds (what a request's `metadata`
/// names), empty if it cannot be read (at most 64 MiB of it is).
pub fn device_of(home: &Path) -> Device {
    #[derive(Deserialize)]
    struct Account {
        #[serde(rename = "accountUuid")]
        account_uuid: Option<String>,
    }
    #[derive(Deserialize)]
    struct Config {
        #[serde(rename = "userID")]
        user_id: Option<String>,
        #[serde(rename = "oauthAccount")]
        oauth_account: Option<Account>,
    }
    let path = home.join(".claude.json");
    let Ok(meta) = std::fs::metadata(&path) else {
        return Default::default();
    };
    if !meta.is_file() || meta.len() > 64 << 20 {
        return Default::default();
    }
    let Ok(text) = std::fs::read(&path) else {
        return Default::default();
    };
    match serde_json::from_slice::<Config>(&text) {
        Ok(c) => (
            c.user_id.unwrap_or_default(),
            c.oauth_account
                .and_then(|a| a.account_uuid)
                .unwrap_or_default(),
        ),
        Err(_) => Default::default(),
    }
}

/// A request shape: its system blocks and its tools.
type Shape = (Vec<Box<RawValue>>, Option<Box<RawValue>>);

/// A request put back together: its body and its `anthropic-beta` header.
#[derive(Debug)]
struct Rebuilt {
    body: String,
    betas: String,
}

/// The most requests remembered as a later request's `base`, and bodies awaiting their
/// reply's usage.
const MAX_BASES: usize = 256;
const MAX_PENDING: usize = 16;

/// Claude Code 2.1.332+'s request records, put back together as the body sent: the three
/// things no record holds filled in — the billing-header system block (recomputed), the
/// `metadata` (the device id from the home's `~/.claude.json`, empty without it; the
/// session id), `stream: true`.
#[derive(Debug)]
struct Rebuild {
    used: bool,
    entrypoint: String,
    shapes: HashMap<String, Shape>,
    texts: Vec<Box<str>>,
    by_hash: HashMap<String, u32>,
    replies: Vec<(String, Vec<Box<RawValue>>, bool)>,
    reply_index: HashMap<String, usize>,
    requests: HashMap<String, Vec<u32>>,
    request_order: VecDeque<String>,
    bodies: VecDeque<(String, Rebuilt)>,
    bytes: usize,
    cap: usize,
}

impl Rebuild {
    fn new(cap: usize) -> Self {
        Self {
            used: false,
            entrypoint: String::new(),
            shapes: HashMap::new(),
            texts: Vec::new(),
            by_hash: HashMap::new(),
            replies: Vec::new(),
            reply_index: HashMap::new(),
            requests: HashMap::new(),
            request_order: VecDeque::new(),
            bodies: VecDeque::new(),
            bytes: 0,
            cap,
        }
    }

    fn room(&mut self, n: usize) -> bool {
        if self.bytes.saturating_add(n) > self.cap {
            return false;
        }
        self.bytes += n;
        true
    }

    fn shape(&mut self, hash: &str, shape: &RawValue) {
        #[derive(Deserialize)]
        struct Stored {
            system: Option<Vec<Box<RawValue>>>,
            tools: Option<Box<RawValue>>,
        }
        if self.shapes.contains_key(hash) || !self.room(shape.get().len()) {
            return;
        }
        if let Ok(s) = serde_json::from_str::<Stored>(shape.get()) {
            self.shapes
                .insert(hash.to_owned(), (s.system.unwrap_or_default(), s.tools));
        }
    }

    fn intern(&mut self, hash: &str, text: Box<str>) {
        if self.by_hash.contains_key(hash) || !self.room(text.len()) {
            return;
        }
        let Ok(i) = u32::try_from(self.texts.len()) else {
            return;
        };
        self.texts.push(text);
        self.by_hash.insert(hash.to_owned(), i);
    }

    fn blob(&mut self, hash: &str, message: &RawValue) {
        self.intern(hash, message.get().into());
    }

    fn reply_block(&mut self, id: &str, content: Option<&RawValue>) {
        #[derive(Deserialize)]
        #[serde(transparent)]
        struct Blocks(Vec<Box<RawValue>>);
        let Some(content) = content else { return };
        let Ok(Blocks(blocks)) = serde_json::from_str(content.get()) else {
            return;
        };
        if !self.room(content.get().len()) {
            return;
        }
        match self.reply_index.get(id) {
            Some(&i) => {
                if let Some(r) = self.replies.get_mut(i) {
                    r.1.extend(blocks);
                    r.2 = false;
                }
            }
            None => {
                self.reply_index.insert(id.to_owned(), self.replies.len());
                self.replies.push((id.to_owned(), blocks, false));
            }
        }
    }

    /// Hashes the replies not hashed yet (a reply's hash names it in a later tail).
    fn hash_replies(&mut self) {
        let mut found = Vec::new();
        for (_, blocks, hashed) in &mut self.replies {
            if *hashed {
                continue;
            }
            *hashed = true;
            let values: Vec<Value> = blocks
                .iter()
                .filter_map(|b| serde_json::from_str(b.get()).ok())
                .collect();
            let mut message = serde_json::Map::new();
            message.insert("role".into(), Value::from("assistant"));
            message.insert("content".into(), Value::Array(values));
            let h = hash(&Value::Object(message));
            let raw: Vec<&str> = blocks.iter().map(|b| b.get()).collect();
            let text = format!(r#"{{"role":"assistant","content":[{}]}}"#, raw.join(","));
            found.push((h, text));
        }
        for (h, text) in found {
            self.intern(&h, text.into());
        }
    }

    fn lookup(&mut self, hash: &str) -> Option<u32> {
        if let Some(&i) = self.by_hash.get(hash) {
            return Some(i);
        }
        self.hash_replies();
        self.by_hash.get(hash).copied()
    }

    fn request(&mut self, record: &Record<'_>, session: &str, device: &(String, String)) {
        let Some(id) = record.id.as_deref() else {
            return;
        };
        let mut messages: Vec<u32> = match record.base.as_deref() {
            Some(base) => match self.requests.get(base) {
                Some(m) => m.iter().take(record.keep.unwrap_or(0)).copied().collect(),
                None => return,
            },
            None => Vec::new(),
        };
        if messages.len() < record.keep.unwrap_or(0) && record.base.is_some() {
            return;
        }
        for h in record.tail.iter().flatten() {
            match self.lookup(h) {
                Some(i) => messages.push(i),
                None => return,
            }
        }
        if self.request_order.len() >= MAX_BASES
            && let Some(old) = self.request_order.pop_front()
        {
            self.requests.remove(&old);
        }
        self.request_order.push_back(id.to_owned());
        self.requests.insert(id.to_owned(), messages.clone());
        if let Some(body) = self.body(record, &messages, session, device) {
            if self.bodies.len() >= MAX_PENDING {
                self.bodies.pop_front();
            }
            self.bodies.push_back((id.to_owned(), body));
        }
    }

    /// The `x-anthropic-billing-header` system block the CLI puts first on the wire (no
    /// record holds it): its version, a fingerprint of the first prompt's text (three hex
    /// digits of SHA-256 over a constant, the text's 5th, 8th and 21st characters, and the
    /// version) and the entry point the transcript names. Checked on every request of the
    /// committed Claude Code captures, before and after a compaction.
    fn billing_block(&self, version: &str, first: Option<&str>) -> Option<String> {
        use sha2::{Digest, Sha256};
        let text = first.map(prompt_text).unwrap_or_default();
        let chars: Vec<char> = text.chars().collect();
        let mut hashed = String::from("59cf53e54c78");
        for i in [4, 7, 20] {
            hashed.push(chars.get(i).copied().unwrap_or('0'));
        }
        hashed.push_str(version);
        let digest = Sha256::digest(hashed.as_bytes());
        let fingerprint: String = digest
            .iter()
            .take(2)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .chars()
            .take(3)
            .collect();
        let entrypoint = if self.entrypoint.is_empty() {
            "cli"
        } else {
            &self.entrypoint
        };
        let header = format!(
            "x-anthropic-billing-header: cc_version={version}.{fingerprint}; cc_entrypoint={entrypoint};"
        );
        Some(format!(
            r#"{{"type":"text","text":{}}}"#,
            serde_json::to_string(&header).ok()?
        ))
    }

    fn take_body(&mut self, request: &str) -> Option<Rebuilt> {
        let i = self.bodies.iter().position(|(id, _)| id == request)?;
        self.bodies.remove(i).map(|(_, b)| b)
    }

    fn body(
        &self,
        record: &Record<'_>,
        messages: &[u32],
        session: &str,
        device: &(String, String),
    ) -> Option<Rebuilt> {
        #[derive(Deserialize)]
        struct Marker<'a> {
            path: Vec<Value>,
            #[serde(borrow)]
            value: &'a RawValue,
        }
        let (system, tools) = self.shapes.get(record.shape_hash.as_deref()?)?;
        let mut system: Vec<Cow<'_, str>> = system.iter().map(|b| Cow::Borrowed(b.get())).collect();
        let mut texts: Vec<Cow<'_, str>> = messages
            .iter()
            .map(|&i| self.texts.get(i as usize).map(|t| Cow::Borrowed(&**t)))
            .collect::<Option<_>>()?;
        let markers: Vec<Marker<'_>> = match record.cache_control {
            Some(raw) => serde_json::from_str(raw.get()).ok()?,
            None => Vec::new(),
        };
        for m in &markers {
            let value = m.value.get();
            match m.path.as_slice() {
                [Value::String(s), Value::Number(i)] if s == "system" => {
                    let slot = system.get_mut(usize::try_from(i.as_u64()?).ok()?)?;
                    let members: Members<'_> = serde_json::from_str(slot).ok()?;
                    *slot = Cow::Owned(with_member(&members.0, "cache_control", value));
                }
                [
                    Value::String(s),
                    Value::Number(i),
                    Value::String(c),
                    Value::Number(j),
                ] if s == "messages" && c == "content" => {
                    let slot = texts.get_mut(usize::try_from(i.as_u64()?).ok()?)?;
                    let message: Members<'_> = serde_json::from_str(slot).ok()?;
                    let content = message.0.iter().find(|(k, _)| k == "content")?.1;
                    let mut blocks: Vec<Cow<'_, str>> =
                        serde_json::from_str::<Vec<&RawValue>>(content.get())
                            .ok()?
                            .into_iter()
                            .map(|b| Cow::Borrowed(b.get()))
                            .collect();
                    let block = blocks.get_mut(usize::try_from(j.as_u64()?).ok()?)?;
                    let members: Members<'_> = serde_json::from_str(block).ok()?;
                    *block = Cow::Owned(with_member(&members.0, "cache_control", value));
                    let content = format!("[{}]", blocks.join(","));
                    let text = with_member(&message.0, "content", &content);
                    *slot = Cow::Owned(text);
                }
                _ => return None,
            }
        }
        let params: Members<'_> = serde_json::from_str(record.params?.get()).ok()?;
        let param = |k: &str| {
            params
                .0
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.get())
        };
        // The CLI writes these keys in this order.
        let user_id = format!(
            r#"{{"device_id":{},"account_uuid":{},"session_id":{}}}"#,
            serde_json::to_string(&device.0).ok()?,
            serde_json::to_string(&device.1).ok()?,
            serde_json::to_string(session).ok()?
        );
        let mut body = String::with_capacity(
            texts.iter().map(|t| t.len() + 1).sum::<usize>()
                + system.iter().map(|t| t.len() + 1).sum::<usize>()
                + tools.as_ref().map_or(0, |t| t.get().len())
                + 512,
        );
        body.push_str("{\"model\":");
        body.push_str(param("model")?);
        body.push_str(",\"messages\":[");
        body.push_str(&texts.join(","));
        body.push_str("],\"system\":[");
        let version = record.version.as_deref().unwrap_or_default();
        body.push_str(&self.billing_block(version, texts.first().map(|t| &**t))?);
        for block in &system {
            body.push(',');
            body.push_str(block);
        }
        body.push(']');
        if let Some(tools) = tools {
            body.push_str(",\"tools\":");
            body.push_str(tools.get());
        }
        body.push_str(",\"metadata\":{\"user_id\":");
        body.push_str(&serde_json::to_string(&user_id).ok()?);
        body.push('}');
        let ordered = ["max_tokens", "thinking", "context_management"];
        for k in ordered {
            if let Some(v) = param(k) {
                body.push_str(&format!(",{}:{v}", serde_json::to_string(k).ok()?));
            }
        }
        for (k, v) in &params.0 {
            if k == "model" || k == "betas" || ordered.contains(&k.as_str()) {
                continue;
            }
            body.push_str(&format!(",{}:{}", serde_json::to_string(k).ok()?, v.get()));
        }
        body.push_str(",\"stream\":true}");
        let betas = match param("betas") {
            Some(raw) => serde_json::from_str::<Vec<String>>(raw).ok()?.join(","),
            None => String::new(),
        };
        Some(Rebuilt { body, betas })
    }
}
