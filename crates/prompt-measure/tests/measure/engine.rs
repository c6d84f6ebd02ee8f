//! The one comparison engine through the audit: the captured traffic of five real agents
//! gets its hand-checked verdicts, the audit and the guard agree on every pair (captured
//! and generated), and each cause of the enum is produced from a documented provider shape.

use std::path::{Path, PathBuf};

use prompt_measure::AuditConfig;
use prompt_measure::audit::{Cause, CauseKind, RequestAudit};
use prompt_wire::engine::{Block, Canonical, Engine, EngineConfig, Exchange, ReportedRead};
use prompt_wire::{ToolChange, Verdict, compare};
use proptest::prelude::*;

use super::audit::audit_bytes;

fn agents_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/agents")
}

/// The captures of one agent path each (MCP, compaction): `tests/fixtures/agent-paths/*`,
/// as (name, folder), sorted.
fn agent_path_dirs() -> Vec<(String, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/agent-paths");
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

const AGENTS: [&str; 5] = [
    "claude-code",
    "codex",
    "gemini-cli",
    "qwen-code",
    "opencode",
];

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
        prop_assert_eq!(r.verdict.predecessor.as_ref().map(|p| p.tag), Some(1));
        agree("generated", r, &compare(e.as_bytes(), l.as_bytes()).unwrap_or_else(|x| panic!("{x}")));
    }
}

