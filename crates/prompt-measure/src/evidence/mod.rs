//! One request's verdict with its proof ([`Evidence`]): what `cacheline evidence` writes, as
//! Markdown ([`crate::report::evidence_markdown`]) and JSON ([`crate::report::evidence_json`],
//! the value's serialization), redacted, to attach to an upstream issue.
//!
//! The log is audited up to line N by the caller's [`Auditor`] (the same as `cacheline
//! audit`'s); the request's verdict names its predecessor (`predecessor.tag` is its line);
//! both lines are then read again (each at most the line cap) for what the verdict does not
//! keep: the bytes around the first divergence, the top-level fields, each element as the
//! engine reads it ([`prompt_engine::Canonical`]), the user-agent. Nothing is compared a
//! second time: cause, place, offset, every change and the first element that differs are
//! the engine's, and the element a change names is found by the engine
//! ([`prompt_engine::Place::element_in`]).
//!
//! Files: `read.rs` (the log read twice), `elements.rs` (both requests side by side),
//! `redact.rs` (credentials masked and scrubbed).

mod elements;
mod read;
mod redact;

use std::io::BufRead;
use std::path::PathBuf;

use prompt_core::input::{self, InputError};
use prompt_engine::SessionSource;
use serde::Serialize;

use crate::audit::{Auditor, Reported, verdict_text};
use crate::catalogue::{AgentId, WriterFinding};
use crate::provider_verdict::ProviderVerdict;

pub(crate) use redact::Redactor;

/// Bytes of each side shown before the first divergent byte.
pub const BEFORE: usize = 64;
/// Bytes of each side shown from the first divergent byte on.
pub const AFTER: usize = 96;
/// Elements listed per group (a longer request's are counted, not listed).
pub const MAX_BLOCKS: usize = 4096;
/// Top-level fields listed.
pub const MAX_FIELDS: usize = 256;
/// The longest user-agent, tool name, role or model shown.
const MAX_LABEL: usize = 160;
/// The longest problem quoted in an error.
const MAX_PROBLEM: usize = 512;

/// Why no evidence could be collected.
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    /// The log could not be opened.
    #[error("{0}")]
    Open(#[from] InputError),
    /// A line the evidence needs (the request's, or its predecessor's) cannot be had.
    #[error("{path}:{line}: {fault}")]
    Line {
        /// The log.
        path: PathBuf,
        /// The line.
        line: u64,
        /// What is wrong.
        fault: LineFault,
    },
}

/// What is wrong with a line the evidence needs.
#[derive(Debug, thiserror::Error)]
pub enum LineFault {
    /// Reading failed.
    #[error("read error: {0}")]
    Read(std::io::Error),
    /// The log ends before it: it has this many lines.
    #[error("no such request: the log has {0} line(s)")]
    OutOfRange(u64),
    /// A blank line.
    #[error("a blank line, not a request")]
    Blank,
    /// The audit skips it: why, as the audit says it (bounded).
    #[error("the audit skips this line: {0}")]
    Skipped(String),
    /// No longer in the log, read again (it changed between the readings): the predecessor
    /// of this line.
    #[error("the predecessor of line {0} is gone: the log changed while it was read")]
    Gone(u64),
    /// Read again, it is not the line audited.
    #[error(
        "the line is not the one audited: the log changed while it was read (give a log nothing rewrites meanwhile)"
    )]
    Changed,
}

impl EvidenceError {
    /// `fault` of line `line` of the log `path`.
    fn at(path: &std::path::Path, line: u64, fault: LineFault) -> Self {
        EvidenceError::Line {
            path: path.to_owned(),
            line,
            fault,
        }
    }

    /// The audit's account of why `line` cannot be read, bounded.
    fn skipped(path: &std::path::Path, line: u64, problem: &dyn std::fmt::Display) -> Self {
        let problem = input::excerpt(&problem.to_string(), MAX_PROBLEM).into_owned();
        Self::at(path, line, LineFault::Skipped(problem))
    }
}

/// What to collect evidence of.
#[derive(Debug, Clone)]
pub struct EvidenceRequest {
    /// The log, as named: in the report and in every error.
    pub log: PathBuf,
    /// The request's line in the log, from 1, as the audit numbers lines (blank and skipped
    /// lines count).
    pub line: u64,
    /// Replace the letters and digits of the excerpts with `x` and `0` (JSON punctuation
    /// kept): the structure shows, the content does not.
    pub redact_text: bool,
    /// Who produces the report.
    pub produced_by: Producer,
}

