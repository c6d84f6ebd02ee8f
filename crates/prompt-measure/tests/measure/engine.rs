//! The one comparison engine through the audit: the captured traffic of five real agents
//! gets its hand-checked verdicts, and the audit and the guard agree on every pair (captured
//! and generated). Each cause produced from a documented provider shape: the engine's own
//! tests (`crates/prompt-engine/tests/engine/causes.rs`).

use std::path::{Path, PathBuf};

use prompt_measure::AuditConfig;
use prompt_measure::audit::{Cause, RequestAudit};
use prompt_wire::{Verdict, compare};
use proptest::prelude::*;

use super::audit::audit_bytes;
use super::json_path::resolve;

fn agents_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/agents")
}

/// The captures of one agent path each (MCP, compaction): `tests/fixtures/agent-paths/*`,
/// as (name, folder), sorted.
fn agent_path_dirs() -> Vec<(String, PathBuf)> {
    capture_dirs("agent-paths")
}

/// The captures in `tests/fixtures/<folder>/*`, as (name, folder), sorted.
fn capture_dirs(folder: &str) -> Vec<(String, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(folder);
    let mut dirs: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap_or_else(|e| panic!("{e}")).path())
        .filter(|p| p.join("capture.jsonl").is_file())
        .map(|p| {
            let name = p
                .file_name()
                .map_or(String::new(), |n| n.to_string_lossy().into_owned());
            (name, p)
        })
        .collect();
    dirs.sort();
    dirs
}

use prompt_measure::report::KNOWN_AGENTS as AGENTS;

/// (line, predecessor, cause, JSON path) as the `verdicts.tsv` in `dir` writes them.
fn expected_in(dir: &Path, agent: &str) -> Vec<(u64, String, String, String)> {
    let path = dir.join("verdicts.tsv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert!(f.len() >= 4, "{agent}: {l}");
            (
                f[0].parse().unwrap_or_else(|e| panic!("{agent}: {l}: {e}")),
                f[1].to_owned(),
                f[2].to_owned(),
                f[3].to_owned(),
            )
        })
        .collect()
}

fn verdict_row(r: &RequestAudit) -> (u64, String, String, String) {
    let v = &r.verdict;
    let cause = v
        .cause
        .as_ref()
        .map_or("extends".to_owned(), |c| c.kind().to_string());
    let path = v
        .cause
        .as_ref()
        .and_then(|c| v.changes.iter().find(|x| x.cause == *c))
        .map_or("-".to_owned(), |c| c.json_path.clone());
    let pred = v
        .predecessor
        .as_ref()
        .map_or("-".to_owned(), |p| p.tag.to_string());
    (r.line, pred, cause, path)
}

fn capture(agent: &str) -> Vec<u8> {
    capture_in(&agents_dir().join(agent))
}

