//! Qwen Code: `~/.qwen/projects/<project>/chats/<session>.jsonl`, records `{uuid,
//! parentUuid, sessionId, timestamp, type, version, cwd, …}`. Requests are the `assistant`
//! records with `usageMetadata` (`promptTokenCount` is the whole prompt, cached included);
//! a `user` record starts a prompt. `~/.qwen/usage_record.jsonl` holds running sums per
//! process, not requests: it is not read.

use std::borrow::Cow;
use std::collections::HashSet;
use std::path::Path;

use prompt_measure::Provider;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{
    JsonLines, ReadContext, Sessions, SessionsById, gemini_usage, keep_first, keep_last, name_of,
};
use crate::error::ImportError;
use crate::store::{Agent, StoredRequest};
use crate::time::parse_iso;

const AGENT: Agent = Agent::QwenCode;

const KNOWN: &[&str] = &["user", "assistant", "tool_result", "system"];

/// The usage counts read: the prompt (cached included), cached, output and thoughts.
const USAGE_READ: [&str; 4] = [
    "promptTokenCount",
    "cachedContentTokenCount",
    "candidatesTokenCount",
    "thoughtsTokenCount",
];

/// Usage fields passed over knowingly.
const USAGE_KNOWN: &[&str] = &["totalTokenCount", "toolUsePromptTokenCount"];

#[derive(Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    uuid: Option<Cow<'a, str>>,
    #[serde(rename = "sessionId", borrow)]
    session_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    subtype: Option<Cow<'a, str>>,
    #[serde(borrow)]
    version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    cwd: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(rename = "usageMetadata", borrow)]
    usage: Option<&'a RawValue>,
}

/// Reads one chat file.
pub fn read(path: &Path, cx: &mut ReadContext<'_>) -> Result<Sessions, ImportError> {
    let mut lines = JsonLines::open(path, AGENT, cx.limits)?;
    let mut version = String::new();
    let mut sessions = SessionsById::default();
    let mut seen: HashSet<String> = HashSet::new();
    let mut project = String::new();
    let (mut prompt, mut compaction) = (false, false);
    while let Some((at, text)) = lines.next_text(cx, &version)? {
        let Some(record) = cx.record::<Record<'_>>(at, &version, text) else {
            continue;
        };
        keep_last(&mut version, record.version.as_deref());
        keep_first(&mut project, record.cwd.as_deref());
        match record.kind.as_deref().unwrap_or("") {
            "user" => prompt = true,
            "system" => {
                if record
                    .subtype
                    .as_deref()
                    .is_some_and(|s| s.contains("compress") || s.contains("compact"))
                {
                    compaction = true;
                }
            }
            "assistant" => {
                let Some(raw) = record.usage else { continue };
                if let Some(uuid) = record.uuid.as_deref() {
                    if seen.contains(uuid) {
                        continue;
                    }
                    seen.insert(uuid.to_owned());
                }
                let Some(usage) = gemini_usage(cx, raw, USAGE_READ, USAGE_KNOWN, AGENT, &version)
                else {
                    cx.skip(at, &version, "usage without counts");
                    continue;
                };
                let request = StoredRequest {
                    time: record.timestamp.as_deref().and_then(parse_iso),
                    model: prompt_measure::logged::bounded_field(
                        record.model.as_deref().unwrap_or_default(),
                    ),
                    after_compaction: std::mem::take(&mut compaction),
                    new_prompt: std::mem::take(&mut prompt),
                    ..StoredRequest::counted(Provider::OpenAi, usage, at.origin())
                };
                let sid = record.session_id.as_deref().unwrap_or_default();
                sessions.push(AGENT, sid, request);
            }
            k if KNOWN.contains(&k) => {}
            other => cx.skips.unknown_record(AGENT, &version, other),
        }
    }
    if project.is_empty() {
        project = name_of(path.parent().and_then(Path::parent));
    }
    Ok(sessions.finish(&version, &project))
}
