//! The one value per request ([`RequestReport`]: the audit's verdict, or why there is none,
//! with what the proxy knew of the exchange) and its projections: the page's and the
//! state's row ([`RequestRow`]) and the terminal's verdict line.

use std::time::Duration;

use prompt_core::profile::Provider;
use serde::Serialize;

use crate::audit::{CauseKind, Place, RequestAudit};

use super::verdict::verdict_text;

/// How a forwarded exchange ended, as the client saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The reply reached its end.
    Complete,
    /// The upstream's reply broke off (a reset, a malformed frame): the client saw an
    /// aborted body.
    UpstreamAborted,
    /// The client went away before the reply's end; the upstream request was ended.
    ClientGone,
    /// The upstream could not be reached or did not answer in time: the client got a 502.
    Unreachable,
}

/// What a proxy knew of an exchange besides its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Forwarded {
    /// The proxy's number for it, from 1, in the order analyses complete.
    pub request: u64,
    /// The provider its path was routed to (Anthropic, OpenAI or Gemini).
    pub api: Provider,
    /// The agent, from its `user-agent` (bounded), if it sent one.
    pub agent: Option<String>,
    /// The upstream's status (502 when unreachable).
    pub status: u16,
    /// How it ended.
    pub outcome: Outcome,
    /// The proxy's own time on the request's path.
    pub added_latency: Duration,
}

/// The one value per request: what the proxy knew of the exchange (none in an audit of a
/// log), and the audit's verdict or why there is none. Every way a verdict is shown is a
/// projection of it: [`RequestReport::verdict_text`], [`RequestReport::page_row`] (and so
/// [`verdict_line`] and [`super::labels::MetricLabels`]), the audit's JSON (the
/// [`RequestAudit`] it holds).
#[derive(Debug, Clone)]
pub struct RequestReport {
    /// What the proxy knew of the exchange.
    pub forwarded: Option<Forwarded>,
    /// Its line in the log (the audit's tag for it), when it reached the audit: a request
    /// whose body could not be read has one, and says why in [`RequestReport::audit`].
    pub line: Option<u64>,
    /// The audit, or why the request was not analysed (a sentence).
    pub audit: Result<Box<RequestAudit>, String>,
    /// The request body as sent (a proxy's `--keep-bodies` only).
    pub body: Option<String>,
}

impl RequestReport {
    /// The verdict as one sentence ([`verdict_text`]); a reply whose usage could not be read
    /// says so; a request not analysed says why.
    pub fn verdict_text(&self) -> String {
        match &self.audit {
            Err(why) => why.clone(),
            Ok(audit) => {
                let mut text = verdict_text(audit);
                let answered = self.forwarded.as_ref().is_none_or(|f| f.status < 300);
                if let Some(e) = &audit.reported_error
                    && answered
                {
                    text.push_str(&format!("; usage not read: {e}"));
                }
                text
            }
        }
    }

    /// The row the page, the state and the event stream show.
    pub fn page_row(&self) -> RequestRow {
        let f = self.forwarded.as_ref();
        let mut row = RequestRow {
            line: self.line,
            verdict: self.verdict_text(),
            body: self.body.clone(),
            ..RequestRow::default()
        };
        if let Some(f) = f {
            row.request = f.request;
            row.api = f.api;
            row.agent = f.agent.clone();
            row.status = f.status;
            row.outcome = f.outcome;
            row.added_latency = f.added_latency;
        }
        let Ok(audit) = &self.audit else {
            return row;
        };
        let v = &audit.verdict;
        // A request that names no session (Gemini CLI, Qwen Code) is grouped by the engine's
        // inference: shown so, not as an empty field.
        row.session = if v.session.id.is_empty() {
            "(inferred)".to_owned()
        } else {
            v.session.id.clone()
        };
        row.model = v.model.clone();
        row.input = audit.tokens;
        row.cached = audit.reported.map(|r| r.usage.cache_read);
        row.reprocessed = v.tokens_lost;
        row.new = v.tokens.saturating_sub(v.common_tokens);
        row.expected_cached = v.expected_cached;
        row.cause = v.cause.as_ref().map(|c| c.kind());
        if let Some(change) = v
            .cause
            .as_ref()
            .and_then(|c| v.changes.iter().find(|ch| ch.cause == *c))
        {
            row.place = Some(match &change.place {
                Place::Request => change.json_path.clone(),
                other => other.to_string(),
            });
            row.excerpt = Some((
                change.divergence.excerpt.earlier.clone(),
                change.divergence.excerpt.later.clone(),
            ));
        }
        row
    }
}