fn capture_in(dir: &Path) -> Vec<u8> {
    let path = dir.join("capture.jsonl");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_captured_agent_request_gets_its_hand_checked_verdict() {
    let mut captures: Vec<(String, PathBuf)> = AGENTS
        .iter()
        .map(|a| (a.to_string(), agents_dir().join(a)))
        .collect();
    let paths = agent_path_dirs();
    assert!(
        paths.iter().any(|(n, _)| n == "claude-code-mcp"),
        "{paths:?}"
    );
    captures.extend(paths);
    // The newest releases' captures, beside the pinned ones (Claude Code 2.1.332, Qwen Code
    // 0.24.4; the other agents' newest are their pinned versions).
    let newest = capture_dirs("agents-newest");
    assert!(newest.iter().any(|(n, _)| n == "qwen-code"), "{newest:?}");
    captures.extend(
        newest
            .into_iter()
            .map(|(n, d)| (format!("agents-newest/{n}"), d)),
    );
    for (agent, dir) in &captures {
        let agent = agent.as_str();
        let log = capture_in(dir);
        let a = audit_bytes(agent, &log, AuditConfig::default());
        let mut got: Vec<(u64, String, String, String)> =
            a.requests.iter().map(verdict_row).collect();
        got.extend(
            a.skipped
                .iter()
                .map(|&l| (l, "-".into(), "skipped".into(), "-".into())),
        );
        got.sort();
        assert_eq!(got, expected_in(dir, agent), "{agent}");
        // Every streamed response's usage was read.
        for r in &a.requests {
            assert!(
                r.reported.is_some(),
                "{agent} line {}: {:?}",
                r.line,
                r.reported_error
            );
        }
    }
}

#[test]
fn a_string_re_sent_as_its_one_text_block_is_serialization_only_in_claude_code_s_traffic() {
    let a = audit_bytes(
        "claude-code",
        &capture("claude-code"),
        AuditConfig::default(),
    );
    let line3 = a
        .requests
        .iter()
        .find(|r| r.line == 3)
        .unwrap_or_else(|| panic!());
    let change = &line3.verdict.changes[0];
    assert_eq!(change.cause, Cause::SerializationOnly);
    assert_eq!(change.json_path, "messages[0]");
    // Nothing of the prefix is lost to it: the bytes extend line 2.
    assert_eq!(
        line3
            .verdict
            .predecessor
            .as_ref()
            .map(|p| p.common_elements),
        Some(line3.verdict.lead + 1)
    );
}

#[test]
fn the_audit_and_the_guard_agree_on_every_captured_pair() {
    for agent in AGENTS {
        let log = capture(agent);
        let lines: Vec<&[u8]> = log.split(|&b| b == b'\n').collect();
        let body = |line: u64| -> Vec<u8> {
            let text = std::str::from_utf8(lines[(line - 1) as usize]).unwrap_or_default();
            prompt_measure::logged::request_body(text)
                .map(|b| b.into_owned().into_bytes())
                .unwrap_or_default()
        };
        let a = audit_bytes(agent, &log, AuditConfig::default());
        let mut pairs = 0;
        for r in &a.requests {
            let Some(p) = r.verdict.predecessor.as_ref().filter(|p| p.same_lane) else {
                continue;
            };
            pairs += 1;
            agree(
                agent,
                r,
                &compare(&body(p.tag), &body(r.line)).unwrap_or_else(|e| panic!("{agent}: {e}")),
            );
        }
        assert!(pairs >= 4, "{agent}: {pairs}");
    }
}

/// The guard's verdict on (predecessor, request) is the audit's on the request: it
/// extends exactly when the audit lists no change that loses tokens, and it breaks at the
/// audit's first such change.
fn agree(what: &str, r: &RequestAudit, guard: &Verdict) {
    let first = r
        .verdict
        .changes
        .iter()
        .find(|c| c.cause != Cause::SerializationOnly);
    match (guard, first) {
        (Verdict::Extends { .. }, None) => {}
        (Verdict::Breaks(b), Some(c)) => {
            assert_eq!(b.cause, c.cause, "{what} line {}", r.line);
            assert_eq!(b.place, c.place, "{what} line {}", r.line);
        }
        (g, c) => panic!("{what} line {}: guard {g:?}, audit {c:?}", r.line),
    }
}

fn chat(messages: &[(&str, &str)]) -> String {
    let messages: Vec<serde_json::Value> = messages
        .iter()
        .map(|(role, content)| serde_json::json!({"role": role, "content": content}))
        .collect();
    serde_json::json!({"model": "m", "messages": messages}).to_string()
}

fn as_refs(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    /// Generated pairs: an earlier request and a later one made from it by appending,
    /// editing, removing, inserting or reordering messages, or by changing the model; the
    /// audit of the two lines and the guard over the two bodies give one verdict.
    #[test]
    fn the_audit_and_the_guard_agree_on_generated_pairs(
        earlier in prop::collection::vec(("(user|assistant|system)", "[a-c]{1,3}"), 1..6),
        op in 0usize..6,
        at in 0usize..8,
        text in "[a-d]{1,3}",
    ) {
        let earlier: Vec<(String, String)> = earlier;
        let mut later = earlier.clone();
        let i = at % later.len();
        match op {
            0 => later.push(("assistant".into(), text.clone())),
            1 => later[i].1 = text.clone(),
            2 => { later.remove(i); }
            3 => later.insert(i, ("user".into(), text.clone())),
            4 => later.swap(i, (i + 1) % earlier.len()),
            _ => {}
        }
        let (e, mut l) = (chat(&as_refs(&earlier)), chat(&as_refs(&later)));
        if op == 5 {
            l = l.replacen(r#""model":"m""#, r#""model":"n""#, 1);
        }
        // Two lines of one session, so the second's predecessor is the first.
        let log = format!(
            "{{\"request\":{e},\"session\":\"s\"}}\n{{\"request\":{l},\"session\":\"s\"}}\n"
        );
        let a = audit_bytes("pair.jsonl", log.as_bytes(), AuditConfig::default());
        prop_assert_eq!(a.requests.len(), 2);
        let r = &a.requests[1];
        let guard = compare(e.as_bytes(), l.as_bytes()).unwrap_or_else(|x| panic!("{x}"));
        // A later request that shares no element with the earlier one is a new
        // conversation to the audit (no predecessor), and no extension to the guard.
        let shares = later.iter().any(|m| earlier.contains(m));
        if shares {
            prop_assert_eq!(r.verdict.predecessor.as_ref().map(|p| p.tag), Some(1));
            agree("generated", r, &guard);
        } else {
            prop_assert_eq!(r.verdict.predecessor.as_ref(), None);
            prop_assert!(!guard.extends(), "{:?}", guard);
        }
    }
}

#[test]
fn an_anthropic_log_is_priced_at_anthropic_s_prices() {
    // Anthropic's documented usage: a cache write costs 1.25 times a miss there, and
    // nothing extra at OpenAI.
    let line = r#"{"request":{"model":"claude-sonnet-4-5","system":"S","messages":[{"role":"user","content":"hi"}]},"response":{"type":"message","usage":{"input_tokens":100,"cache_creation_input_tokens":1000,"cache_read_input_tokens":0,"output_tokens":5}}}"#;
    let a = audit_bytes("anthropic.jsonl", line.as_bytes(), AuditConfig::default());
    assert_eq!(a.requests[0].priced_as, prompt_measure::Provider::Anthropic);
    // 100 misses + 1,000 writes at 1.25 against an ideal of 1,100 misses (nothing earlier).
    let overspend = a.summary.overspend_pct.unwrap_or_default();
    assert!(
        (overspend - (1350.0 / 1100.0 - 1.0) * 100.0).abs() < 1e-6,
        "{overspend}"
    );
}

#[test]
fn a_previous_response_id_names_the_session_of_the_streamed_reply_it_follows() {
    // Codex's first request, its reply streamed (`resp_0001`), logged in session `s1`; then a
    // request that names only that reply.
    let capture = capture("codex");
    let first = std::str::from_utf8(capture.split(|&b| b == b'\n').next().unwrap_or_default())
        .unwrap_or_default();
    let mut first: serde_json::Value =
        serde_json::from_str(first).unwrap_or_else(|e| panic!("{e}"));
    first["session"] = serde_json::json!("s1");
    let next = serde_json::json!({
        "path": "/v1/responses",
        "request": {"model": "gpt-5-codex", "previous_response_id": "resp_0001",
                    "input": [{"role": "user", "content": "more"}]},
    });
    let log = format!("{first}\n{next}\n");
    let a = audit_bytes("chain.jsonl", log.as_bytes(), AuditConfig::default());
    let session = &a.requests[1].verdict.session;
    assert_eq!(session.id, "s1");
    assert_eq!(
        session.source,
        prompt_wire::engine::SessionSource::PreviousResponse
    );
}

/// Every break of every captured session loses what its provider's column says: what the
/// rule would read of an append-only continuation of the predecessor, less what the rule
/// read of this request. Within the audit's tokenizer cut at the change (a token or two),
/// and the rule's own step where it reads in steps.
#[test]
fn the_tokens_a_break_loses_are_its_provider_column_s() {
    let logs = every_fixture_log().into_iter().map(|path| {
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        (path.display().to_string(), bytes)
    });
    let mut checked = 0;
    for (name, log) in logs {
        let a = audit_bytes(&name, &log, AuditConfig::default());
        for r in &a.requests {
            let v = &r.verdict;
            let (Some(p), Some(cause)) = (&v.predecessor, &v.cause) else {
                continue;
            };
            // A break of the bytes (not what usage alone tells: provider_side, ttl_expired).
            let in_the_bytes = v.changes.iter().any(|c| &c.cause == cause);
            if v.tokens_lost == 0 || !p.same_lane || !in_the_bytes {
                continue;
            }
            let pred = a
                .requests
                .iter()
                .find(|x| x.line == p.tag)
                .unwrap_or_else(|| panic!("{name} line {}: no line {}", r.line, p.tag));
            let Some((column_lost, step)) = r.lost_by_provider_column(pred) else {
                continue;
            };
            assert!(
                v.tokens_lost.abs_diff(column_lost) <= step,
                "{name} line {}: the verdict loses {}, its provider's column {column_lost}",
                r.line,
                v.tokens_lost
            );
            checked += 1;
        }
    }
    eprintln!("{checked} breaks checked");
    assert!(checked >= 10, "only {checked} breaks checked");
}

/// Every capture and audit fixture: `tests/fixtures/agents*/*/capture.jsonl`,
/// `tests/fixtures/agent-paths/*/capture.jsonl` and
/// `crates/prompt-measure/tests/fixtures/audit/*.jsonl`, sorted.
fn every_fixture_log() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixtures = root.join("../../tests/fixtures");
    let mut logs = Vec::new();
    let entries = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap_or_else(|e| panic!("{e}")).path())
            .collect()
    };
    for folder in entries(&fixtures) {
        let name = folder
            .file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned());
        if name.starts_with("agents") || name == "agent-paths" {
            logs.extend(
                entries(&folder)
                    .into_iter()
                    .map(|d| d.join("capture.jsonl"))
                    .filter(|p| p.is_file()),
            );
        }
    }
    logs.extend(
        entries(&root.join("tests/fixtures/audit"))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl")),
    );
    logs.sort();
    logs
}

