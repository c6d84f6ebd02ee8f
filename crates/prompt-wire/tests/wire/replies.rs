//! Replies read back: each provider's documented response recorded and carried
//! byte-for-byte in the next body; errors typed, nothing recorded.

use std::error::Error as _;

use prompt_core::profile::Provider;
use prompt_core::session::ToolResult;
use prompt_core::{ApiKind, ComposeError};
use prompt_wire::{WireError, read_reply};
use serde_json::json;

use crate::common::{APIS, reply, session, values, wire};
use crate::fixtures::fixture;

#[test]
fn every_documented_reply_is_read_with_its_tool_calls_text_and_usage() {
    let cases = [
        (
            ApiKind::OpenAi,
            "call_12345xyz",
            "get_weather",
            r#"{"location":"Paris, France"}"#,
            "",
            Provider::OpenAi,
        ),
        (
            ApiKind::LlamaCpp,
            "Yk2qf1t3JTqvB0b0Nj3x9a1mLw0ZbNqE",
            "get_weather",
            r#"{"location":"Paris, France"}"#,
            "",
            Provider::LlamaCpp,
        ),
        (
            ApiKind::OpenAiResponses,
            "call_12345xyz",
            "get_weather",
            r#"{"location":"Paris, France"}"#,
            "Let me check.",
            Provider::OpenAi,
        ),
        (
            ApiKind::Anthropic,
            "toolu_01A09q90qw90lq917835lq9",
            "get_weather",
            r#"{"location": "San Francisco, CA"}"#,
            "Let me check.",
            Provider::Anthropic,
        ),
        (
            ApiKind::Gemini,
            "",
            "get_current_temperature",
            r#"{"location": "London"}"#,
            "Let me check.",
            Provider::Gemini,
        ),
    ];
    for (api, id, name, arguments, text, provider) in cases {
        let reply = read_reply(api, &fixture(api, "response_tool_calls.json")).unwrap();
        assert_eq!(reply.tool_calls.len(), 1, "{api:?}");
        let call = &reply.tool_calls[0];
        if api == ApiKind::Gemini {
            assert!(call.id.starts_with("gemini-"), "{}", call.id);
        } else {
            assert_eq!(call.id, id);
        }
        assert_eq!(
            (call.name.as_str(), call.arguments.as_str()),
            (name, arguments),
            "{api:?}"
        );
        assert_eq!(reply.text, text, "{api:?}");
        let usage = reply.usage.unwrap();
        assert_eq!(usage.provider, provider, "{api:?}");
        let usage: serde_json::Value = serde_json::from_str(&usage.json).unwrap();
        assert!(usage.is_object());
        assert!(reply.stop_reason.is_some(), "{api:?}");
    }
}

/// The provider's own bytes the next request must carry, from a documented reply.
fn verbatim(api: ApiKind, body: &str) -> Vec<String> {
    let raw: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_str(body).unwrap();
    let elements = |array: &str| -> Vec<String> {
        let items: Vec<&serde_json::value::RawValue> = serde_json::from_str(array).unwrap();
        items.iter().map(|r| r.get().to_owned()).collect()
    };
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => {
            let choices: Vec<std::collections::BTreeMap<String, &serde_json::value::RawValue>> =
                serde_json::from_str(raw["choices"].get()).unwrap();
            vec![choices[0]["message"].get().to_owned()]
        }
        ApiKind::OpenAiResponses => elements(raw["output"].get()),
        ApiKind::Anthropic => elements(raw["content"].get()),
        ApiKind::Gemini => {
            let candidates: Vec<serde_json::Value> =
                serde_json::from_str(raw["candidates"].get()).unwrap();
            assert!(candidates[0]["content"]["parts"].is_array());
            let content = body.find("\"parts\": [").unwrap();
            let parts = &body[content + "\"parts\": ".len()..];
            let end = parts.find("],\n        \"role\"").unwrap();
            elements(&parts[..=end])
        }
    }
}

#[test]
fn a_documented_reply_is_recorded_and_carried_byte_for_byte_in_the_next_body() {
    for api in APIS {
        let mut s = session(api);
        let mut w = wire(api);
        w.body(&s.turn(values("a", 1), "What's the weather?").unwrap())
            .unwrap();
        let body = String::from_utf8(fixture(api, "response_tool_calls.json")).unwrap();
        let reply = w.record_reply(&mut s, body.as_bytes()).unwrap();
        for call in &reply.tool_calls {
            s.record_tool(&ToolResult::text(&call.id, "15 degrees"))
                .unwrap();
        }
        let next = String::from_utf8(
            w.body(&s.continuation(values("a", 2)).unwrap())
                .unwrap()
                .to_bytes(),
        )
        .unwrap();
        let pieces = verbatim(api, &body);
        assert!(!pieces.is_empty());
        for piece in pieces {
            assert!(next.contains(&piece), "{api:?}: {piece}\nnot in\n{next}");
        }
        // Anthropic's thinking block comes back with its signature, as sent.
        if api == ApiKind::Anthropic {
            assert!(next.contains(
                r#""signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds...""#
            ));
        }
    }
}

