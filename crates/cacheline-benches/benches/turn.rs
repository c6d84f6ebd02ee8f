//! One turn (compose + serialize) at growing history lengths.
//!
//! Run: `cargo bench -p cacheline-benches --bench turn`. The per-turn cost must not grow with
//! history length: a turn serializes only its new nodes and returns a view over the frozen
//! bytes of the rest. Copying the whole request into one buffer (`to_bytes`) is measured
//! separately: it is a memcpy of every byte and grows with the request by nature.

use std::cell::RefCell;

use prompt_core::{
    Component, ComponentId, Extensions, Placement, PromptPolicy, Session, SessionContext,
    SessionOptions,
};
use serde_json::json;

fn main() {
    divan::main();
}

struct Date(String);

fn id(s: &str) -> ComponentId {
    ComponentId::new(s).unwrap_or_else(|e| panic!("{e}"))
}

/// A session with realistic components and `nodes` history nodes.
fn session(nodes: usize) -> Session {
    let tools = "{\"name\":\"read_file\",\"description\":\"Read a file from the workspace.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"}}}}".repeat(20);
    let components = vec![
        Component::constant(
            id("assistant_instructions"),
            "You are a careful coding assistant. ".repeat(20),
        )
        .placement(Placement::Prefix),
        Component::constant(id("tool_schemas"), tools).placement(Placement::Prefix),
        Component::turn(id("date"), |t| {
            t.get::<Date>().map(|d| format!("Today is {}.", d.0))
        }),
    ];
    let policy = PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"assistant_instructions\", \"tool_schemas\"]\n",
        "agent.toml",
        &components,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .ignore_warnings();
    let mut s = Session::start(
        components,
        &policy,
        SessionContext::default(),
        SessionOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut day = 0;
    while s.history().len() < nodes {
        day += 1;
        let values = Extensions::new().with(Date(format!("day {}", day / 7)));
        if let Err(e) = s.turn(
            values,
            format!("Question {day}: what does module {day} do?"),
        ) {
            panic!("{e}");
        }
        let reply = json!({"role": "assistant", "content": format!("Module {day} parses the config and returns typed errors with line numbers.")});
        if let Err(e) = s.record_assistant(&reply) {
            panic!("{e}");
        }
    }
    s
}

const SIZES: [usize; 3] = [100, 1_000, 10_000];

/// `Session::turn` + the request's length, fingerprint and new nodes: everything a client
/// needs before it streams the chunks to the socket. One long-lived session, as an agent runs
/// it: each sample appends one more turn, so history grows by at most 100 nodes over the run.
#[divan::bench(args = SIZES, sample_count = 100, sample_size = 1)]
fn turn(bencher: divan::Bencher, nodes: usize) {
    let s = RefCell::new(session(nodes));
    bencher
        .with_inputs(|| answer(&mut s.borrow_mut()))
        .bench_local_values(|()| {
            let mut s = s.borrow_mut();
            let values = Extensions::new().with(Date("day 9999".to_owned()));
            match s.turn(values, "One more question about the parser?") {
                Ok(req) => (req.len(), req.prefix_fingerprint(), req.new_nodes().len()),
                Err(e) => panic!("{e}"),
            }
        });
}

/// The previous sample's turn answered, outside the measured time: a turn is refused while
/// the last request has no reply.
fn answer(s: &mut Session) {
    if s.unanswered_request().is_some()
        && let Err(e) = s.record_assistant(&json!({"role": "assistant", "content": "Ok."}))
    {
        panic!("{e}");
    }
}

/// The same turn, then the whole request copied into one `Vec<u8>` (O(request bytes)).
#[divan::bench(args = SIZES, sample_count = 100, sample_size = 1)]
fn turn_and_copy_request(bencher: divan::Bencher, nodes: usize) {
    let s = RefCell::new(session(nodes));
    bencher
        .with_inputs(|| answer(&mut s.borrow_mut()))
        .bench_local_values(|()| {
            let mut s = s.borrow_mut();
            let values = Extensions::new().with(Date("day 9999".to_owned()));
            match s.turn(values, "One more question about the parser?") {
                Ok(req) => req.to_bytes().len(),
                Err(e) => panic!("{e}"),
            }
        });
}
