//! # cacheline-import
//!
//! Reads the session stores coding agents already keep — Claude Code, Codex CLI, Gemini
//! CLI, Qwen Code, opencode — read-only, and tells per request, session, project and day
//! what the prompt cache read, wrote and cost, and where it broke and why: the audit's own
//! verdict where the store holds the request (Claude Code 2.1.332+), what the usage proves
//! elsewhere ([`analysis`]). `cacheline import` is this crate on the command line.
//!
//! ```no_run
//! use cacheline_import::{Options, discover, import};
//! let home = std::path::Path::new("/home/me");
//! let sources = discover::in_home(home, &[]);
//! let report = import(&sources, &Options::default(), &mut |_| {});
//! println!("{}", report.text(5));
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod agents;
pub mod analysis;
pub mod discover;
pub mod error;
pub mod html;
mod json;
pub mod lines;
pub mod report;
pub mod store;
pub mod time;

pub use agents::Limits;
pub use analysis::{Moment, Pricing, RequestRow, SessionReport};
pub use discover::Source;
pub use error::ImportError;
pub use report::{Group, Report, Totals};
pub use store::{Agent, Skips, StoredRequest, StoredSession};

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use agents::ReadContext;
use prompt_measure::{O200kBase, Tokenizer};

/// What an import reads and how.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Options {
    /// Only requests at or after this time (seconds since the epoch); files last changed
    /// before it are not opened.
    pub since: Option<f64>,
    /// The prices.
    pub pricing: Pricing,
    /// The bounds.
    pub limits: Limits,
}

/// How far an import is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the files read so far.
    pub bytes: u64,
    /// Bytes of every file to read.
    pub total: u64,
}

/// Files read at once before their sessions are judged (in order): bounds what is held.
const CHUNK: usize = 32;
/// The most reader threads (the judging stays on the calling thread, in order).
const MAX_READERS: usize = 4;
/// The most reply ids remembered to count a reply once over an import.
const MAX_REPLIES: usize = 4_000_000;

/// What reading one source gave.
type Read = (Result<Vec<StoredSession>, ImportError>, Skips);

fn read_source(
    source: &Source,
    limits: Limits,
    devices: &HashMap<PathBuf, agents::claude::Device>,
) -> Read {
    let mut skips = Skips::default();
    let mut cx = ReadContext {
        limits,
        skips: &mut skips,
        home: source.home.as_deref(),
    };
    let none = agents::claude::Device::default();
    let read = match source.agent {
        Agent::ClaudeCode => {
            let device = source
                .home
                .as_ref()
                .and_then(|h| devices.get(h))
                .unwrap_or(&none);
            agents::claude::read(&source.path, &mut cx, device)
        }
        Agent::Codex => agents::codex::read(&source.path, &mut cx),
        Agent::GeminiCli => agents::gemini::read(&source.path, &mut cx),
        Agent::QwenCode => agents::qwen::read(&source.path, &mut cx),
        Agent::Opencode => agents::opencode::read(&source.path, &mut cx),
    };
    (read, skips)
}

/// Reads a chunk of sources on up to `readers` threads; the results in the chunk's order.
fn read_chunk(
    chunk: &[&Source],
    limits: Limits,
    devices: &HashMap<PathBuf, agents::claude::Device>,
    readers: usize,
) -> Vec<Read> {
    if readers <= 1 || chunk.len() <= 1 {
        return chunk
            .iter()
            .map(|s| read_source(s, limits, devices))
            .collect();
    }
    let mut slots: Vec<Option<Read>> = (0..chunk.len()).map(|_| None).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..readers)
            .map(|w| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .enumerate()
                        .skip(w)
                        .step_by(readers)
                        .map(|(i, s)| (i, read_source(s, limits, devices)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        // A reader that panicked (none should) leaves its slots empty: read again below.
        for h in handles {
            if let Ok(done) = h.join() {
                for (i, r) in done {
                    if let Some(slot) = slots.get_mut(i) {
                        *slot = Some(r);
                    }
                }
            }
        }
    });
    slots
        .into_iter()
        .zip(chunk)
        .map(|(r, s)| r.unwrap_or_else(|| read_source(s, limits, devices)))
        .collect()
}

