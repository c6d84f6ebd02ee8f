//! What the proxy remembers: per session, counts and the last few requests' rows (no body
//! unless `--keep-bodies`), least-recently-used sessions dropped and counted.

use std::collections::VecDeque;

use prompt_measure::recent::RecentMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prompt_measure::report::RequestRow;
use serde::Serialize;
use tokio::sync::broadcast;

use crate::copy::Budget;
use crate::counts::{Counts, Totals};

/// The most bytes of body copies held for the analysis at once.
#[deprecated(
    note = "one budget covers copies in flight and queued: `ANALYSIS_BUDGET_BYTES`, `Limits::analysis_budget`"
)]
pub const ANALYSIS_QUEUE_BYTES: u64 = crate::copy::ANALYSIS_BUDGET_BYTES;
/// A session: its counts and its latest rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionView {
    /// The engine's key for it.
    pub session: String,
    /// Its requests and tokens.
    #[serde(flatten)]
    pub counts: Counts,
    /// Its latest requests (at most [`ProxyState::ROWS_PER_SESSION`]), oldest first.
    pub rows: Vec<RequestRow>,
}

/// A session as `/_cacheline/state` takes it: its view (without rows) and its rows, shared.
pub(crate) type PageSession = (SessionView, Vec<Arc<RequestRow>>);

struct Session {
    view: SessionView,
    /// Shared with the state's readers: a snapshot takes them without copying under the lock.
    rows: VecDeque<Arc<RequestRow>>,
}

struct Inner {
    /// The least recently used dropped first, past `max_sessions`.
    sessions: RecentMap<String, Session>,
    totals: Totals,
}

/// The state shared by the proxy's connections, its analysis thread and observers (the
/// CLI's summary, a page, metrics). Cheap to read: [`ProxyState::snapshot`] copies it.
pub struct ProxyState {
    inner: Mutex<Inner>,
    forwarded: AtomicU64,
    dropped: AtomicU64,
    /// Exchanges dropped because the analysis' memory budget was full (also in `dropped`).
    over_budget: AtomicU64,
    /// Everything held for the analysis, in flight and queued.
    pub(crate) budget: Arc<Budget>,
    /// `--log` writes that failed (at most one: nothing is written after).
    log_failures: AtomicU64,
    /// Exchanges the log should have had a line for and has not.
    log_not_written: AtomicU64,
    /// Rows and warnings recorded: what `/_cacheline/state` shows changes with it.
    records: AtomicU64,
    /// CPU time the analysis thread spent on exchanges, in microseconds.
    analysis_cpu_micros: AtomicU64,
    max_sessions: usize,
    events: broadcast::Sender<RequestRow>,
    warnings: broadcast::Sender<String>,
    pub(crate) metrics: crate::metrics::Metrics,
    /// The audit's cache lifetime counters, as of the last analysed request.
    lifetime: Mutex<prompt_measure::lifetime::LifetimeCounts>,
}

impl std::fmt::Debug for ProxyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyState")
            .field("max_sessions", &self.max_sessions)
            .finish_non_exhaustive()
    }
}

impl ProxyState {
    /// Rows kept per session (older ones are counted, not kept).
    pub const ROWS_PER_SESSION: usize = 64;

    pub(crate) fn new(max_sessions: usize) -> Self {
        let (events, _) = broadcast::channel(1024);
        let (warnings, _) = broadcast::channel(Self::MAX_WARNINGS);
        ProxyState {
            inner: Mutex::new(Inner {
                sessions: RecentMap::new(max_sessions),
                totals: Totals::default(),
            }),
            forwarded: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            over_budget: AtomicU64::new(0),
            budget: Arc::new(Budget::new(crate::copy::ANALYSIS_BUDGET_BYTES)),
            log_failures: AtomicU64::new(0),
            log_not_written: AtomicU64::new(0),
            records: AtomicU64::new(0),
            analysis_cpu_micros: AtomicU64::new(0),
            max_sessions: max_sessions.max(1),
            events,
            warnings,
            metrics: crate::metrics::Metrics::default(),
            lifetime: Mutex::new(Default::default()),
        }
    }