/// One request, as the proxy saw and analysed it: the projection of a [`RequestReport`]
/// its page, its state and its event stream show.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRow {
    /// The proxy's number for it, from 1, in the order analyses complete.
    pub request: u64,
    /// Its line in the `--log` file (and the audit's tag for it), when it was analysed.
    pub line: Option<u64>,
    /// The session the engine put it in (`-` when not analysed).
    pub session: String,
    /// The provider its path was routed to.
    pub api: Provider,
    /// The agent, from its `user-agent` (bounded), if it sent one.
    pub agent: Option<String>,
    /// The model, if read.
    pub model: Option<String>,
    /// The upstream's status (502 when unreachable).
    pub status: u16,
    /// How it ended.
    pub outcome: Outcome,
    /// Input tokens, by the audit's tokenizer.
    pub input: u64,
    /// Input tokens the provider said it read from its cache, if its reply said.
    pub cached: Option<u64>,
    /// Tokens an append-only request would have reused, processed again here.
    pub reprocessed: u64,
    /// Tokens new in this request (not shared with its predecessor from the start).
    pub new: u64,
    /// Tokens the provider's rule says should have been read from the cache.
    pub expected_cached: u64,
    /// The verdict's cause, `None` when it extends its predecessor as it should.
    pub cause: Option<CauseKind>,
    /// Where the change is (`tools[1]`, `message 3`…), when there is one.
    pub place: Option<String>,
    /// The changed bytes, earlier and later (bounded by the engine).
    pub excerpt: Option<(String, String)>,
    /// The verdict, as `cacheline audit` words it, or why the request was not analysed.
    pub verdict: String,
    /// The proxy's own time on the request's path (before sending upstream, after the
    /// reply's head arrived), not the upstream's.
    pub added_latency: Duration,
    /// The request body as sent (only with `--keep-bodies`, credentials never included:
    /// headers are not kept and the body is what the agent sent).
    pub body: Option<String>,
}

impl Default for RequestRow {
    /// A row of a request not analysed: number 0, session `-`, status 0, nothing counted.
    fn default() -> Self {
        RequestRow {
            request: 0,
            line: None,
            session: "-".to_owned(),
            api: Provider::OpenAi,
            agent: None,
            model: None,
            status: 0,
            outcome: Outcome::Complete,
            input: 0,
            cached: None,
            reprocessed: 0,
            new: 0,
            expected_cached: 0,
            cause: None,
            place: None,
            excerpt: None,
            verdict: String::new(),
            added_latency: Duration::ZERO,
            body: None,
        }
    }
}

/// The longest verdict printed on a terminal line.
pub const VERDICT_BYTES: usize = 600;

/// One request's verdict line on standard error: one line whatever the traffic, every value
/// from input (the session, the model, the verdict with its excerpts) escaped
/// ([`prompt_core::input::escape_controls`]: a newline or an escape sequence in a model name
/// cannot forge a line or drive the terminal) and bounded.
pub fn verdict_line(row: &RequestRow) -> String {
    use prompt_core::input::{EXCERPT_BYTES, escape_controls, excerpt};
    let shown = |text: &str, max: usize| excerpt(&escape_controls(text), max).into_owned();
    let cached = row.cached.map_or_else(|| "-".to_owned(), |c| c.to_string());
    let verdict = shown(&row.verdict, VERDICT_BYTES);
    let outcome = match row.outcome {
        Outcome::Complete => "",
        Outcome::UpstreamAborted => " [upstream aborted]",
        Outcome::ClientGone => " [client gone]",
        Outcome::Unreachable => " [upstream unreachable]",
    };
    format!(
        "cacheline proxy: {} #{} {} {} input={} cached={} expected={} status={}{}: {}",
        shown(&row.session, EXCERPT_BYTES),
        row.request,
        row.api,
        shown(row.model.as_deref().unwrap_or("-"), EXCERPT_BYTES),
        row.input,
        cached,
        row.expected_cached,
        row.status,
        outcome,
        verdict
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verdict_line_is_one_line_whatever_the_model_session_and_verdict_hold() {
        let row = RequestRow {
            request: 7,
            line: Some(7),
            session: "s\u{1b}]0;retitled\u{7}".to_owned(),
            api: Provider::Anthropic,
            model: Some("claude\ncacheline proxy: s-1 #8 anthropic m input=1 cached=1 expected=1 status=200: extends line 7\u{1b}[2J".to_owned()),
            status: 200,
            input: 1,
            new: 1,
            verdict: format!("extends line 6\r\u{9b}2J{}", "x".repeat(2 * VERDICT_BYTES)),
            ..RequestRow::default()
        };
        let line = verdict_line(&row);
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(line.contains("s\\x1b]0;retitled\\x07 #7"), "{line}");
        assert!(line.contains("claude\\ncacheline proxy: s-1 #8"), "{line}");
        assert!(
            line.contains("\\x1b[2J") && line.contains("\\r\\u{9b}2J"),
            "{line}"
        );
        assert!(line.len() < 2 * VERDICT_BYTES, "bounded: {}", line.len());
    }
}
