//! What the proxy remembers: per session, counts and the last few requests' rows (no body
//! unless `--keep-bodies`), least-recently-used sessions dropped and counted.

use std::collections::VecDeque;

use prompt_measure::recent::RecentMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use prompt_measure::report::RequestRow;
use serde::Serialize;
use tokio::sync::broadcast;

use crate::counts::{Counts, Totals};

/// The most bytes of body copies waiting for the analysis at once; a copy that would pass it
/// is dropped and counted, as one that finds the queue full.
pub const ANALYSIS_QUEUE_BYTES: u64 = 256 << 20;
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

struct Session {
    view: SessionView,
    rows: VecDeque<RequestRow>,
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
    /// Bytes of body copies waiting in the analysis queue ([`ANALYSIS_QUEUE_BYTES`] at most).
    queued_bytes: AtomicU64,
    max_sessions: usize,
    events: broadcast::Sender<RequestRow>,
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
        ProxyState {
            inner: Mutex::new(Inner {
                sessions: RecentMap::new(max_sessions),
                totals: Totals::default(),
            }),
            forwarded: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            queued_bytes: AtomicU64::new(0),
            max_sessions: max_sessions.max(1),
            events,
            metrics: crate::metrics::Metrics::default(),
            lifetime: Mutex::new(Default::default()),
        }
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
                view.rows = s.rows.iter().cloned().collect();
                view
            })
            .collect()
    }

    /// The totals so far.
    pub fn totals(&self) -> Totals {
        let inner = self.lock();
        let mut t = inner.totals.clone();
        t.forwarded = self.forwarded.load(Ordering::Relaxed);
        t.analysis_dropped = self.dropped.load(Ordering::Relaxed);
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

    pub(crate) fn warn(&self, warning: String) {
        let mut inner = self.lock();
        if inner.totals.warnings.len() < Self::MAX_WARNINGS {
            inner.totals.warnings.push(warning);
        }
    }

    pub(crate) fn forwarded(&self) {
        self.forwarded.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn dropped(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes `bytes` of the analysis queue's byte budget; `false` (nothing taken) when they
    /// do not fit, and the copy is then dropped: the queue's length alone would let 1,024
    /// copies of 32 MiB each wait.
    pub(crate) fn reserve_queued(&self, bytes: u64) -> bool {
        self.queued_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes)
                    .filter(|&total| total <= ANALYSIS_QUEUE_BYTES)
            })
            .is_ok()
    }

    /// Gives back what [`ProxyState::reserve_queued`] took, once the copy left the queue.
    pub(crate) fn release_queued(&self, bytes: u64) {
        let _ = self
            .queued_bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                Some(held.saturating_sub(bytes))
            });
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
        s.rows.push_back(row.clone());
        drop(guard);
        // No receiver is not an error.
        let _ = self.events.send(row);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prompt_measure::report::Outcome;

    use super::*;

    #[test]
    fn copies_waiting_for_the_analysis_are_held_within_a_byte_budget() {
        let state = ProxyState::new(2);
        let copy = 32 << 20; // the largest copy of one body
        let fits = ANALYSIS_QUEUE_BYTES / copy;
        for _ in 0..fits {
            assert!(state.reserve_queued(copy));
        }
        assert!(!state.reserve_queued(copy), "over the budget");
        assert!(!state.reserve_queued(u64::MAX), "no overflow past it");
        state.release_queued(copy);
        assert!(
            state.reserve_queued(copy),
            "room again once one left the queue"
        );
    }

    fn row(session: &str) -> RequestRow {
        RequestRow {
            request: 1,
            line: Some(1),
            session: session.to_owned(),
            api: prompt_core::profile::Provider::OpenAi,
            agent: None,
            model: None,
            status: 200,
            outcome: Outcome::Complete,
            input: 10,
            cached: Some(4),
            reprocessed: 0,
            new: 6,
            expected_cached: 4,
            cause: None,
            place: None,
            excerpt: None,
            verdict: String::new(),
            added_latency: Duration::ZERO,
            body: None,
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
