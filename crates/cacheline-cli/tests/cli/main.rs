//! The `cacheline` binary, run as a user runs it: a process with arguments, standard input,
//! standard output, standard error and an exit status. One test binary, one module per
//! command.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

mod audit;
mod behaviour;
mod defects;
mod demo;
mod evidence;
mod import;
mod lock;
mod probe_template;
mod profiles;
mod proxy;
mod proxy_agents;
mod proxy_haproxy;
mod simulate;
mod status_check;

/// The provider rules `simulate` and `audit` price a request under, in the order they print.
pub const BACKENDS: [&str; 6] = [
    "llama_cpp",
    "vllm",
    "openai",
    "deepseek",
    "anthropic",
    "limit",
];

/// Runs `cacheline ARGS`; returns (exit status, stdout, stderr).
pub fn cacheline(args: &[&str]) -> (i32, String, String) {
    cacheline_with_stdin(args, b"")
}

/// Runs `cacheline ARGS` with `stdin` on its standard input.
pub fn cacheline_with_stdin(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    // Each run keeps its session state apart: one test's sessions never carry into another's.
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let state = std::env::temp_dir().join(format!(
        "cacheline-cli-state-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_cacheline"))
        .args(args)
        .env("XDG_STATE_HOME", &state)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start cacheline: {e}"));
    if let Some(mut input) = child.stdin.take() {
        // The command may exit before reading it all; that is its business.
        let _ = input.write_all(stdin);
    }
    let output = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("cacheline did not finish: {e}"));
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Writes `text` to a file named `name` in a directory of this test process.
pub fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cacheline-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    path
}
