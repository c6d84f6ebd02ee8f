//! `evidence`: one request's verdict with its proof, as Markdown and JSON, redacted.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::{cacheline, temp_file};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The Claude Code capture, as the workspace names it.
const CLAUDE: &str = "tests/fixtures/agents/claude-code/capture.jsonl";

/// Runs `cacheline ARGS` in the workspace root (so the fixture is named as in the docs).
fn in_root(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_cacheline"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn evidence(log: &str, line: u64, extra: &[&str]) -> (String, Value) {
    let n = line.to_string();
    let mut args = vec!["evidence", log, "--request", &n, "--stdout"];
    args.extend_from_slice(extra);
    let (code, md, err) = in_root(&args);
    assert_eq!(code, 0, "{err}");
    args[4] = "--json";
    let (code, json, err) = in_root(&args);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    (md, json)
}

/// A logged line's field, read from the fixture itself.
fn fixture_line(line: usize) -> Value {
    let text = std::fs::read_to_string(root().join(CLAUDE)).unwrap();
    serde_json::from_str(text.lines().nth(line - 1).unwrap()).unwrap()
}

/// `{"input_tokens": …, "cache_read_input_tokens": …}` of a logged Anthropic stream's
/// `message_start`.
fn streamed_usage(line: usize) -> (u64, u64, u64) {
    let response = fixture_line(line)["response"].as_str().unwrap().to_owned();
    let data = response
        .lines()
        .find_map(|l| {
            l.strip_prefix("data: ")
                .filter(|d| d.contains("message_start"))
        })
        .unwrap();
    let start: Value = serde_json::from_str(data).unwrap();
    let u = &start["message"]["usage"];
    (
        u["input_tokens"].as_u64().unwrap(),
        u["cache_read_input_tokens"].as_u64().unwrap(),
        u["cache_creation_input_tokens"].as_u64().unwrap(),
    )
}

use prompt_core::input::thousands;