    /// The same, holding at most `bytes` of body copies for the analysis.
    pub(crate) fn with_analysis_budget(mut self, bytes: u64) -> Self {
        self.budget = Arc::new(Budget::new(bytes));
        self
    }

    /// The bytes of body copies held for the analysis now, in flight and queued: never more
    /// than [`crate::Limits::analysis_budget`].
    pub fn analysis_held_bytes(&self) -> u64 {
        self.budget.held()
    }

    /// Counts `spent`, the analysis thread's CPU time on one exchange.
    pub(crate) fn add_analysis_cpu(&self, spent: std::time::Duration) {
        let micros = u64::try_from(spent.as_micros()).unwrap_or(u64::MAX);
        // Saturating, as every counter here: never wraps.
        let _ = self
            .analysis_cpu_micros
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_add(micros))
            });
    }

    /// A number that changes whenever what `/_cacheline/state` shows does.
    pub(crate) fn version(&self) -> u64 {
        self.records
            .load(Ordering::Acquire)
            .wrapping_add(self.forwarded.load(Ordering::Relaxed))
            .wrapping_add(self.dropped.load(Ordering::Relaxed))
    }

    /// The audit's cache lifetime counters over the requests analysed so far
    /// (`prompt_measure::lifetime`: expiries, tokens lost, the longer lifetime's net,
    /// keep-warm), as `/_cacheline/state` shows them.
    pub fn lifetime(&self) -> prompt_measure::lifetime::LifetimeCounts {
        self.lifetime
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn set_lifetime(&self, counts: &prompt_measure::lifetime::LifetimeCounts) {
        self.lifetime
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone_from(counts);
    }

    /// Every session held, least recently active first, with its latest rows.
    pub fn snapshot(&self) -> Vec<SessionView> {
        let inner = self.lock();
        inner
            .sessions
            .values_by_use()
            .map(|s| {
                let mut view = s.view.clone();
                view.rows = s.rows.iter().map(|r| RequestRow::clone(r)).collect();
                view
            })
            .collect()
    }

    /// The `n` most recently active sessions (least recently active first), each with its
    /// rows shared rather than copied, and the totals: what `/_cacheline/state` serializes
    /// once the lock is released.
    pub(crate) fn page_snapshot(&self, n: usize) -> (Vec<PageSession>, Totals) {
        let inner = self.lock();
        let skip = inner.sessions.len().saturating_sub(n);
        let sessions = inner
            .sessions
            .values_by_use()
            .skip(skip)
            .map(|s| (s.view.clone(), s.rows.iter().cloned().collect()))
            .collect();
        drop(inner);
        (sessions, self.totals())
    }

    /// The totals so far.
    pub fn totals(&self) -> Totals {
        let inner = self.lock();
        let mut t = inner.totals.clone();
        t.forwarded = self.forwarded.load(Ordering::Relaxed);
        t.analysis_dropped = self.dropped.load(Ordering::Relaxed);
        t.analysis_over_budget = self.over_budget.load(Ordering::Relaxed);
        t.log_failures = self.log_failures.load(Ordering::Relaxed);
        t.log_lines_not_written = self.log_not_written.load(Ordering::Relaxed);
        t.analysis_cpu_micros = self.analysis_cpu_micros.load(Ordering::Relaxed);
        t.sessions = inner.sessions.len() as u64;
        t
    }

    /// A stream of every request's row as its analysis completes (a slow receiver misses
    /// rows: `RecvError::Lagged` says how many).
    pub fn subscribe(&self) -> broadcast::Receiver<RequestRow> {
        self.events.subscribe()
    }

    /// Warnings kept.
    pub const MAX_WARNINGS: usize = 16;

    /// Every warning as it is given (the log could not be written, no tokenizer): what a
    /// host that prints verdict lines from [`ProxyState::subscribe`] prints beside them.
    pub fn subscribe_warnings(&self) -> broadcast::Receiver<String> {
        self.warnings.subscribe()
    }

    pub(crate) fn warn(&self, warning: String) {
        let mut inner = self.lock();
        if inner.totals.warnings.len() < Self::MAX_WARNINGS {
            inner.totals.warnings.push(warning.clone());
        }
        drop(inner);
        self.records.fetch_add(1, Ordering::AcqRel);
        // No receiver is not an error.
        let _ = self.warnings.send(warning);
    }

    /// A `--log` write failed: counted, and warned of once.
    pub(crate) fn log_failed(&self, warning: String) {
        self.log_failures.fetch_add(1, Ordering::Relaxed);
        self.log_not_written.fetch_add(1, Ordering::Relaxed);
        self.warn(warning);
    }

    /// An exchange the log has no line for, after its write failed.
    pub(crate) fn log_line_not_written(&self) {
        self.log_not_written.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn forwarded(&self) {
        self.forwarded.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// An exchange dropped because the analysis' memory budget was full.
    pub(crate) fn dropped_over_budget(&self) {
        self.over_budget.fetch_add(1, Ordering::Relaxed);
        self.dropped();
    }

    /// Holds the state's lock until `release` says so (or is dropped), after saying so on
    /// `held`: what a test of readers that must not stall forwarding holds.
    #[cfg(test)]
    pub(crate) fn hold_lock(
        &self,
        held: std::sync::mpsc::Sender<()>,
        release: std::sync::mpsc::Receiver<()>,
    ) {
        let _guard = self.lock();
        let _ = held.send(());
        let _ = release.recv();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding it leaves counts that are still counts.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records an analysed (or unanalysed) request.
    pub(crate) fn record(&self, row: RequestRow) {
        self.metrics.observe(&row);
        let mut guard = self.lock();
        let inner = &mut *guard;
        let t = &mut inner.totals;
        if row.line.is_some() {
            t.analysed = t.analysed.saturating_add(1);
        } else {
            t.not_analysed = t.not_analysed.saturating_add(1);
        }
        t.counts.add(&row);
        if inner.sessions.get_mut(&row.session).is_none() {
            let new = Session {
                view: SessionView {
                    session: row.session.clone(),
                    counts: Counts::default(),
                    rows: Vec::new(),
                },
                rows: VecDeque::new(),
            };
            if inner.sessions.insert(row.session.clone(), new).is_some() {
                t.sessions_dropped = t.sessions_dropped.saturating_add(1);
            }
        }
        let Some(s) = inner.sessions.get_mut(&row.session) else {
            return;
        };
        s.view.counts.add(&row);
        if s.rows.len() >= Self::ROWS_PER_SESSION {
            s.rows.pop_front();
        }
        s.rows.push_back(Arc::new(row.clone()));
        drop(guard);
        self.records.fetch_add(1, Ordering::AcqRel);
        // No receiver is not an error.
        let _ = self.events.send(row);
    }
}

/// `/_cacheline/state` as last built, and the state's version it was built at (the page
/// serves it; the proxy's shared state holds it).
#[derive(Default)]
pub(crate) struct StateCache {
    pub(crate) built: tokio::sync::Mutex<Option<(u64, bytes::Bytes)>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(session: &str) -> RequestRow {
        RequestRow {
            request: 1,
            line: Some(1),
            session: session.to_owned(),
            status: 200,
            input: 10,
            cached: Some(4),
            new: 6,
            expected_cached: 4,
            ..RequestRow::default()
        }
    }

    #[test]
    fn the_least_recently_used_session_is_dropped_and_counted() {
        let state = ProxyState::new(2);
        state.record(row("a"));
        state.record(row("b"));
        state.record(row("a"));
        state.record(row("c"));
        let names: Vec<String> = state.snapshot().into_iter().map(|s| s.session).collect();
        assert_eq!(names, ["a", "c"]);
        let t = state.totals();
        assert_eq!(t.sessions_dropped, 1);
        assert_eq!(t.sessions, 2);
        assert_eq!(t.counts.input, 40);
    }

    #[test]
    fn rows_per_session_are_capped() {
        let state = ProxyState::new(4);
        for _ in 0..(ProxyState::ROWS_PER_SESSION + 5) {
            state.record(row("a"));
        }
        let s = &state.snapshot()[0];
        assert_eq!(s.rows.len(), ProxyState::ROWS_PER_SESSION);
        assert_eq!(s.counts.requests, ProxyState::ROWS_PER_SESSION as u64 + 5);
    }
}
