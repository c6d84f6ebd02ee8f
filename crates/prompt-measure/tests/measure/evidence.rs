//! `prompt_measure::evidence`: one request's proof, collected from a log read twice, on the
//! engine's own elements and changes; and its two printers.

use std::cell::Cell;
use std::path::PathBuf;

use prompt_core::input::InputError;
use prompt_measure::evidence::{
    Evidence, EvidenceError, EvidenceRequest, LineFault, Producer, collect,
};
use prompt_measure::report::{evidence_json, evidence_markdown};
use prompt_measure::{AuditConfig, Auditor, O200kBase};
use serde_json::json;

fn request(line: u64, redact_text: bool) -> EvidenceRequest {
    EvidenceRequest {
        log: PathBuf::from("log.jsonl"),
        line,
        redact_text,
        produced_by: Producer {
            cacheline: "cacheline test".to_owned(),
            command: format!("cacheline evidence log.jsonl --request {line}"),
        },
    }
}

/// The evidence of `line` of a log whose first reading is `first` and every later one
/// `again` (the same log, unless a test rewrites it between the two).
fn collect_from(
    first: &str,
    again: &str,
    line: u64,
    redact_text: bool,
) -> Result<Evidence, EvidenceError> {
    let tokenizer = O200kBase::shared().unwrap_or_else(|e| panic!("{e}"));
    let mut auditor = Auditor::new(tokenizer, AuditConfig::default());
    let reads = Cell::new(0);
    collect(&request(line, redact_text), &mut auditor, || {
        reads.set(reads.get() + 1);
        Ok::<_, InputError>(if reads.get() == 1 { first } else { again }.as_bytes())
    })
}

fn evidence(log: &str, line: u64) -> Evidence {
    collect_from(log, log, line, false).unwrap_or_else(|e| panic!("{e}"))
}

/// An Anthropic request of a session: these tools and messages, after a long system prompt.
fn anthropic(ts: u64, tools: &[&str], messages: &[(&str, &str)]) -> String {
    let filler = "lorem ipsum dolor sit amet ".repeat(200);
    json!({
        "ts": ts,
        "path": "/v1/messages",
        "headers": {"x-claude-code-session-id": "s-1", "user-agent": "claude-cli/2.1.197 (external, sdk-cli)"},
        "request": {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "tools": tools.iter().map(|t| json!({"name": t, "input_schema": {"type": "object"}})).collect::<Vec<_>>(),
            "system": [{"type": "text", "text": format!("You are terse. {filler}")}],
            "messages": messages.iter().map(|(role, text)| json!({"role": role, "content": text})).collect::<Vec<_>>(),
        }
    })
    .to_string()
}

/// The evidence of the second of two requests.
fn second_of(first: String, second: String) -> Evidence {
    evidence(&log(&[first, second]), 2)
}

fn log(lines: &[String]) -> String {
    lines.join("\n") + "\n"
}

#[test]
fn an_edited_message_is_placed_by_the_engine_at_its_first_divergent_byte_on_both_sides() {
    let e = second_of(
        anthropic(
            1_000,
            &["read"],
            &[("user", "Today is Monday."), ("assistant", "ok")],
        ),
        anthropic(
            1_010,
            &["read"],
            &[
                ("user", "Today is Tuesday."),
                ("assistant", "ok"),
                ("user", "more"),
            ],
        ),
    );
    assert_eq!(e.cause.as_deref(), Some("edit_in_place"));
    let path = e.json_path.as_deref().unwrap_or_default();
    assert!(path.starts_with("messages[0]"), "{path}");
    let d = e.divergence.as_ref().unwrap_or_else(|| panic!("{e:?}"));
    let offset = d.byte_offset.unwrap_or_else(|| panic!("{d:?}"));
    // The same offset into the same message of each body: the bodies are alike up to it.
    assert_eq!(d.earlier.byte_offset, Some(offset));
    assert_eq!(d.later.byte_offset, Some(offset));
    assert!(d.earlier.before.ends_with("Today is "), "{d:?}");
    assert_eq!(d.earlier.before, d.later.before);
    assert!(d.earlier.from.starts_with("Monday") && d.later.from.starts_with("Tuesday"));
    assert_eq!(
        (
            d.earlier.line,
            d.later.line,
            e.earlier.as_ref().map(|s| s.line)
        ),
        (1, 2, Some(1))
    );
    assert_eq!(e.changes.len(), 1, "{:?}", e.changes);
    assert_eq!(e.gap_secs, Some(10.0));
}

