//! `--diagnose`: asks the provider for its own verdict on each request, beside the engine's.
//!
//! For an Anthropic Messages request (`/v1/messages`) of a model whose profile has cache
//! diagnostics, the body gains `"diagnostics":{"previous_message_id":…}` as its last
//! top-level key (the session's last reply id, `null` on its first request, which opts in)
//! and `anthropic-beta` gains `cache-diagnosis-2026-04-07`
//! (<https://platform.claude.com/docs/en/build-with-claude/cache-diagnostics>). For an OpenAI
//! Responses request (`/v1/responses`) of GPT-5.6 or later, the body gains
//! `"prompt_cache_options":{"comparison_response_id":…}` once the session has a reply
//! (<https://developers.openai.com/api/docs/guides/prompt-caching/diagnostics>). Both sit
//! after every byte of the prompt and are not part of it: they cost no cache.
//!
//! The bytes are spliced in before the body's closing brace; nothing else is re-serialized.
//! `content-length` is set to the new length. A request whose session is not named by a
//! header, whose agent already sent the field, whose model has no diagnostics, or whose body
//! cannot be read as one JSON object is forwarded unchanged, and counted. The analysis sees
//! the agent's own bytes; the upstream gets the modified ones.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hyper::header::{HeaderMap, HeaderValue};
use prompt_core::ApiKind;
use prompt_core::profile::Profile;
use prompt_core::raw_json::Object;
use prompt_measure::recent::RecentMap;
use serde::Serialize;

use prompt_core::profile::Provider;

/// Sessions whose last reply id is held (least recently used dropped).
pub const MAX_DIAGNOSE_SESSIONS: usize = 4096;

/// The longest session key held.
const MAX_SESSION_KEY: usize = 256;

/// What `--diagnose` did, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DiagnoseCounts {
    /// Requests sent upstream with the provider's diagnostics field added.
    pub added: u64,
    /// Requests of a diagnosable API that name no session: sent unchanged.
    pub unnamed: u64,
    /// Requests whose agent already asked for diagnostics: sent unchanged.
    pub agent_sent: u64,
    /// Requests of a model or upstream without diagnostics: sent unchanged.
    pub unsupported: u64,
    /// OpenAI requests of a session with no reply id yet: sent unchanged.
    pub no_previous: u64,
    /// Requests whose body could not be read or rewritten (not one JSON object, over the
    /// copy limit, cut off, too slow): sent unchanged.
    pub failed: u64,
}

/// Why a request goes unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    AgentSent,
    Unsupported,
    NoPrevious,
    Failed,
}

/// The `--diagnose` state: the last reply id per session, bounded, and the counts.
#[derive(Debug, Default)]
pub(crate) struct Diagnose {
    last: Mutex<Last>,
    order: AtomicU64,
    added: AtomicU64,
    unnamed: AtomicU64,
    agent_sent: AtomicU64,
    unsupported: AtomicU64,
    no_previous: AtomicU64,
    failed: AtomicU64,
}

/// Session key → (reply id, the request's order), at most [`MAX_DIAGNOSE_SESSIONS`], the
/// least recently used dropped first.
#[derive(Debug)]
struct Last(RecentMap<String, (String, u64)>);

impl Default for Last {
    fn default() -> Self {
        Last(RecentMap::new(MAX_DIAGNOSE_SESSIONS))
    }
}

/// The API a request at `path` of `api` gets cache diagnostics on, if any: Anthropic
/// Messages and OpenAI Responses (not `count_tokens`, not another endpoint).
pub(crate) fn diagnosable(api: Provider, path: &str) -> Option<ApiKind> {
    match (api, path.trim_end_matches('/')) {
        (Provider::Anthropic, "/v1/messages") => Some(ApiKind::Anthropic),
        (Provider::OpenAi, "/v1/responses") => Some(ApiKind::OpenAiResponses),
        _ => None,
    }
}

