//! The log read twice: audited up to line N (remembering what the audit said of the
//! requests the engine could still name as a predecessor), then the line and its
//! predecessor read again, each checked to be the line audited.

use std::collections::{HashMap, VecDeque};
use std::io::BufRead;
use std::path::Path;

use prompt_core::hash::Digest128;
use prompt_engine::{Canonical, Context};

use super::redact::{Masked, mask_credentials};
use super::{EvidenceError, LineFault};
use crate::audit::{Auditor, Line, LineProblem, LineReader, Reported, RequestAudit};
use crate::logged::{LoggedRequest, read_request};

/// What the audit says of a request besides its verdict, kept for the requests a later
/// one may name as its predecessor.
#[derive(Debug, Clone, Copy)]
pub(super) struct Audited {
    pub(super) tokens: u64,
    pub(super) reported: Option<Reported>,
    /// The line's digest as audited: what is read again must be the same line.
    digest: Digest128,
}

/// The next line of `lines` (of the log named `path`), with its number.
fn next_line<'l, R: BufRead>(
    lines: &'l mut LineReader<R>,
    path: &Path,
) -> Result<(u64, Option<Line<'l>>), EvidenceError> {
    let line = lines.line_number().saturating_add(1);
    let next = lines
        .next_line()
        .map_err(|e| EvidenceError::at(path, line, LineFault::Read(e)))?;
    Ok((line, next))
}

/// The audit of line `n` of `log` (named `path`), and what it said of the requests before
/// it the engine could still name as a predecessor (bounded by the engine's own bound).
pub(super) fn audit_up_to(
    path: &Path,
    n: u64,
    auditor: &mut Auditor<'_>,
    log: impl BufRead,
) -> Result<(RequestAudit, HashMap<u64, Audited>), EvidenceError> {
    let held = auditor.config().engine.max_requests.max(1);
    let mut lines = LineReader::new(log, auditor.config().max_line_bytes);
    let mut recent: VecDeque<(u64, Audited)> = VecDeque::new();
    loop {
        let (line, next) = next_line(&mut lines, path)?;
        let Some(read) = next else {
            return Err(EvidenceError::at(path, n, LineFault::OutOfRange(line - 1)));
        };
        let digest = match &read {
            Line::Text(bytes) => Digest128::of(&[bytes]),
            Line::TooLong(_) => Digest128::of(&[]),
        };
        match auditor.push_read(line, read) {
            Ok(Some(audit)) => {
                let audited = Audited {
                    tokens: audit.tokens,
                    reported: audit.reported,
                    digest,
                };
                if line == n {
                    let mut held: HashMap<u64, Audited> = recent.into_iter().collect();
                    held.insert(line, audited);
                    return Ok((audit, held));
                }
                recent.push_back((line, audited));
                if recent.len() > held {
                    recent.pop_front();
                }
            }
            Ok(None) if line == n => {
                return Err(EvidenceError::at(path, line, LineFault::Blank));
            }
            Err(problem) if line == n => return Err(EvidenceError::skipped(path, line, &problem)),
            Ok(None) | Err(_) => {}
        }
    }
}

/// The request's line and its predecessor's, read again.
pub(super) struct Lines<'p> {
    path: &'p Path,
    of: u64,
    texts: HashMap<u64, String>,
}

impl<'p> Lines<'p> {
    /// Lines `of` and `predecessor` of `log` (each at most `cap` bytes).
    pub(super) fn read_again(
        path: &'p Path,
        of: u64,
        predecessor: Option<u64>,
        cap: usize,
        log: impl BufRead,
    ) -> Result<Self, EvidenceError> {
        let mut lines = LineReader::new(log, cap);
        let last = predecessor.map_or(of, |p| p.max(of));
        let mut texts = HashMap::new();
        while lines.line_number() < last {
            match next_line(&mut lines, path)? {
                (_, None) => break,
                (line, Some(Line::Text(_))) if line == of || Some(line) == predecessor => {
                    let text = String::from_utf8(lines.take_line()).map_err(|e| {
                        let problem = LineProblem::NotUtf8(e.utf8_error().valid_up_to());
                        EvidenceError::skipped(path, line, &problem)
                    })?;
                    texts.insert(line, text);
                }
                _ => {}
            }
        }
        Ok(Self { path, of, texts })
    }

    /// Line `line` as the audit read it (its digest checked against `held`), its credentials
    /// masked.
    pub(super) fn reread(
        &self,
        line: u64,
        held: &HashMap<u64, Audited>,
    ) -> Result<Reread<'_>, EvidenceError> {
        let text = self
            .texts
            .get(&line)
            .ok_or_else(|| EvidenceError::at(self.path, line, LineFault::Gone(self.of)))?;
        if held
            .get(&line)
            .is_some_and(|audited| audited.digest != Digest128::of(&[text.as_bytes()]))
        {
            return Err(EvidenceError::at(self.path, line, LineFault::Changed));
        }
        let logged = read_request(text).map_err(|p| EvidenceError::skipped(self.path, line, &p))?;
        let masked = mask_credentials(&logged.body);
        Ok(Reread {
            log: self.path,
            line,
            logged,
            masked,
        })
    }
}

/// A request read again: its line, its logged parts and its body masked.
pub(super) struct Reread<'t> {
    /// The log it was read from.
    log: &'t Path,
    pub(super) line: u64,
    pub(super) logged: LoggedRequest<'t>,
    pub(super) masked: Masked,
}

/// How far from the divergence an engine excerpt is looked for in its body.
const EXCERPT_SEARCH: usize = 512;

impl Reread<'_> {
    /// The engine's view of the request, as the audit read it (with its path and headers).
    pub(super) fn canonical(&self) -> Result<Canonical<'_>, EvidenceError> {
        let context = Context {
            path: self.logged.path.as_deref(),
            headers: &self.logged.headers,
        };
        Canonical::read(self.logged.body.as_bytes(), context)
            .map_err(|e| EvidenceError::skipped(self.log, self.line, &e))
    }

    /// `excerpt`, a piece of the body near byte `near`, as the same bytes of the masked body
    /// (credential values starred, byte for byte); when it is not found there, every byte
    /// of it that is not JSON punctuation is starred: an excerpt is never shown unmasked.
    pub(super) fn masked_excerpt(&self, excerpt: &str, near: usize) -> String {
        if excerpt.is_empty() {
            return String::new();
        }
        let (raw, masked) = (self.logged.body.as_ref(), self.masked.text.as_str());
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
}
