//! The agent loop's bookkeeping at scale: recording the results of N parallel tool calls of
//! one reply, finding a safe compaction cut, and branching, each of which must be linear (or
//! better) in what it reads.
//!
//! Run: `cargo bench -p cacheline-benches --bench lifecycle`. Before issue 17 recording the
//! results was quadratic (each result re-read the whole reply and every earlier result):
//! 1,000 took 1.5 s and 2,000 took 6.3 s in a release build. Figures: docs/benchmarks.md.

use cacheline_benches::sessions::bare;
use prompt_core::{Extensions, Session};

fn main() {
    divan::main();
}

/// A session whose last reply calls `n` tools, none answered yet.
fn calling(n: usize) -> Session {
    let mut s = bare();
    if let Err(e) = s.turn(Extensions::new(), "run them all") {
        panic!("{e}");
    }
    let calls: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"id":"call_{i}","type":"function","function":{{"name":"read_file","arguments":"{{\"path\":\"src/{i}.rs\"}}"}}}}"#
            )
        })
        .collect();
    let reply = format!(
        r#"{{"role":"assistant","content":null,"tool_calls":[{}]}}"#,
        calls.join(",")
    );
    s.record_assistant_raw(&reply)
        .unwrap_or_else(|e| panic!("{e}"));
    s
}

#[divan::bench(args = [250, 1_000, 4_000])]
fn record_results_of_parallel_calls(bencher: divan::Bencher, n: usize) {
    bencher
        .with_inputs(|| calling(n))
        .bench_local_values(|mut s| {
            for i in 0..n {
                if let Err(e) = s.record_tool_result(&format!("call_{i}"), "fn main() {}") {
                    panic!("{e}");
                }
            }
            s
        });
}

/// A history of `rounds` rounds of user, one call, its result, a reply.
fn rounds(rounds: usize) -> Session {
    let mut s = bare();
    for round in 0..rounds {
        if let Err(e) = s.turn(Extensions::new(), format!("round {round}")) {
            panic!("{e}");
        }
        let call = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function","function":{"name":"read_file","arguments":"{}"}}]}"#;
        s.record_assistant_raw(call)
            .unwrap_or_else(|e| panic!("{e}"));
        s.record_tool_result("call_0", "ok")
            .unwrap_or_else(|e| panic!("{e}"));
        if let Err(e) = s.continuation(Extensions::new()) {
            panic!("{e}");
        }
        s.record_assistant_raw(r#"{"role":"assistant","content":"done"}"#)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    s
}

#[divan::bench(args = [250, 2_500])]
fn safe_cut_keeping_the_last_ten(bencher: divan::Bencher, n: usize) {
    let s = rounds(n);
    bencher.bench_local(|| s.history().safe_cut(0, 10));
}

#[divan::bench(args = [250, 2_500])]
fn regenerate_branch(bencher: divan::Bencher, n: usize) {
    let s = rounds(n);
    bencher.bench_local(|| s.regenerate().unwrap_or_else(|e| panic!("{e}")));
}