#[test]
fn evidence_of_the_claude_code_resume_names_the_date_edit_at_message_0_byte_6717() {
    let (md, j) = evidence(CLAUDE, 8, &[]);
    // The fixture's README, line 8: the reminder block of message 0 says 2026-12-05
    // instead of 2026-12-04 (byte 6717), against line 6.
    assert_eq!(j["cause"], "edit_in_place");
    assert_eq!(j["json_path"], "messages[0].content[2]");
    assert_eq!(j["place"], "message 0, block 2");
    assert_eq!(j["divergence"]["byte_offset"], 6717);
    assert_eq!(j["earlier"]["line"], 6);
    let d = &j["divergence"];
    let (before, e_from, l_from) = (
        d["later"]["before"].as_str().unwrap(),
        d["earlier"]["from"].as_str().unwrap(),
        d["later"]["from"].as_str().unwrap(),
    );
    assert!(before.ends_with("Today's date is 2026-12-0"), "{before}");
    assert_eq!(d["earlier"]["before"], d["later"]["before"]);
    assert!(e_from.starts_with("4.") && l_from.starts_with("5."), "{d}");
    assert!(before.len() <= 64 && l_from.len() <= 96);
    let changes = j["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0]["json_path"], "messages[0].content[2]");
    // The gap: the two lines' logged times.
    let gap = fixture_line(8)["ts"].as_f64().unwrap() - fixture_line(6)["ts"].as_f64().unwrap();
    assert!((j["gap_secs"].as_f64().unwrap() - gap).abs() < 1e-6);
    // Usage: what each streamed reply reported.
    let mut read_row = "| read from the cache |".to_owned();
    for (side, line) in [("earlier", 6), ("later", 8)] {
        let (uncached, read, written) = streamed_usage(line);
        let u = &j[side]["usage"];
        assert_eq!(u["input"], uncached + read + written, "{side}");
        assert_eq!(u["cached"], read, "{side}");
        assert_eq!(u["written"], written, "{side}");
        read_row.push_str(&format!(" {} |", thousands(read)));
    }
    assert!(md.contains(&read_row), "{read_row}\n{md}");
    // Element hashes: tools and system alike, messages[0] the first to differ.
    assert_eq!(j["blocks"]["first_difference"], "messages[0]");
    let rows = j["blocks"]["rows"].as_array().unwrap();
    let first = rows.iter().position(|r| r["status"] != "equal").unwrap();
    assert_eq!(
        (&rows[first]["group"], &rows[first]["index"]),
        (&Value::from("messages"), &Value::from(0))
    );
    assert_eq!(rows.iter().filter(|r| r["group"] == "tools").count(), 26);
    assert_ne!(rows[first]["earlier"], rows[first]["later"]);
    // The Markdown says the same.
    assert!(
        md.contains("**edit_in_place** at `messages[0].content[2]`, byte 6717"),
        "{md}"
    );
    assert!(md.contains("against line 6"), "{md}");
    assert!(
        md.lines()
            .any(|l| l.starts_with("| messages[0] `user` |")
                && l.ends_with("**first difference** |")),
        "{md}"
    );
    assert!(md.contains(&format!("{gap:.1} s")), "{md}");
    assert!(
        md.contains("`claude-code` 2.1.197 (user-agent `claude-cli/2.1.197"),
        "{md}"
    );
    assert!(md.contains("(from header)"), "{md}");
}

/// Every fact of the JSON is in the Markdown: the two are views of one report.
#[test]
fn evidence_json_parses_and_carries_the_facts_of_the_markdown() {
    for line in [3, 8, 9] {
        let (md, j) = evidence(CLAUDE, line, &[]);
        let mut facts: Vec<String> = vec![
            j["verdict"].as_str().unwrap().to_owned(),
            j["session"]["id"].as_str().unwrap().to_owned(),
            j["agent"]["user_agent"].as_str().unwrap().to_owned(),
            j["produced_by"]["command"].as_str().unwrap().to_owned(),
            format!("line {}", j["earlier"]["line"]),
            format!("{:.1} s", j["gap_secs"].as_f64().unwrap()),
            format!(
                "rule: {} tokens; lost: {} ",
                thousands(j["expected_cached"].as_u64().unwrap()),
                thousands(j["tokens_lost"].as_u64().unwrap())
            ),
        ];
        for side in ["earlier", "later"] {
            let u = &j[side]["usage"];
            for k in ["input", "cached", "written", "uncached"] {
                facts.push(thousands(u[k].as_u64().unwrap()));
            }
            facts.push(thousands(j[side]["tokens"].as_u64().unwrap()));
        }
        for c in j["changes"].as_array().unwrap() {
            facts.push(format!(
                "| {} | `{}` | {} | {} |",
                c["cause"].as_str().unwrap(),
                c["json_path"].as_str().unwrap(),
                c["place"].as_str().unwrap(),
                c["byte_offset"]
            ));
        }
        for f in j["fields"].as_array().unwrap() {
            facts.push(format!(
                "`{}` {}",
                f["name"].as_str().unwrap(),
                f["status"].as_str().unwrap()
            ));
        }
        for r in j["blocks"]["rows"].as_array().unwrap() {
            if r["status"] != "equal" {
                facts.push(format!("{}[{}]", r["group"].as_str().unwrap(), r["index"]));
                facts.push(r["later"].as_str().unwrap_or("—").to_owned());
            }
        }
        if let Some(d) = j["divergence"].as_object() {
            facts.push(format!("Byte {} of the later body", d["byte_offset"]));
            facts.push(d["later"]["from"].as_str().unwrap().replace('\n', "\\n"));
        }
        for fact in facts {
            assert!(md.contains(&fact), "line {line}: {fact:?} is not in\n{md}");
        }
    }
}

#[test]
fn a_cold_start_is_a_report_that_says_so() {
    let (md, j) = evidence(CLAUDE, 2, &[]);
    assert_eq!(j["cause"], "cold_start");
    assert!(j["earlier"].is_null() && j["divergence"].is_null(), "{j}");
    assert!(j["changes"].as_array().unwrap().is_empty());
    assert!(md.contains("**Cold start**: no earlier request"), "{md}");
    assert!(!md.contains("### First divergent byte"), "{md}");
    assert!(!md.contains("**first difference**"), "{md}");
}

#[test]
fn a_request_out_of_range_skipped_or_zero_is_an_error_naming_the_file_and_line() {
    let (code, out, err) = in_root(&["evidence", CLAUDE, "--request", "99"]);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(
        err.contains(&format!(
            "{CLAUDE}:99: no such request: the log has 9 line(s)"
        )),
        "{err}"
    );
    // Line 1 is Claude Code's `HEAD /` preflight: no body.
    let (code, _, err) = in_root(&["evidence", CLAUDE, "--request", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!("{CLAUDE}:1: the audit skips this line: ")),
        "{err}"
    );
    // A line over the cap is skipped by the audit, and said so.
    let (code, _, err) = in_root(&[
        "evidence",
        CLAUDE,
        "--request",
        "8",
        "--max-line-bytes",
        "1000",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{CLAUDE}:8: the audit skips this line: line 8 is longer than the 1000-byte limit"
        )),
        "{err}"
    );
    let (code, _, err) = in_root(&["evidence", CLAUDE, "--request", "0"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = cacheline(&["evidence", "-", "--request", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("give a file, not standard input"), "{err}");
}

#[test]
fn evidence_files_are_written_to_the_out_dir_and_their_paths_printed() {
    let dir = std::env::temp_dir().join(format!("cacheline-evidence-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_string_lossy();
    let (code, out, err) = in_root(&["evidence", CLAUDE, "--request", "8", "--out", &d]);
    assert_eq!(code, 0, "{err}");
    let md = dir.join("evidence-line-8.md");
    let json = dir.join("evidence-line-8.json");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [md.display().to_string(), json.display().to_string()]
    );
    let (stdout_md, stdout_json) = evidence(CLAUDE, 8, &[]);
    assert_eq!(std::fs::read_to_string(&md).unwrap(), stdout_md);
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(written, stdout_json);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A Gemini request with a credential in each place one is sent: headers, the URL's
/// `?key=`, and a body field named `api_key` beside the text that changes.
fn leaky_line(ts: u64, first: &str, more: bool) -> String {
    let mut contents = vec![
        serde_json::json!({"role": "user", "parts": [{"text": first, "api_key": "SECRET-body-key-0123456789"}]}),
        serde_json::json!({"role": "model", "parts": [{"text": "ok"}]}),
    ];
    if more {
        contents.push(serde_json::json!({"role": "user", "parts": [{"text": "and now?"}]}));
    }
    serde_json::json!({
        "ts": ts,
        "path": "/v1beta/models/gemini-2.5-flash:generateContent?key=SECRET-query-key",
        "headers": {
            "authorization": "Bearer SECRET-authorization",
            "x-api-key": "SECRET-x-api-key",
            "x-goog-api-key": "SECRET-x-goog-api-key",
            "api-key": "SECRET-api-key",
            "cookie": "session=SECRET-cookie",
            "x-session-token": "SECRET-token-header",
            "user-agent": "leaky-agent/0.3.1",
        },
        "request": {"contents": contents},
    })
    .to_string()
}

#[test]
fn no_credential_reaches_the_markdown_or_the_json() {
    let log = temp_file(
        "evidence-leaky.jsonl",
        &format!(
            "{}\n{}\n",
            leaky_line(1_000, "hello there A", false),
            leaky_line(1_060, "hello there B", true)
        ),
    );
    let log = log.to_string_lossy();
    for extra in [&[][..], &["--redact-text"][..]] {
        let (md, j) = evidence(&log, 2, extra);
        let json = j.to_string();
        assert_eq!(j["cause"], "edit_in_place", "{json}");
        assert_eq!(j["redaction"]["credentials_hidden"], 2, "{json}");
        // The credential sat within the excerpt: it shows as hidden, not as itself.
        let later = &j["divergence"]["later"];
        let around = format!(
            "{}{}",
            later["before"].as_str().unwrap(),
            later["from"].as_str().unwrap()
        );
        // (`_key` is `_xxx` under --redact-text.)
        assert!(
            around.contains(r#"_"#) && around.contains(r#"":"*****"#),
            "{around}"
        );
        // The verdict sentence quotes the engine's excerpt, which starts inside the body's
        // credential ("…0123456789"): its last bytes are starred too, not shown.
        let verdict = j["verdict"].as_str().unwrap();
        assert!(
            !verdict.contains("89\\\"") && !md.contains("89\\\""),
            "a cut credential was written: {verdict}"
        );
        assert_eq!(j["agent"]["name"], "leaky-agent");
        assert_eq!(
            j["later"]["path"],
            "/v1beta/models/gemini-2.5-flash:generateContent"
        );
        for text in [&md, &json] {
            assert!(
                !text.contains("SECRET"),
                "a credential was written:\n{text}"
            );
        }
    }
}

#[test]
fn redact_text_shows_the_structure_without_the_content() {
    let (md, j) = evidence(CLAUDE, 8, &["--redact-text"]);
    assert_eq!(j["redaction"]["text_redacted"], true);
    let d = &j["divergence"]["later"];
    assert!(d["before"].as_str().unwrap().ends_with("0000-00-0"), "{d}");
    for text in [md.as_str(), &j["verdict"].to_string(), &d.to_string()] {
        assert!(!text.contains("2026-12"), "{text}");
    }
    // The excerpts hide the content; the writer catalogue's name for the block ("the
    // currentDate reminder") is the catalogue's text, not the request's, and stays.
    assert!(!d.to_string().contains("currentDate"), "{d}");
    // The facts that are not content stay.
    assert_eq!(j["json_path"], "messages[0].content[2]");
    assert!(md.contains("--redact-text"), "{md}");
}

/// The report in docs/evidence.md is the command's output, byte for byte.
#[test]
fn the_evidence_report_in_the_docs_is_the_commands_output() {
    let doc = std::fs::read_to_string(root().join("docs/evidence.md")).unwrap();
    let command = doc
        .split("```sh\n")
        .nth(1)
        .and_then(|block| block.lines().next())
        .filter(|l| l.starts_with("cacheline evidence "))
        .expect("docs/evidence.md shows the command in a sh block");
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let (code, out, err) = in_root(&args);
    assert_eq!(code, 0, "{err}");
    let start = doc.find("````markdown\n").expect("a ````markdown block") + "````markdown\n".len();
    let end = start + doc[start..].find("\n````").expect("its end") + 1;
    assert_eq!(
        &doc[start..end],
        out,
        "docs/evidence.md differs from `{command}`: paste its output"
    );
    assert!(Path::new(&root().join(CLAUDE)).exists());
}

/// Text hoisted into the system field is content: the verdict quotes it, and
/// `--redact-text` hides it there too.
#[test]
fn redact_text_hides_the_hoisted_text_the_verdict_quotes() {
    let earlier = r#"{"ts":1000,"path":"/v1/messages","request":{"model":"claude-sonnet-4-5","system":"You are terse.","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"}]}}"#;
    let later = r#"{"ts":1010,"path":"/v1/messages","request":{"model":"claude-sonnet-4-5","system":"You are terse.\nConfidential plan: launch Tuesday.","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"more"}]}}"#;
    let log = temp_file("evidence-hoist.jsonl", &format!("{earlier}\n{later}\n"));
    let log = log.to_string_lossy();
    let (md, j) = evidence(&log, 2, &[]);
    assert_eq!(j["cause"], "insert_above_history", "{j}");
    assert!(md.contains("Confidential plan"), "{md}");
    let (md, j) = evidence(&log, 2, &["--redact-text"]);
    let json = j.to_string();
    for text in [&md, &json] {
        assert!(
            !text.contains("Confidential") && !text.contains("launch"),
            "{text}"
        );
    }
    assert!(
        md.contains("(\"\\nxxxxxxxxxxxx xxxx: xxxxxx xxxxxxx.\")"),
        "{md}"
    );
}

/// A header is not in the body: its two values are shown, and no body offset.
#[test]
fn a_header_change_shows_both_values_and_no_body_offset() {
    let line = |beta: &str, more: &str| {
        format!(
            r#"{{"ts":1000,"path":"/v1/messages","headers":{{"x-claude-code-session-id":"s-1","anthropic-beta":"{beta}"}},"request":{{"model":"claude-sonnet-4-5","system":"You are terse.","messages":[{{"role":"user","content":"hi"}},{{"role":"assistant","content":"hello"}}{more}]}}}}"#
        )
    };
    let log = temp_file(
        "evidence-header.jsonl",
        &format!(
            "{}\n{}\n",
            line("beta-one", ""),
            line("beta-two", r#",{"role":"user","content":"more"}"#)
        ),
    );
    let (md, j) = evidence(&log.to_string_lossy(), 2, &[]);
    assert_eq!(j["cause"], "header_or_param_changed", "{j}");
    assert_eq!(j["json_path"], "headers.anthropic-beta");
    let d = &j["divergence"];
    assert!(d["byte_offset"].is_null(), "{d}");
    assert_eq!(
        (&d["earlier"]["from"], &d["later"]["from"]),
        (&"beta-one".into(), &"beta-two".into())
    );
    assert!(md.contains("Not in the body (a header)"), "{md}");
    assert!(md.contains("- earlier (line 1): `beta-one`"), "{md}");
    assert!(md.contains("- later (line 2): `beta-two`"), "{md}");
}

/// The keys docs/evidence.md lists are the JSON's, all of them.
#[test]
fn the_json_keys_in_the_docs_are_the_reports() {
    let doc = std::fs::read_to_string(root().join("docs/evidence.md")).unwrap();
    let section = doc.split("## The JSON").nth(1).unwrap();
    let section = section.split("\n## ").next().unwrap();
    let mut documented: Vec<String> = section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .flat_map(|l| {
            let cell = l.split(" |").next().unwrap_or("");
            format!("`{cell}")
                .split(", ")
                .map(|k| k.trim_matches('`').to_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    documented.sort();
    let (_, j) = evidence(CLAUDE, 8, &[]);
    let mut keys: Vec<String> = j.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(documented, keys);
}

#[test]
fn evidence_names_the_writer_the_catalogue_finds() {
    let (md, json) = evidence(CLAUDE, 8, &[]);
    assert!(
        md.contains("### Writer\n\n- the currentDate reminder (writer catalogue entry `claude-code-current-date`, claude-code >=2.1.0, <=2.1.197)"),
        "{md}"
    );
    assert_eq!(json["writer"]["kind"], "catalogue", "{json}");
    assert_eq!(json["writer"]["id"], "claude-code-current-date", "{json}");
    assert_eq!(json["agent"]["name"], "claude-code", "{json}");
    assert_eq!(json["agent"]["version"], "2.1.197", "{json}");
    // Line 9 extends line 8: no change, so no writer.
    let (md, json) = evidence(CLAUDE, 9, &[]);
    assert!(md.contains("- no writer catalogue entry matches"), "{md}");
    assert!(json["writer"].is_null(), "{json}");
}

/// Two Anthropic turns whose tool description changed; the second reply carries the
/// provider's cache diagnostics (the shape of
/// <https://platform.claude.com/docs/en/build-with-claude/cache-diagnostics>:
/// `diagnostics.cache_miss_reason` with `type` and `cache_missed_input_tokens`).
#[test]
fn evidence_shows_the_provider_s_verdict_beside_cacheline_s() {
    let filler = "lorem ipsum dolor sit amet ".repeat(300);
    let body = |tool: &str, turns: usize, previous: Option<&str>| {
        let mut messages = Vec::new();
        for t in 0..turns {
            messages.push(
                serde_json::json!({"role": "user", "content": format!("user {t}: {filler}")}),
            );
            messages.push(
                serde_json::json!({"role": "assistant", "content": format!("assistant {t}")}),
            );
        }
        messages.push(serde_json::json!({"role": "user", "content": format!("user {turns}")}));
        let mut b = serde_json::json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "tools": [{"name": "read", "description": tool, "input_schema": {"type": "object"}}],
            "system": [{"type": "text", "text": format!("You are a coding agent. {filler}")}],
            "messages": messages,
        });
        if let Some(p) = previous {
            b["diagnostics"] = serde_json::json!({"previous_message_id": p});
        }
        b.to_string()
    };
    let reply = |id: &str, diagnostics: Option<Value>| {
        let mut r = serde_json::json!({
            "id": id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
            "usage": {"input_tokens": 5000, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "output_tokens": 1}
        });
        if let Some(d) = diagnostics {
            r["diagnostics"] = d;
        }
        r
    };
    let line = |ts: u64, body: String, reply: Value| {
        serde_json::json!({
            "ts": ts, "path": "/v1/messages",
            "headers": {"x-claude-code-session-id": "s-1", "user-agent": "claude-cli/2.1.197 (external, sdk-cli)"},
            "request": body, "response": reply,
        })
        .to_string()
    };
    let log = [
        line(1_800_000_000, body("Reads a file.", 1, None), reply("msg_1", None)),
        line(
            1_800_000_010,
            body("Reads a file, now longer.", 2, Some("msg_1")),
            reply(
                "msg_2",
                Some(serde_json::json!({"cache_miss_reason": {"type": "tools_changed", "cache_missed_input_tokens": 4900}})),
            ),
        ),
    ]
    .join("\n");
    let path = temp_file("evidence-provider.jsonl", &log);
    let path = path.to_string_lossy().into_owned();
    let (md, json) = evidence(&path, 2, &[]);
    assert!(
        md.contains(
            "### The provider's verdict\n\n- provider: tools_changed, ~4,900 tokens missed (agrees)"
        ),
        "{md}"
    );
    assert_eq!(
        json["provider_verdict"]["agreement"]["agreement"], "agree",
        "{json}"
    );
    assert_eq!(json["cause"], "tools_changed", "{json}");
}