/// One request as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    /// Its line in the log.
    pub line: u64,
    /// The URL path without its query, when logged.
    pub path: Option<String>,
    /// When it was sent (seconds since the epoch), when logged.
    pub ts: Option<f64>,
    /// Its input tokens by the audit's tokenizer.
    pub tokens: u64,
    /// The usage its response reported.
    pub usage: Option<UsageFacts>,
}

/// Reported usage.
#[derive(Debug, Clone, Serialize)]
pub struct UsageFacts {
    /// Whose usage shape it was read as.
    pub provider: String,
    /// Input tokens in all.
    pub input: u64,
    /// Read from the cache.
    pub cached: u64,
    /// Written to the cache.
    pub written: u64,
    /// Neither.
    pub uncached: u64,
}

impl UsageFacts {
    fn of(r: &Reported) -> Self {
        Self {
            provider: r.provider.to_string(),
            input: r.usage.input(),
            cached: r.usage.cache_read,
            written: r.usage.cache_write,
            uncached: r.usage.input_uncached,
        }
    }
}

/// The bytes of one side around the first divergence.
#[derive(Debug, Clone, Serialize)]
pub struct Around {
    /// Its line.
    pub line: u64,
    /// The offset in that body (`None`: not placed in it; `from` is then the engine's
    /// excerpt of the changed value or element).
    pub byte_offset: Option<usize>,
    /// Up to [`BEFORE`] bytes before it.
    pub before: String,
    /// Up to [`AFTER`] bytes from it on.
    pub from: String,
}

/// The first divergent byte.
#[derive(Debug, Clone, Serialize)]
pub struct FirstDivergence {
    /// The offset in the later body (`None`: a header, not in the body).
    pub byte_offset: Option<usize>,
    /// The earlier request's bytes there.
    pub earlier: Around,
    /// The later request's.
    pub later: Around,
}

/// One change of the verdict.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeFacts {
    /// Its cause.
    pub cause: String,
    /// The cause as a sentence.
    pub detail: String,
    /// Where.
    pub place: String,
    /// The JSON path in the later body.
    pub json_path: String,
    /// The byte offset in the later body.
    pub byte_offset: usize,
}

/// A top-level field, compared as bytes.
#[derive(Debug, Clone, Serialize)]
pub struct FieldFacts {
    /// Its name.
    pub name: String,
    /// `equal`, `extended` (the later's bytes start with the earlier's but for its closing
    /// bracket), `changed`, `added`, `removed`, or `sent` (no predecessor).
    pub status: &'static str,
}

/// One element, side by side.
#[derive(Debug, Clone, Serialize)]
pub struct BlockRow {
    /// `tools`, `system` or `messages`: the engine's groups, in the provider's cache order.
    pub group: &'static str,
    /// Its index in its group.
    pub index: usize,
    /// The tool's name or the message's role (the later's, else the earlier's).
    pub label: String,
    /// The earlier request's element hash (short hex), if it has the element.
    pub earlier: Option<String>,
    /// The later request's.
    pub later: Option<String>,
    /// `equal`, `differs` (another hash as compared), `added`, `removed`, or `sent` (no
    /// predecessor).
    pub status: &'static str,
}

/// Both requests' elements.
#[derive(Debug, Clone, Serialize)]
pub struct Blocks {
    /// The rows, in the provider's order (tools, system, messages), at most
    /// [`MAX_BLOCKS`] per group.
    pub rows: Vec<BlockRow>,
    /// The first element the engine's changes name (`messages[0]`), in that order.
    pub first_difference: Option<String>,
    /// Elements not listed (past the bound).
    pub unlisted: usize,
}

/// The session.
#[derive(Debug, Clone, Serialize)]
pub struct SessionFacts {
    /// Its key (bounded).
    pub id: String,
    /// Where it came from.
    pub source: SessionSource,
}

/// The agent, as its user-agent header names it.
#[derive(Debug, Clone, Serialize)]
pub struct AgentFacts {
    /// The header (bounded).
    pub user_agent: String,
    /// Its first product's name.
    pub name: String,
    /// Its first product's version, when it has one.
    pub version: Option<String>,
}

/// How the report was redacted.
#[derive(Debug, Clone, Serialize)]
pub struct Redaction {
    /// Credential values hidden in the two bodies.
    pub credentials_hidden: usize,
    /// Letters and digits of the excerpts replaced ([`EvidenceRequest::redact_text`]).
    pub text_redacted: bool,
    /// Bytes shown before and from the divergence, per side.
    pub excerpt_bytes: [usize; 2],
}

