//! `cacheline evidence LOG --request N`: one request's verdict with its proof, as a Markdown
//! report and its JSON, redacted, to attach to an upstream issue.
//!
//! The log is audited up to line N by the same [`Auditor`] as `cacheline audit`; the
//! request's verdict names its predecessor (`predecessor.tag` is its line); both lines are
//! then read again (each at most the line cap) for what the verdict does not keep: the
//! bytes around the first divergence, the top-level fields, each element's hash as the
//! engine reads it ([`Canonical`]), the user-agent. Nothing is compared a second time:
//! cause, place, offset and every change are the engine's.
//!
//! The report is a list of sections ([`sections::SECTIONS`]), each a small function of
//! [`Evidence`]: a new fact is a field of [`Evidence`] and one function in that list.

mod redact;
mod sections;

use std::collections::{HashMap, VecDeque};
use std::error::Error;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};

use prompt_core::hash::Digest128;
use prompt_core::input;
use prompt_measure::audit::{
    DEFAULT_MAX_LINE_BYTES, Line, LineProblem, LineReader, Reported, RequestAudit, verdict_text,
};
use prompt_measure::logged::{LoggedRequest, read_request};
use prompt_measure::{AuditConfig, Auditor, O200kBase};
use prompt_registry::wire::engine::{Canonical, Change, Context, Place};
use serde::Serialize;

use redact::{Masked, Redactor, mask_credentials};

/// Bytes of each side shown before the first divergent byte.
const BEFORE: usize = 64;
/// Bytes of each side shown from the first divergent byte on.
const AFTER: usize = 96;
/// Elements listed per request (a longer request's are counted, not listed).
const MAX_BLOCKS: usize = 4096;
/// Top-level fields listed.
const MAX_FIELDS: usize = 256;
/// The longest user-agent, tool name, role or model shown.
const MAX_LABEL: usize = 160;

/// Arguments of `evidence`.
#[derive(Debug, clap::Args)]
pub(crate) struct EvidenceArgs {
    /// JSONL log as `cacheline audit` reads it (a file, not `-`: it is read twice).
    file: PathBuf,
    /// The request: its line in the log, from 1, as `cacheline audit` numbers lines (blank
    /// and skipped lines count).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    request: u64,
    /// Directory the report is written to, as evidence-line-N.md and evidence-line-N.json
    /// (default: the current directory).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print the JSON on standard output instead of writing the files.
    #[arg(long, conflicts_with_all = ["out", "stdout"])]
    json: bool,
    /// Print the Markdown on standard output instead of writing the files.
    #[arg(long, conflicts_with = "out")]
    stdout: bool,
    /// Replace the letters and digits of the excerpts with x and 0 (JSON punctuation kept):
    /// the structure shows, the content does not.
    #[arg(long)]
    redact_text: bool,
    /// JSON file overriding price multipliers, as `audit --prices`.
    #[arg(long)]
    prices: Option<PathBuf>,
    /// Earlier requests compared exactly with each new one, as `audit --window`.
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// Anthropic's per-model minimum cacheable prefix, in tokens, as `audit`.
    #[arg(long, default_value_t = 1024)]
    anthropic_min_tokens: usize,
    /// Longest line read, in bytes (default 32 MiB), as `audit --max-line-bytes`.
    #[arg(long, default_value_t = DEFAULT_MAX_LINE_BYTES, value_name = "N")]
    max_line_bytes: usize,
}

