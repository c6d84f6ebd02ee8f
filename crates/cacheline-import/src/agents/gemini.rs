//! Gemini CLI: `~/.gemini/tmp/<project>/chats/session-<start>-<id8>.jsonl`, JSON lines that
//! build a session object: a header `{sessionId, projectHash, startTime, …}`, `{"$set":
//! {…}}` updates, and messages `{id, timestamp, type: "user"|"gemini", …}` (a message whose
//! `id` was seen replaces it). Requests are the `gemini` messages with `tokens` (`input` is
//! the whole prompt, cached included), in order, the last version of each. A `$set` of
//! `sessionId` is a resume (a new process).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use prompt_measure::{Provider, Usage};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{ReadContext, Sessions, malformed, open_lines};
use crate::error::ImportError;
use crate::json::Members;
use crate::lines::Line;
use crate::store::{Agent, Origin, StoredRequest, StoredSession};
use crate::time::parse_iso;

const AGENT: Agent = Agent::GeminiCli;

const KNOWN: &[&str] = &["user", "gemini", "info", "error", "warning"];

const USAGE_KNOWN: &[&str] = &["input", "output", "cached", "thoughts", "tool", "total"];

#[derive(Deserialize)]
struct Record<'a> {
    #[serde(rename = "sessionId", borrow)]
    session_id: Option<Cow<'a, str>>,
    #[serde(rename = "projectHash")]
    project_hash: Option<&'a RawValue>,
    #[serde(rename = "$set", borrow)]
    set: Option<&'a RawValue>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    tokens: Option<&'a RawValue>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Set<'a> {
    #[serde(rename = "sessionId", borrow)]
    session_id: Option<Cow<'a, str>>,
}

/// Reads one chat file.
pub fn read(path: &Path, cx: &mut ReadContext<'_>) -> Result<Sessions, ImportError> {
    let mut lines = open_lines(path, cx.limits)?;
    let version = String::new();
    let mut session = String::new();
    let mut requests: Vec<StoredRequest> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let (mut new_process, mut prompt) = (false, false);
    loop {
        let line_no = lines.line_number() + 1;
        let read = lines.next_line().map_err(|source| ImportError::Io {
            path: path.to_owned(),
            line: Some(line_no),
            source,
        })?;
        let Some(read) = read else { break };
        let text = match read {
            Line::TooLong(n) => {
                cx.skips.line(
                    AGENT,
                    &version,
                    Origin::new(path, line_no),
                    format!(
                        "line of {n} bytes over the {} byte cap",
                        cx.limits.max_line_bytes
                    ),
                );
                continue;
            }
            Line::Text(t) => t,
        };
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let record: Record<'_> = match serde_json::from_slice(text) {
            Ok(r) => r,
            Err(e) => {
                cx.skips
                    .line(AGENT, &version, Origin::new(path, line_no), malformed(&e));
                continue;
            }
        };
        if record.project_hash.is_some() {
            if let Some(id) = &record.session_id {
                session = prompt_measure::logged::bounded_field(id);
            }
            continue;
        }
        if let Some(set) = record.set {
            if let Ok(s) = serde_json::from_str::<Set<'_>>(set.get())
                && let Some(id) = s.session_id
            {
                session = prompt_measure::logged::bounded_field(&id);
                new_process = true;
            }
            continue;
        }
        match record.kind.as_deref().unwrap_or("") {
            "user" => {
                // Tool results are stored as user messages too.
                if !record
                    .content
                    .is_some_and(|c| c.get().contains("\"functionResponse\""))
                {
                    prompt = true;
                }
            }
            "gemini" => {
                let Some(tokens) = record.tokens else {
                    continue;
                };
                let Some(usage) = usage_of(tokens, cx, &version) else {
                    cx.skips.line(
                        AGENT,
                        &version,
                        Origin::new(path, line_no),
                        "tokens without counts".to_owned(),
                    );
                    continue;
                };
                let id = record.id.as_deref().unwrap_or_default();
                let model = prompt_measure::logged::bounded_field(
                    record.model.as_deref().unwrap_or_default(),
                );
                if let Some(&i) = by_id.get(id)
                    && let Some(r) = requests.get_mut(i)
                {
                    r.usage = usage;
                    r.model = model;
                    continue;
                }
                if !id.is_empty() {
                    by_id.insert(id.to_owned(), requests.len());
                }
                requests.push(StoredRequest {
                    time: record.timestamp.as_deref().and_then(parse_iso),
                    model,
                    provider: Provider::Gemini,
                    usage,
                    new_process: std::mem::take(&mut new_process),
                    after_compaction: false,
                    new_prompt: std::mem::take(&mut prompt),
                    origin: Origin::new(path, line_no),
                    body: None,
                    headers: Vec::new(),
                    reply: None,
                });
            }
            k if KNOWN.contains(&k) => {}
            other => cx.skips.unknown_record(AGENT, &version, other),
        }
    }
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![StoredSession {
        agent: AGENT,
        version,
        session,
        project: project_of(path),
        requests,
    }])
}

/// The project: `.project_root` beside `chats/` (the absolute path), else the folder's name.
fn project_of(path: &Path) -> String {
    let Some(dir) = path.parent().and_then(Path::parent) else {
        return String::new();
    };
    let root = dir.join(".project_root");
    if let Ok(meta) = std::fs::metadata(&root)
        && meta.is_file()
        && meta.len() < 4096
        && let Ok(text) = std::fs::read_to_string(&root)
        && !text.trim().is_empty()
    {
        return prompt_measure::logged::bounded_field(text.trim());
    }
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Gemini's `tokens`: `input` is the whole prompt; thoughts are billed as output.
fn usage_of(raw: &RawValue, cx: &mut ReadContext<'_>, version: &str) -> Option<Usage> {
    let members: Members<'_> = serde_json::from_str(raw.get()).ok()?;
    let (mut input, mut cached, mut output, mut thoughts) = (None, 0u64, 0u64, 0u64);
    for (key, value) in &members.0 {
        let n = || value.get().trim().parse::<u64>().unwrap_or(0);
        match key.as_str() {
            "input" => input = Some(n()),
            "cached" => cached = n(),
            "output" => output = n(),
            "thoughts" => thoughts = n(),
            k if USAGE_KNOWN.contains(&k) => {}
            other => cx.skips.unknown_field(AGENT, version, other),
        }
    }
    let input = input?;
    Some(Usage {
        input_uncached: input.saturating_sub(cached),
        cache_read: cached.min(input),
        cache_write: 0,
        output: output.saturating_add(thoughts),
    })
}
