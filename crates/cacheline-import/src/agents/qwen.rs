//! Qwen Code: `~/.qwen/projects/<project>/chats/<session>.jsonl`, records `{uuid,
//! parentUuid, sessionId, timestamp, type, version, cwd, …}`. Requests are the `assistant`
//! records with `usageMetadata` (`promptTokenCount` is the whole prompt, cached included);
//! a `user` record starts a prompt. `~/.qwen/usage_record.jsonl` holds running sums per
//! process, not requests: it is not read.

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

const AGENT: Agent = Agent::QwenCode;

const KNOWN: &[&str] = &["user", "assistant", "tool_result", "system"];

const USAGE_KNOWN: &[&str] = &[
    "promptTokenCount",
    "candidatesTokenCount",
    "thoughtsTokenCount",
    "totalTokenCount",
    "cachedContentTokenCount",
    "toolUsePromptTokenCount",
];

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
    let mut lines = open_lines(path, cx.limits)?;
    let mut version = String::new();
    let mut sessions: Vec<StoredSession> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut seen: std::collections::HashSet<String> = Default::default();
    let mut project = String::new();
    let (mut prompt, mut compaction) = (false, false);
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
        if let Some(v) = &record.version
            && version != **v
        {
            version = prompt_measure::logged::bounded_field(v);
        }
        if project.is_empty()
            && let Some(cwd) = &record.cwd
        {
            project = prompt_measure::logged::bounded_field(cwd);
        }
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
                let Some(usage) = usage_of(raw, cx, &version) else {
                    cx.skips.line(
                        AGENT,
                        &version,
                        Origin::new(path, line_no),
                        "usage without counts".to_owned(),
                    );
                    continue;
                };
                let sid = record.session_id.as_deref().unwrap_or_default().to_owned();
                let slot = *index.entry(sid.clone()).or_insert_with(|| {
                    sessions.push(StoredSession {
                        agent: AGENT,
                        version: String::new(),
                        session: prompt_measure::logged::bounded_field(&sid),
                        project: String::new(),
                        requests: Vec::new(),
                    });
                    sessions.len() - 1
                });
                if let Some(s) = sessions.get_mut(slot) {
                    s.requests.push(StoredRequest {
                        time: record.timestamp.as_deref().and_then(parse_iso),
                        model: prompt_measure::logged::bounded_field(
                            record.model.as_deref().unwrap_or_default(),
                        ),
                        provider: Provider::OpenAi,
                        usage,
                        new_process: false,
                        after_compaction: std::mem::take(&mut compaction),
                        new_prompt: std::mem::take(&mut prompt),
                        origin: Origin::new(path, line_no),
                        body: None,
                        headers: Vec::new(),
                        reply: None,
                    });
                }
            }
            k if KNOWN.contains(&k) => {}
            other => cx.skips.unknown_record(AGENT, &version, other),
        }
    }
    let project = if project.is_empty() {
        path.parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    } else {
        project
    };
    for s in &mut sessions {
        s.version.clone_from(&version);
        s.project.clone_from(&project);
    }
    Ok(sessions)
}

/// Qwen's `usageMetadata` (Gemini's names): the prompt counts the cached tokens.
fn usage_of(raw: &RawValue, cx: &mut ReadContext<'_>, version: &str) -> Option<Usage> {
    let members: Members<'_> = serde_json::from_str(raw.get()).ok()?;
    let (mut prompt, mut cached, mut output, mut thoughts) = (None, 0u64, 0u64, 0u64);
    for (key, value) in &members.0 {
        let n = || value.get().trim().parse::<u64>().unwrap_or(0);
        match key.as_str() {
            "promptTokenCount" => prompt = Some(n()),
            "cachedContentTokenCount" => cached = n(),
            "candidatesTokenCount" => output = n(),
            "thoughtsTokenCount" => thoughts = n(),
            k if USAGE_KNOWN.contains(&k) => {}
            other => cx.skips.unknown_field(AGENT, version, other),
        }
    }
    let prompt = prompt?;
    Some(Usage {
        input_uncached: prompt.saturating_sub(cached),
        cache_read: cached.min(prompt),
        cache_write: 0,
        output: output.saturating_add(thoughts),
    })
}
