//! What people expect of a Rust command line: usage errors, `--version`, one error format,
//! quiet pipes, standard input as `-`.

use std::process::Command;

use crate::{cacheline, cacheline_with_stdin, temp_file};

#[test]
fn unknown_subcommand_is_a_usage_error() {
    let (code, _, err) = cacheline(&["frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.contains("unrecognized subcommand"), "{err}");
}

#[test]
fn version_and_help_name_the_program() {
    let (code, out, err) = cacheline(&["--version"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(
        out.trim(),
        format!("cacheline {}", env!("CARGO_PKG_VERSION"))
    );
    let (code, out, _) = cacheline(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("Where every prompt writer lands"), "{out}");
    for command in [
        "status",
        "check",
        "demo",
        "simulate",
        "audit",
        "probe-template",
        "bench-live",
    ] {
        assert!(out.contains(command), "--help lacks {command}:\n{out}");
    }
}

/// Runs `cacheline ARGS | head -1` in bash with pipefail: cacheline's own exit status.
fn piped_into_head(args: &str) -> (i32, String, String) {
    let script = format!(
        "set -o pipefail; '{}' {args} | head -n 1",
        env!("CARGO_BIN_EXE_cacheline")
    );
    let output = Command::new("bash")
        .args(["-c", &script])
        .output()
        .unwrap_or_else(|e| panic!("bash: {e}"));
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn status_piped_into_head_prints_one_line_and_nothing_else() {
    let (code, out, err) = piped_into_head("status");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.starts_with("[prompt] default = tail"), "{out}");
    assert_eq!((code, err.as_str()), (0, ""));
}

#[test]
fn a_closed_stdout_ends_the_program_quietly_with_status_0() {
    // Far more output than a pipe buffer holds, so the writes after `head` exits fail.
    let (code, out, err) = piped_into_head("demo --turns 300");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert_eq!((code, err.as_str()), (0, ""));
    let (code, _, err) = piped_into_head("demo --turns 300 --json");
    assert_eq!((code, err.as_str()), (0, ""));
}

#[test]
fn check_reads_standard_input_and_reports_file_line_col_error() {
    let (code, out, err) = cacheline_with_stdin(
        &["check", "-"],
        b"[prompt]\nprefix_allow = [\"tool_schemas\"]\n",
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("<stdin>: ok"), "{out}");
    let (code, _, err) = cacheline_with_stdin(&["check", "-"], b"[prompt]\ndefault = \"middle\"\n");
    assert_eq!(code, 2);
    assert!(err.starts_with("<stdin>:2:11: error: "), "{err}");
}

#[test]
fn a_bad_price_file_is_reported_as_file_line_col_error() {
    let prices = temp_file("prices.json", "{\n  \"openai\": {\"reed\": 0.5}\n}\n");
    let shown = prices.display().to_string();
    let (code, _, err) = cacheline(&["simulate", "--turns", "2", "--prices", &shown]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with(&format!("{shown}:2:19: error: unknown field `reed`")),
        "{err}"
    );
    assert!(!err.contains("at line"), "the position is said once: {err}");
}

#[test]
fn bench_live_replies_without_probe_is_a_usage_error() {
    let (code, _, err) = cacheline(&["bench-live", "--replies", "--url", "http://127.0.0.1:9"]);
    assert_eq!(code, 2);
    assert!(err.contains("--probe"), "{err}");
}

#[test]
fn inputs_that_are_not_regular_files_are_refused() {
    for path in ["/dev/zero", "/"] {
        let (code, _, err) = cacheline(&["check", path]);
        assert_eq!(code, 2, "{path}");
        assert!(err.contains("not a regular file"), "{path}: {err}");
    }
}

#[test]
fn bench_fleet_without_a_fleet_names_the_missing_file_and_how_to_start_one() {
    let dir = std::env::temp_dir().join(format!("cacheline-no-fleet-{}", std::process::id()));
    let (code, out, err) = cacheline(&["bench-fleet", "--fleet-dir", &dir.to_string_lossy()]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("replica-1.url"), "{err}");
    assert!(err.contains("scripts/fleet.sh start 2"), "{err}");
    assert!(out.is_empty(), "{out}");
}
