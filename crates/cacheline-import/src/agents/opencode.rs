//! opencode: one SQLite database, `~/.local/share/opencode/opencode.db`, for every project
//! and session. Opened read-only (SQLite reads its write-ahead log beside it, and waits a
//! bounded time for a writer's lock); rows are streamed, never loaded whole. Requests are
//! the assistant rows of `message` (`data.tokens`: `input` uncached, `cache.read`,
//! `cache.write`, `output`), in `time_created` order per session; a user row starts a
//! prompt; an assistant row with `summary: true` is a compaction.

use std::borrow::Cow;
use std::path::Path;

use prompt_measure::{Provider, Usage};
use rusqlite::{Connection, OpenFlags};
use serde::Deserialize;

use super::ReadContext;
use super::Sessions;
use crate::error::ImportError;
use crate::store::{Agent, Origin, StoredRequest, StoredSession};

const AGENT: Agent = Agent::Opencode;

#[derive(Deserialize)]
struct Data<'a> {
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
    tokens: Option<Tokens>,
    #[serde(rename = "modelID", borrow)]
    model_id: Option<Cow<'a, str>>,
    #[serde(rename = "providerID", borrow)]
    provider_id: Option<Cow<'a, str>>,
    summary: Option<serde_json::Value>,
    #[serde(borrow)]
    mode: Option<Cow<'a, str>>,
}

#[derive(Deserialize, Default)]
struct Tokens {
    input: Option<f64>,
    output: Option<f64>,
    reasoning: Option<f64>,
    cache: Option<Cache>,
}

#[derive(Deserialize, Default)]
struct Cache {
    read: Option<f64>,
    write: Option<f64>,
}

fn count(n: Option<f64>) -> u64 {
    match n {
        Some(n) if n.is_finite() && n > 0.0 => n.min(1e18) as u64,
        _ => 0,
    }
}

/// The provider whose usage object and prices a row's `providerID` names.
fn provider_of(id: &str) -> Provider {
    match id {
        "anthropic" | "amazon-bedrock" | "google-vertex-anthropic" => Provider::Anthropic,
        "google" | "google-vertex" => Provider::Gemini,
        "deepseek" => Provider::DeepSeek,
        _ => Provider::OpenAi,
    }
}

/// Reads every session of the database.
pub fn read(path: &Path, cx: &mut ReadContext<'_>) -> Result<Sessions, ImportError> {
    let db = |source| ImportError::Database {
        path: path.to_owned(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(|source| ImportError::Io {
        path: path.to_owned(),
        line: None,
        source,
    })?;
    if !meta.is_file() {
        return Err(ImportError::NotAFile {
            path: path.to_owned(),
        });
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(db)?;
    conn.busy_timeout(cx.limits.busy_timeout).map_err(db)?;
    // A store is hostile input: no trusted schema, no writes, bounded recursion.
    conn.pragma_update(None, "query_only", true).map_err(db)?;
    conn.pragma_update(None, "trusted_schema", false)
        .map_err(db)?;
    let mut statement = conn
        .prepare(
            "SELECT m.session_id, m.time_created, m.data, s.directory, s.version, \
             length(m.data) \
             FROM message m LEFT JOIN session s ON s.id = m.session_id \
             ORDER BY m.session_id, m.time_created, m.id",
        )
        .map_err(db)?;
    let mut rows = statement.query([]).map_err(db)?;
    let mut sessions: Vec<StoredSession> = Vec::new();
    let (mut prompt, mut compaction) = (false, false);
    let mut row_no: u64 = 0;
    while let Some(row) = rows.next().map_err(db)? {
        row_no += 1;
        let origin = Origin::new(path, row_no);
        let session: String = row
            .get::<_, Option<String>>(0)
            .ok()
            .flatten()
            .unwrap_or_default();
        let version: String = row
            .get::<_, Option<String>>(4)
            .ok()
            .flatten()
            .unwrap_or_default();
        let version = prompt_measure::logged::bounded_field(&version);
        let size: i64 = row.get::<_, Option<i64>>(5).ok().flatten().unwrap_or(0);
        if usize::try_from(size).map_or(true, |s| s > cx.limits.max_line_bytes) {
            cx.skips.line(
                AGENT,
                &version,
                origin,
                format!(
                    "message data of {size} bytes over the {} byte cap",
                    cx.limits.max_line_bytes
                ),
            );
            continue;
        }
        let text: String = match row.get::<_, Option<String>>(2) {
            Ok(Some(t)) => t,
            _ => {
                cx.skips.line(
                    AGENT,
                    &version,
                    origin,
                    "message data is not text".to_owned(),
                );
                continue;
            }
        };
        let data: Data<'_> = match serde_json::from_str(&text) {
            Ok(d) => d,
            Err(e) => {
                cx.skips.line(AGENT, &version, origin, super::malformed(&e));
                continue;
            }
        };
        if sessions.last().is_none_or(|s| s.session != session) {
            let directory: String = row
                .get::<_, Option<String>>(3)
                .ok()
                .flatten()
                .unwrap_or_default();
            sessions.push(StoredSession {
                agent: AGENT,
                version: version.clone(),
                session: prompt_measure::logged::bounded_field(&session),
                project: prompt_measure::logged::bounded_field(&directory),
                requests: Vec::new(),
            });
            prompt = false;
            compaction = false;
        }
        match data.role.as_deref() {
            Some("user") => prompt = true,
            Some("assistant") => {
                let Some(tokens) = data.tokens else { continue };
                let cache = tokens.cache.unwrap_or_default();
                let usage = Usage {
                    input_uncached: count(tokens.input),
                    cache_read: count(cache.read),
                    cache_write: count(cache.write),
                    output: count(tokens.output).saturating_add(count(tokens.reasoning)),
                };
                let time: Option<i64> = row.get::<_, Option<i64>>(1).ok().flatten();
                let is_summary = matches!(data.summary, Some(serde_json::Value::Bool(true)))
                    || data.mode.as_deref() == Some("compaction");
                let request = StoredRequest {
                    time: time.map(|ms| ms as f64 / 1000.0),
                    model: prompt_measure::logged::bounded_field(
                        data.model_id.as_deref().unwrap_or_default(),
                    ),
                    provider: provider_of(data.provider_id.as_deref().unwrap_or_default()),
                    usage,
                    new_process: false,
                    after_compaction: std::mem::take(&mut compaction),
                    new_prompt: std::mem::take(&mut prompt),
                    origin,
                    body: None,
                    headers: Vec::new(),
                    reply: None,
                };
                if is_summary {
                    compaction = true;
                }
                if let Some(s) = sessions.last_mut() {
                    if s.version.is_empty() {
                        s.version = version;
                    }
                    s.requests.push(request);
                }
            }
            Some(other) => cx.skips.unknown_record(AGENT, &version, other),
            None => cx.skips.unknown_record(AGENT, &version, "(no role)"),
        }
    }
    sessions.retain(|s| !s.requests.is_empty());
    Ok(sessions)
}