/// One engine over a list of requests: the verdicts.
fn engine_run(requests: &[Exchange<'_>]) -> Vec<prompt_wire::engine::Analysis> {
    let mut engine = Engine::new(EngineConfig::default());
    let count = &mut |c: &Canonical<'_>, b: &Block| {
        u32::try_from(c.compared_text(b).len() / 4).unwrap_or(u32::MAX)
    };
    requests
        .iter()
        .enumerate()
        .map(|(i, x)| {
            engine
                .analyze(x, i as u64 + 1, count)
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect()
}

/// A long Anthropic request (documented shape: `tools`, `system` blocks, `messages` of
/// content blocks) of `turns` user/assistant pairs, with `cache_control` on the listed
/// messages.
fn anthropic(system: &str, turns: usize, marked: &[usize]) -> String {
    let filler = "lorem ipsum dolor sit amet ".repeat(400);
    let mut messages = Vec::new();
    for t in 0..turns {
        for (k, role) in [(2 * t, "user"), (2 * t + 1, "assistant")] {
            let mut block =
                serde_json::json!({"type": "text", "text": format!("{role} {t}: {filler}")});
            if marked.contains(&k) {
                block["cache_control"] = serde_json::json!({"type": "ephemeral"});
            }
            messages.push(serde_json::json!({"role": role, "content": [block]}));
        }
    }
    // The question of the next turn: the next request keeps it where it is.
    messages
        .push(serde_json::json!({"role": "user", "content": format!("user {turns}: {filler}")}));
    serde_json::json!({
        "model": "claude-sonnet-4-5",
        "tools": [{"name": "read", "description": "Read a file.", "input_schema": {"type": "object"}}],
        "system": [{"type": "text", "text": system}],
        "messages": messages,
    })
    .to_string()
}

fn as_refs(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
}

/// A request of session `s` at `path` (none: known by its body).
fn at<'a>(body: &'a str, path: Option<&'a str>) -> Exchange<'a> {
    Exchange {
        path,
        session: Some("s"),
        ..Exchange::body(body.as_bytes())
    }
}

fn exchange(body: &str) -> Exchange<'_> {
    Exchange {
        path: Some("/v1/messages"),
        session: Some("s"),
        ..Exchange::body(body.as_bytes())
    }
}

#[test]
fn a_model_switch_with_an_identical_history_is_a_break_naming_the_model() {
    let e = anthropic("S", 3, &[5]);
    let l = e.replace("claude-sonnet-4-5", "claude-opus-4-8");
    let v = engine_run(&[exchange(&e), exchange(&l)]);
    assert_eq!(v[1].cause, Some(Cause::ModelChanged));
    let p = v[1].predecessor.as_ref().unwrap_or_else(|| panic!());
    assert!(!p.same_lane);
    assert!(v[1].tokens_lost > 0 && v[1].tokens_lost == v[0].tokens);
    assert_eq!(v[1].changes[0].json_path, "model");
}

#[test]
fn an_edited_tool_and_a_rewritten_system_prompt_are_both_listed() {
    let e = anthropic("S", 2, &[3]);
    let l = anthropic("T", 2, &[3]).replace("Read a file.", "Read any file.");
    let v = engine_run(&[exchange(&e), exchange(&l)]);
    let kinds: Vec<CauseKind> = v[1].changes.iter().map(|c| c.cause.kind()).collect();
    assert_eq!(kinds, [CauseKind::ToolsChanged, CauseKind::SystemChanged]);
    assert_eq!(
        v[1].changes[0].cause,
        Cause::ToolsChanged {
            change: ToolChange::Edited,
            name: "read".into()
        }
    );
}

#[test]
fn codex_s_additional_tools_item_is_read_as_tools() {
    let body = |description: &str| {
        serde_json::json!({
            "model": "gpt-5-codex",
            "instructions": "You are Codex.",
            "input": [
                {"type": "additional_tools", "tools": [{"type": "function", "name": "shell", "description": description, "parameters": {}}]},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
            ],
        })
        .to_string()
    };
    let (e, l) = (body("Run a command."), body("Run a shell command."));
    let v = engine_run(&[at(&e, Some("/v1/responses")), at(&l, Some("/v1/responses"))]);
    assert_eq!(
        v[1].cause,
        Some(Cause::ToolsChanged {
            change: ToolChange::Edited,
            name: "shell".into()
        })
    );
    assert_eq!(v[1].changes[0].json_path, "tools[0]");
    // The item is not a message.
    assert_eq!(v[0].messages, 2);
}

#[test]
fn headers_parameters_and_the_cache_key_are_causes_of_their_own() {
    let e = anthropic("S", 2, &[3]);
    let (h1, h2) = (
        [("anthropic-beta".to_owned(), "a".to_owned())],
        [("anthropic-beta".to_owned(), "b".to_owned())],
    );
    let v = engine_run(&[
        Exchange {
            headers: &h1,
            ..exchange(&e)
        },
        Exchange {
            headers: &h2,
            ..exchange(&e)
        },
    ]);
    assert_eq!(
        v[1].cause,
        Some(Cause::HeaderOrParamChanged {
            name: "header:anthropic-beta".into()
        })
    );
    assert_eq!(v[1].changes[0].json_path, "headers.anthropic-beta");
    // OpenAI's reasons: the reasoning effort and the prompt_cache_key.
    let responses = |effort: &str, key: &str| {
        serde_json::json!({"model": "gpt-5", "prompt_cache_key": key, "reasoning": {"effort": effort},
            "input": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
        .to_string()
    };
    let (a, b, c) = (
        responses("low", "k"),
        responses("high", "k"),
        responses("high", "k2"),
    );
    let r = Some("/v1/responses");
    let v = engine_run(&[at(&a, r), at(&b, r), at(&c, r)]);
    assert_eq!(
        v[1].cause,
        Some(Cause::HeaderOrParamChanged {
            name: "reasoning.effort".into()
        })
    );
    assert_eq!(v[2].cause, Some(Cause::CacheKeyChanged));
}

#[test]
fn message_causes_are_told_apart() {
    let m = |xs: &[&str]| {
        // An answered question first: the requests continue a conversation.
        let mut v: Vec<(&str, &str)> = vec![("system", "S"), ("user", "q"), ("assistant", "r")];
        v.extend(xs.iter().map(|x| ("user", *x)));
        chat(&v)
    };
    let cases: [(&[&str], &[&str], CauseKind); 6] = [
        (
            &["a", "b", "c"],
            &["a", "B", "c", "d"],
            CauseKind::EditInPlace,
        ),
        (&["a", "b", "c"], &["a", "c", "d"], CauseKind::Removed),
        (
            &["a", "b", "c"],
            &["a", "x", "b", "c", "d"],
            CauseKind::InsertAboveHistory,
        ),
        (&["a", "b", "c"], &["a", "c", "b", "d"], CauseKind::Reorder),
        (
            &["a", "b", "c", "d", "e", "f", "g"],
            &["summary", "h"],
            CauseKind::Compaction,
        ),
        (&["a", "b", "eph"], &["a", "b"], CauseKind::TailDropped),
    ];
    for (e, l, want) in cases {
        let (e, l) = (m(e), m(l));
        let v = engine_run(&[at(&e, None), at(&l, None)]);
        assert_eq!(
            v[1].cause.as_ref().map(Cause::kind),
            Some(want),
            "{e} → {l}"
        );
    }
}

#[test]
fn a_gap_longer_than_the_asked_lifetime_is_ttl_expired_from_the_logged_timestamps() {
    let body = anthropic("S", 3, &[5]);
    let later = anthropic("S", 4, &[7]);
    fn timed(b: &str, ts: f64) -> Exchange<'_> {
        Exchange {
            ts: Some(ts),
            ..exchange(b)
        }
    }
    // Anthropic's default lifetime is 5 minutes: 299 s is within it, 301 s is not.
    let v = engine_run(&[timed(&body, 1000.0), timed(&later, 1299.0)]);
    assert_eq!(v[1].cause, None, "{:?}", v[1]);
    assert!(v[1].expected_cached > 0);
    let v = engine_run(&[timed(&body, 1000.0), timed(&later, 1301.0)]);
    assert_eq!(v[1].cause, Some(Cause::TtlExpired));
    assert_eq!(v[1].tokens_lost, v[1].expected_cached);
    // A marker asking for an hour holds the entry past five minutes.
    let hour = body.replace(r#""type":"ephemeral""#, r#""type":"ephemeral","ttl":"1h""#);
    let v = engine_run(&[timed(&hour, 1000.0), timed(&later, 1301.0)]);
    assert_eq!(v[1].cause, None, "{:?}", v[1]);
}

#[test]
fn a_provider_that_reads_less_than_the_unchanged_prefix_is_named_even_when_some_was_read() {
    let (body, later) = (anthropic("S", 3, &[5]), anthropic("S", 4, &[7]));
    fn with(b: &str, ts: Option<f64>, cached: u64) -> Exchange<'_> {
        Exchange {
            ts,
            reported: Some(ReportedRead {
                input: 10_000,
                cached,
            }),
            ..exchange(b)
        }
    }
    // Within the lifetime, the tools and system read (a floor) and the history billed again.
    let v = engine_run(&[with(&body, Some(0.0), 0), with(&later, Some(10.0), 300)]);
    assert_eq!(v[1].cause, Some(Cause::ProviderSide));
    assert!(v[1].shortfall.unwrap_or(0) > 5_000, "{:?}", v[1]);
    // Without timestamps, expiry cannot be told from the provider's side.
    let v = engine_run(&[with(&body, None, 0), with(&later, None, 300)]);
    assert_eq!(v[1].cause, Some(Cause::Unknown));
    // Read what was expected: nothing to say.
    let full = v[1].expected_cached * 10_000 / v[1].tokens;
    let v = engine_run(&[with(&body, Some(0.0), 0), with(&later, Some(10.0), full)]);
    assert_eq!(v[1].cause, None, "{:?}", v[1]);
}

#[test]
fn anthropic_breakpoints_that_do_not_reach_back_are_named() {
    // The predecessor wrote its cache at message 5; the next request marks message 7 (two
    // messages on, within the 20-block lookback), none, or only one 22 messages on.
    let body = anthropic("S", 3, &[5]);
    let reach = anthropic("S", 4, &[7]);
    let none = anthropic("S", 4, &[]);
    let far = anthropic("S", 15, &[27]);
    for (later, want) in [
        (reach, None),
        (none, Some(Cause::BreakpointMoved)),
        (far, Some(Cause::LookbackExceeded)),
    ] {
        let v = engine_run(&[exchange(&body), exchange(&later)]);
        assert_eq!(v[1].cause, want, "{:?}", v[1].breakpoints);
    }
}

#[test]
fn a_prefix_below_the_provider_s_minimum_is_below_minimum() {
    // OpenAI's model (the profile table's minimum: 1,024 tokens).
    let openai = |b: String| b.replacen(r#""model":"m""#, r#""model":"gpt-4.1""#, 1);
    let e = openai(chat(&[("system", "S"), ("user", "hi")]));
    let l = openai(chat(&[
        ("system", "S"),
        ("user", "hi"),
        ("assistant", "yo"),
        ("user", "more"),
    ]));
    let v = engine_run(&[at(&e, None), at(&l, None)]);
    assert_eq!(v[0].cause, Some(Cause::ColdStart));
    assert_eq!(v[1].cause, Some(Cause::BelowMinimum));
    assert_eq!(v[1].tokens_lost, 0);
}

#[test]
fn every_cause_of_the_enum_is_produced_by_a_test_here() {
    // The list this file covers, kept beside the enum: a new cause fails here until a test
    // produces it.
    let covered = [
        CauseKind::ColdStart,
        CauseKind::ModelChanged,
        CauseKind::CacheKeyChanged,
        CauseKind::HeaderOrParamChanged,
        CauseKind::ToolsChanged,
        CauseKind::SystemChanged,
        CauseKind::InsertAboveHistory,
        CauseKind::EditInPlace,
        CauseKind::Removed,
        CauseKind::Reorder,
        CauseKind::Compaction,
        CauseKind::TailDropped,
        CauseKind::SerializationOnly,
        CauseKind::BreakpointMoved,
        CauseKind::LookbackExceeded,
        CauseKind::BelowMinimum,
        CauseKind::TtlExpired,
        CauseKind::ProviderSide,
        CauseKind::Unknown,
    ];
    assert_eq!(covered.as_slice(), CauseKind::ALL.as_slice());
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
fn a_conversation_whose_tools_were_re_sorted_is_compared_with_its_own_history_not_an_older_head() {
    // One inferred session: an older conversation that happened to send the tools in the
    // new order, then the conversation that re-sorts them.
    let body = |tools: [&str; 2], messages: &[(&str, &str)]| {
        let tools: Vec<serde_json::Value> = tools
            .iter()
            .map(|n| serde_json::json!({"type": "function", "function": {"name": n, "parameters": {}}}))
            .collect();
        let messages: Vec<serde_json::Value> = messages
            .iter()
            .map(|(r, c)| serde_json::json!({"role": r, "content": c}))
            .collect();
        serde_json::json!({"model": "gpt-4.1", "tools": tools, "messages": messages}).to_string()
    };
    let older = body(["b", "a"], &[("user", "x"), ("assistant", "y")]);
    let first = body(["a", "b"], &[("user", "u1"), ("assistant", "a1")]);
    let resorted = body(
        ["b", "a"],
        &[("user", "u1"), ("assistant", "a1"), ("user", "u2")],
    );
    let v = engine_run(&[
        Exchange::body(older.as_bytes()),
        Exchange::body(first.as_bytes()),
        Exchange::body(resorted.as_bytes()),
    ]);
    assert_eq!(
        v[2].predecessor.as_ref().map(|p| p.tag),
        Some(2),
        "{:?}",
        v[2]
    );
    assert_eq!(
        v[2].cause.as_ref().map(Cause::kind),
        Some(CauseKind::ToolsChanged)
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

#[test]
fn parallel_side_calls_forked_from_one_request_are_compared_with_it_not_with_each_other() {
    // Found by the accuracy benchmark's concurrency set: two side calls forked from the main
    // conversation at once, then the main conversation going on. Each extends the main
    // request; none continues the side call logged just before it.
    let head = [
        ("system", "S"),
        ("user", "q"),
        ("assistant", "r"),
        ("user", "a"),
    ];
    let with = |more: &[(&'static str, &'static str)]| {
        let mut v = head.to_vec();
        v.extend_from_slice(more);
        chat(&v)
    };
    let main = with(&[]);
    let side = with(&[("user", "side question")]);
    let next = with(&[("assistant", "b"), ("user", "c")]);
    let v = engine_run(&[at(&main, None), at(&side, None), at(&next, None)]);
    for (i, r) in v.iter().enumerate().skip(1) {
        assert_eq!(r.predecessor.as_ref().map(|p| p.tag), Some(1), "{i}: {r:?}");
        assert_eq!(r.cause, None, "{i}: {r:?}");
    }
    // A second side call after the first goes on with a message of the same role: by the
    // bytes, an edit of the first one's question (a retry), and compared with it.
    let side_2 = with(&[("user", "another side question")]);
    let v = engine_run(&[at(&main, None), at(&side, None), at(&side_2, None)]);
    assert_eq!(v[2].predecessor.as_ref().map(|p| p.tag), Some(2));
}

#[test]
fn anthropic_breakpoints_that_do_not_reach_back_are_named_when_the_system_is_marked_apart() {
    // Found by the accuracy benchmark: Claude Code and opencode mark the system prompt apart
    // from the messages. Its entry is still read when the messages' breakpoint moves back or
    // past the lookback, but the messages the predecessor wrote are not: that is the break.
    // A system prompt over the minimum cacheable prefix, so that its own entry counts.
    let text = "You are a coding agent. ".repeat(400);
    let plain = format!(r#""system":[{{"text":"{text}","type":"text"}}]"#);
    let marked = format!(
        r#""system":[{{"cache_control":{{"type":"ephemeral"}},"text":"{text}","type":"text"}}]"#
    );
    let system = |b: String| b.replacen(&plain, &marked, 1);
    let body = system(anthropic(&text, 3, &[5]));
    assert!(body.contains(r#""cache_control":{"type":"ephemeral"},"text":"You are"#));
    let reach = system(anthropic(&text, 4, &[7]));
    let back = system(anthropic(&text, 4, &[1]));
    let far = system(anthropic(&text, 15, &[27]));
    for (later, want) in [
        (reach, None),
        (back, Some(Cause::BreakpointMoved)),
        (far, Some(Cause::LookbackExceeded)),
    ] {
        let v = engine_run(&[exchange(&body), exchange(&later)]);
        assert_eq!(v[1].cause, want, "{:?}", v[1].breakpoints);
        if want.is_some() {
            // The system's entry is still read; the messages after it are lost.
            assert!(v[1].tokens_lost > 0 && v[1].tokens_lost < v[1].common_tokens);
        }
    }
}

#[test]
fn a_message_re_sent_with_other_whitespace_is_serialization_only() {
    // Found by the accuracy benchmark: a message re-sent pretty-printed (another JSON writer)
    // is the same message to the provider, which parses it; only a string's own spacing
    // counts. Here an assistant message's tool call, an object inside the message.
    let call = r#"{"role":"assistant","content":"r","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}}]}"#;
    let spaced = r#"{"role": "assistant", "content": "r", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    ]}"#;
    let body = |m: &str, more: &str| {
        format!(
            r#"{{"model":"m","messages":[{{"role":"system","content":"S"}},{{"role":"user","content":"q"}},{m},{{"role":"tool","tool_call_id":"c1","content":"ok"}}{more}]}}"#
        )
    };
    let e = body(call, "");
    let l = body(spaced, r#",{"role":"assistant","content":"done"}"#);
    let v = engine_run(&[at(&e, None), at(&l, None)]);
    assert_eq!(v[1].cause, None, "{:?}", v[1]);
    assert_eq!(
        v[1].changes.first().map(|c| c.cause.kind()),
        Some(CauseKind::SerializationOnly)
    );
    // Spacing inside a string is the text: an edit.
    let edited = l.replace(r#""content": "r""#, r#""content": "r ""#);
    let v = engine_run(&[at(&e, None), at(&edited, None)]);
    assert_eq!(v[1].cause, Some(Cause::EditInPlace), "{:?}", v[1]);
}
