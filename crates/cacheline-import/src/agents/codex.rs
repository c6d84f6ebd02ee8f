//! Codex CLI: `~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<thread id>.jsonl`, lines of
//! `{timestamp, type, payload}`.
//!
//! Requests are the `token_usage_record`s (one per model request, with the provider's
//! response id), or, in a file that has none (older versions), the `event_msg`
//! `token_count`s' `last_token_usage`. `input_tokens` is the whole prompt, cached included.
//! A new process shows as `thread_settings_applied`; the model is the last `turn_context`'s.

use std::borrow::Cow;
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

const AGENT: Agent = Agent::Codex;

const KNOWN: &[&str] = &[
    "session_meta",
    "event_msg",
    "turn_context",
    "response_item",
    "token_usage_record",
    "world_state",
    "compacted",
];

const USAGE_KNOWN: &[&str] = &[
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
    "total_tokens",
];

#[derive(Deserialize)]
struct Record<'a> {
    #[serde(borrow)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    session_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    cwd: Option<Cow<'a, str>>,
    #[serde(borrow)]
    cli_version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
    #[serde(borrow)]
    info: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Info<'a> {
    #[serde(borrow)]
    last_token_usage: Option<&'a RawValue>,
}

#[derive(Default)]
struct Pending {
    new_process: bool,
    compaction: bool,
    prompt: bool,
}

impl Pending {
    fn take(&mut self) -> (bool, bool, bool) {
        (
            std::mem::take(&mut self.new_process),
            std::mem::take(&mut self.compaction),
            std::mem::take(&mut self.prompt),
        )
    }
}

/// Reads one rollout file.
pub fn read(path: &Path, cx: &mut ReadContext<'_>) -> Result<Sessions, ImportError> {
    let mut lines = open_lines(path, cx.limits)?;
    let mut version = String::new();
    let mut session = String::new();
    let mut project = String::new();
    let mut model = String::new();
    let mut records = Vec::new();
    let mut counts = Vec::new();
    let mut pending = [Pending::default(), Pending::default()];
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
        let parsed = serde_json::from_slice::<Record<'_>>(text).and_then(|r| {
            let p = match r.payload {
                Some(p) => Some(serde_json::from_str::<Payload<'_>>(p.get())?),
                None => None,
            };
            Ok((r, p))
        });
        let (record, payload) = match parsed {
            Ok(r) => r,
            Err(e) => {
                cx.skips
                    .line(AGENT, &version, Origin::new(path, line_no), malformed(&e));
                continue;
            }
        };
        let kind = record.kind.as_deref().unwrap_or("");
        let sub = payload
            .as_ref()
            .and_then(|p| p.kind.as_deref())
            .unwrap_or("")
            .to_owned();
        let sub = sub.as_str();
        let mark = |pending: &mut [Pending; 2], f: fn(&mut Pending)| {
            for p in pending.iter_mut() {
                f(p);
            }
        };
        match (kind, payload) {
            ("session_meta", Some(p)) => {
                if let Some(v) = p.cli_version.as_deref() {
                    version = prompt_measure::logged::bounded_field(v);
                }
                if let Some(id) = p.id.as_deref().or(p.session_id.as_deref()) {
                    session = prompt_measure::logged::bounded_field(id);
                }
                if let Some(cwd) = p.cwd.as_deref() {
                    project = prompt_measure::logged::bounded_field(cwd);
                }
            }
            ("turn_context", Some(p)) => {
                if let Some(m) = p.model.as_deref() {
                    model = prompt_measure::logged::bounded_field(m);
                }
                if project.is_empty()
                    && let Some(cwd) = p.cwd.as_deref()
                {
                    project = prompt_measure::logged::bounded_field(cwd);
                }
            }
            ("compacted", _) => mark(&mut pending, |p| p.compaction = true),
            ("event_msg", Some(p)) => match sub {
                "thread_settings_applied" => mark(&mut pending, |p| p.new_process = true),
                "context_compacted" => mark(&mut pending, |p| p.compaction = true),
                "user_message" => mark(&mut pending, |p| p.prompt = true),
                "token_count" => {
                    let usage = p
                        .info
                        .and_then(|i| serde_json::from_str::<Info<'_>>(i.get()).ok())
                        .and_then(|i| i.last_token_usage)
                        .and_then(|u| usage_of(u, cx, &version));
                    if let Some(usage) = usage {
                        let (new_process, after_compaction, new_prompt) = pending[1].take();
                        counts.push(StoredRequest {
                            time: record.timestamp.as_deref().and_then(parse_iso),
                            model: model.clone(),
                            provider: Provider::OpenAi,
                            usage,
                            new_process,
                            after_compaction,
                            new_prompt,
                            origin: Origin::new(path, line_no),
                            body: None,
                            headers: Vec::new(),
                            reply: None,
                        });
                    }
                }
                _ => {}
            },
            ("response_item", Some(p)) => {
                if sub == "message" && p.role.as_deref() == Some("user") {
                    mark(&mut pending, |p| p.prompt = true);
                }
            }
            ("token_usage_record", Some(p)) => {
                if session.is_empty()
                    && let Some(id) = p.session_id.as_deref()
                {
                    session = prompt_measure::logged::bounded_field(id);
                }
                let Some(usage) = p.usage.and_then(|u| usage_of(u, cx, &version)) else {
                    cx.skips.line(
                        AGENT,
                        &version,
                        Origin::new(path, line_no),
                        "usage without counts".to_owned(),
                    );
                    continue;
                };
                let (new_process, after_compaction, new_prompt) = pending[0].take();
                records.push(StoredRequest {
                    time: record.timestamp.as_deref().and_then(parse_iso),
                    model: model.clone(),
                    provider: Provider::OpenAi,
                    usage,
                    new_process,
                    after_compaction,
                    new_prompt,
                    origin: Origin::new(path, line_no),
                    body: None,
                    headers: Vec::new(),
                    reply: None,
                });
            }
            (k, _) if KNOWN.contains(&k) => {}
            (other, _) => cx.skips.unknown_record(AGENT, &version, other),
        }
    }
    let requests = if records.is_empty() { counts } else { records };
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    if session.is_empty() {
        session = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    Ok(vec![StoredSession {
        agent: AGENT,
        version,
        session,
        project,
        requests,
    }])
}

/// A Codex usage object: `input_tokens` is the whole prompt.
fn usage_of(raw: &RawValue, cx: &mut ReadContext<'_>, version: &str) -> Option<Usage> {
    let members: Members<'_> = serde_json::from_str(raw.get()).ok()?;
    let (mut input, mut cached, mut write, mut output) = (None, 0u64, 0u64, 0u64);
    for (key, value) in &members.0 {
        let n = || value.get().trim().parse::<u64>().unwrap_or(0);
        match key.as_str() {
            "input_tokens" => input = Some(n()),
            "cached_input_tokens" => cached = n(),
            "cache_write_input_tokens" => write = n(),
            "output_tokens" => output = n(),
            k if USAGE_KNOWN.contains(&k) => {}
            other => cx.skips.unknown_field(AGENT, version, other),
        }
    }
    let input = input?;
    Some(Usage {
        input_uncached: input.saturating_sub(cached).saturating_sub(write),
        cache_read: cached.min(input),
        cache_write: write.min(input.saturating_sub(cached)),
        output,
    })
}
