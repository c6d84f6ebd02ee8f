//! `cacheline audit` over hand-written logs in `fixtures/audit/` whose divergence points are
//! known, over malformed input, and over a long generated log in bounded memory.

use std::io::BufReader;
use std::path::{Path, PathBuf};

use prompt_measure::audit::{
    AuditSummary, Cause, CauseKind, Event, Line, LineReader, RequestAudit, audit_reader,
};
use prompt_measure::synthetic::{Responses, SyntheticLog, write_log};
use prompt_measure::{AuditConfig, Auditor, O200kBase, Rule, SimConfig};
use proptest::prelude::*;

pub(crate) fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/audit")
        .join(name)
}

fn tokenizer() -> &'static O200kBase {
    O200kBase::shared().unwrap_or_else(|e| panic!("{e}"))
}

pub(crate) struct Audited {
    pub(crate) requests: Vec<RequestAudit>,
    pub(crate) skipped: Vec<u64>,
    pub(crate) summary: AuditSummary,
}

pub(crate) fn audit_bytes(name: &str, bytes: &[u8], config: AuditConfig) -> Audited {
    let mut auditor = Auditor::new(tokenizer(), config);
    let (mut requests, mut skipped) = (Vec::new(), Vec::new());
    audit_reader(
        BufReader::new(bytes),
        Path::new(name),
        &mut auditor,
        |event| {
            match event {
                Event::Request(r) => requests.push(r.clone()),
                Event::Skipped(e) => skipped.push(e.line),
            }
            Ok(())
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    Audited {
        requests,
        skipped,
        summary: auditor.summary(),
    }
}

pub(crate) fn audit(name: &str) -> Audited {
    let path = fixture(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    audit_bytes(name, &bytes, AuditConfig::default())
}

/// (predecessor line, cause, JSON path and byte offset of the cause's change) of a request.
pub(crate) fn point(r: &RequestAudit) -> (Option<u64>, Option<CauseKind>, Option<(String, usize)>) {
    let v = &r.verdict;
    let change = v
        .cause
        .as_ref()
        .and_then(|c| v.changes.iter().find(|x| x.cause == *c));
    (
        v.predecessor.as_ref().map(|p| p.tag),
        v.cause.as_ref().map(Cause::kind),
        change.map(|c| (c.json_path.clone(), c.divergence.byte_offset)),
    )
}

fn path(p: &str, offset: usize) -> Option<(String, usize)> {
    Some((p.to_owned(), offset))
}

#[test]
fn a_head_rewrite_is_found_at_message_0_where_the_date_changed() {
    let a = audit("head_rewrite.jsonl");
    assert_eq!(a.requests.len(), 3);
    assert_eq!(
        point(&a.requests[0]),
        (None, Some(CauseKind::ColdStart), None)
    );
    // Line 2 extends line 1 (below OpenAI's 1,024-token minimum, so nothing is served).
    assert_eq!(
        point(&a.requests[1]),
        (Some(1), Some(CauseKind::BelowMinimum), None)
    );
    let r = &a.requests[2];
    assert_eq!(
        point(r),
        (
            Some(2),
            Some(CauseKind::SystemChanged),
            path("messages[0]", 178)
        )
    );
    let d = &r.verdict.changes[0].divergence;
    assert_eq!(d.producer.as_deref(), Some("system"));
    assert!(d.excerpt.earlier.contains("2026-11-30"), "{:?}", d.excerpt);
    assert!(d.excerpt.later.contains("2026-12-01"), "{:?}", d.excerpt);
    // Everything of line 2 was keyed on the system message, but line 2 is below OpenAI's
    // minimum: the provider cached none of it, so the break loses nothing, and says so.
    assert_eq!(r.verdict.tokens_lost, 0);
    assert!(r.verdict.nothing_cached(), "{:?}", r.verdict);
    // Top breakers rank tokens lost: a break that lost none is not among them.
    assert!(
        a.summary.top_breakers.is_empty(),
        "{:?}",
        a.summary.top_breakers
    );
}

#[test]
fn a_tool_schema_reorder_is_found_in_the_tools_array() {
    let a = audit("tool_reorder.jsonl");
    let r = &a.requests[1];
    assert_eq!(
        point(r),
        (
            Some(1),
            Some(CauseKind::ToolsChanged),
            path("tools[0]", 407)
        )
    );
    assert_eq!(
        r.verdict.cause,
        Some(Cause::ToolsChanged {
            change: prompt_wire::ToolChange::Reordered,
            name: "grep".into()
        })
    );
    let d = &r.verdict.changes[0].divergence;
    assert!(d.excerpt.earlier.contains("read_file") && d.excerpt.later.contains("grep"));
    // Nothing but the tools changed: the next request extends this one.
    assert_eq!(
        point(&a.requests[2]),
        (Some(2), Some(CauseKind::BelowMinimum), None)
    );
    assert!(a.requests[2].verdict.changes.is_empty());
}

#[test]
fn a_per_turn_injected_message_is_a_removal_where_it_was() {
    let a = audit("injected_message.jsonl");
    for (r, (at, offset)) in a.requests[1..]
        .iter()
        .zip([("messages[1]", 111), ("messages[3]", 327)])
    {
        assert_eq!(
            point(r),
            (Some(r.line - 1), Some(CauseKind::Removed), path(at, offset))
        );
        let d = &r.verdict.changes[0].divergence;
        assert_eq!(d.producer.as_deref(), Some("user"));
        assert!(d.excerpt.earlier.contains("<context>"), "{:?}", d.excerpt);
        // A short log, below its provider's minimum: a break that loses nothing.
        assert!(r.verdict.nothing_cached(), "{:?}", r.verdict);
    }
    assert_eq!(a.summary.causes.get(&CauseKind::Removed), Some(&2));
}

#[test]
fn an_append_only_log_diverges_nowhere_and_loses_nothing() {
    let a = audit("append_only.jsonl");
    for r in &a.requests[1..] {
        assert_eq!(
            point(r),
            (Some(r.line - 1), Some(CauseKind::BelowMinimum), None)
        );
        assert!(r.verdict.changes.is_empty(), "{:?}", r.verdict.changes);
        assert_eq!(r.verdict.tokens_lost, 0);
        // Every token of the previous request is reusable, and llama.cpp reuses all of them.
        let previous = a.requests[(r.line - 2) as usize].tokens;
        assert_eq!(r.verdict.common_tokens, previous);
        assert_eq!(r.cached.get(&Rule::Limit), Some(&previous));
        assert_eq!(r.cached.get(&Rule::LlamaCpp), Some(&previous));
    }
    assert!(a.summary.top_breakers.is_empty());
    // The responses' usage is the hit rate: 128 cached of 180 + 220 prompt tokens.
    assert_eq!(a.summary.hit_rate_source, "reported usage (2 requests)");
    assert!((a.summary.hit_rate - 128.0 / 400.0).abs() < 1e-12);
    assert!(a.requests[0].reported.is_none());
    assert_eq!(
        a.requests[2].reported.map(|r| r.usage.cache_read),
        Some(128)
    );
}

#[test]
fn a_reserialized_message_is_serialization_only_and_loses_nothing() {
    let a = audit("reserialized.jsonl");
    let v = &a.requests[1].verdict;
    assert_eq!(v.changes.len(), 1, "{:?}", v.changes);
    assert_eq!(v.changes[0].cause, Cause::SerializationOnly);
    assert_eq!(v.changes[0].json_path, "messages[1]");
    assert_eq!(v.tokens_lost, 0);
    assert_eq!(v.common_tokens, a.requests[0].tokens);
}

#[test]
fn malformed_lines_are_reported_with_their_line_number_and_skipped() {
    let a = audit("malformed.jsonl");
    assert_eq!(a.skipped, vec![2, 3, 5, 6, 8, 9]);
    assert_eq!(
        a.requests.iter().map(|r| r.line).collect::<Vec<_>>(),
        vec![1, 7]
    );
    assert_eq!(point(&a.requests[1]).0, Some(1));
    assert!(a.requests[1].verdict.changes.is_empty());
    assert_eq!((a.summary.requests, a.summary.malformed), (2, 6));
}

#[test]
fn a_long_log_streams_in_bounded_memory() {
    let mut log = Vec::new();
    let spec = SyntheticLog {
        concurrent: 4,
        turns: 12,
        target_bytes: 1 << 20,
        seed: 7,
        ..SyntheticLog::default()
    };
    let written = write_log(&mut log, &spec).unwrap_or_else(|e| panic!("{e}"));
    let config = AuditConfig::default()
        .with_sim(
            SimConfig::default()
                .with_window(6)
                .with_window_tokens(200_000)
                .with_block_capacity(2_000)
                .with_anthropic_capacity(50),
        )
        .with_token_cache(20_000)
        .with_max_breakers(8);
    let a = audit_bytes("synthetic.jsonl", &log, config);
    assert_eq!(a.summary.requests, written.lines);
    assert_eq!(a.summary.malformed, 0);
    let kept = a.summary.retained;
    assert!(kept.requests <= 6, "{kept:?}");
    assert!(kept.request_tokens <= 200_000, "{kept:?}");
    assert!(kept.blocks <= 4_000, "{kept:?}");
    assert!(kept.anthropic_entries <= 100, "{kept:?}");
    // A segment larger than the cache's budget is still admitted; the bound is per
    // generation, two generations.
    assert!(
        a.summary.retained_cache_tokens <= 2 * 20_000 + 10_000,
        "{}",
        a.summary.retained_cache_tokens
    );
    // Each kind of client in the generated log is recognized.
    for cause in [
        CauseKind::SystemChanged,
        CauseKind::Removed,
        CauseKind::ToolsChanged,
    ] {
        assert!(
            a.summary.causes.get(&cause).copied().unwrap_or(0) > 0,
            "{cause:?}: {:?}",
            a.summary.causes
        );
    }
    let extended = a
        .requests
        .iter()
        .filter(|r| r.verdict.predecessor.is_some() && r.verdict.changes.is_empty())
        .count();
    assert!(extended > 0, "{:?}", a.summary.causes);
    assert!(a.summary.engine.requests > 0);
    // Interleaved sessions: with the window holding all of them, each request finds its
    // own session's previous request.
    assert!(a.summary.limit_share > 0.8, "{}", a.summary.limit_share);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn arbitrary_lines_never_panic(lines in proptest::collection::vec(prop_oneof![
        any::<String>(),
        "\\{\"messages\":\\[(\\{\"role\":\"(user|system)\",\"content\":\"[a-z ]{0,20}\"\\},?){0,4}\\]\\}",
        "\\{\"request\":\\{\"messages\":\\[\\]\\},\"response\":(null|1|\\{\\}|\\{\"usage\":\\{\"prompt_tokens\":-1\\}\\})\\}",
        "\\{\"tools\":(null|\\[\\]|3),\"messages\":\\[\\{\\}\\]\\}",
    ], 0..12)) {
        let text = lines.join("\n");
        let a = audit_bytes("random.jsonl", text.as_bytes(), AuditConfig::default());
        prop_assert_eq!(a.summary.requests as usize, a.requests.len());
        prop_assert_eq!(a.summary.malformed as usize, a.skipped.len());
        for r in &a.requests {
            for (rule, cached) in &r.cached {
                prop_assert!(*cached <= r.tokens, "{}", rule);
            }
        }
    }
}

/// Writes the generated log used for the figures in docs/measurements.md:
/// `CACHELINE_SYNTHETIC_LOG=/tmp/log.jsonl CACHELINE_SYNTHETIC_MB=100 cargo test -p
/// prompt-measure --test measure -- --ignored write_synthetic_log`
/// (`CACHELINE_SYNTHETIC_RESPONSES=whole` or `streamed`: every request with its reply).
#[test]
#[ignore = "writes a large file; run by hand"]
fn write_synthetic_log() {
    let path = std::env::var("CACHELINE_SYNTHETIC_LOG")
        .unwrap_or_else(|_| panic!("set CACHELINE_SYNTHETIC_LOG to the output path"));
    let mb: u64 = std::env::var("CACHELINE_SYNTHETIC_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut out = std::io::BufWriter::new(file);
    let responses = match std::env::var("CACHELINE_SYNTHETIC_RESPONSES").as_deref() {
        Ok("whole") => Responses::Whole,
        Ok("streamed") => Responses::Streamed,
        _ => Responses::WithoutUsage,
    };
    let spec = SyntheticLog {
        target_bytes: mb << 20,
        responses,
        ..SyntheticLog::default()
    };
    let written = write_log(&mut out, &spec).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(written.bytes >= mb << 20);
    eprintln!("{path}: {} lines, {} bytes", written.lines, written.bytes);
}

#[test]
fn a_new_conversation_shares_the_system_prompt_and_loses_nothing() {
    let log = concat!(
        r#"{"messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Fix the CI."},{"role":"assistant","content":"Done."},{"role":"user","content":"Thanks."}]}"#,
        "\n",
        r#"{"messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Write the changelog."}]}"#,
        "\n",
        // A retry of the first turn extends it: not another new conversation.
        r#"{"messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Write the changelog."}]}"#,
        "\n",
    );
    let a = audit_bytes(
        "two-conversations.jsonl",
        log.as_bytes(),
        AuditConfig::default(),
    );
    let v = &a.requests[1].verdict;
    assert!(v.new_conversation);
    assert_eq!(
        (v.cause.clone(), v.tokens_lost),
        (Some(Cause::ColdStart), 0)
    );
    assert!(v.common_tokens > 0, "{v:?}");
    assert_eq!(a.summary.new_conversations, 2);
    let retry = &a.requests[2].verdict;
    assert_eq!(retry.predecessor.as_ref().map(|p| p.tag), Some(2));
    assert!(retry.changes.is_empty(), "{:?}", retry.changes);
    assert!(a.summary.top_breakers.is_empty());
}

#[test]
fn an_injected_system_message_right_after_the_prompt_is_a_removal_not_a_head_rewrite() {
    let log = concat!(
        r#"{"messages":[{"role":"system","content":"You are a coding agent."},{"role":"system","content":"Recalled: the user likes small commits."},{"role":"user","content":"Fix the CI."}]}"#,
        "\n",
        r#"{"messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Fix the CI."},{"role":"assistant","content":"Done."},{"role":"system","content":"Recalled: CI runs clippy."},{"role":"user","content":"Thanks."}]}"#,
        "\n",
    );
    let a = audit_bytes(
        "injected-system.jsonl",
        log.as_bytes(),
        AuditConfig::default(),
    );
    let r = &a.requests[1];
    // Chat's leading system messages are its system field: the recalled one is gone.
    assert_eq!(
        point(r),
        (
            Some(1),
            Some(CauseKind::SystemChanged),
            path("messages[1]", 66)
        )
    );
}

fn request(messages: &[(&str, &str)]) -> String {
    let messages: Vec<serde_json::Value> = messages
        .iter()
        .map(|(role, content)| serde_json::json!({"role": role, "content": content}))
        .collect();
    serde_json::json!({ "messages": messages }).to_string()
}

#[test]
fn a_line_longer_than_the_cap_is_skipped_with_its_number_and_later_lines_are_audited() {
    let long_content = "word ".repeat(20_000);
    let log = [
        request(&[
            ("system", "You are a coding agent."),
            ("user", "Fix the CI."),
        ]),
        request(&[
            ("system", "You are a coding agent."),
            ("user", &long_content),
        ]),
        String::new(),
        request(&[
            ("system", "You are a coding agent."),
            ("user", "Fix the CI."),
            ("assistant", "Done."),
            ("user", "Thanks."),
        ]),
    ]
    .join("\n");
    let long_len = log.lines().nth(1).map_or(0, str::len);
    let config = AuditConfig::default().with_max_line_bytes(4096);
    let mut auditor = Auditor::new(tokenizer(), config);
    let (mut lines, mut skipped) = (Vec::new(), Vec::new());
    // Small chunks: the long line is consumed piece by piece.
    let reader = BufReader::with_capacity(256, log.as_bytes());
    audit_reader(reader, Path::new("long.jsonl"), &mut auditor, |event| {
        match event {
            Event::Request(r) => lines.push(r.line),
            Event::Skipped(e) => skipped.push((e.line, e.to_string())),
        }
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(lines, vec![1, 4]);
    assert_eq!(
        skipped,
        vec![(
            2,
            format!(
                "long.jsonl:2: skipped: line 2 is longer than the 4096-byte limit ({long_len} bytes)"
            )
        )]
    );
    let summary = auditor.summary();
    assert_eq!((summary.requests, summary.malformed), (2, 1));
    // Line 4 extends line 1 (a model no provider is known for: no minimum, so nothing to
    // say of it): the skipped line did not disturb the audit.
    assert_eq!(summary.causes.get(&CauseKind::ColdStart), Some(&1));
    assert_eq!(summary.causes.values().sum::<u64>(), 1);
    assert!(summary.top_breakers.is_empty());
    // push_line applies the same cap to a line handed over whole.
    let mut auditor = Auditor::new(tokenizer(), config);
    let long = log.lines().nth(1).unwrap_or_default();
    assert!(auditor.push_line(9, long).is_err());
    assert_eq!(auditor.summary().malformed, 1);
}

#[test]
fn the_line_reader_never_holds_more_than_its_cap() {
    const CAP: usize = 1000;
    let long = vec![b'x'; 1 << 20];
    let mut data = Vec::new();
    data.extend_from_slice(b"short\r\n");
    data.extend_from_slice(&long);
    data.push(b'\n');
    data.extend_from_slice(&vec![b'y'; CAP]); // exactly the cap: kept
    data.push(b'\n');
    data.extend_from_slice(&vec![b'z'; CAP + 1]); // one byte over: skipped
    data.push(b'\n');
    data.push(b'\n'); // an empty line
    data.extend_from_slice(&long); // the last line, without a newline
    let expected: Vec<(u64, Option<usize>)> = vec![
        (1, Some(5)),
        (2, None),
        (3, Some(CAP)),
        (4, None),
        (5, Some(0)),
        (6, None),
    ];
    // Whatever the chunks the BufRead hands over: 7 bytes, 8 KiB, or the whole input at once.
    for chunk in [7, 8 << 10, data.len()] {
        let mut reader = LineReader::new(BufReader::with_capacity(chunk, &data[..]), CAP);
        let mut seen = Vec::new();
        while let Some(line) = reader.next_line().unwrap_or_else(|e| panic!("{e}")) {
            let entry = match line {
                Line::Text(bytes) => Some(bytes.len()),
                Line::TooLong(bytes) => {
                    assert!(bytes > CAP as u64);
                    None
                }
            };
            seen.push((reader.line_number(), entry));
            assert!(
                reader.buffer_capacity() <= CAP,
                "chunk {chunk}: capacity {} after line {}",
                reader.buffer_capacity(),
                reader.line_number()
            );
        }
        assert_eq!(seen, expected, "chunk {chunk}");
    }
    // The length of a skipped line is counted in full.
    let mut reader = LineReader::new(&data[7..], CAP);
    let first = reader.next_line().ok().flatten();
    assert_eq!(first, Some(Line::TooLong(1 << 20)));
}

#[test]
fn reported_usage_that_would_overflow_the_sum_is_set_aside() {
    let body = request(&[("user", "Hi.")]);
    let line = format!(
        r#"{{"request": {body}, "response": {{"usage": {{"input_tokens": 18446744073709551615, "cache_read_input_tokens": 0}}}}}}"#
    );
    let log = format!("{line}\n{line}\n");
    let a = audit_bytes("overflow.jsonl", log.as_bytes(), AuditConfig::default());
    assert_eq!(a.requests.len(), 2);
    let reported = a
        .summary
        .reported
        .unwrap_or_else(|| panic!("no reported usage"));
    assert_eq!(
        (
            reported.requests,
            reported.overflowed,
            reported.total.input()
        ),
        (1, 1, u64::MAX)
    );
    assert_eq!(
        a.summary.hit_rate_source,
        "reported usage (1 requests, 1 more set aside: their counts overflow the sum)"
    );
    // An inconsistent body is reported as such on its request, and not summed.
    let wrapped = format!(
        r#"{{"request": {body}, "response": {{"usage": {{"prompt_cache_hit_tokens": 18446744073709551615, "prompt_cache_miss_tokens": 1}}}}}}"#
    );
    let a = audit_bytes("wrapped.jsonl", wrapped.as_bytes(), AuditConfig::default());
    assert!(a.requests[0].reported.is_none());
    let error = a.requests[0].reported_error.clone().unwrap_or_default();
    assert!(
        error.starts_with("deepseek usage: `prompt_cache_hit_tokens`"),
        "{error}"
    );
    assert!(a.summary.reported.is_none());
}

#[test]
fn a_large_tools_change_is_described_briefly() {
    let tools: Vec<serde_json::Value> = (0..5000)
        .map(|i| serde_json::json!({"type": "function", "function": {"name": format!("tool_{i}")}}))
        .collect();
    let reversed: Vec<serde_json::Value> = tools.iter().rev().cloned().collect();
    let mut edited = tools.clone();
    edited[4999] = serde_json::json!({"type": "function", "function": {"name": "tool_new"}});
    let line = |tools: &[serde_json::Value], turns: usize| {
        let mut messages = vec![serde_json::json!({"role": "user", "content": "Hi."})];
        for _ in 0..turns {
            messages.push(serde_json::json!({"role": "assistant", "content": "Hello."}));
        }
        serde_json::json!({"tools": tools, "messages": messages}).to_string()
    };
    let log = [line(&tools, 0), line(&reversed, 1), line(&edited, 2)].join("\n");
    let a = audit_bytes("tools.jsonl", log.as_bytes(), AuditConfig::default());
    let changes = |i: usize| a.requests[i].verdict.changes.clone();
    // 5,000 tools reversed: one change, named by the tool found where another was.
    let reorder = changes(1);
    assert_eq!(reorder.len(), 1, "{reorder:?}");
    assert_eq!(
        reorder[0].cause,
        Cause::ToolsChanged {
            change: prompt_wire::ToolChange::Reordered,
            name: "tool_4999".into()
        }
    );
    // Line 3 continues line 2's history (its tools sorted back, one replaced): against
    // line 2, the tool gone and the new one, nothing else.
    assert_eq!(
        a.requests[2].verdict.predecessor.as_ref().map(|p| p.tag),
        Some(2)
    );
    let changed: Vec<String> = changes(2).iter().map(|c| c.cause.to_string()).collect();
    assert_eq!(
        changed,
        ["tool `tool_4999` was removed", "tool `tool_new` was added"]
    );
    assert!(
        a.requests[2]
            .verdict
            .changes
            .iter()
            .all(|c| c.divergence.excerpt.earlier.len() < 600)
    );
}

#[test]
fn a_long_role_is_shortened_where_it_is_quoted() {
    let role = "r".repeat(100_000);
    let log = [
        request(&[(role.as_str(), "a"), ("user", "Hi.")]),
        request(&[
            (role.as_str(), "b"),
            ("user", "Hi."),
            ("assistant", "Hello."),
        ]),
    ]
    .join("\n");
    let a = audit_bytes("role.jsonl", log.as_bytes(), AuditConfig::default());
    let v = &a.requests[1].verdict;
    let quoted = v.changes[0]
        .divergence
        .producer
        .as_deref()
        .unwrap_or_default();
    assert!(
        quoted.len() <= prompt_core::input::EXCERPT_BYTES + '…'.len_utf8() && quoted.ends_with('…'),
        "{} bytes",
        quoted.len()
    );
    assert!(
        serde_json::to_string(v).unwrap_or_default().len() < 2_000,
        "{v:?}"
    );
    assert!(a.summary.top_breakers.iter().all(|b| b.detail.len() < 200));
}
