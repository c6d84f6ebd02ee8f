//! The provider's cache diagnostics read from whole and streamed replies (the wire reads the
//! reply; the engine's provider module reads the diagnostics object it holds).

use prompt_core::ApiKind;
use prompt_wire::stream::StreamReader;
use prompt_wire::{Cause, MissReason, ProviderDiagnosis, reply_id};

// Shapes from the providers' documents: Anthropic's cache diagnostics
// (https://platform.claude.com/docs/en/build-with-claude/cache-diagnostics: `diagnostics`
// with `cache_miss_reason.type` and `cache_missed_input_tokens`; in a stream on
// `message_start`'s message, as the Anthropic SDKs' `AnthropicDiagnostics` documents);
// OpenAI's prompt cache diagnostics
// (https://developers.openai.com/api/docs/guides/prompt-caching/diagnostics:
// `prompt_cache_diagnostics` on the response, `type` `cache_miss` with `reason`,
// `cache_missed_tokens`, `comparison_reusable_tokens`; a stream's `response.completed`
// carries the whole response).
const ANTHROPIC_WHOLE: &str = r#"{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":12,"cache_read_input_tokens":0,"cache_creation_input_tokens":4000,"output_tokens":2},"diagnostics":{"cache_miss_reason":{"type":"tools_changed","cache_missed_input_tokens":3900}}}"#;

fn anthropic_stream(diagnostics: &str) -> String {
    format!(
        "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_02\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{{\"input_tokens\":12,\"cache_read_input_tokens\":0,\"cache_creation_input_tokens\":4000,\"output_tokens\":1}},\"diagnostics\":{diagnostics}}}}}\n\n\
event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"ok\"}}}}\n\n\
event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":2}}}}\n\n\
event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
    )
}

fn responses_whole(diagnostics: &str) -> String {
    format!(
        r#"{{"id":"resp_02","object":"response","status":"completed","model":"gpt-5.6","output":[{{"type":"message","id":"m1","role":"assistant","status":"completed","content":[{{"type":"output_text","text":"OK","annotations":[]}}]}}],"usage":{{"input_tokens":2000,"input_tokens_details":{{"cached_tokens":0}},"output_tokens":1,"total_tokens":2001}},"prompt_cache_diagnostics":{diagnostics}}}"#
    )
}

fn responses_stream(diagnostics: &str) -> String {
    let completed = responses_whole(diagnostics);
    format!(
        "event: response.created\ndata: {{\"type\":\"response.created\",\"sequence_number\":0,\"response\":{{\"id\":\"resp_02\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"gpt-5.6\",\"output\":[]}}}}\n\n\
event: response.completed\ndata: {{\"type\":\"response.completed\",\"sequence_number\":1,\"response\":{completed}}}\n\n"
    )
}

fn streamed(api: ApiKind, sse: &str) -> prompt_wire::Reply {
    let mut reader = StreamReader::new(api);
    reader.feed(sse.as_bytes()).unwrap();
    while reader.next_event().is_some() {}
    reader.into_reply().unwrap()
}