#[test]
fn the_first_difference_is_the_first_element_the_engine_s_changes_name() {
    let e = second_of(
        anthropic(
            1_000,
            &["read", "write"],
            &[("user", "hi"), ("assistant", "ok")],
        ),
        anthropic(
            1_010,
            &["read", "edit"],
            &[("user", "hi"), ("assistant", "ok"), ("user", "more")],
        ),
    );
    assert_eq!(e.cause.as_deref(), Some("tools_changed"));
    assert_eq!(e.blocks.first_difference.as_deref(), Some("tools[1]"));
    let statuses: Vec<(&str, usize, &str)> = e
        .blocks
        .rows
        .iter()
        .map(|r| (r.group, r.index, r.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("tools", 0, "equal"),
            ("tools", 1, "differs"),
            ("system", 0, "equal"),
            ("messages", 0, "equal"),
            ("messages", 1, "equal"),
            ("messages", 2, "added"),
        ]
    );
    let row = &e.blocks.rows[1];
    assert_eq!(row.label, "edit");
    assert_ne!(row.earlier, row.later);
    // The top-level fields, as bytes: the messages grew, the tools changed.
    let field = |name: &str| e.fields.iter().find(|f| f.name == name).map(|f| f.status);
    assert_eq!(field("tools"), Some("changed"));
    assert_eq!(field("messages"), Some("extended"));
    assert_eq!(field("model"), Some("equal"));
}

#[test]
fn a_request_that_extends_its_predecessor_has_no_first_difference() {
    let e = second_of(
        anthropic(1_000, &["read"], &[("user", "hi")]),
        anthropic(1_010, &["read"], &[("user", "hi"), ("assistant", "ok")]),
    );
    assert_eq!(e.cause, None);
    assert!(e.changes.is_empty() && e.divergence.is_none(), "{e:?}");
    assert_eq!(e.blocks.first_difference, None);
    let markdown = evidence_markdown(&e);
    assert!(
        markdown.contains("**No break**: it extends line 1"),
        "{markdown}"
    );
    assert!(!markdown.contains("**first difference**"), "{markdown}");
}

/// The engine reads a last user message that goes on with more blocks as an extension (a
/// merged message): its row differs, yet it is no first difference, as the verdict says.
#[test]
fn a_last_message_that_goes_on_with_more_blocks_is_no_first_difference() {
    let line = |ts: u64, blocks: &[&str]| {
        let content: Vec<_> = blocks
            .iter()
            .map(|t| json!({"type": "text", "text": t}))
            .collect();
        json!({"ts": ts, "path": "/v1/messages",
               "headers": {"x-claude-code-session-id": "s-1"},
               "request": {"model": "claude-sonnet-4-5", "system": "You are terse.",
                           "messages": [{"role": "user", "content": content}]}})
        .to_string()
    };
    let e = second_of(line(1_000, &["hi"]), line(1_010, &["hi", "more"]));
    assert_eq!(e.cause, None, "{e:?}");
    let last = e.blocks.rows.last().map(|r| (r.group, r.status));
    assert_eq!(last, Some(("messages", "differs")));
    assert_eq!(e.blocks.first_difference, None);
}

#[test]
fn a_cold_start_lists_every_element_and_field_as_sent() {
    let log = log(&[anthropic(1_000, &["read"], &[("user", "hi")])]);
    let e = evidence(&log, 1);
    assert_eq!(e.cause.as_deref(), Some("cold_start"));
    assert!(e.earlier.is_none() && e.divergence.is_none());
    assert!(e.blocks.rows.iter().all(|r| r.status == "sent"));
    assert!(e.fields.iter().all(|f| f.status == "sent"));
    assert_eq!(e.blocks.first_difference, None);
}

#[test]
fn a_header_change_is_the_engine_s_excerpt_of_both_values_with_no_body_offset() {
    let line = |beta: &str, more: bool| {
        let mut messages = vec![
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "hello"}),
        ];
        if more {
            messages.push(json!({"role": "user", "content": "more"}));
        }
        json!({"ts": 1000, "path": "/v1/messages",
               "headers": {"x-claude-code-session-id": "s-1", "anthropic-beta": beta},
               "request": {"model": "claude-sonnet-4-5", "system": "You are terse.", "messages": messages}})
        .to_string()
    };
    let e = second_of(line("beta-one", false), line("beta-two", true));
    assert_eq!(e.json_path.as_deref(), Some("headers.anthropic-beta"));
    let d = e.divergence.unwrap_or_else(|| panic!("no divergence"));
    assert_eq!(d.byte_offset, None);
    assert_eq!(
        (d.earlier.from.as_str(), d.later.from.as_str()),
        ("beta-one", "beta-two")
    );
    assert_eq!((d.earlier.byte_offset, d.later.byte_offset), (None, None));
}

