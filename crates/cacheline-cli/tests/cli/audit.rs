//! `audit`: a log of real requests, from a file or standard input.

use std::path::PathBuf;

use serde_json::Value;

use crate::{cacheline, cacheline_with_stdin};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../prompt-measure/tests/fixtures/audit"
    ))
    .join(name)
}

#[test]
fn malformed_lines_are_reported_with_their_line_number_and_skipped() {
    let path = fixture("malformed.jsonl");
    let path = path.to_string_lossy();
    let (code, out, err) = cacheline(&["audit", &path, "--json"]);
    // Skipped lines make the run fail unless --allow-skipped says otherwise.
    assert_eq!(code, 1, "{err}");
    for line in [2, 3, 5, 6, 8, 9] {
        assert!(
            err.contains(&format!("malformed.jsonl:{line}: warning: line skipped: ")),
            "line {line}:\n{err}"
        );
    }
    assert!(
        err.contains(":2: warning: line skipped: not a JSON object"),
        "{err}"
    );
    assert!(
        err.contains(
            ":3: warning: line skipped: the request body's messages is a number, not an array"
        ),
        "{err}"
    );
    assert!(
        err.contains(":5: warning: line skipped: the request body has none of `messages`"),
        "{err}"
    );
    assert!(
        err.contains(":8: warning: line skipped: not UTF-8"),
        "{err}"
    );
    assert!(err.contains("6 line(s) skipped; exit 1"), "{err}");
    let (code, _, _) = cacheline(&["audit", &path, "--json", "--allow-skipped"]);
    assert_eq!(code, 0);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let skipped: Vec<u64> = json["skipped"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["line"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(skipped, vec![2, 3, 5, 6, 8, 9]);
}

#[test]
fn audit_json_has_the_documented_shape() {
    let path = fixture("head_rewrite.jsonl");
    let (code, out, err) = cacheline(&["audit", &path.to_string_lossy(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let summary = &json["summary"];
    assert_eq!(summary["requests"], 3);
    for key in ["hit_rate", "limit_share", "overspend_pct"] {
        assert!(summary[key].is_number(), "summary.{key}: {summary}");
    }
    let requests = json["requests"]
        .as_array()
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0]["verdict"]["cause"]["cause"], "cold_start");
    assert!(requests[0]["verdict"]["predecessor"].is_null());
    assert_eq!(requests[0]["shape"], "chat_completions");
    assert_eq!(requests[2]["line"], 3);
    assert!(requests[2]["tokens"].as_u64().unwrap_or(0) > 0);
    let v = &requests[2]["verdict"];
    assert_eq!(v["predecessor"]["tag"], 2);
    assert_eq!(v["cause"]["cause"], "system_changed");
    assert_eq!(v["session"]["source"], "inferred");
    let change = &v["changes"][0];
    assert_eq!(change["json_path"], "messages[0]");
    assert_eq!(change["place"], "system");
    assert_eq!(change["divergence"]["byte_offset"], 178);
    assert_eq!(change["divergence"]["producer"], "system");
    // Tokens lost by the provider's rule: the whole request is under OpenAI's 1,024-token
    // minimum, so nothing of it was cached and nothing is lost.
    assert_eq!(v["tokens_lost"], 0);
    assert_eq!(requests[2]["priced_as"], "openai");
    for rule in super::BACKENDS {
        assert!(requests[2]["cached"][rule].is_u64(), "{rule}");
        assert!(
            summary["backends"][rule]["cached_share"].is_number(),
            "{rule}"
        );
    }
}

#[test]
fn audit_text_lists_each_request_and_the_top_cache_breaker() {
    let path = fixture("head_rewrite.jsonl");
    let (code, out, err) = cacheline(&["audit", &path.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cold_start: the first request"), "{out}");
    assert!(
        out.contains("system_changed at messages[0], byte 178 vs line 2"),
        "{out}"
    );
    // Under OpenAI's minimum: the break is named, and nothing is counted lost.
    assert!(
        out.contains("nothing lost: the provider caches no prefix this short"),
        "{out}"
    );
    assert!(out.contains("no cache-breakers"), "{out}");
    // A llama.cpp log whose tool was edited: a breaker, with what it lost.
    let path = fixture("llama_cpp_whole.jsonl");
    let (code, out, err) = cacheline(&["audit", &path.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("top cache-breakers"), "{out}");
    assert!(out.contains("1. tools_changed at tools[0]"), "{out}");
}

#[test]
fn a_missing_log_is_an_error_naming_the_file() {
    let (code, _, err) = cacheline(&["audit", "/nonexistent/requests.jsonl"]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("error: /nonexistent/requests.jsonl: cannot read"),
        "{err}"
    );
}

#[test]
fn an_empty_log_says_there_were_no_requests() {
    let (code, out, err) = cacheline_with_stdin(&["audit", "-"], b"");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no requests in the log"), "{out}");
    assert!(!out.contains("overspend"), "{out}");
}

#[test]
fn summary_only_json_prints_only_the_summary() {
    let log = std::fs::read(fixture("head_rewrite.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    let (code, out, err) = cacheline_with_stdin(&["audit", "-", "--summary-only", "--json"], &log);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(json["requests"], 3, "{json}");
    assert!(
        json.get("summary").is_none(),
        "only the summary object: {json}"
    );
    assert!(json["hit_rate"].is_number(), "{json}");
}

#[test]
fn a_line_longer_than_max_line_bytes_is_skipped_with_its_number() {
    let short = r#"{"messages":[{"role":"user","content":"Fix the CI."}]}"#;
    let long = format!(
        r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "x".repeat(5000)
    );
    let log = format!("{short}\n{long}\n{short}\n");
    let args = ["audit", "-", "--json", "--max-line-bytes", "1000"];
    let (code, out, err) = cacheline_with_stdin(&args, log.as_bytes());
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!(
            "-:2: warning: line skipped: line 2 is longer than the 1000-byte limit ({} bytes)",
            long.len()
        )),
        "{err}"
    );
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(json["skipped"][0]["line"], 2, "{json}");
    let lines: Vec<u64> = json["requests"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["line"].as_u64()).collect())
        .unwrap_or_default();
    assert_eq!(lines, vec![1, 3]);
    // --allow-skipped keeps exit 0; the default cap (32 MiB) audits the same line.
    let mut allow = args.to_vec();
    allow.push("--allow-skipped");
    let (code, _, _) = cacheline_with_stdin(&allow, log.as_bytes());
    assert_eq!(code, 0);
    let (code, _, err) = cacheline_with_stdin(&["audit", "-", "--json"], log.as_bytes());
    assert_eq!(code, 0, "{err}");
}

/// Three Anthropic bodies as a Jan-style bridge sends them: the second extends the first;
/// the third carries a per-turn update joined into the one system field (hoisting).
const HOISTING_BRIDGE: &str = concat!(
    r#"{"model":"m","system":"Be brief.","messages":[{"role":"user","content":"hi"}]}"#,
    "\n",
    r#"{"model":"m","system":"Be brief.","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"and?"}]}"#,
    "\n\n",
    r#"{"model":"m","system":"Be brief.\n\nToday is Monday.","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"and?"},{"role":"assistant","content":"so"},{"role":"user","content":"go on"}]}"#,
    "\n"
);

#[test]
fn audit_guard_flags_a_hoisting_bridge_and_deny_breaks_fails_the_run() {
    let (code, out, err) =
        cacheline_with_stdin(&["audit", "--guard", "-"], HOISTING_BRIDGE.as_bytes());
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("line 2: extends line 1 (Anthropic Messages)"),
        "{out}"
    );
    assert!(
        out.contains("line 4: BREAKS line 2: Anthropic Messages: hoisting: text was added to the system field"),
        "{out}"
    );
    assert!(out.contains("Today is Monday."), "{out}");
    assert!(
        out.contains("3 bodies, 2 pairs: 1 extend, 0 extend all but"),
        "{out}"
    );

    let (code, out, err) = cacheline_with_stdin(
        &["audit", "--guard", "-", "--json", "--deny-breaks"],
        HOISTING_BRIDGE.as_bytes(),
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("1 pair(s) break the cache (--deny-breaks)"),
        "{err}"
    );
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let hoisted = &report["pairs"][1];
    assert_eq!(hoisted["outcome"], "breaks");
    assert_eq!(hoisted["at"]["cause"], "insert_above_history");
    assert!(hoisted["at"]["hoisted"].is_string(), "{hoisted}");
    assert_eq!(hoisted["at"]["place"], "system");
    assert_eq!(report["summary"]["breaks"], 1);
}

#[test]
fn audit_guard_reports_bodies_it_cannot_read_or_compare_and_exits_1() {
    let log = concat!(
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        "\n",
        r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
        "\n",
        "[1,2]\n",
    )
    .to_owned()
        + &format!(
            r#"{{"contents":[{{"role":"user","parts":[{{"text":"{}"}}]}}]}}"#,
            "x".repeat(300)
        )
        + "\n";
    let (code, out, err) = cacheline_with_stdin(
        &["audit", "--guard", "-", "--max-line-bytes", "200"],
        log.as_bytes(),
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("line 2: cannot be compared with line 1: the earlier body is a Chat Completions body, the later one a Gemini body"),
        "{out}"
    );
    assert!(
        out.contains("line 3: cannot be compared with line 2: the later body is"),
        "{out}"
    );
    assert!(
        err.contains("line 4 skipped: a body of 352 bytes, over the 200-byte limit"),
        "{err}"
    );
    assert!(
        err.contains("exit 1 (pass --allow-skipped to exit 0)"),
        "{err}"
    );
    let (code, _, err) = cacheline_with_stdin(
        &[
            "audit",
            "--guard",
            "-",
            "--max-line-bytes",
            "200",
            "--allow-skipped",
        ],
        log.as_bytes(),
    );
    assert_eq!(code, 0, "{err}");
}

#[test]
fn audit_of_a_directory_without_bodies_is_an_error() {
    let dir = std::env::temp_dir().join(format!("cacheline-audit-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let (code, _, err) = cacheline(&["audit", &dir.to_string_lossy()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no .json request bodies in the directory"),
        "{err}"
    );
}

#[test]
fn audit_of_streamed_replies_prints_what_their_whole_replies_print() {
    // llama.cpp's captured requests and replies, each logged whole and as its stream.
    let whole = std::fs::read(fixture("llama_cpp_whole.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    let streamed =
        std::fs::read(fixture("llama_cpp_streamed.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    for args in [&["audit", "-"][..], &["audit", "-", "--json"]] {
        let (code, whole_out, err) = cacheline_with_stdin(args, &whole);
        assert_eq!(code, 0, "{err}");
        let (code, streamed_out, err) = cacheline_with_stdin(args, &streamed);
        assert_eq!(code, 0, "{err}");
        assert_eq!(streamed_out, whole_out, "{args:?}");
        assert!(
            whole_out.contains("reported usage (9 requests)"),
            "{whole_out}"
        );
    }
}

#[test]
fn audit_guard_reads_request_response_lines_as_audit_does() {
    // The lines `audit` reads (a request wrapped with its response, the body as an object or
    // as its text): the guard compares their bodies, and a model switch is a break.
    let log = concat!(
        r#"{"request":{"model":"m","messages":[{"role":"user","content":"hi"}]},"response":{"usage":{"prompt_tokens":5}}}"#,
        "\n",
        r#"{"request":"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"yo\"}]}","response":null}"#,
        "\n",
        r#"{"request":{"model":"n","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}]}}"#,
        "\n",
    );
    let (code, out, err) =
        cacheline_with_stdin(&["audit", "--guard", "-", "--json"], log.as_bytes());
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_eq!(report["summary"]["unreadable"], 0, "{out}");
    assert_eq!(report["pairs"][0]["outcome"], "extends", "{out}");
    assert_eq!(report["pairs"][1]["outcome"], "breaks", "{out}");
    assert_eq!(report["pairs"][1]["at"]["cause"], "model_changed", "{out}");
}

/// The "Cache lifetime" section of `cacheline audit`'s text summary.
fn lifetime_section(out: &str) -> String {
    let start = out
        .find("Cache lifetime:")
        .unwrap_or_else(|| panic!("no Cache lifetime section: {out}"));
    let rest = &out[start..];
    let end = rest
        .find("\ntop cache-breakers")
        .or_else(|| rest.find("\nno cache-breakers"))
        .unwrap_or(rest.len());
    rest[..end].trim_end().to_owned()
}

#[test]
fn audit_prints_the_cache_lifetime_section_and_its_json() {
    let path = fixture("lifetime_anthropic.jsonl");
    let path = path.to_string_lossy();
    let (code, out, err) = cacheline(&["audit", &path, "--summary-only"]);
    assert_eq!(code, 0, "{err}");
    let section = lifetime_section(&out);
    assert!(
        section.contains(
            "3 requests expired in 1 of 1 sessions: 11,970 tokens lost, 13,766 units ($0.0413)"
        ),
        "{section}"
    );
    assert!(section.contains("keeps 2 of 3 expiries"), "{section}");
    assert!(section.contains("net saves 4,453 units"), "{section}");
    assert!(
        section.contains(
            "keep-warm: 33 pings, 13,241 units against 13,766 re-written: would have paid off"
        ),
        "{section}"
    );
    assert!(section.contains("anthropic 5 min below 1 h"), "{section}");
    assert!(section.contains("1. session s-gaps (header)"), "{section}");

    let (code, out, err) = cacheline(&["audit", &path, "--json", "--summary-only"]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let l = &json["lifetime"];
    assert_eq!(l["total"]["expired"], 3);
    assert_eq!(l["total"]["tokens_lost"], 11_970);
    assert_eq!(l["total"]["gaps"], serde_json::json!([1, 1, 1, 1, 0]));
    assert_eq!(l["total"]["longer"]["kept"], 2);
    assert_eq!(l["total"]["keep_warm"]["pings"], 33);
    assert_eq!(l["sessions"][0]["session"], "s-gaps");
    assert_eq!(l["sessions"][0]["expired"], 3);
    assert_eq!(l["sessions_with_expiry"], 1);
    assert_eq!(l["break_even"][0]["gap_secs"], 3600);
}

#[test]
fn audit_prices_take_a_lifetime_key_for_input_prices_and_the_1h_write() {
    let path = fixture("lifetime_anthropic.jsonl");
    let dir = std::env::temp_dir().join(format!("cacheline-lifetime-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let prices = dir.join("prices.json");
    std::fs::write(
        &prices,
        r#"{"anthropic": {"write": 1.25}, "lifetime": {"anthropic_1h_write": 1.25, "input_usd_per_mtok": {"claude-sonnet-4-5": 30.0}}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (code, out, err) = cacheline(&[
        "audit",
        &path.to_string_lossy(),
        "--summary-only",
        "--prices",
        &prices.to_string_lossy(),
    ]);
    assert_eq!(code, 0, "{err}");
    let section = lifetime_section(&out);
    // Ten times the built-in $3/MTok; a 1-hour write at the 5-minute price adds nothing.
    assert!(section.contains("13,766 units ($0.4130)"), "{section}");
    assert!(section.contains("its writes +0 units"), "{section}");
    // An unknown key under "lifetime" is an error naming it.
    std::fs::write(&prices, r#"{"lifetime": {"anthropic_2h_write": 3}}"#)
        .unwrap_or_else(|e| panic!("{e}"));
    let (code, _, err) = cacheline(&[
        "audit",
        &path.to_string_lossy(),
        "--prices",
        &prices.to_string_lossy(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("\"lifetime\": unknown field `anthropic_2h_write`"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// docs/measurements.md's "Cache lifetime economics" example is what the command prints.
#[test]
fn the_cache_lifetime_example_in_the_docs_is_the_command_s_output() {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/measurements.md"
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let marker = "<!-- lifetime-example -->";
    let at = docs
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in docs/measurements.md"));
    let block = docs[at..]
        .split("```text\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .unwrap_or_else(|| panic!("no text block after {marker}"));
    let path = fixture("lifetime_anthropic.jsonl");
    let (code, out, err) = cacheline(&["audit", &path.to_string_lossy(), "--summary-only"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(block, lifetime_section(&out));
}

fn agent_capture(agent: &str) -> String {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/agents"
    ))
    .join(agent)
    .join("capture.jsonl")
    .to_string_lossy()
    .into_owned()
}

#[test]
fn audit_names_the_writer_and_a_user_catalogue_overrides_the_built_in_entry() {
    let log = agent_capture("claude-code");
    let (code, out, err) = cacheline(&["audit", &log, "--allow-skipped"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("2,124 tokens lost — the currentDate reminder (claude-code >=2.1.0, <=2.1.197) — cnighswonger/claude-code-cache-fix#342 — fix: resume on the day the session began"),
        "{out}"
    );
    let dir = std::env::temp_dir().join(format!("cacheline-catalogue-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let user = dir.join("writers.toml");
    std::fs::write(
        &user,
        "version = 1\n[[writer]]\nid = \"claude-code-current-date\"\nagent = \"claude-code\"\nversions = \"*\"\ncause = \"edit_in_place\"\npath = \"messages[0].content[*]\"\npattern = \"# currentDate\"\nname = \"our date reminder\"\nvaries = \"per day\"\nworkaround = \"resume before midnight\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let user_path = user.to_string_lossy().into_owned();
    let (code, out, err) =
        cacheline(&["audit", &log, "--allow-skipped", "--catalogue", &user_path]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("— our date reminder (claude-code) — fix: resume before midnight"),
        "{out}"
    );
    // The JSON carries the agent and the writer.
    let (_, out, _) = cacheline(&["audit", &log, "--allow-skipped", "--json"]);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let line8 = json["requests"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["line"] == 8))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(line8["agent"]["name"], "claude-code");
    assert_eq!(line8["writer"]["kind"], "catalogue");
    assert_eq!(line8["writer"]["id"], "claude-code-current-date");
    // A malformed user catalogue: exit 2, the entry and the field named.
    std::fs::write(
        &user,
        "version = 1\n[[writer]]\nid = \"mine\"\nagent = \"claude-code\"\nversions = \"soon\"\ncause = \"edit_in_place\"\npath = \"messages[0]\"\npattern = \"x\"\nname = \"n\"\nvaries = \"v\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (code, _, err) = cacheline(&["audit", &log, "--catalogue", &user_path]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("writer mine: field `versions`"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn agent_path_capture(name: &str) -> String {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/agent-paths"
    ))
    .join(name)
    .join("capture.jsonl")
    .to_string_lossy()
    .into_owned()
}

/// The verdict line of `line` in `cacheline audit`'s table.
fn table_line(out: &str, line: u64) -> String {
    out.lines()
        .find(|l| l.trim_start().starts_with(&format!("{line} ")))
        .unwrap_or_else(|| panic!("no line {line} in:\n{out}"))
        .to_owned()
}

#[test]
fn audit_names_the_writer_on_the_mcp_and_compaction_captures() {
    // Claude Code's MCP path: turn 2 ran without the MCP server, its tools left `tools`.
    let log = agent_path_capture("claude-code-mcp");
    let (code, out, err) = cacheline(&["audit", &log, "--allow-skipped"]);
    assert_eq!(code, 0, "{err}");
    let five = table_line(&out, 5);
    assert!(
        five.contains("tools_changed at tools[3]")
            && five.contains("tool `mcp__capture__lookup_note` was removed")
            && five.contains("— an MCP server's tools, dropped from the tools array on a disconnect and re-added on reconnect (claude-code) — anthropics/claude-code#65917 — fix: none known"),
        "{five}"
    );
    // Claude Code's compaction path: the first turn after /compact.
    let log = agent_path_capture("claude-code-compact");
    let (code, out, err) = cacheline(&["audit", &log, "--allow-skipped"]);
    assert_eq!(code, 0, "{err}");
    let thirteen = table_line(&out, 13);
    assert!(
        thirteen.contains("system_changed at system[0]")
            && thirteen.contains("cc_version=2.1.197.f9d")
            // The history replaced by the summary: the engine's own cause, beside it.
            && thirteen.contains("also compaction at messages[0]")
            && thirteen.contains("— the billing header's cc_version fingerprint, a hash of the first user message, re-derived when /compact replaces that message with its summary (claude-code >=2.1.36, <=2.1.332) — anthropics/claude-code#50085 — fix: CLAUDE_CODE_ATTRIBUTION_HEADER=0"),
        "{thirteen}"
    );
}

#[test]
fn audit_lists_a_block_changed_in_three_sessions_without_an_entry_as_learned() {
    // The capture's lines 6 and 8 (the midnight resume) in three sessions, from a Claude Code
    // version no catalogue entry covers.
    let text =
        std::fs::read_to_string(agent_capture("claude-code")).unwrap_or_else(|e| panic!("{e}"));
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let mut log = String::new();
    for s in ["a", "b", "c"] {
        for n in [6, 8] {
            let mut l = lines[n - 1].clone();
            l["headers"]["user-agent"] = Value::String("claude-cli/3.0.0 (external, cli)".into());
            l["headers"]["x-claude-code-session-id"] = Value::String(format!("session-{s}"));
            log.push_str(&l.to_string());
            log.push('\n');
        }
    }
    let path = std::env::temp_dir().join(format!("cacheline-learned-{}.jsonl", std::process::id()));
    std::fs::write(&path, log).unwrap_or_else(|e| panic!("{e}"));
    let p = path.to_string_lossy().into_owned();
    let (code, out, err) = cacheline(&["audit", &p]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("— a learned volatile block: changed in 3 sessions, no catalogue entry"),
        "{out}"
    );
    assert!(
        out.contains("  learned volatile block: claude-code at messages[0].content[2], changed in 3 sessions, no catalogue entry"),
        "{out}"
    );
    let (_, out, _) = cacheline(&["audit", &p, "--json", "--summary-only"]);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let learned = &json["learned_volatile"][0];
    assert_eq!(learned["sessions"], 3, "{out}");
    let _ = std::fs::remove_file(&path);
}
