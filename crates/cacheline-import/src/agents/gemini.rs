//! Gemini CLI: `~/.gemini/tmp/<project>/chats/session-<start>-<id8>.jsonl`, JSON lines that
//! build a session object: a header `{sessionId, projectHash, startTime, …}`, `{"$set":
//! {…}}` updates, and messages `{id, timestamp, type: "user"|"gemini", …}` (a message whose
//! `id` was seen replaces it). Requests are the `gemini` messages with `tokens` (`input` is
//! the whole prompt, cached included), in order, the last version of each. A `$set` of
//! `sessionId` is a resume (a new process).

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use prompt_measure::Provider;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{JsonLines, ReadContext, Sessions, gemini_usage, keep_last, name_of};
use crate::error::ImportError;
use crate::store::{Agent, StoredRequest, StoredSession};
use crate::time::parse_iso;

const AGENT: Agent = Agent::GeminiCli;

const KNOWN: &[&str] = &["user", "gemini", "info", "error", "warning"];

/// The usage counts read: the prompt (cached included), cached, output and thoughts.
const USAGE_READ: [&str; 4] = ["input", "cached", "output", "thoughts"];

/// Usage fields passed over knowingly.
const USAGE_KNOWN: &[&str] = &["tool", "total"];

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
    let mut lines = JsonLines::open(path, AGENT, cx.limits)?;
    let version = String::new();
    let mut session = String::new();
    let mut requests: Vec<StoredRequest> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let (mut new_process, mut prompt) = (false, false);
    while let Some((at, text)) = lines.next_text(cx, &version)? {
        let Some(record) = cx.record::<Record<'_>>(at, &version, text) else {
            continue;
        };
        if record.project_hash.is_some() {
            keep_last(&mut session, record.session_id.as_deref());
            continue;
        }
        if let Some(set) = record.set {
            if let Ok(s) = serde_json::from_str::<Set<'_>>(set.get())
                && s.session_id.is_some()
            {
                keep_last(&mut session, s.session_id.as_deref());
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
                let Some(usage) =
                    gemini_usage(cx, tokens, USAGE_READ, USAGE_KNOWN, AGENT, &version)
                else {
                    cx.skip(at, &version, "tokens without counts");
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
                    new_process: std::mem::take(&mut new_process),
                    new_prompt: std::mem::take(&mut prompt),
                    ..StoredRequest::counted(Provider::Gemini, usage, at.origin())
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
    name_of(Some(dir))
}
