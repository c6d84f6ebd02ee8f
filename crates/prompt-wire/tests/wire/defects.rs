//! Reproducers for the defects of issue 20 that live in prompt-wire, one test per defect,
//! named after the defect it reproduces.

use prompt_core::ApiKind;
use prompt_core::input::EXCERPT_BYTES;
use prompt_wire::{Cause, Verdict, compare, read_reply};

/// docs/wire.md: every diagnostic stays under 2 KiB.
const DIAGNOSTIC_LIMIT: usize = 2048;

/// A megabyte of attacker text, in a JSON string.
fn huge() -> String {
    "x".repeat(1 << 20)
}

/// Defect 4: a reply's diagnostics quote a bounded excerpt of what the provider sent: a bad
/// `role`, a Responses `status`, a Gemini `blockReason` or `finishReason`, a duplicated key.
#[test]
fn defect4_reply_diagnostics_quote_a_bounded_excerpt() {
    let h = huge();
    let cases = [
        (
            ApiKind::OpenAi,
            format!(r#"{{"choices":[{{"message":{{"role":"{h}","content":"hi"}}}}]}}"#),
        ),
        (
            ApiKind::OpenAiResponses,
            format!(r#"{{"output":[],"status":"{h}"}}"#),
        ),
        (
            ApiKind::Gemini,
            format!(r#"{{"promptFeedback":{{"blockReason":"{h}"}}}}"#),
        ),
        (
            ApiKind::Gemini,
            format!(r#"{{"candidates":[{{"finishReason":"{h}"}}]}}"#),
        ),
        (
            ApiKind::Gemini,
            format!(r#"{{"candidates":[{{"finishReason":"{h}","content":{{}}}}]}}"#),
        ),
        (ApiKind::Anthropic, format!(r#"{{"{h}":1,"{h}":2}}"#)),
        (
            ApiKind::OpenAi,
            format!(r#"{{"error":{{"message":"{h}"}}}}"#),
        ),
    ];
    for (api, body) in cases {
        let err = read_reply(api, body.as_bytes()).unwrap_err();
        let shown = err.to_string();
        assert!(
            shown.len() < DIAGNOSTIC_LIMIT,
            "{api:?}: a {}-byte diagnostic: {}…",
            shown.len(),
            &shown[..200]
        );
        assert!(shown.contains("xxxx…"), "{api:?}: {shown}");
    }
}

/// Defect 4: the guard quotes a bounded excerpt of a tool's name (and of a message's role),
/// in the cause and in the divergence's producer.
#[test]
fn defect4_guard_quotes_bounded_tool_names_and_roles() {
    let h = huge();
    let earlier = r#"{"model":"m","tools":[],"messages":[{"role":"user","content":"hi"}]}"#;
    let later = format!(
        r#"{{"model":"m","tools":[{{"type":"function","function":{{"name":"{h}"}}}}],"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let Verdict::Breaks(b) = compare(earlier.as_bytes(), later.as_bytes()).unwrap() else {
        panic!("a new tool breaks the cache");
    };
    let quoted = EXCERPT_BYTES + '…'.len_utf8();
    assert!(
        matches!(&b.cause, Cause::ToolsChanged { change: prompt_wire::ToolChange::Added, name } if name.len() == quoted),
        "{:?}",
        (&b.cause.to_string()[..20], b.cause.to_string().len())
    );
    let json = serde_json::to_string(&b).unwrap();
    assert!(json.len() < DIAGNOSTIC_LIMIT, "{} bytes", json.len());
    assert!(b.to_string().len() < DIAGNOSTIC_LIMIT);

    let earlier = format!(r#"{{"messages":[{{"role":"{h}","content":"a"}}]}}"#);
    let later = format!(r#"{{"messages":[{{"role":"{h}","content":"b"}}]}}"#);
    let Verdict::Breaks(b) = compare(earlier.as_bytes(), later.as_bytes()).unwrap() else {
        panic!("an edit breaks the cache");
    };
    let json = serde_json::to_string(&b).unwrap();
    assert!(json.len() < DIAGNOSTIC_LIMIT, "{} bytes", json.len());
}

/// Defect 5: a text block stands for its string content whatever the order of its keys (or
/// its spacing): `{"text":…,"type":"text"}`, `{"type":"text","text":…}` and the string
/// itself are the same message; another text, or another key, is still an edit.
#[test]
fn defect5_text_blocks_compare_by_meaning_whatever_their_key_order() {
    let body = |content: &str| {
        format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":{content}}},{{"role":"assistant","content":"ok"}}]}}"#
        )
    };
    let longer = |content: &str| {
        format!(
            r#"{{"model":"m","messages":[{{"role":"user","content":{content}}},{{"role":"assistant","content":"ok"}},{{"role":"user","content":"next"}}]}}"#
        )
    };
    let same = [
        r#""hi""#,
        r#"[{"type":"text","text":"hi"}]"#,
        r#"[{"text":"hi","type":"text"}]"#,
        r#"[ { "text" : "hi" , "type" : "text" } ]"#,
        r#"[{"text":"hi","type":"text","cache_control":{"type":"ephemeral"}}]"#,
    ];
    for a in same {
        for b in same {
            let verdict = compare(body(a).as_bytes(), longer(b).as_bytes()).unwrap();
            assert!(verdict.extends(), "{a} then {b}: {verdict:?}");
        }
    }
    for other in [
        r#"[{"text":"hello","type":"text"}]"#,
        r#"[{"text":"hi","type":"text","lang":"en"}]"#,
        r#"[{"text":"hi","type":"input_text"}]"#,
    ] {
        let verdict = compare(body(same[2]).as_bytes(), longer(other).as_bytes()).unwrap();
        let Verdict::Breaks(b) = verdict else {
            panic!("{other}: {verdict:?}")
        };
        assert_eq!(b.cause, Cause::EditInPlace, "{other}");
    }
}
