//! One turn (compose + serialize) at growing history lengths.
//!
//! Run: `cargo bench -p cacheline-benches --bench turn`. The per-turn cost must not grow with
//! history length: a turn serializes only its new nodes and returns a view over the frozen
//! bytes of the rest. Copying the whole request into one buffer (`to_bytes`) is measured
//! separately: it is a memcpy of every byte and grows with the request by nature.

use std::cell::RefCell;

use cacheline_benches::sessions::{answer, grow, id, next_turn, session_with};
use prompt_core::{Component, Placement, Request, Session, SessionOptions};

fn main() {
    divan::main();
}

/// A session with realistic components and `nodes` history nodes.
fn session(nodes: usize) -> Session {
    let tools = "{\"name\":\"read_file\",\"description\":\"Read a file from the workspace.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}}".repeat(20);
    let tools = Component::constant(id("tool_schemas"), tools).placement(Placement::Prefix);
    let mut s = session_with(vec![tools], SessionOptions::default());
    grow(&mut s, nodes);
    s
}

const SIZES: [usize; 3] = [100, 1_000, 10_000];

/// One long-lived session of `nodes` nodes, as an agent runs it: each sample appends one more
/// turn (so history grows by at most 100 nodes over the run) and `measure`s its request.
fn bench_turn<R>(bencher: divan::Bencher, nodes: usize, measure: impl Fn(Request<'_>) -> R) {
    let s = RefCell::new(session(nodes));
    bencher
        .with_inputs(|| answer(&mut s.borrow_mut()))
        .bench_local_values(|()| {
            let mut s = s.borrow_mut();
            measure(next_turn(&mut s, "One more question about the parser?"))
        });
}

/// `Session::turn` + the request's length, fingerprint and new nodes: everything a client
/// needs before it streams the chunks to the socket.
#[divan::bench(args = SIZES, sample_count = 100, sample_size = 1)]
fn turn(bencher: divan::Bencher, nodes: usize) {
    bench_turn(bencher, nodes, |req| {
        (req.len(), req.prefix_fingerprint(), req.new_nodes().len())
    });
}

/// The same turn, then the whole request copied into one `Vec<u8>` (O(request bytes)).
#[divan::bench(args = SIZES, sample_count = 100, sample_size = 1)]
fn turn_and_copy_request(bencher: divan::Bencher, nodes: usize) {
    bench_turn(bencher, nodes, |req| req.to_bytes().len());
}