/// Why no evidence could be written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EvidenceError {
    /// Standard input was named: the log is read twice.
    #[error("{0}: evidence reads the log twice: give a file, not standard input")]
    Stdin(PathBuf),
    /// The log could not be opened.
    #[error("{0}")]
    Open(#[from] input::InputError),
    /// Reading failed.
    #[error("{path}:{line}: read error: {source}")]
    Read {
        /// The log.
        path: PathBuf,
        /// The line being read.
        line: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// The log has fewer lines.
    #[error("{path}:{line}: no such request: the log has {lines} line(s)")]
    OutOfRange {
        /// The log.
        path: PathBuf,
        /// The line asked for.
        line: u64,
        /// Lines in the log.
        lines: u64,
    },
    /// The line asked for is blank.
    #[error("{path}:{line}: a blank line, not a request")]
    Blank {
        /// The log.
        path: PathBuf,
        /// The line.
        line: u64,
    },
    /// The audit skipped the line asked for (or, on the second reading, its predecessor).
    #[error("{path}:{line}: the audit skips this line: {problem}")]
    Skipped {
        /// The log.
        path: PathBuf,
        /// The line.
        line: u64,
        /// Why, as the audit says it (bounded).
        problem: String,
    },
    /// The predecessor's line is no longer in the log (it changed between the readings).
    #[error(
        "{path}:{line}: the predecessor of line {of} is gone: the log changed while it was read"
    )]
    Gone {
        /// The log.
        path: PathBuf,
        /// The predecessor's line.
        line: u64,
        /// The request's line.
        of: u64,
    },
    /// A line read again is not the line audited.
    #[error(
        "{path}:{line}: the line is not the one audited: the log changed while it was read (give a log nothing rewrites meanwhile)"
    )]
    Changed {
        /// The log.
        path: PathBuf,
        /// The line.
        line: u64,
    },
    /// A report file could not be written.
    #[error("{path}: cannot write: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// What the audit says of a request besides its verdict, kept for the requests a later
/// one may name as its predecessor.
#[derive(Debug, Clone, Copy)]
struct Audited {
    tokens: u64,
    reported: Option<Reported>,
    /// The line's digest as audited: what is read again must be the same line.
    digest: Digest128,
}

/// The audit of line `n`, and what it said of the requests before it the engine could
/// still name as a predecessor (bounded by the engine's own bound).
fn audit_up_to(
    args: &EvidenceArgs,
    auditor: &mut Auditor<'_>,
) -> Result<(RequestAudit, HashMap<u64, Audited>), EvidenceError> {
    let path = &args.file;
    let n = args.request;
    let file = input::open(path)?;
    let cap = auditor.config().max_line_bytes;
    let held = auditor.config().engine.max_requests.max(1);
    let mut lines = LineReader::new(BufReader::with_capacity(1 << 20, file), cap);
    let mut recent: VecDeque<(u64, Audited)> = VecDeque::new();
    let skipped = |line, problem: &dyn std::fmt::Display| EvidenceError::Skipped {
        path: path.clone(),
        line,
        problem: input::excerpt(&problem.to_string(), 512).into_owned(),
    };
    loop {
        let line = lines.line_number().saturating_add(1);
        let next = lines.next_line().map_err(|source| EvidenceError::Read {
            path: path.clone(),
            line,
            source,
        })?;
        let Some(read) = next else {
            return Err(EvidenceError::OutOfRange {
                path: path.clone(),
                line: n,
                lines: line - 1,
            });
        };
        let digest = match &read {
            Line::Text(bytes) => Digest128::of(&[bytes]),
            Line::TooLong(_) => Digest128::of(&[]),
        };
        let outcome = auditor.push_read(line, read);
        match outcome {
            Ok(Some(audit)) if line == n => {
                let mut held: HashMap<u64, Audited> = recent.into_iter().collect();
                held.insert(
                    line,
                    Audited {
                        tokens: audit.tokens,
                        reported: audit.reported,
                        digest,
                    },
                );
                return Ok((audit, held));
            }
            Ok(Some(audit)) => {
                recent.push_back((
                    line,
                    Audited {
                        tokens: audit.tokens,
                        reported: audit.reported,
                        digest,
                    },
                ));
                if recent.len() > held {
                    recent.pop_front();
                }
            }
            Ok(None) if line == n => {
                return Err(EvidenceError::Blank {
                    path: path.clone(),
                    line,
                });
            }
            Err(problem) if line == n => return Err(skipped(line, &problem)),
            Ok(None) | Err(_) => {}
        }
    }
}

/// Checks that `text`, line `line` read again, is the line the audit read (when the audit
/// kept its digest).
fn same_line(
    held: &HashMap<u64, Audited>,
    path: &Path,
    line: u64,
    text: &str,
) -> Result<(), EvidenceError> {
    match held.get(&line) {
        Some(audited) if audited.digest != Digest128::of(&[text.as_bytes()]) => {
            Err(EvidenceError::Changed {
                path: path.to_owned(),
                line,
            })
        }
        _ => Ok(()),
    }
}

