//! One client connection's state, as the accept loop's watchdog and the reply being
//! forwarded on it both see it: requests in flight, when it went idle, whether a reply
//! broke off.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::limits::Limits;

/// What one client connection is doing, as its watchdog and its reply see it.
#[derive(Debug)]
pub(crate) struct ConnState {
    pub(crate) epoch: Instant,
    /// Requests whose head was read and whose reply is not done.
    pub(crate) in_flight: AtomicUsize,
    /// When the first byte of a request head came (µs since `epoch`, plus one), while no
    /// request is in flight; 0 when none has.
    pub(crate) head_started: AtomicU64,
    /// When the connection last became idle (µs since `epoch`).
    pub(crate) idle_since: AtomicU64,
    /// Whether a request was served (then the idle timeout applies, else the header one).
    pub(crate) served: AtomicBool,
    /// Whether a reply broke off: the connection ends with a reset, not a clean end.
    pub(crate) abort: AtomicBool,
    pub(crate) changed: Notify,
}

impl ConnState {
    pub(crate) fn new() -> Self {
        ConnState {
            epoch: Instant::now(),
            in_flight: AtomicUsize::new(0),
            head_started: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            served: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            changed: Notify::new(),
        }
    }

    pub(crate) fn micros(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    pub(crate) fn at(&self, micros: u64) -> Instant {
        self.epoch + Duration::from_micros(micros)
    }

    /// Bytes came from the client.
    pub(crate) fn read_bytes(&self) {
        if self.in_flight.load(Ordering::Acquire) == 0
            && self.head_started.load(Ordering::Acquire) == 0
        {
            self.head_started
                .store(self.micros().saturating_add(1), Ordering::Release);
            self.changed.notify_one();
        }
    }

    /// A request's head was read: in flight until the guard is dropped (its reply done, or
    /// the request given up).
    pub(crate) fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.head_started.store(0, Ordering::Release);
        InFlight(self.clone())
    }

    /// The reply broke off: end the connection with a reset.
    pub(crate) fn abort(&self) {
        self.abort.store(true, Ordering::Release);
    }

    pub(crate) fn aborted(&self) -> bool {
        self.abort.load(Ordering::Acquire)
    }

    /// No request in flight and none begun.
    pub(crate) fn is_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
            && self.head_started.load(Ordering::Acquire) == 0
    }

    /// When the connection is closed if nothing changes: `None` while a request is in flight.
    pub(crate) fn deadline(&self, limits: &Limits) -> Option<Instant> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        let started = self.head_started.load(Ordering::Acquire);
        if started > 0 {
            return Some(self.at(started - 1) + limits.header_read_timeout);
        }
        let wait = if self.served.load(Ordering::Acquire) {
            limits.idle_timeout
        } else {
            limits.header_read_timeout
        };
        Some(self.at(self.idle_since.load(Ordering::Acquire)) + wait)
    }
}

/// A request in flight on a connection; dropped when its reply is done.
pub(crate) struct InFlight(pub(crate) Arc<ConnState>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let s = &self.0;
        if s.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            s.idle_since.store(s.micros(), Ordering::Release);
            s.served.store(true, Ordering::Release);
            s.changed.notify_one();
        }
    }
}
