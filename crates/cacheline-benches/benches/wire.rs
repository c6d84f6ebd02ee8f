//! One turn's body for each API (compose + serialize) at growing history lengths.
//!
//! Run: `cargo bench -p cacheline-benches --bench wire`. The per-turn cost must not grow with
//! history length: the wire converts only the nodes new since the previous body (each node
//! is converted once, memoized by its chained id) and the body is a view over those bytes.
//! What is measured per sample: `Session::turn`, `Wire::body` (conversion of the new nodes,
//! lengths, Anthropic's breakpoints), the body's length and stable length, and writing the
//! chunks from the first new node to the end into a reused buffer — what a client sends
//! after the bytes it already streamed for the previous request.

use std::cell::RefCell;

use cacheline_benches::sessions::{answer, grow, next_turn, session_with};
use prompt_core::tools::{ToolSet, ToolSource};
use prompt_core::{ApiKind, Session};
use prompt_wire::{Wire, WireOptions};
use serde_json::json;

fn main() {
    divan::main();
}

fn tools() -> ToolSet {
    let listing: Vec<serde_json::Value> = (0..20)
        .map(|i| {
            json!({"type": "function", "function": {"name": format!("tool_{i:02}"),
                "description": "Read a file from the workspace.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}})
        })
        .collect();
    ToolSet::from_openai(&[(ToolSource::builtin(), &json!(listing))])
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A session with `nodes` history nodes for `api`, and its wire after one body (every
/// node converted once, as in a session that sent a body per turn).
fn setup(api: ApiKind, nodes: usize) -> (Session, Wire) {
    let mut s = session_with(vec![], prompt_wire::session_options(api, tools()));
    let options = match api {
        ApiKind::Gemini => WireOptions::new("model").param(
            "generationConfig",
            &json!({"maxOutputTokens": 1024, "temperature": 0.2}),
        ),
        ApiKind::OpenAiResponses => {
            WireOptions::new("model").param("max_output_tokens", &json!(1024))
        }
        _ => WireOptions::new("model")
            .param("max_tokens", &json!(1024))
            .param("temperature", &json!(0.2)),
    };
    let mut w = Wire::new(api, options).unwrap_or_else(|e| panic!("{e}"));
    grow(&mut s, nodes);
    if let Err(e) = w.body(&next_turn(&mut s, "Warm up.")) {
        panic!("{e}");
    }
    (s, w)
}

const SIZES: [usize; 3] = [100, 1_000, 10_000];

/// One long-lived session per size, as an agent runs it: each sample appends one more turn.
fn bench(bencher: divan::Bencher, api: ApiKind, nodes: usize) {
    let (s, mut w) = setup(api, nodes);
    let s = RefCell::new(s);
    let mut out: Vec<u8> = Vec::with_capacity(1 << 16);
    bencher
        .with_inputs(|| answer(&mut s.borrow_mut()))
        .bench_local_values(|()| {
            let mut s = s.borrow_mut();
            let req = next_turn(&mut s, "One more question about the parser?");
            let body = match w.body(&req) {
                Ok(body) => body,
                Err(e) => panic!("{e}"),
            };
            out.clear();
            for chunk in body.new_chunks() {
                out.extend_from_slice(chunk);
            }
            (body.len(), body.stable_len(), out.len())
        });
}

#[divan::bench(args = SIZES, sample_count = 100, sample_size = 1)]
fn openai_chat(bencher: divan::Bencher, nodes: usize) {
    bench(bencher, ApiKind::OpenAi, nodes);
}

#[divan::bench(args = SIZES, sample_count = 100, sample_size = 1)]
fn openai_responses(bencher: divan::Bencher, nodes: usize) {
    bench(bencher, ApiKind::OpenAiResponses, nodes);
}

#[divan::bench(args = SIZES, sample_count = 100, sample_size = 1)]
fn anthropic(bencher: divan::Bencher, nodes: usize) {
    bench(bencher, ApiKind::Anthropic, nodes);
}

#[divan::bench(args = SIZES, sample_count = 100, sample_size = 1)]
fn gemini(bencher: divan::Bencher, nodes: usize) {
    bench(bencher, ApiKind::Gemini, nodes);
}

#[divan::bench(args = SIZES, sample_count = 100, sample_size = 1)]
fn llama_cpp(bencher: divan::Bencher, nodes: usize) {
    bench(bencher, ApiKind::LlamaCpp, nodes);
}

/// The same turn without a wire (`Session::turn` and the request's length): the baseline the
/// wire's cost adds to.
#[divan::bench(args = SIZES, sample_count = 100, sample_size = 1)]
fn baseline_turn_only(bencher: divan::Bencher, nodes: usize) {
    let (s, _) = setup(ApiKind::OpenAi, nodes);
    let s = RefCell::new(s);
    bencher
        .with_inputs(|| answer(&mut s.borrow_mut()))
        .bench_local_values(|()| {
            let mut s = s.borrow_mut();
            next_turn(&mut s, "One more question about the parser?").len()
        });
}