#[test]
fn error_and_empty_replies_are_typed_errors_and_nothing_is_recorded() {
    let api = ApiKind::OpenAi;
    let mut s = session(api);
    let w = wire(api);
    s.turn(values("a", 1), "hi").unwrap();
    let before = s.history().len();
    let err = w
        .record_reply(&mut s, &fixture(api, "error.json"))
        .unwrap_err();
    assert!(
        matches!(&err, WireError::ProviderError { message, .. } if message.starts_with("Invalid 'messages[2].tool_calls'")),
        "{err}"
    );
    let err = read_reply(
        ApiKind::Anthropic,
        &fixture(ApiKind::Anthropic, "error.json"),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("text content blocks must be non-empty"),
        "{err}"
    );
    let err = read_reply(
        ApiKind::Gemini,
        &fixture(ApiKind::Gemini, "response_blocked.json"),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the Gemini generateContent reply holds no message to record: prompt blocked: SAFETY"
    );
    let err = w
        .record_reply(
            &mut s,
            br#"{"choices":[{"message":{"role":"user","content":"x"}}]}"#,
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the OpenAI Chat Completions reply is not a response: \"user\", not \"assistant\" (at choices[0].message.role)"
    );
    let err = w.record_reply(&mut s, b"{\"choices\": [").unwrap_err();
    assert!(
        matches!(&err, WireError::Reply { at, .. } if at == "body"),
        "{err}"
    );
    let huge = vec![b' '; prompt_wire::MAX_REPLY_BYTES + 1];
    assert!(matches!(
        w.record_reply(&mut s, &huge),
        Err(WireError::ReplyTooLarge { .. })
    ));
    assert_eq!(s.history().len(), before);
}

#[test]
fn a_reply_while_tool_calls_wait_for_results_is_refused_with_the_session_error_as_source() {
    let api = ApiKind::Anthropic;
    let mut s = session(api);
    let mut w = wire(api);
    w.body(&s.turn(values("a", 1), "hi").unwrap()).unwrap();
    let body = reply(
        api,
        1,
        "",
        &[("toolu_1", "read_file", json!({"path": "a"}))],
    );
    w.record_reply(&mut s, body.as_bytes()).unwrap();
    let err = w.record_reply(&mut s, body.as_bytes()).unwrap_err();
    // The message shows why, not only the source.
    assert!(
        err.to_string()
            .starts_with("the session refused the reply's message: the assistant's tool calls [\"toolu_1\"] have no results yet"),
        "{err}"
    );
    let source = err.source().unwrap();
    assert!(
        source
            .downcast_ref::<ComposeError>()
            .is_some_and(|e| matches!(e, ComposeError::UnansweredToolCalls { .. }))
    );
}

#[test]
fn gemini_calls_without_ids_get_ids_unique_in_the_session_and_results_name_their_call() {
    let api = ApiKind::Gemini;
    let mut s = session(api);
    let mut w = wire(api);
    let body = reply(api, 1, "", &[("", "read_file", json!({"path": "a"}))]);
    let mut ids = Vec::new();
    for turn in 1..=2 {
        w.body(&s.turn(values("a", turn), "Read a.").unwrap())
            .unwrap();
        // The same reply twice: the ids differ, so results never answer the wrong call.
        let reply = w.record_reply(&mut s, body.as_bytes()).unwrap();
        ids.push(reply.tool_calls[0].id.clone());
        s.record_tool(&ToolResult::text(&reply.tool_calls[0].id, "text"))
            .unwrap();
        let next = String::from_utf8(
            w.body(&s.continuation(values("a", turn)).unwrap())
                .unwrap()
                .to_bytes(),
        )
        .unwrap();
        assert!(
            next.contains(
                r#"{"functionResponse":{"name":"read_file","response":{"output":"text"}}}"#
            ),
            "{next}"
        );
        w.record_reply(&mut s, reply_text(api).as_bytes()).unwrap();
    }
    assert_ne!(ids[0], ids[1]);

    // A call with Gemini's own id is answered with that id.
    let body = json!({"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"id": "fc-7", "name": "grep", "args": {"pattern": "x"}}}]}}]});
    w.body(&s.turn(values("a", 3), "Grep.").unwrap()).unwrap();
    let reply = w.record_reply(&mut s, body.to_string().as_bytes()).unwrap();
    assert_eq!(reply.tool_calls[0].id, "fc-7");
    s.record_tool(&ToolResult::text("fc-7", "hit")).unwrap();
    let next = String::from_utf8(
        w.body(&s.continuation(values("a", 3)).unwrap())
            .unwrap()
            .to_bytes(),
    )
    .unwrap();
    assert!(
        next.contains(
            r#"{"functionResponse":{"id":"fc-7","name":"grep","response":{"output":"hit"}}}"#
        ),
        "{next}"
    );
}

fn reply_text(api: ApiKind) -> String {
    reply(api, 9, "Done.", &[])
}