/// The text of lines `wanted` (each at most `cap` bytes), read again.
fn read_lines(
    path: &Path,
    wanted: &[u64],
    cap: usize,
) -> Result<HashMap<u64, String>, EvidenceError> {
    let file = input::open(path)?;
    let mut lines = LineReader::new(BufReader::with_capacity(1 << 20, file), cap);
    let last = wanted.iter().copied().max().unwrap_or(0);
    let mut found = HashMap::new();
    while lines.line_number() < last {
        let line = lines.line_number().saturating_add(1);
        let next = lines.next_line().map_err(|source| EvidenceError::Read {
            path: path.to_owned(),
            line,
            source,
        })?;
        match next {
            None => break,
            Some(Line::Text(_)) if wanted.contains(&line) => {
                let text =
                    String::from_utf8(lines.take_line()).map_err(|e| EvidenceError::Skipped {
                        path: path.to_owned(),
                        line,
                        problem: LineProblem::NotUtf8(e.utf8_error().valid_up_to()).to_string(),
                    })?;
                found.insert(line, text);
            }
            Some(_) => {}
        }
    }
    Ok(found)
}

/// One request as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Side {
    /// Its line in the log.
    pub(crate) line: u64,
    /// The URL path without its query, when logged.
    pub(crate) path: Option<String>,
    /// When it was sent (seconds since the epoch), when logged.
    pub(crate) ts: Option<f64>,
    /// Its input tokens by the audit's tokenizer.
    pub(crate) tokens: u64,
    /// The usage its response reported.
    pub(crate) usage: Option<UsageFacts>,
}

/// Reported usage.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct UsageFacts {
    /// Whose usage shape it was read as.
    pub(crate) provider: String,
    /// Input tokens in all.
    pub(crate) input: u64,
    /// Read from the cache.
    pub(crate) cached: u64,
    /// Written to the cache.
    pub(crate) written: u64,
    /// Neither.
    pub(crate) uncached: u64,
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
pub(crate) struct Around {
    /// Its line.
    pub(crate) line: u64,
    /// The offset in that body (`None`: not placed in it; `from` is then the engine's
    /// excerpt of the changed value or element).
    pub(crate) byte_offset: Option<usize>,
    /// Up to [`BEFORE`] bytes before it.
    pub(crate) before: String,
    /// Up to [`AFTER`] bytes from it on.
    pub(crate) from: String,
}

/// The first divergent byte.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FirstDivergence {
    /// The offset in the later body (`None`: a header, not in the body).
    pub(crate) byte_offset: Option<usize>,
    /// The earlier request's bytes there.
    pub(crate) earlier: Around,
    /// The later request's.
    pub(crate) later: Around,
}

/// One change of the verdict.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChangeFacts {
    /// Its cause.
    pub(crate) cause: String,
    /// The cause as a sentence.
    pub(crate) detail: String,
    /// Where.
    pub(crate) place: String,
    /// The JSON path in the later body.
    pub(crate) json_path: String,
    /// The byte offset in the later body.
    pub(crate) byte_offset: usize,
}

/// A top-level field, compared as bytes.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FieldFacts {
    /// Its name.
    pub(crate) name: String,
    /// `equal`, `extended` (the later's bytes start with the earlier's but for its closing
    /// bracket), `changed`, `added`, `removed`, or `sent` (no predecessor).
    pub(crate) status: &'static str,
}

/// One element, side by side.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct BlockRow {
    /// `tools`, `system` or `messages`.
    pub(crate) group: &'static str,
    /// Its index in its group.
    pub(crate) index: usize,
    /// The tool's name or the message's role (the later's, else the earlier's).
    pub(crate) label: String,
    /// The earlier request's element hash (short hex), if it has the element.
    pub(crate) earlier: Option<String>,
    /// The later request's.
    pub(crate) later: Option<String>,
    /// `equal`, `differs`, `added`, `removed`, or `sent` (no predecessor).
    pub(crate) status: &'static str,
}

/// Both requests' elements.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Blocks {
    /// The rows, in the provider's order (tools, system, messages), at most
    /// [`MAX_BLOCKS`] per group.
    pub(crate) rows: Vec<BlockRow>,
    /// The first row that differs (`messages[0]`), in that order.
    pub(crate) first_difference: Option<String>,
    /// Elements not listed (past the bound).
    pub(crate) unlisted: usize,
}

/// The session.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SessionFacts {
    /// Its key (bounded).
    pub(crate) id: String,
    /// Where it came from.
    pub(crate) source: prompt_registry::wire::engine::SessionSource,
}

