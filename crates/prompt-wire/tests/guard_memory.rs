//! Defect 6 of issue 20: the guard's memory per message. A test binary of its own, because
//! it counts every allocation of the process (one test, so nothing else allocates
//! meanwhile). Time is measured in docs/robustness.md, never here.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use prompt_wire::compare;

/// The system allocator, counting the bytes held now and the most ever held.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; only counters move.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = HELD.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A Chat Completions body of `n` small messages (about 46 bytes each), and the same body
/// with one more message.
fn bodies(n: usize) -> (Vec<u8>, Vec<u8>) {
    let messages: Vec<String> = (0..n)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            format!(r#"{{"role":"{role}","content":"message {i:07}"}}"#)
        })
        .collect();
    let earlier = format!(r#"{{"model":"m","messages":[{}]}}"#, messages.join(","));
    let later = format!(
        r#"{{"model":"m","messages":[{},{{"role":"user","content":"one more"}}]}}"#,
        messages.join(",")
    );
    (earlier.into_bytes(), later.into_bytes())
}

/// Defect 6: comparing two bodies of small messages holds at most 128 bytes per message of
/// each body beyond the bodies themselves, whether the later body extends the earlier one
/// or breaks it (two 30 MB bodies of 46-byte messages then stay under 300 MB of RSS).
#[test]
fn defect6_the_guard_holds_a_bounded_number_of_bytes_per_message() {
    const MESSAGES: usize = 50_000;
    const PER_MESSAGE: usize = 128;
    let (earlier, later) = bodies(MESSAGES);
    let edited = String::from_utf8(later.clone())
        .unwrap()
        .replacen("message 0000005", "message edited", 1)
        .into_bytes();
    for (case, later) in [("extends", &later), ("breaks", &edited)] {
        let before = HELD.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let verdict = compare(&earlier, later).unwrap();
        assert_eq!(verdict.extends(), case == "extends", "{verdict:?}");
        drop(verdict);
        let held = PEAK.load(Ordering::Relaxed) - before;
        let per_message = held / (2 * MESSAGES);
        assert!(
            per_message <= PER_MESSAGE,
            "{case}: {held} bytes at the peak, {per_message} per message"
        );
    }
}