/// A Gemini request with a credential in its headers, its URL's query and a body field.
fn leaky(ts: u64, text: &str) -> String {
    json!({
        "ts": ts,
        "path": "/v1beta/models/gemini-2.5-flash:generateContent?key=SECRET-query-key",
        "headers": {"x-goog-api-key": "SECRET-header", "user-agent": "leaky-agent/0.3.1"},
        "request": {"contents": [
            {"role": "user", "parts": [{"text": text, "api_key": "SECRET-body-key-0123456789"}]},
            {"role": "model", "parts": [{"text": "ok"}]},
        ]},
    })
    .to_string()
}

#[test]
fn no_credential_reaches_the_value_its_debug_print_or_either_printer() {
    let log = log(&[leaky(1_000, "hello there A"), leaky(1_060, "hello there B")]);
    for redact_text in [false, true] {
        let e = collect_from(&log, &log, 2, redact_text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(e.redaction.credentials_hidden, 2);
        assert_eq!(e.redaction.text_redacted, redact_text);
        assert_eq!(
            e.later.path.as_deref(),
            Some("/v1beta/models/gemini-2.5-flash:generateContent")
        );
        let json = evidence_json(&e).unwrap_or_else(|e| panic!("{e}"));
        for text in [evidence_markdown(&e), json, format!("{e:?}")] {
            assert!(
                !text.contains("SECRET"),
                "a credential was written:\n{text}"
            );
        }
    }
}

#[test]
fn the_json_is_the_value_s_serialization_ending_in_a_newline() {
    let e = second_of(
        anthropic(1_000, &["read"], &[("user", "hi")]),
        anthropic(1_010, &["edit"], &[("user", "hi"), ("assistant", "ok")]),
    );
    let json = evidence_json(&e).unwrap_or_else(|e| panic!("{e}"));
    assert!(json.ends_with("}\n"));
    let parsed: serde_json::Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        parsed,
        serde_json::to_value(&e).unwrap_or_else(|e| panic!("{e}"))
    );
    assert_eq!(parsed["schema"], 1);
    assert_eq!(parsed["blocks"]["rows"][0]["group"], "tools");
    assert_eq!(parsed["blocks"]["rows"][0]["status"], "differs");
    assert_eq!(parsed["produced_by"]["cacheline"], "cacheline test");
}

#[test]
fn a_line_read_again_must_be_the_line_audited() {
    let audited = log(&[
        anthropic(1_000, &["read"], &[("user", "hi")]),
        anthropic(1_010, &["read"], &[("user", "hi"), ("assistant", "ok")]),
    ]);
    // The predecessor's line, rewritten between the two readings.
    let rewritten = audited.replacen(r#""ts":1000"#, r#""ts":1001"#, 1);
    let result = collect_from(&audited, &rewritten, 2, false);
    let message = result.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.starts_with("log.jsonl:1: the line is not the one audited"),
        "{message}"
    );
    // The request's own line.
    let rewritten = audited.replacen(r#""ts":1010"#, r#""ts":1011"#, 1);
    let result = collect_from(&audited, &rewritten, 2, false);
    assert!(
        matches!(
            &result,
            Err(EvidenceError::Line {
                line: 2,
                fault: LineFault::Changed,
                ..
            })
        ),
        "{result:?}"
    );
}

#[test]
fn a_line_past_the_end_blank_or_skipped_is_an_error_naming_the_log_and_the_line() {
    let log = format!(
        "not json\n\n{}\n",
        anthropic(1_000, &["read"], &[("user", "hi")])
    );
    let error = |line| match collect_from(&log, &log, line, false) {
        Ok(e) => panic!("{e:?}"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        error(9),
        "log.jsonl:9: no such request: the log has 3 line(s)"
    );
    assert_eq!(error(2), "log.jsonl:2: a blank line, not a request");
    assert!(
        error(1).starts_with("log.jsonl:1: the audit skips this line: not a JSON object"),
        "{}",
        error(1)
    );
    // The log emptied before the second reading.
    let gone = collect_from(&log, "", 3, false);
    assert!(
        matches!(
            &gone,
            Err(EvidenceError::Line {
                line: 3,
                fault: LineFault::Gone(3),
                ..
            })
        ),
        "{gone:?}"
    );
}