/// Reads `sources` (each once, in order; files on up to four threads) and judges every
/// session on this one: the report. A source that cannot be read is noted in
/// [`Report::skipped`], never fatal.
pub fn import(sources: &[Source], options: &Options, progress: &mut dyn FnMut(Progress)) -> Report {
    let tokenizer: Option<&dyn Tokenizer> = O200kBase::shared().ok().map(|t| t as &dyn Tokenizer);
    let total = sources
        .iter()
        .map(|s| s.bytes)
        .fold(0u64, u64::saturating_add);
    let mut report = Report::default();
    let mut seen = HashSet::new();
    let wanted: Vec<&Source> = sources
        .iter()
        .filter(|s| seen.insert(s.path.clone()))
        .filter(|s| match (options.since, s.modified) {
            (Some(since), Some(modified)) => modified >= since,
            _ => true,
        })
        .collect();
    let mut devices = HashMap::new();
    for s in &wanted {
        if s.agent == Agent::ClaudeCode
            && let Some(home) = &s.home
            && !devices.contains_key(home)
        {
            devices.insert(home.clone(), agents::claude::device_of(home));
        }
    }
    let readers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, MAX_READERS);
    let no_tokens = NoTokens;
    let mut judge = analysis::Judge::new(tokenizer.unwrap_or(&no_tokens), options.pricing.table);
    let mut replies: HashSet<String> = HashSet::new();
    let mut done = total.saturating_sub(
        wanted
            .iter()
            .map(|s| s.bytes)
            .fold(0u64, u64::saturating_add),
    );
    for chunk in wanted.chunks(CHUNK) {
        let reads = read_chunk(chunk, options.limits, &devices, readers);
        for (source, (read, skips)) in chunk.iter().zip(reads) {
            done = done.saturating_add(source.bytes);
            report.skipped.merge(skips);
            report.files += 1;
            report.bytes = report.bytes.saturating_add(source.bytes);
            match read {
                Ok(sessions) => {
                    for mut session in sessions {
                        // A reply another file already holds is counted there.
                        session.requests.retain(|r| match &r.reply {
                            Some(key) if replies.contains(key) => false,
                            Some(key) => {
                                if replies.len() < MAX_REPLIES {
                                    replies.insert(key.clone());
                                }
                                true
                            }
                            None => true,
                        });
                        if session.requests.is_empty() {
                            continue;
                        }
                        if tokenizer.is_none() {
                            // No tokenizer, no audit: every request is judged from usage.
                            for r in &mut session.requests {
                                r.body = None;
                            }
                        }
                        let mut s = analysis::analyse(session, &mut judge, &options.pricing);
                        if let Some(since) = options.since {
                            s.requests.retain(|r| r.secs.is_none_or(|t| t >= since));
                            if s.requests.is_empty() {
                                continue;
                            }
                            resum(&mut s);
                        }
                        report.sessions.push(s);
                    }
                }
                Err(e) => report.skipped.source(&source.path, error::chain(&e)),
            }
            progress(Progress { bytes: done, total });
        }
    }
    report.finish();
    report
}

/// A session's sums again, after some requests were left out.
fn resum(s: &mut SessionReport) {
    let r = &s.requests;
    s.input_tokens = r
        .iter()
        .map(|r| r.input_tokens)
        .fold(0, u64::saturating_add);
    s.cache_read_tokens = r
        .iter()
        .map(|r| r.cache_read_tokens)
        .fold(0, u64::saturating_add);
    s.cache_write_tokens = r
        .iter()
        .map(|r| r.cache_write_tokens)
        .fold(0, u64::saturating_add);
    s.output_tokens = r
        .iter()
        .map(|r| r.output_tokens)
        .fold(0, u64::saturating_add);
    s.cost = r.iter().map(|r| r.cost).sum();
    s.lost_cost = r.iter().map(|r| r.lost_cost).sum();
    s.cost_units = r.iter().map(|r| r.cost_units).sum();
    s.lost_units = r.iter().map(|r| r.lost_units).sum();
}

/// Stands in when the tokenizer cannot be built (no request is audited then).
struct NoTokens;

impl Tokenizer for NoTokens {
    fn name(&self) -> &str {
        "none"
    }
    fn encode(&self, _text: &str) -> Vec<u32> {
        Vec::new()
    }
}
