//! Reproducers for the defects of issue 20 seen at the command line, one test per defect,
//! named after the defect it reproduces.

use crate::cacheline_with_stdin;

/// Defect 4: `audit --guard` over a body whose tool has a 1 MB name writes a few hundred
/// bytes about it, not the name (twice).
#[test]
fn defect4_audit_guard_with_a_megabyte_tool_name_writes_a_bounded_report() {
    let name = "t".repeat(1 << 20);
    let earlier = r#"{"model":"m","tools":[],"messages":[{"role":"user","content":"hi"}]}"#;
    let later = format!(
        r#"{{"model":"m","tools":[{{"type":"function","function":{{"name":"{name}"}}}}],"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let input = format!("{earlier}\n{later}\n");
    for json in [false, true] {
        let mut args = vec!["audit", "--guard", "-"];
        if json {
            args.push("--json");
        }
        let (status, stdout, stderr) = cacheline_with_stdin(&args, input.as_bytes());
        assert_eq!(status, 0, "{stderr}");
        assert!(
            stdout.contains("was added") || stdout.contains(r#""change":"added""#),
            "{}",
            &stdout[..stdout.len().min(300)]
        );
        assert!(
            stdout.len() < 4096,
            "--json {json}: {} bytes written",
            stdout.len()
        );
    }
}

/// Defect 9: `audit --json` of a log without requests (empty, or only malformed lines) says
/// the overspend is undefined (`null`), with the reason, instead of `-100.0`.
#[test]
fn defect9_audit_json_of_a_log_without_requests_reports_no_overspend() {
    for log in [&b""[..], b"not json\n{\"model\":\"m\"}\n"] {
        let (code, out, err) =
            cacheline_with_stdin(&["audit", "-", "--json", "--allow-skipped"], log);
        assert_eq!(code, 0, "{err}");
        let json: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let summary = &json["summary"];
        assert_eq!(summary["requests"], 0, "{summary}");
        assert!(summary["overspend_pct"].is_null(), "{summary}");
        assert_eq!(
            summary["overspend_undefined"],
            "no input tokens: nothing was spent to compare with the ideal",
            "{summary}"
        );
    }
}

/// Defect 10: `status` over the issue's agent.toml (allow all, deny `date` and `git_*`,
/// `date = "prefix"`) exits 0 with `date` in the tail and a warning that the deny demotes
/// it; `check --strict` fails on that warning.
#[test]
fn defect10_status_accepts_a_per_turn_request_that_a_deny_demotes() {
    let config = crate::temp_file(
        "defect10.toml",
        "[prompt]\nprefix_allow = [\"*\"]\nprefix_deny = [\"date\", \"git_*\"]\n[prompt.placement]\ndate = \"prefix\"\n",
    );
    let config = config.to_string_lossy();
    let (code, out, err) = crate::cacheline(&["status", "--config", &config, "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(":5:1: warning: `date` in [prompt.placement] requests the prefix")
            && err.contains("prefix_deny entry `date` keeps it in the tail"),
        "{err}"
    );
    let json: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    let date = json["prompt"]["components"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["id"] == "date"))
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(date["placement"], "tail", "{date}");
    assert_eq!(date["rule"]["rule"], "denied", "{date}");
    let (code, _, _) = crate::cacheline(&["check", &config, "--strict"]);
    assert_eq!(code, 1);
}
