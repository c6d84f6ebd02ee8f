//! `cacheline import` throughput: MB/s of transcript read and judged, per agent's store.
//!
//! Run: `cargo bench -p cacheline-benches --bench import`.
//!
//! Each agent's fixture sessions copied (fresh ids) into a home of 16 MiB
//! ([`import_history::write_history`]); each iteration finds and imports the whole home, as
//! `cacheline import --home` does (the report built, not printed). `claude-code-rebuilt` is
//! Claude Code 2.1.332: every request rebuilt from the store and audited.

use std::path::PathBuf;
use std::sync::LazyLock;

use cacheline_benches::import_history::write_history;
use cacheline_import::{Options, discover, import};
use divan::counter::BytesCount;

fn main() {
    divan::main();
}

const AGENTS: &[&str] = &[
    "claude-code",
    "claude-code-rebuilt",
    "codex",
    "gemini-cli",
    "qwen-code",
    "all",
];

static HOMES: LazyLock<Vec<(PathBuf, u64)>> = LazyLock::new(|| {
    let base = std::env::temp_dir().join(format!("cacheline-import-bench-{}", std::process::id()));
    AGENTS
        .iter()
        .map(|agent| {
            let home = base.join(agent);
            let _ = std::fs::remove_dir_all(&home);
            let only: Vec<&str> = if *agent == "all" {
                Vec::new()
            } else {
                vec![*agent]
            };
            let (bytes, _) = write_history(&home, 16 << 20, &only)
                .unwrap_or_else(|e| panic!("generating the history: {e}"));
            (home, bytes)
        })
        .collect()
});

#[divan::bench(args = AGENTS, sample_count = 5, sample_size = 1)]
fn import_home(bencher: divan::Bencher, agent: &str) {
    let i = AGENTS.iter().position(|a| *a == agent).unwrap_or(0);
    let (home, bytes) = &HOMES[i];
    bencher.counter(BytesCount::new(*bytes)).bench(|| {
        let sources = discover::in_home(home, &[]);
        import(&sources, &Options::default(), &mut |_| {})
    });
}
