//! The analysis' copy of a body, and the one memory budget every copy is held under: from
//! its first byte copied (the request still streaming upstream) to the end of its analysis
//! (queued, then analysed). A copy that would pass the budget is dropped at once and the
//! exchange is counted as not analysed; the traffic itself never waits on the budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

/// The bytes of body copies the analysis holds at once, in flight and queued: the default of
/// [`crate::Limits::analysis_budget`].
pub const ANALYSIS_BUDGET_BYTES: u64 = 256 << 20;

/// Bytes held for the analysis, against a limit.
#[derive(Debug)]
pub(crate) struct Budget {
    held: AtomicU64,
    limit: u64,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Self {
        Budget {
            held: AtomicU64::new(0),
            limit,
        }
    }

    /// Takes `n` bytes; `false` (nothing taken) when they do not fit.
    pub(crate) fn try_take(&self, n: u64) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    /// Gives back `n` bytes taken by [`Budget::try_take`].
    pub(crate) fn give_back(&self, n: u64) {
        let _ = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                Some(held.saturating_sub(n))
            });
    }

    /// The bytes held now.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Acquire)
    }
}

/// What became of a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    /// Every byte so far is held.
    #[default]
    Copying,
    /// The body passed the copy cap: nothing held, the request is not analysed.
    Over,
    /// The budget was full: nothing held, the exchange is dropped and counted.
    Dropped,
    /// Not needed (the other side of the exchange will not be analysed): nothing held.
    Skipped,
}

/// A copy of a body, as frames (shared with the forwarded ones, not copied), bounded by a
/// cap of its own and by the [`Budget`] it is held under; what it holds is given back to the
/// budget when it is dropped (after its analysis, or when its exchange is dropped).
#[derive(Debug, Default)]
pub(crate) struct BodyCopy {
    pub(crate) chunks: Vec<Bytes>,
    /// The body's length so far (held or not).
    pub(crate) len: u64,
    state: State,
    /// Bytes held.
    held: u64,
    /// Bytes taken from the budget: at least `held` (a body's announced length is taken
    /// at once).
    taken: u64,
    /// `None`: a placeholder, which holds nothing (a push drops it).
    budget: Option<Arc<Budget>>,
}

impl BodyCopy {
    /// An empty copy held under `budget`, of a body of `expected` bytes when its length is
    /// announced: those are taken from the budget at once (a copy that will not fit is
    /// dropped before it holds anything, and copies that fit are not dropped halfway for
    /// others), and a body announced over `cap` is not copied at all.
    pub(crate) fn new(budget: &Arc<Budget>, expected: Option<u64>, cap: usize) -> Self {
        let mut copy = BodyCopy {
            chunks: Vec::new(),
            len: 0,
            state: State::Copying,
            held: 0,
            taken: 0,
            budget: Some(budget.clone()),
        };
        match expected {
            Some(n) if n > cap as u64 => copy.state = State::Over,
            Some(n) if budget.try_take(n) => copy.taken = n,
            Some(_) => copy.state = State::Dropped,
            None => {}
        }
        copy
    }

    /// A copy that is not needed: it holds nothing, and is not counted as dropped.
    pub(crate) fn skipped() -> Self {
        BodyCopy {
            chunks: Vec::new(),
            len: 0,
            state: State::Skipped,
            held: 0,
            taken: 0,
            budget: None,
        }
    }

    /// Adds a frame's data: held when it fits under `cap` and the budget.
    pub(crate) fn push(&mut self, data: &Bytes, cap: usize) {
        self.len = self.len.saturating_add(data.len() as u64);
        if self.state != State::Copying {
            return;
        }
        if self.len > cap as u64 {
            self.release(State::Over);
            return;
        }
        let held = self.held.saturating_add(data.len() as u64);
        let more = held.saturating_sub(self.taken);
        match &self.budget {
            Some(b) if more == 0 || b.try_take(more) => {
                self.taken = self.taken.max(held);
                self.held = held;
                self.chunks.push(data.clone());
            }
            _ => self.release(State::Dropped),
        }
    }