/// The agent, as its user-agent header names it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AgentFacts {
    /// The header (bounded).
    pub(crate) user_agent: String,
    /// Its first product's name.
    pub(crate) name: String,
    /// Its first product's version, when it has one.
    pub(crate) version: Option<String>,
}

/// How the report was redacted.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Redaction {
    /// Credential values hidden in the two bodies.
    pub(crate) credentials_hidden: usize,
    /// `--redact-text`.
    pub(crate) text_redacted: bool,
    /// Bytes shown before and from the divergence, per side.
    pub(crate) excerpt_bytes: [usize; 2],
}

/// Who produced the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Producer {
    /// `cacheline` and its version.
    pub(crate) cacheline: String,
    /// The command that produced it.
    pub(crate) command: String,
}

/// Everything the report says: the Markdown and the JSON are two views of it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Evidence {
    /// The format of this JSON.
    pub(crate) schema: u32,
    /// The log, as named.
    pub(crate) log: String,
    /// The request's line.
    pub(crate) line: u64,
    /// The verdict sentence (`cacheline audit`'s and the proxy's).
    pub(crate) verdict: String,
    /// The cause, `None` when the request extends its predecessor.
    pub(crate) cause: Option<String>,
    /// The cause as a sentence.
    pub(crate) cause_detail: Option<String>,
    /// Where: the cause's change's place and JSON path.
    pub(crate) place: Option<String>,
    /// Its JSON path in the later body.
    pub(crate) json_path: Option<String>,
    /// Tokens lost.
    pub(crate) tokens_lost: u64,
    /// Tokens the provider's rule says should have been read from the cache.
    pub(crate) expected_cached: u64,
    /// The first divergent byte and both sides around it.
    pub(crate) divergence: Option<FirstDivergence>,
    /// Every change of the verdict.
    pub(crate) changes: Vec<ChangeFacts>,
    /// The top-level fields.
    pub(crate) fields: Vec<FieldFacts>,
    /// The elements' hashes.
    pub(crate) blocks: Blocks,
    /// Seconds between the two requests.
    pub(crate) gap_secs: Option<f64>,
    /// The predecessor; `None`: a cold start.
    pub(crate) earlier: Option<Side>,
    /// The request.
    pub(crate) later: Side,
    /// The model.
    pub(crate) model: Option<String>,
    /// The lane (endpoint and model).
    pub(crate) lane: String,
    /// The session.
    pub(crate) session: SessionFacts,
    /// The agent and its version, from the user-agent header.
    pub(crate) agent: Option<AgentFacts>,
    /// Who wrote the change: a writer catalogue entry, or a learned volatile block.
    pub(crate) writer: Option<prompt_measure::catalogue::WriterFinding>,
    /// The provider's own verdict beside cacheline's, when the reply carried its cache
    /// diagnostics.
    pub(crate) provider_verdict: Option<prompt_measure::provider_verdict::ProviderVerdict>,
    /// The redaction.
    pub(crate) redaction: Redaction,
    /// Who produced it.
    pub(crate) produced_by: Producer,
}

/// A request read again: its logged parts and its body masked.
struct Reread<'t> {
    logged: LoggedRequest<'t>,
    masked: Masked,
}