/// Who produced the report.
#[derive(Debug, Clone, Serialize)]
pub struct Producer {
    /// The program and its version (`cacheline 0.1.0`).
    pub cacheline: String,
    /// The command that produced it.
    pub command: String,
}

/// Everything the report says: the Markdown and the JSON are two views of it (schema 1).
#[derive(Debug, Clone, Serialize)]
pub struct Evidence {
    /// The format of this JSON.
    pub schema: u32,
    /// The log, as named.
    pub log: String,
    /// The request's line.
    pub line: u64,
    /// The verdict sentence (`cacheline audit`'s and the proxy's).
    pub verdict: String,
    /// The cause, `None` when the request extends its predecessor.
    pub cause: Option<String>,
    /// The cause as a sentence.
    pub cause_detail: Option<String>,
    /// Where: the cause's change's place.
    pub place: Option<String>,
    /// Its JSON path in the later body.
    pub json_path: Option<String>,
    /// Tokens lost.
    pub tokens_lost: u64,
    /// Tokens the provider's rule says should have been read from the cache.
    pub expected_cached: u64,
    /// The first divergent byte and both sides around it.
    pub divergence: Option<FirstDivergence>,
    /// Every change of the verdict.
    pub changes: Vec<ChangeFacts>,
    /// The top-level fields.
    pub fields: Vec<FieldFacts>,
    /// The elements' hashes.
    pub blocks: Blocks,
    /// Seconds between the two requests.
    pub gap_secs: Option<f64>,
    /// The predecessor; `None`: a cold start.
    pub earlier: Option<Side>,
    /// The request.
    pub later: Side,
    /// The model.
    pub model: Option<String>,
    /// The lane (endpoint and model).
    pub lane: String,
    /// The session.
    pub session: SessionFacts,
    /// The agent and its version, from the user-agent header.
    pub agent: Option<AgentFacts>,
    /// Who wrote the change: a writer catalogue entry, or a learned volatile block.
    pub writer: Option<WriterFinding>,
    /// The provider's own verdict beside cacheline's, when the reply carried its cache
    /// diagnostics.
    pub provider_verdict: Option<ProviderVerdict>,
    /// The redaction.
    pub redaction: Redaction,
    /// Who produced it.
    pub produced_by: Producer,
    /// The credential values of both bodies, scrubbed once more from each printed whole.
    #[serde(skip)]
    pub(crate) redactor: Redactor,
}

/// The agent and version, as the writer catalogue reads them from the request's headers
/// (`user-agent`, else codex's `originator`), with the header as sent (bounded).
fn agent_of(headers: &[(String, String)]) -> Option<AgentFacts> {
    let id = AgentId::from_headers(headers)?;
    let ua = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("user-agent"))
        .map(|(_, v)| input::excerpt(v.trim(), MAX_LABEL).into_owned())
        .unwrap_or_default();
    Some(AgentFacts {
        user_agent: ua,
        name: id.name,
        version: id.version.map(|v| v.to_string()),
    })
}

fn path_without_query(path: Option<&str>) -> Option<String> {
    path.map(|p| {
        let p = p.split('?').next().unwrap_or(p);
        input::excerpt(p, MAX_LABEL).into_owned()
    })
}

/// A cause's quoted content (the start of text hoisted into the system field) redacted as
/// an excerpt.
fn redact_cause(cause: &mut prompt_engine::Cause, r: &Redactor) {
    if let prompt_engine::Cause::InsertAboveHistory {
        hoisted: Some(text),
        ..
    } = cause
    {
        *text = r.excerpt(text);
    }
}