#[test]
fn anthropic_diagnostics_are_read_from_whole_and_streamed_replies() {
    let whole = prompt_wire::read_reply(ApiKind::Anthropic, ANTHROPIC_WHOLE.as_bytes()).unwrap();
    let expected = ProviderDiagnosis::Miss {
        reason: MissReason::ToolsChanged,
        missed_tokens: Some(3900),
        reusable_tokens: None,
    };
    let raw = whole.diagnostics.unwrap();
    assert_eq!(
        ProviderDiagnosis::parse(ApiKind::Anthropic, &raw).unwrap(),
        expected
    );
    let sse = anthropic_stream(
        r#"{"cache_miss_reason":{"type":"tools_changed","cache_missed_input_tokens":3900}}"#,
    );
    let raw = streamed(ApiKind::Anthropic, &sse).diagnostics.unwrap();
    assert_eq!(
        ProviderDiagnosis::parse(ApiKind::Anthropic, &raw).unwrap(),
        expected
    );
    let pending = anthropic_stream(r#"{"cache_miss_reason":null}"#);
    let raw = streamed(ApiKind::Anthropic, &pending).diagnostics.unwrap();
    assert_eq!(
        ProviderDiagnosis::parse(ApiKind::Anthropic, &raw).unwrap(),
        ProviderDiagnosis::Pending
    );
    assert_eq!(
        reply_id(ApiKind::Anthropic, sse.as_bytes()).as_deref(),
        Some("msg_02")
    );
    assert_eq!(
        reply_id(ApiKind::Anthropic, ANTHROPIC_WHOLE.as_bytes()).as_deref(),
        Some("msg_02")
    );
}

#[test]
fn openai_prompt_cache_diagnostics_are_read_from_whole_and_streamed_replies() {
    let miss = r#"{"type":"cache_miss","reason":"tools_changed","cache_missed_tokens":1800,"comparison_reusable_tokens":2000}"#;
    let expected = ProviderDiagnosis::Miss {
        reason: MissReason::ToolsChanged,
        missed_tokens: Some(1800),
        reusable_tokens: Some(2000),
    };
    let whole = responses_whole(miss);
    let reply = prompt_wire::read_reply(ApiKind::OpenAiResponses, whole.as_bytes()).unwrap();
    let raw = reply.diagnostics.unwrap();
    assert_eq!(
        ProviderDiagnosis::parse(ApiKind::OpenAiResponses, &raw).unwrap(),
        expected
    );
    let sse = responses_stream(miss);
    let raw = streamed(ApiKind::OpenAiResponses, &sse)
        .diagnostics
        .unwrap();
    assert_eq!(
        ProviderDiagnosis::parse(ApiKind::OpenAiResponses, &raw).unwrap(),
        expected
    );
    let hit = responses_stream(r#"{"type":"cache_hit"}"#);
    let raw = streamed(ApiKind::OpenAiResponses, &hit)
        .diagnostics
        .unwrap();
    assert_eq!(
        ProviderDiagnosis::parse(ApiKind::OpenAiResponses, &raw).unwrap(),
        ProviderDiagnosis::NoChange
    );
    for (json, want) in [
        (
            r#"{"type":"comparison_response_not_found"}"#,
            ProviderDiagnosis::NotFound,
        ),
        (r#"{"type":"unavailable"}"#, ProviderDiagnosis::Unavailable),
    ] {
        assert_eq!(
            ProviderDiagnosis::parse(ApiKind::OpenAiResponses, json).unwrap(),
            want
        );
    }
    assert_eq!(
        reply_id(ApiKind::OpenAiResponses, sse.as_bytes()).as_deref(),
        Some("resp_02")
    );
}

#[test]
fn a_hostile_diagnostics_object_is_an_error_never_a_panic() {
    for (api, json, says) in [
        (
            ApiKind::OpenAiResponses,
            r#"{"type":"cache_miss"}"#,
            "reason",
        ),
        (
            ApiKind::OpenAiResponses,
            r#"{"type":"cache_miss","reason":"x","cache_missed_tokens":-1}"#,
            "cache_missed_tokens",
        ),
        (ApiKind::OpenAiResponses, r#"{"type":"teapot"}"#, "teapot"),
        (ApiKind::OpenAiResponses, "[1]", "prompt_cache_diagnostics"),
        (
            ApiKind::Anthropic,
            r#"{"cache_miss_reason":{"cache_missed_input_tokens":1}}"#,
            "type",
        ),
        (
            ApiKind::Anthropic,
            r#"{"cache_miss_reason":"#,
            "diagnostics",
        ),
    ] {
        let e = ProviderDiagnosis::parse(api, json).unwrap_err().to_string();
        assert!(e.contains(says), "{json}: {e}");
    }
    let huge = format!(
        r#"{{"type":"cache_miss","reason":"{}"}}"#,
        "x".repeat(10_000)
    );
    let e = ProviderDiagnosis::parse(ApiKind::OpenAiResponses, &huge).unwrap_err();
    assert!(e.to_string().contains("4096-byte limit"), "{e}");
    let odd = r#"{"type":"cache_miss","reason":"reasoning_changed"}"#;
    assert_eq!(
        ProviderDiagnosis::parse(ApiKind::OpenAiResponses, odd).unwrap(),
        ProviderDiagnosis::Miss {
            reason: MissReason::Other("reasoning_changed".to_owned()),
            missed_tokens: None,
            reusable_tokens: None
        }
    );
    assert_eq!(
        reply_id(ApiKind::Anthropic, b"data: {\"type\":\"message_start\"}\n"),
        None
    );
    assert_eq!(reply_id(ApiKind::Anthropic, b"{\"id\":12}"), None);
}

#[test]
fn causes_take_openai_names_for_responses() {
    assert_eq!(
        Cause::SystemChanged.miss_reason_in(ApiKind::OpenAiResponses),
        MissReason::InputChanged
    );
    assert_eq!(
        Cause::EditInPlace.miss_reason_in(ApiKind::OpenAiResponses),
        MissReason::InputChanged
    );
    assert_eq!(
        Cause::HeaderOrParamChanged {
            name: "service_tier".to_owned()
        }
        .miss_reason_in(ApiKind::OpenAiResponses),
        MissReason::ServiceTierChanged
    );
    assert_eq!(
        Cause::SystemChanged.miss_reason_in(ApiKind::Anthropic),
        MissReason::SystemChanged
    );
}