/// The agent and version, as the writer catalogue reads them from the request's headers
/// (`user-agent`, else codex's `originator`), with the header as sent (bounded).
fn agent_of(headers: &[(String, String)]) -> Option<AgentFacts> {
    let id = prompt_measure::catalogue::AgentId::from_headers(headers)?;
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

/// `body[offset - BEFORE .. offset]` and `body[offset .. offset + AFTER]`, at character
/// boundaries.
fn around(body: &str, offset: usize) -> (String, String) {
    let at = body.floor_char_boundary(offset.min(body.len()));
    let start = body.floor_char_boundary(at.saturating_sub(BEFORE));
    let end = body.floor_char_boundary(at.saturating_add(AFTER).min(body.len()));
    (body[start..at].to_owned(), body[at..end].to_owned())
}

/// Where the element a change names starts in a body, and its length.
fn element_span(c: &Canonical<'_>, place: &Place) -> Option<(usize, usize)> {
    let block = match place {
        Place::Tools { index } => c.tools.get(*index).map(|t| t.block)?,
        Place::System { block } => *c.system.get(*block)?,
        Place::Message { index, block } => {
            let m = c.messages.iter().find(|m| m.index as usize == *index)?;
            match block {
                Some(b) => *c.content_of(m).get(*b)?,
                None => m.block,
            }
        }
        _ => return None,
    };
    Some((block.start as usize, block.len as usize))
}

/// A cause's quoted content (the start of text hoisted into the system field) redacted as
/// an excerpt.
fn redact_cause(cause: &mut prompt_registry::wire::engine::Cause, r: &Redactor) {
    use prompt_registry::wire::engine::Cause;
    if let Cause::InsertAboveHistory {
        hoisted: Some(text),
        ..
    } = cause
    {
        *text = r.excerpt(text);
    }
}

/// A short hex of an element hash.
fn short(hash: u64) -> String {
    format!("{:08x}", hash >> 32)
}

/// The rows of one group.
fn group_rows(
    group: &'static str,
    earlier: Option<Vec<(u64, String)>>,
    later: Vec<(u64, String)>,
    rows: &mut Vec<BlockRow>,
    unlisted: &mut usize,
) {
    let earlier_len = earlier.as_ref().map_or(0, Vec::len);
    let len = later.len().max(earlier_len);
    for i in 0..len {
        if i >= MAX_BLOCKS {
            *unlisted += len - i;
            break;
        }
        let e = earlier.as_ref().and_then(|e| e.get(i));
        let l = later.get(i);
        let status = match (e, l) {
            (Some(e), Some(l)) if e.0 == l.0 => "equal",
            (Some(_), Some(_)) => "differs",
            (None, _) if earlier.is_none() => "sent",
            (None, _) => "added",
            (Some(_), None) => "removed",
        };
        let label = l.or(e).map(|x| x.1.clone()).unwrap_or_default();
        rows.push(BlockRow {
            group,
            index: i,
            label,
            earlier: e.map(|x| short(x.0)),
            later: l.map(|x| short(x.0)),
            status,
        });
    }
}

fn blocks_of(c: &Canonical<'_>) -> [Vec<(u64, String)>; 3] {
    let label = |s: &str| input::excerpt(s, MAX_LABEL).into_owned();
    [
        c.tools
            .iter()
            .map(|t| (t.block.hash, label(&t.name)))
            .collect(),
        c.system.iter().map(|b| (b.hash, String::new())).collect(),
        c.messages
            .iter()
            .map(|m| (m.block.hash, label(c.role(m))))
            .collect(),
    ]
}

fn blocks(earlier: Option<&Canonical<'_>>, later: &Canonical<'_>) -> Blocks {
    let mut rows = Vec::new();
    let mut unlisted = 0;
    let mut e = earlier
        .map(blocks_of)
        .map(|[a, b, c]| [Some(a), Some(b), Some(c)]);
    let [lt, ls, lm] = blocks_of(later);
    for (i, (group, l)) in [("tools", lt), ("system", ls), ("messages", lm)]
        .into_iter()
        .enumerate()
    {
        let e = e.as_mut().and_then(|e| e[i].take());
        group_rows(group, e, l, &mut rows, &mut unlisted);
    }
    // The first element the cache cannot reuse: one that differs or is gone, or a tool or
    // system block added before the messages.
    let first_difference = rows
        .iter()
        .find(|r| {
            matches!(r.status, "differs" | "removed")
                || (r.status == "added" && r.group != "messages")
        })
        .map(|r| format!("{}[{}]", r.group, r.index));
    Blocks {
        rows,
        first_difference,
        unlisted,
    }
}

/// The top-level fields of two bodies, compared as bytes.
fn fields(earlier: Option<&str>, later: &str) -> Vec<FieldFacts> {
    use prompt_core::raw_json::Object;
    let parse = |text: &str| -> Vec<(String, String)> {
        Object::parse(text)
            .map(|o| {
                o.fields
                    .iter()
                    .map(|(k, v)| {
                        (
                            input::excerpt(k, MAX_LABEL).into_owned(),
                            v.get().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let l = parse(later);
    let Some(earlier) = earlier else {
        return l
            .into_iter()
            .take(MAX_FIELDS)
            .map(|(name, _)| FieldFacts {
                name,
                status: "sent",
            })
            .collect();
    };
    let e = parse(earlier);
    let mut out: Vec<FieldFacts> = l
        .iter()
        .map(|(name, lv)| {
            let status = match e.iter().find(|(k, _)| k == name) {
                None => "added",
                Some((_, ev)) if ev == lv => "equal",
                Some((_, ev)) => {
                    let open = ev.strip_suffix([']', '}', '"']).unwrap_or(ev);
                    if ev.len() > 1 && lv.starts_with(open) {
                        "extended"
                    } else {
                        "changed"
                    }
                }
            };
            FieldFacts {
                name: name.clone(),
                status,
            }
        })
        .collect();
    out.extend(
        e.iter()
            .filter(|(k, _)| !l.iter().any(|(n, _)| n == k))
            .map(|(name, _)| FieldFacts {
                name: name.clone(),
                status: "removed",
            }),
    );
    out.truncate(MAX_FIELDS);
    out
}

fn path_without_query(path: Option<&str>) -> Option<String> {
    path.map(|p| {
        let p = p.split('?').next().unwrap_or(p);
        input::excerpt(p, MAX_LABEL).into_owned()
    })
}

/// The engine's view of a request read again, as the audit read it (its path and headers).
fn canonical_of<'r>(
    r: &'r Reread<'_>,
    path: &Path,
    line: u64,
) -> Result<Canonical<'r>, EvidenceError> {
    Canonical::read(
        r.logged.body.as_bytes(),
        Context {
            path: r.logged.path.as_deref(),
            headers: &r.logged.headers,
        },
    )
    .map_err(|e| EvidenceError::Skipped {
        path: path.to_owned(),
        line,
        problem: input::excerpt(&e.to_string(), 512).into_owned(),
    })
}

/// One request read again: its line, its bytes, the engine's view of them.
type Read<'a, 'r> = (u64, &'a Reread<'r>, &'a Canonical<'a>);

/// The bytes of both sides around the change `c` names: for a tool, a system block or a
/// message, the body's bytes at its offset in the later body, and at the same offset into
/// the same element in the earlier body; for a value (a parameter, the model, a header),
/// the engine's excerpt of it on each side (a header is not in the body: no offset).
fn first_divergence(
    c: &Change,
    (n, later, later_c): Read<'_, '_>,
    earlier: Option<Read<'_, '_>>,
    redactor: &Redactor,
) -> FirstDivergence {
    let offset = c.divergence.byte_offset;
    let in_body = !matches!(c.place, Place::Header { .. } | Place::Request);
    let placed = earlier.and_then(|(line, er, ec)| {
        let (ls, _) = element_span(later_c, &c.place)?;
        let (es, elen) = element_span(ec, &c.place)?;
        let at = es + offset.checked_sub(ls)?.min(elen);
        Some((line, at, around(&er.masked.text, at)))
    });
    let engine = |line: u64, text: &str, at: Option<usize>| Around {
        line,
        byte_offset: at,
        before: String::new(),
        from: redactor.excerpt(text),
    };
    let earlier_line = earlier.map_or(0, |(line, _, _)| line);
    let (earlier_side, later_side) = match placed {
        Some((line, at, (before, from))) => {
            let (l_before, l_from) = around(&later.masked.text, offset);
            (
                Around {
                    line,
                    byte_offset: Some(at),
                    before: redactor.excerpt(&before),
                    from: redactor.excerpt(&from),
                },
                Around {
                    line: n,
                    byte_offset: Some(offset),
                    before: redactor.excerpt(&l_before),
                    from: redactor.excerpt(&l_from),
                },
            )
        }
        None => (
            engine(earlier_line, &c.divergence.excerpt.earlier, None),
            engine(n, &c.divergence.excerpt.later, in_body.then_some(offset)),
        ),
    };
    FirstDivergence {
        byte_offset: in_body.then_some(offset),
        earlier: earlier_side,
        later: later_side,
    }
}

/// The command line that produces this report (the options that change it).
fn command_of(args: &EvidenceArgs) -> String {
    let mut cmd = format!(
        "cacheline evidence {} --request {}",
        args.file.display(),
        args.request
    );
    if args.redact_text {
        cmd.push_str(" --redact-text");
    }
    if let Some(p) = &args.prices {
        cmd.push_str(&format!(" --prices {}", p.display()));
    }
    if args.window != 32 {
        cmd.push_str(&format!(" --window {}", args.window));
    }
    if args.anthropic_min_tokens != 1024 {
        cmd.push_str(&format!(
            " --anthropic-min-tokens {}",
            args.anthropic_min_tokens
        ));
    }
    if args.max_line_bytes != DEFAULT_MAX_LINE_BYTES {
        cmd.push_str(&format!(" --max-line-bytes {}", args.max_line_bytes));
    }
    cmd
}

/// How far from the divergence an engine excerpt is looked for in its body.
const EXCERPT_SEARCH: usize = 512;

/// `excerpt`, a piece of `raw` near byte `near`, as the same bytes of `masked` (`raw` with
/// its credential values starred, byte for byte); when it is not found there, every byte
/// of it that is not JSON punctuation is starred: an excerpt is never shown unmasked.
fn masked_excerpt(raw: &str, masked: &str, excerpt: &str, near: usize) -> String {
    if excerpt.is_empty() {
        return String::new();
    }
    let lo = near.saturating_sub(EXCERPT_SEARCH + excerpt.len());
    let hi = near
        .saturating_add(EXCERPT_SEARCH + excerpt.len())
        .min(raw.len());
    let found = (raw.len() == masked.len())
        .then(|| raw.get(lo..hi))
        .flatten()
        .and_then(|window| window.find(excerpt))
        .map(|i| lo + i);
    match found.and_then(|start| masked.get(start..start + excerpt.len())) {
        Some(m) => m.to_owned(),
        None => excerpt
            .chars()
            .map(|c| {
                if c.is_ascii_punctuation() || c.is_whitespace() {
                    c
                } else {
                    '*'
                }
            })
            .collect(),
    }
}

/// The evidence of `args.request`.
pub(crate) fn collect(
    args: &EvidenceArgs,
    auditor: &mut Auditor<'_>,
) -> Result<(Evidence, Redactor), EvidenceError> {
    let path = &args.file;
    let (audit, held) = audit_up_to(args, auditor)?;
    let n = audit.line;
    let v = &audit.verdict;
    let pred = v.predecessor.as_ref().map(|p| p.tag);
    let wanted: Vec<u64> = std::iter::once(n).chain(pred).collect();
    let texts = read_lines(path, &wanted, auditor.config().max_line_bytes)?;
    let reread = |line: u64| -> Result<Reread<'_>, EvidenceError> {
        let text = texts.get(&line).ok_or_else(|| EvidenceError::Gone {
            path: path.clone(),
            line,
            of: n,
        })?;
        same_line(&held, path, line, text)?;
        let logged = read_request(text).map_err(|p| EvidenceError::Skipped {
            path: path.clone(),
            line,
            problem: input::excerpt(&p.to_string(), 512).into_owned(),
        })?;
        let masked = mask_credentials(&logged.body);
        Ok(Reread { logged, masked })
    };
    let later = reread(n)?;
    let earlier = pred.map(reread).transpose()?;
    let later_c = canonical_of(&later, path, n)?;
    let earlier_c = match (&earlier, pred) {
        (Some(r), Some(line)) => Some((line, r, canonical_of(r, path, line)?)),
        _ => None,
    };
    let redactor = Redactor::new(
        std::iter::once(&later.masked).chain(earlier.as_ref().map(|r| &r.masked)),
        args.redact_text,
    );

    // The verdict sentence over the engine's excerpts, redacted as every other excerpt.
    let mut shown = audit.clone();
    for c in &mut shown.verdict.changes {
        // The engine cut its excerpts from the bodies as sent: the same bytes are taken from
        // the masked bodies, so no piece of a credential the window cuts through is shown.
        let at = c.divergence.byte_offset;
        // A header's excerpt is its value, not a piece of a body (and headers are read
        // without credentials).
        let in_body = !matches!(c.place, Place::Header { .. } | Place::Request);
        if in_body {
            if let Some(r) = &earlier {
                c.divergence.excerpt.earlier = masked_excerpt(
                    &r.logged.body,
                    &r.masked.text,
                    &c.divergence.excerpt.earlier,
                    at,
                );
            }
            c.divergence.excerpt.later = masked_excerpt(
                &later.logged.body,
                &later.masked.text,
                &c.divergence.excerpt.later,
                at,
            );
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

    let divergence = cause_change.map(|c| {
        let earlier = earlier_c.as_ref().map(|(line, r, c)| (*line, *r, c));
        first_divergence(c, (n, &later, &later_c), earlier, &redactor)
    });

    let side = |line: u64, r: &Reread<'_>, tokens: u64, reported: Option<&Reported>| Side {
        line,
        path: path_without_query(r.logged.path.as_deref()),
        ts: r.logged.ts,
        tokens,
        usage: reported.map(UsageFacts::of),
    };
    let earlier_side = match (&earlier, pred) {
        (Some(r), Some(line)) => {
            let facts = held.get(&line);
            Some(side(
                line,
                r,
                facts.map_or(0, |f| f.tokens),
                facts.and_then(|f| f.reported.as_ref()),
            ))
        }
        _ => None,
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
        fields: fields(
            earlier.as_ref().map(|r| r.masked.text.as_str()),
            &later.masked.text,
        ),
        blocks: blocks(earlier_c.as_ref().map(|(_, _, c)| c), &later_c),
        gap_secs: v.predecessor.as_ref().and_then(|p| p.gap_secs),
        earlier: earlier_side,
        later: side(n, &later, audit.tokens, audit.reported.as_ref()),
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
            text_redacted: args.redact_text,
            excerpt_bytes: [BEFORE, AFTER],
        },
        produced_by: Producer {
            cacheline: format!("cacheline {}", env!("CARGO_PKG_VERSION")),
            command: command_of(args),
        },
    })
    .map(|e| (e, redactor))
}

/// `value` with every string scrubbed of the credential values: the last safety net over
/// the JSON as written.
fn scrub_value(value: serde_json::Value, r: &Redactor) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(r.scrub_whole(&s)),
        Value::Array(a) => Value::Array(a.into_iter().map(|v| scrub_value(v, r)).collect()),
        Value::Object(o) => Value::Object(
            o.into_iter()
                .map(|(k, v)| (r.scrub_whole(&k), scrub_value(v, r)))
                .collect(),
        ),
        other => other,
    }
}

/// The report's two files: the Markdown and the JSON, each scrubbed once more as a whole.
fn render(e: &Evidence, r: &Redactor) -> Result<(String, String), serde_json::Error> {
    let markdown = r.scrub_whole(&sections::markdown(e));
    let json = scrub_value(serde_json::to_value(e)?, r);
    let mut json = serde_json::to_string_pretty(&json)?;
    json.push('\n');
    Ok((markdown, json))
}

pub(crate) fn run(
    args: &EvidenceArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    if args.file.as_os_str() == "-" {
        return Err(EvidenceError::Stdin(args.file.clone()).into());
    }
    let Some(prices) = crate::output::load_prices(args.prices.as_deref(), err) else {
        return Ok(2);
    };
    let mut config = AuditConfig::default()
        .with_prices(prices)
        .with_max_line_bytes(args.max_line_bytes);
    config.sim.window = args.window.max(1);
    config.sim.anthropic.min_tokens = args.anthropic_min_tokens;
    let tokenizer = O200kBase::shared()?;
    let mut auditor = Auditor::new(tokenizer, config);
    let (evidence, redactor) = collect(args, &mut auditor)?;
    let (markdown, json) = render(&evidence, &redactor)?;
    if args.json {
        out.write_all(json.as_bytes())?;
        return Ok(0);
    }
    if args.stdout {
        out.write_all(markdown.as_bytes())?;
        return Ok(0);
    }
    let dir = args.out.clone().unwrap_or_else(|| PathBuf::from("."));
    for (ext, text) in [("md", &markdown), ("json", &json)] {
        let path = dir.join(format!("evidence-line-{}.{ext}", evidence.line));
        std::fs::write(&path, text).map_err(|source| EvidenceError::Write {
            path: path.clone(),
            source,
        })?;
        writeln!(out, "{}", path.display())?;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use prompt_core::hash::Digest128;

    use super::{Audited, EvidenceError, same_line};

    #[test]
    fn a_line_read_again_must_be_the_line_audited() {
        let audited = r#"{"request":{"model":"m","messages":[]}}"#;
        let held = HashMap::from([(
            3,
            Audited {
                tokens: 1,
                reported: None,
                digest: Digest128::of(&[audited.as_bytes()]),
            },
        )]);
        let log = Path::new("log.jsonl");
        assert!(same_line(&held, log, 3, audited).is_ok());
        let rewritten = r#"{"request":{"model":"n","messages":[]}}"#;
        let result = same_line(&held, log, 3, rewritten);
        assert!(
            matches!(&result, Err(EvidenceError::Changed { line: 3, .. })),
            "{result:?}"
        );
        let message = result.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.starts_with("log.jsonl:3: the line is not the one audited"),
            "{message}"
        );
    }
}