/// The evidence of `request.line` of the log `open_log` opens (it is opened twice: once to
/// audit up to the line with `auditor`, a fresh one configured as `cacheline audit`'s, then
/// to read the line and its predecessor again).
pub fn collect<R: BufRead>(
    request: &EvidenceRequest,
    auditor: &mut Auditor<'_>,
    mut open_log: impl FnMut() -> Result<R, InputError>,
) -> Result<Evidence, EvidenceError> {
    let path = request.log.as_path();
    let (audit, held) = read::audit_up_to(path, request.line, auditor, open_log()?)?;
    let n = audit.line;
    let pred = audit.verdict.predecessor.as_ref().map(|p| p.tag);
    let texts =
        read::Lines::read_again(path, n, pred, auditor.config().max_line_bytes, open_log()?)?;
    let later = texts.reread(n, &held)?;
    let earlier = pred.map(|line| texts.reread(line, &held)).transpose()?;
    let later_c = later.canonical()?;
    let earlier_c = earlier.as_ref().map(read::Reread::canonical).transpose()?;
    let earlier_read = earlier.as_ref().zip(earlier_c.as_ref());
    let redactor = Redactor::new(
        std::iter::once(&later.masked).chain(earlier.as_ref().map(|r| &r.masked)),
        request.redact_text,
    );

    // The verdict sentence over the engine's excerpts, redacted as every other excerpt.
    let mut shown = audit.clone();
    for c in &mut shown.verdict.changes {
        // The engine cut its excerpts from the bodies as sent: the same bytes are taken from
        // the masked bodies, so no piece of a credential the window cuts through is shown.
        // A header's excerpt is its value, not a piece of a body (and headers are read
        // without credentials).
        if elements::in_body(&c.place) {
            let at = c.divergence.byte_offset;
            if let Some(r) = &earlier {
                c.divergence.excerpt.earlier = r.masked_excerpt(&c.divergence.excerpt.earlier, at);
            }
            c.divergence.excerpt.later = later.masked_excerpt(&c.divergence.excerpt.later, at);
        }
        c.divergence.excerpt.earlier = redactor.excerpt(&c.divergence.excerpt.earlier);
        c.divergence.excerpt.later = redactor.excerpt(&c.divergence.excerpt.later);
        redact_cause(&mut c.cause, &redactor);
    }
    if let Some(cause) = &mut shown.verdict.cause {
        redact_cause(cause, &redactor);
    }
    // From here on, the verdict as shown.
    let v = &shown.verdict;
    let cause_change = v
        .cause
        .as_ref()
        .and_then(|cause| v.changes.iter().find(|c| c.cause == *cause));
    let divergence = cause_change
        .map(|c| elements::first_divergence(c, (&later, &later_c), earlier_read, &redactor));
    let side = |r: &read::Reread<'_>| {
        let audited = held.get(&r.line);
        Side {
            line: r.line,
            path: path_without_query(r.logged.path.as_deref()),
            ts: r.logged.ts,
            tokens: audited.map_or(0, |a| a.tokens),
            usage: audited
                .and_then(|a| a.reported.as_ref())
                .map(UsageFacts::of),
        }
    };
    let changes = v
        .changes
        .iter()
        .map(|c| ChangeFacts {
            cause: c.cause.kind().as_str().to_owned(),
            detail: redactor.scrub(&c.cause.to_string()),
            place: c.place.to_string(),
            json_path: c.json_path.clone(),
            byte_offset: c.divergence.byte_offset,
        })
        .collect();
    Ok(Evidence {
        schema: 1,
        log: path.display().to_string(),
        line: n,
        verdict: redactor.scrub(&verdict_text(&shown)),
        cause: v.cause.as_ref().map(|c| c.kind().as_str().to_owned()),
        cause_detail: v.cause.as_ref().map(|c| redactor.scrub(&c.to_string())),
        place: cause_change.map(|c| c.place.to_string()),
        json_path: cause_change.map(|c| c.json_path.clone()),
        tokens_lost: v.tokens_lost,
        expected_cached: v.expected_cached,
        divergence,
        changes,
        fields: elements::fields(
            earlier.as_ref().map(|r| r.masked.text.as_str()),
            &later.masked.text,
        ),
        blocks: elements::blocks(earlier_c.as_ref(), &later_c, &v.changes),
        gap_secs: v.predecessor.as_ref().and_then(|p| p.gap_secs),
        earlier: earlier.as_ref().map(side),
        later: side(&later),
        model: v
            .model
            .as_deref()
            .map(|m| input::excerpt(m, MAX_LABEL).into_owned()),
        lane: input::excerpt(&v.lane, MAX_LABEL).into_owned(),
        session: SessionFacts {
            id: redactor.scrub(&v.session.id),
            source: v.session.source,
        },
        agent: agent_of(&later.logged.headers),
        writer: audit.writer.clone(),
        provider_verdict: audit.provider_verdict.clone(),
        redaction: Redaction {
            credentials_hidden: later.masked.hidden
                + earlier.as_ref().map_or(0, |r| r.masked.hidden),
            text_redacted: request.redact_text,
            excerpt_bytes: [BEFORE, AFTER],
        },
        produced_by: request.produced_by.clone(),
        redactor,
    })
}
