//! `cacheline import`: the agents' own session stores (the fixture homes of
//! `tests/fixtures/import/`), read-only; and every example of `docs/import.md`, run as shown.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::cacheline;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn fixtures() -> PathBuf {
    root().join("tests/fixtures/import")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.unwrap_or_else(|e| panic!("{e}"));
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// A folder holding `home/`: every fixture home merged (five agents, seven versions).
fn merged_home(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cacheline-import-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for entry in std::fs::read_dir(fixtures()).unwrap_or_else(|e| panic!("{e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        if path.join("home").is_dir() {
            copy_dir(&path.join("home"), &dir.join("home"));
        }
    }
    dir
}

fn json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = cacheline(args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn import_json_follows_the_contract() {
    let dir = merged_home("json");
    let home = dir.join("home");
    let report = json(&[
        "import",
        "--home",
        home.to_str().unwrap_or_default(),
        "--json",
    ]);
    let sessions = report["sessions"]
        .as_array()
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(sessions.len(), 7);
    let mut agents: Vec<&str> = sessions
        .iter()
        .filter_map(|s| s["agent"].as_str())
        .collect();
    agents.sort();
    agents.dedup();
    assert_eq!(
        agents,
        [
            "claude-code",
            "codex",
            "gemini-cli",
            "opencode",
            "qwen-code"
        ]
    );
    for s in sessions {
        for key in [
            "agent",
            "session",
            "project",
            "models",
            "requests",
            "input_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "output_tokens",
            "cost",
            "lost_cost",
        ] {
            assert!(!s[key].is_null(), "{key} in {s}");
        }
        let requests = s["requests"].as_array().unwrap_or_else(|| panic!("{s}"));
        let mut input = 0;
        for (i, r) in requests.iter().enumerate() {
            assert_eq!(r["index"], i as u64 + 1);
            for key in [
                "index",
                "time",
                "model",
                "input_tokens",
                "cache_read_tokens",
                "cache_write_tokens",
                "output_tokens",
                "tokens_lost",
                "exact",
            ] {
                assert!(!r[key].is_null(), "{key} in {r}");
            }
            assert!(r["cause"].is_null() || r["cause"].is_string(), "{r}");
            assert!(r["input_tokens"].as_u64() >= r["cache_read_tokens"].as_u64());
            input += r["input_tokens"].as_u64().unwrap_or(0);
        }
        assert_eq!(s["input_tokens"].as_u64(), Some(input));
    }
    assert_eq!(report["totals"]["requests"], 42);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn import_filters_by_agent_and_day_and_reads_single_files() {
    let dir = merged_home("filters");
    let home = dir.join("home");
    let home = home.to_str().unwrap_or_default();
    let only = json(&[
        "import", "--home", home, "--agent", "codex", "--agent", "gemini", "--json",
    ]);
    assert_eq!(only["totals"]["sessions"], 2);
    let since = json(&["import", "--home", home, "--since", "2026-12-05", "--json"]);
    for s in since["sessions"].as_array().into_iter().flatten() {
        for r in s["requests"].as_array().into_iter().flatten() {
            assert!(r["time"].as_str().is_some_and(|t| t >= "2026-12-05"), "{r}");
        }
    }
    assert!(since["totals"]["requests"].as_u64() < Some(42));
    let file = fixtures().join("qwen-code-0.15.10/home/.qwen/projects/-tmp-cacheline-capture-qwen-code-project/chats/2abee914-3158-402a-97ff-c99710a17423.jsonl");
    let one = json(&["import", file.to_str().unwrap_or_default(), "--json"]);
    assert_eq!(one["totals"]["requests"], 6);
    assert_eq!(one["sessions"][0]["agent"], "qwen-code");
    let (code, _, err) = cacheline(&["import", "--agent", "vim", "--home", home]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown agent"), "{err}");
    let (code, _, err) = cacheline(&["import", "/nonexistent/cacheline-import"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/cacheline-import"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn import_html_is_one_self_contained_page_with_the_breaks_marked() {
    let dir = merged_home("html");
    let page = dir.join("import.html");
    let (code, out, err) = cacheline(&[
        "import",
        "--home",
        dir.join("home").to_str().unwrap_or_default(),
        "--html",
        page.to_str().unwrap_or_default(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("cacheline import: 7 session(s), 42 request(s)"),
        "{out}"
    );
    // Piped: no progress bar on standard error.
    assert_eq!(err, "");
    let html = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{e}"));
    assert!(html.starts_with("<!doctype html>") && html.contains("<style>"));
    for banned in ["http://", "https://", "<script", "<link", "@import", "url("] {
        assert!(!html.contains(banned), "{banned} in the page");
    }
    assert_eq!(html.matches("<section class=\"session\">").count(), 7);
    assert!(html.contains("class=\"req break\""));
    assert!(html.contains("37d198cd-2ed5-412d-87bf-90614168a711"));
    let _ = std::fs::remove_dir_all(dir);
}

/// The `sh` blocks of `docs/import.md`, each command run with `HOME` a home holding every
/// fixture store (and `backup/home` a copy of it), in a folder of its own; a `text` block
/// right after a block of one command is its output, exactly.
#[test]
fn docs_import_md_examples_run_as_shown() {
    let text =
        std::fs::read_to_string(root().join("docs/import.md")).unwrap_or_else(|e| panic!("{e}"));
    let dir = merged_home("docs");
    copy_dir(&dir.join("home"), &dir.join("backup/home"));
    let home = dir.join("home");
    let mut blocks: Vec<(String, String)> = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(lang) = line.trim_start().strip_prefix("```") {
            let body: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.trim_start().starts_with("```"))
                .collect();
            blocks.push((lang.trim().to_owned(), body.join("\n")));
        }
    }
    let mut ran = 0;
    for (i, (lang, body)) in blocks.iter().enumerate() {
        if lang != "sh" {
            continue;
        }
        let commands: Vec<&str> = body
            .lines()
            .map(|l| l.split(" #").next().unwrap_or("").trim())
            .filter(|l| !l.is_empty())
            .collect();
        let expected = blocks
            .get(i + 1)
            .filter(|(l, _)| l == "text")
            .map(|(_, b)| b);
        for command in &commands {
            let words: Vec<String> = command
                .split_whitespace()
                .map(|w| match w.strip_prefix("~/") {
                    Some(rest) => home.join(rest).to_string_lossy().into_owned(),
                    None => w.to_owned(),
                })
                .collect();
            assert_eq!(words[0], "cacheline", "docs/import.md: {command}");
            let output = Command::new(env!("CARGO_BIN_EXE_cacheline"))
                .args(&words[1..])
                .current_dir(&dir)
                .env("HOME", &home)
                .output()
                .unwrap_or_else(|e| panic!("{e}"));
            let out = String::from_utf8_lossy(&output.stdout);
            assert!(
                output.status.success(),
                "docs/import.md: {command}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            if let (Some(expected), 1) = (expected, commands.len()) {
                assert_eq!(
                    out.trim_end(),
                    expected.trim_end(),
                    "docs/import.md: {command}"
                );
            }
            ran += 1;
        }
    }
    assert!(ran >= 5, "docs/import.md has {ran} commands");
    // The JSON shown names only keys the real output has.
    let output = Command::new(env!("CARGO_BIN_EXE_cacheline"))
        .args(["import", "--json"])
        .env("HOME", &home)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let real = String::from_utf8_lossy(&output.stdout);
    let mut shown = 0;
    for (lang, body) in &blocks {
        if lang != "json" {
            continue;
        }
        for key in body.split('"').skip(1).step_by(2) {
            if body.contains(&format!("\"{key}\":")) {
                assert!(
                    real.contains(&format!("\"{key}\":")),
                    "docs/import.md shows a key {key:?} the JSON lacks"
                );
                shown += 1;
            }
        }
    }
    assert!(shown > 20, "{shown} keys shown");
    let _ = std::fs::remove_dir_all(dir);
}