#[test]
fn every_json_path_a_verdict_names_exists_in_the_body_it_describes() {
    let mut checked = 0;
    let mut problems = Vec::new();
    for path in every_fixture_log() {
        let name = path.display().to_string();
        let log = std::fs::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let lines: Vec<serde_json::Value> = log
            .split(|&b| b == b'\n')
            .map(|l| serde_json::from_slice(l).unwrap_or(serde_json::Value::Null))
            .collect();
        let body = |line: u64| -> Option<serde_json::Value> {
            let l = lines.get(usize::try_from(line).ok()?.checked_sub(1)?)?;
            match l.get("request").unwrap_or(l) {
                serde_json::Value::String(s) => serde_json::from_str(s).ok(),
                other => Some(other.clone()),
            }
        };
        let header = |line: u64, name: &str| -> bool {
            lines
                .get(line as usize - 1)
                .and_then(|l| l.get("headers"))
                .and_then(|h| h.as_object())
                .is_some_and(|h| h.keys().any(|k| k.eq_ignore_ascii_case(name)))
        };
        let a = audit_bytes(&name, &log, AuditConfig::default());
        for r in &a.requests {
            let pred = r.verdict.predecessor.as_ref().map(|p| p.tag);
            for c in &r.verdict.changes {
                checked += 1;
                let found = |line: u64| match c.json_path.strip_prefix("headers.") {
                    Some(h) => header(line, h),
                    None => body(line).is_some_and(|b| resolve(&b, &c.json_path).is_some()),
                };
                if !(found(r.line) || pred.is_some_and(found)) {
                    problems.push(format!(
                        "{name} line {} ({} vs line {}): {} names `{}`, in neither body",
                        r.line,
                        c.cause.kind(),
                        pred.map_or("-".to_owned(), |p| p.to_string()),
                        c.cause.kind(),
                        c.json_path
                    ));
                }
            }
        }
    }
    assert!(checked >= 50, "{checked} changes checked");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