/// The session a request names by header (the engine's [`SESSION_HEADERS`], first found),
/// with its API: the key its last reply id is held under.
///
/// [`SESSION_HEADERS`]: prompt_wire::engine::SESSION_HEADERS
pub(crate) fn session_key(kind: ApiKind, headers: &HeaderMap) -> Option<String> {
    prompt_wire::engine::SESSION_HEADERS.iter().find_map(|h| {
        let v = headers.get(*h)?.to_str().ok()?.trim();
        (!v.is_empty() && v.len() <= MAX_SESSION_KEY).then(|| format!("{kind:?} {h}={v}"))
    })
}

/// Whether the upstream at `url` is the provider's own API for a request of `model`.
/// A loopback upstream (a local gateway, a test's stand-in) is taken to be the provider's
/// API; any other host is held to the profile's (Anthropic's cache diagnostics are the
/// Claude API's only: not Bedrock's, Vertex AI's or Foundry's).
fn supported(kind: ApiKind, model: &str, upstream_url: &str, loopback: bool) -> bool {
    let base = (!loopback).then_some(upstream_url);
    matches!(kind, ApiKind::Anthropic | ApiKind::OpenAiResponses)
        && Profile::lookup(kind, model, base).answers_cache_diagnostics()
}

/// The body with the diagnostics field spliced in before its closing brace.
pub(crate) fn rewrite(
    kind: ApiKind,
    body: &[u8],
    previous: Option<&str>,
    upstream_url: &str,
    loopback: bool,
) -> Result<Vec<u8>, Skip> {
    let text = std::str::from_utf8(body).map_err(|_| Skip::Failed)?;
    let top = Object::parse(text).map_err(|_| Skip::Failed)?;
    let model = top.str("model").unwrap_or_default();
    if !supported(kind, &model, upstream_url, loopback) {
        return Err(Skip::Unsupported);
    }
    let id = match previous {
        Some(id) => serde_json::to_string(id).map_err(|_| Skip::Failed)?,
        None => "null".to_owned(),
    };
    let field = match kind {
        ApiKind::Anthropic if top.has("diagnostics") => return Err(Skip::AgentSent),
        ApiKind::Anthropic => format!(r#""diagnostics":{{"previous_message_id":{id}}}"#),
        ApiKind::OpenAiResponses if top.has("prompt_cache_options") => {
            return Err(Skip::AgentSent);
        }
        ApiKind::OpenAiResponses if previous.is_none() => return Err(Skip::NoPrevious),
        ApiKind::OpenAiResponses => {
            format!(r#""prompt_cache_options":{{"comparison_response_id":{id}}}"#)
        }
        _ => return Err(Skip::Unsupported),
    };
    let close = body
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .filter(|&i| body[i] == b'}')
        .ok_or(Skip::Failed)?;
    let mut out = Vec::with_capacity(body.len() + field.len() + 1);
    out.extend_from_slice(&body[..close]);
    if !top.fields.is_empty() {
        out.push(b',');
    }
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(&body[close..]);
    Ok(out)
}

/// The headers for the rewritten body: `content-length` its length, and for Anthropic the
/// beta value appended to `anthropic-beta` (or the header added). `false` when a header
/// cannot be set (the request then goes unchanged).
pub(crate) fn fix_headers(kind: ApiKind, headers: &mut HeaderMap, len: usize) -> bool {
    if kind == ApiKind::Anthropic {
        let (name, beta) = prompt_wire::CACHE_DIAGNOSIS_BETA;
        let value = match headers.get(name).map(|v| v.to_str()) {
            None => beta.to_owned(),
            Some(Ok(v)) if v.split(',').any(|b| b.trim() == beta) => v.to_owned(),
            Some(Ok(v)) if v.trim().is_empty() => beta.to_owned(),
            Some(Ok(v)) => format!("{v},{beta}"),
            Some(Err(_)) => return false,
        };
        let Ok(value) = HeaderValue::from_str(&value) else {
            return false;
        };
        headers.insert(name, value);
    }
    headers.remove(hyper::header::TRANSFER_ENCODING);
    headers.insert(hyper::header::CONTENT_LENGTH, HeaderValue::from(len));
    true
}

/// What an exchange carries for `--diagnose`: the session key its reply id is held under,
/// its API, its order of arrival, and the reply id its request was compared with.
#[derive(Debug, Clone)]
pub(crate) struct DiagnoseJob {
    pub(crate) key: String,
    pub(crate) kind: ApiKind,
    pub(crate) order: u64,
    pub(crate) against: Option<String>,
}

impl Diagnose {
    /// The next request's order of arrival.
    pub(crate) fn next_order(&self) -> u64 {
        self.order.fetch_add(1, Ordering::Relaxed)
    }

    /// Holds the id of a reply (`body`, decoded: whole or streamed) of `job`'s session.
    pub(crate) fn remember_reply(&self, job: &DiagnoseJob, body: &[u8]) {
        if let Some(id) = prompt_wire::reply_id(job.kind, body) {
            self.remember(&job.key, id, job.order);
        }
    }

    /// The last reply id of the session `key`, if held.
    pub(crate) fn previous(&self, key: &str) -> Option<String> {
        let mut last = self.last.lock().ok()?;
        last.0.get_mut(key).map(|(id, _)| id.clone())
    }

    /// Holds `id` as the last reply of session `key`, unless a later request's reply is
    /// already held (`order`: the request's order of arrival).
    pub(crate) fn remember(&self, key: &str, id: String, order: u64) {
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        if let Some(held) = last.0.get_mut(key) {
            if held.1 <= order {
                *held = (id, order);
            }
            return;
        }
        last.0.insert(key.to_owned(), (id, order));
    }

    /// Sessions held.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.last.lock().map_or(0, |l| l.0.len())
    }

    /// Counts a request sent with the field added.
    pub(crate) fn added(&self) {
        self.added.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request that names no session.
    pub(crate) fn unnamed(&self) {
        self.unnamed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request sent unchanged, and why.
    pub(crate) fn skipped(&self, why: Skip) {
        let n = match why {
            Skip::AgentSent => &self.agent_sent,
            Skip::Unsupported => &self.unsupported,
            Skip::NoPrevious => &self.no_previous,
            Skip::Failed => &self.failed,
        };
        n.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far.
    pub(crate) fn counts(&self) -> DiagnoseCounts {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        DiagnoseCounts {
            added: n(&self.added),
            unnamed: n(&self.unnamed),
            agent_sent: n(&self.agent_sent),
            unsupported: n(&self.unsupported),
            no_previous: n(&self.no_previous),
            failed: n(&self.failed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_is_spliced_before_the_closing_brace_and_nothing_else_moves() {
        let body =
            br#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}  "#;
        let out = rewrite(ApiKind::Anthropic, body, Some("msg_1"), "", true).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}],"diagnostics":{"previous_message_id":"msg_1"}}  "#
        );
        let first = rewrite(ApiKind::Anthropic, body, None, "", true).unwrap();
        assert!(
            std::str::from_utf8(&first)
                .unwrap()
                .contains(r#""diagnostics":{"previous_message_id":null}}"#)
        );
        let openai = br#"{"model":"gpt-5.6","input":"hi"}"#;
        let out = rewrite(ApiKind::OpenAiResponses, openai, Some("resp_1"), "", true).unwrap();
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"model":"gpt-5.6","input":"hi","prompt_cache_options":{"comparison_response_id":"resp_1"}}"#
        );
    }

    #[test]
    fn a_request_that_cannot_take_the_field_is_left_alone_and_says_why() {
        let sent = br#"{"model":"claude-sonnet-4-5","messages":[],"diagnostics":{"previous_message_id":null}}"#;
        assert_eq!(
            rewrite(ApiKind::Anthropic, sent, None, "", true),
            Err(Skip::AgentSent)
        );
        let sent = br#"{"model":"gpt-5.6","input":"hi","prompt_cache_options":{"ttl":"30m"}}"#;
        assert_eq!(
            rewrite(ApiKind::OpenAiResponses, sent, Some("r"), "", true),
            Err(Skip::AgentSent)
        );
        let old = br#"{"model":"gpt-5.5","input":"hi"}"#;
        assert_eq!(
            rewrite(ApiKind::OpenAiResponses, old, Some("r"), "", true),
            Err(Skip::Unsupported)
        );
        let new = br#"{"model":"gpt-5.6","input":"hi"}"#;
        assert_eq!(
            rewrite(ApiKind::OpenAiResponses, new, None, "", true),
            Err(Skip::NoPrevious)
        );
        // Bedrock is not the Claude API: no cache diagnostics there.
        let body = br#"{"model":"claude-sonnet-4-5","messages":[]}"#;
        assert_eq!(
            rewrite(
                ApiKind::Anthropic,
                body,
                None,
                "https://bedrock-runtime.us-east-1.amazonaws.com",
                false
            ),
            Err(Skip::Unsupported)
        );
        assert!(
            rewrite(
                ApiKind::Anthropic,
                body,
                None,
                "https://api.anthropic.com",
                false
            )
            .is_ok()
        );
        for bad in [
            &b"not json"[..],
            b"[1]",
            b"{\"model\":\"claude-sonnet-4-5\",",
            b"\xff",
        ] {
            assert_eq!(
                rewrite(ApiKind::Anthropic, bad, None, "", true),
                Err(Skip::Failed)
            );
        }
        // The profile table says which models answer: GPT-5.6 and later on Responses.
        let openai = |m: &str| supported(ApiKind::OpenAiResponses, m, "", true);
        assert!(openai("gpt-6-astra") && openai("gpt-5.6-mini"));
        assert!(!openai("gpt-5") && !openai("gpt-4.1") && !openai("o3"));
    }

    #[test]
    fn the_beta_header_is_appended_and_the_length_fixed() {
        let mut h = HeaderMap::new();
        h.insert(
            "anthropic-beta",
            HeaderValue::from_static("fine-grained-tool-streaming-2025-05-14"),
        );
        h.insert(
            hyper::header::CONTENT_LENGTH,
            HeaderValue::from_static("10"),
        );
        assert!(fix_headers(ApiKind::Anthropic, &mut h, 77));
        assert_eq!(
            h["anthropic-beta"],
            "fine-grained-tool-streaming-2025-05-14,cache-diagnosis-2026-04-07"
        );
        assert_eq!(h[hyper::header::CONTENT_LENGTH], "77");
        assert!(fix_headers(ApiKind::Anthropic, &mut h, 77));
        assert_eq!(
            h["anthropic-beta"],
            "fine-grained-tool-streaming-2025-05-14,cache-diagnosis-2026-04-07"
        );
        let mut h = HeaderMap::new();
        assert!(fix_headers(ApiKind::OpenAiResponses, &mut h, 5));
        assert!(h.get("anthropic-beta").is_none());
    }

    #[test]
    fn the_last_reply_ids_are_bounded_and_a_late_reply_does_not_overwrite_a_newer_one() {
        let d = Diagnose::default();
        d.remember("s", "msg_2".to_owned(), 2);
        d.remember("s", "msg_1".to_owned(), 1);
        assert_eq!(d.previous("s").as_deref(), Some("msg_2"));
        for i in 0..MAX_DIAGNOSE_SESSIONS + 10 {
            d.remember(&format!("k{i}"), "x".to_owned(), 3);
        }
        assert_eq!(d.held(), MAX_DIAGNOSE_SESSIONS);
        let mut h = HeaderMap::new();
        assert_eq!(session_key(ApiKind::Anthropic, &h), None);
        h.insert("x-claude-code-session-id", HeaderValue::from_static("abc"));
        assert_eq!(
            session_key(ApiKind::Anthropic, &h).as_deref(),
            Some("Anthropic x-claude-code-session-id=abc")
        );
    }
}
