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

use super::{JsonLines, ReadContext, Sessions, keep_first, keep_last};
use crate::error::ImportError;
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

/// The usage counts read: the prompt (cached included), cached, written and output.
const USAGE_READ: [&str; 4] = [
    "input_tokens",
    "cached_input_tokens",
    "cache_write_input_tokens",
    "output_tokens",
];

/// Usage fields passed over knowingly.
const USAGE_KNOWN: &[&str] = &["reasoning_output_tokens", "total_tokens"];

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
    /// A request with the markers seen since the last one (which it clears).
    fn request(
        &mut self,
        time: Option<f64>,
        model: &str,
        usage: Usage,
        origin: Origin,
    ) -> StoredRequest {
        StoredRequest {
            time,
            model: model.to_owned(),
            new_process: std::mem::take(&mut self.new_process),
            after_compaction: std::mem::take(&mut self.compaction),
            new_prompt: std::mem::take(&mut self.prompt),
            ..StoredRequest::counted(Provider::OpenAi, usage, origin)
        }
    }
}

/// Reads one rollout file.
pub fn read(path: &Path, cx: &mut ReadContext<'_>) -> Result<Sessions, ImportError> {
    let mut lines = JsonLines::open(path, AGENT, cx.limits)?;
    let mut version = String::new();
    let mut session = String::new();
    let mut project = String::new();
    let mut model = String::new();
    let mut records = Vec::new();
    let mut counts = Vec::new();
    let mut pending = [Pending::default(), Pending::default()];
    while let Some((at, text)) = lines.next_text(cx, &version)? {
        let parsed = serde_json::from_slice::<Record<'_>>(text).and_then(|r| {
            let p = match r.payload {
                Some(p) => Some(serde_json::from_str::<Payload<'_>>(p.get())?),
                None => None,
            };
            Ok((r, p))
        });
        let Some((record, payload)) = cx.parsed(at, &version, parsed) else {
            continue;
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
                keep_last(&mut version, p.cli_version.as_deref());
                keep_last(&mut session, p.id.as_deref().or(p.session_id.as_deref()));
                keep_last(&mut project, p.cwd.as_deref());
            }
            ("turn_context", Some(p)) => {
                keep_last(&mut model, p.model.as_deref());
                keep_first(&mut project, p.cwd.as_deref());
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
                        let time = record.timestamp.as_deref().and_then(parse_iso);
                        counts.push(pending[1].request(time, &model, usage, at.origin()));
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
                keep_first(&mut session, p.session_id.as_deref());
                let Some(usage) = p.usage.and_then(|u| usage_of(u, cx, &version)) else {
                    cx.skip(at, &version, "usage without counts");
                    continue;
                };
                let time = record.timestamp.as_deref().and_then(parse_iso);
                records.push(pending[0].request(time, &model, usage, at.origin()));
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
    let [input, cached, write, output] = cx.counts(raw, USAGE_READ, USAGE_KNOWN, AGENT, version)?;
    let input = input?;
    let (cached, write) = (cached.unwrap_or(0), write.unwrap_or(0));
    Some(Usage {
        input_uncached: input.saturating_sub(cached).saturating_sub(write),
        cache_read: cached.min(input),
        cache_write: write.min(input.saturating_sub(cached)),
        output: output.unwrap_or(0),
    })
}