    /// Frees what it holds, now in `state`.
    fn release(&mut self, state: State) {
        self.state = state;
        self.chunks = Vec::new();
        if let Some(b) = &self.budget {
            b.give_back(self.taken);
        }
        self.held = 0;
        self.taken = 0;
    }

    /// Whether the body passed the copy cap.
    pub(crate) fn is_over(&self) -> bool {
        self.state == State::Over
    }

    /// Whether the copy was dropped because the budget was full.
    pub(crate) fn is_dropped(&self) -> bool {
        self.state == State::Dropped
    }

    /// Whether it holds every byte of the body so far.
    pub(crate) fn is_whole(&self) -> bool {
        self.state == State::Copying
    }

    /// The bytes, in one buffer.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.bytes_into(&mut v);
        v
    }

    /// The body, in `out` (cleared first): the analysis thread reuses one buffer.
    pub(crate) fn bytes_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(usize::try_from(self.held).unwrap_or(0));
        for c in &self.chunks {
            out.extend_from_slice(c);
        }
    }
}

/// The capacity a buffer the analysis thread keeps between exchanges (the body read, the
/// log line) is shrunk back to after a larger body: one large body does not stay resident.
pub(crate) const REUSED_BUFFER_BYTES: usize = 4 << 20;

impl Drop for BodyCopy {
    fn drop(&mut self) {
        if let Some(b) = &self.budget {
            b.give_back(self.taken);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_is_never_passed_and_overflows_are_refused() {
        let budget = Budget::new(256 << 20);
        let copy = 32 << 20;
        for _ in 0..8 {
            assert!(budget.try_take(copy));
        }
        assert!(!budget.try_take(copy), "over the budget");
        assert!(!budget.try_take(u64::MAX), "no overflow past it");
        budget.give_back(copy);
        assert!(budget.try_take(copy), "room again once one was given back");
    }

    #[test]
    fn a_copy_gives_back_what_it_holds_when_dropped_over_its_cap_or_past_the_budget() {
        let budget = Arc::new(Budget::new(10));
        let mut a = BodyCopy::new(&budget, None, 100);
        a.push(&Bytes::from_static(b"hello"), 100);
        assert_eq!(budget.held(), 5);
        let mut b = BodyCopy::new(&budget, None, 100);
        b.push(&Bytes::from_static(b"four"), 100);
        assert_eq!(budget.held(), 9);
        // Past the budget: dropped, and what it held is given back.
        b.push(&Bytes::from_static(b"xy"), 100);
        assert!(b.is_dropped() && b.chunks.is_empty());
        assert_eq!(budget.held(), 5);
        assert_eq!(b.len, 6, "its length is still counted");
        // Past its own cap: over, given back.
        a.push(&Bytes::from_static(b"!"), 5);
        assert!(a.is_over());
        assert_eq!(budget.held(), 0);
        let mut c = BodyCopy::new(&budget, None, 100);
        c.push(&Bytes::from_static(b"0123456789"), 100);
        assert_eq!(c.bytes(), b"0123456789");
        // Moved out (to the analysis queue) it still holds; dropped, it gives back.
        let moved = std::mem::take(&mut c);
        assert_eq!(budget.held(), 10);
        drop(c);
        assert_eq!(budget.held(), 10);
        drop(moved);
        assert_eq!(budget.held(), 0);
        let mut placeholder = BodyCopy::default();
        placeholder.push(&Bytes::from_static(b"x"), 100);
        assert!(
            placeholder.is_dropped(),
            "a copy with no budget holds nothing"
        );
        // An announced length is taken at once; one that does not fit is dropped at once,
        // one over the cap is not copied.
        let sized = BodyCopy::new(&budget, Some(8), 100);
        assert!(sized.is_whole());
        assert_eq!(budget.held(), 8);
        let late = BodyCopy::new(&budget, Some(3), 100);
        assert!(late.is_dropped());
        assert_eq!(budget.held(), 8);
        let huge = BodyCopy::new(&budget, Some(101), 100);
        assert!(huge.is_over());
        drop(sized);
        assert_eq!(budget.held(), 0);
        let mut skipped = BodyCopy::skipped();
        skipped.push(&Bytes::from_static(b"x"), 100);
        assert!(!skipped.is_dropped() && !skipped.is_whole() && skipped.chunks.is_empty());
    }
}
