//! The proxy's one counters struct ([`Counts`]): kept per session, for the whole proxy
//! ([`Totals`]) and per metric series, and added to the same way everywhere.

use std::collections::BTreeMap;

use prompt_measure::audit::CauseKind;
use prompt_measure::report::RequestRow;
use serde::Serialize;

/// Requests and tokens, as rows add up.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counts {
    /// Requests seen.
    pub requests: u64,
    /// Input tokens.
    pub input: u64,
    /// Tokens the providers reported read from cache.
    pub cached: u64,
    /// Tokens processed again that an append-only request would have reused.
    pub reprocessed: u64,
    /// Tokens the rules expected from cache.
    pub expected_cached: u64,
    /// Breaks by cause.
    pub breaks: BTreeMap<CauseKind, u64>,
}

impl Counts {
    /// Adds one row (counts saturate, never wrap).
    pub fn add(&mut self, row: &RequestRow) {
        self.requests = self.requests.saturating_add(1);
        self.input = self.input.saturating_add(row.input);
        self.cached = self.cached.saturating_add(row.cached.unwrap_or(0));
        self.reprocessed = self.reprocessed.saturating_add(row.reprocessed);
        self.expected_cached = self.expected_cached.saturating_add(row.expected_cached);
        if let Some(c) = row.cause {
            let n = self.breaks.entry(c).or_default();
            *n = n.saturating_add(1);
        }
    }
}

/// The proxy's totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Requests forwarded (all, analysed or not).
    pub forwarded: u64,
    /// Requests analysed (verdict printed).
    pub analysed: u64,
    /// Exchanges forwarded but not analysed because the analysis queue or its memory budget
    /// was full ("analysis dropped N requests").
    pub analysis_dropped: u64,
    /// Of those, the ones dropped because the memory budget was full
    /// ([`crate::Limits::analysis_budget`]).
    pub analysis_over_budget: u64,
    /// `--log` writes that failed (at most one: nothing more is written after it).
    pub log_failures: u64,
    /// Exchanges the `--log` file has no line for, because a write failed.
    pub log_lines_not_written: u64,
    /// Requests not analysed: a body over the copy cap, or a copy that could not be read.
    pub not_analysed: u64,
    /// Sessions dropped from the state, least recently used first.
    pub sessions_dropped: u64,
    /// Sessions held now.
    pub sessions: u64,
    /// CPU time the analysis thread spent on exchanges (reading the copies, writing the
    /// log, the engine, the verdict), in microseconds: apart from the forwarding's.
    pub analysis_cpu_micros: u64,
    /// Requests and tokens over every row.
    #[serde(flatten)]
    pub counts: Counts,
    /// What went wrong besides requests (the log could not be written, no tokenizer), at
    /// most [`crate::ProxyState::MAX_WARNINGS`].
    pub warnings: Vec<String>,
}
