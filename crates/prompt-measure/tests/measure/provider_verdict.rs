//! The provider's verdict beside the engine's: replies built from the providers' documented
//! shapes, whole and streamed, for Anthropic and OpenAI, reconciled with the engine's
//! verdict on the same request by the audit.
//!
//! Sources of the shapes:
//! - Anthropic cache diagnostics,
//!   <https://platform.claude.com/docs/en/build-with-claude/cache-diagnostics>: the request's
//!   `diagnostics.previous_message_id` with the beta `cache-diagnosis-2026-04-07`; the
//!   reply's `diagnostics.cache_miss_reason` (`type`, `cache_missed_input_tokens`), absent
//!   when no divergence was found; in a stream on `message_start`'s message (as the
//!   Anthropic SDK types `AnthropicDiagnostics` document it).
//! - OpenAI prompt cache diagnostics,
//!   <https://developers.openai.com/api/docs/guides/prompt-caching/diagnostics>: the
//!   request's `prompt_cache_options.comparison_response_id` (GPT-5.6 and later); the
//!   response's `prompt_cache_diagnostics` (`type` `cache_miss` with `reason`,
//!   `cache_missed_tokens`, `comparison_reusable_tokens`; `cache_hit`;
//!   `comparison_response_not_found`; `unavailable`). Assumed, not shown by the page: a
//!   stream carries it in the response `response.completed` holds, as it does `usage`.

use prompt_measure::AuditConfig;
use prompt_measure::audit::{Cause, RequestAudit, verdict_text};
use prompt_measure::provider_verdict::Agreement;
use prompt_wire::{MissReason, ProviderDiagnosis};
use serde_json::{Value, json};

use super::audit::{Audited, audit_bytes};

/// The texts of `turns` user and assistant turns and of the next user message, each long
/// enough to cache: the one conversation both APIs' bodies below carry.
fn conversation_texts(turns: usize) -> (Vec<(String, String)>, String) {
    let filler = "lorem ipsum dolor sit amet ".repeat(400);
    let past = (0..turns)
        .map(|t| {
            (
                format!("user {t}: {filler}"),
                format!("assistant {t}: {filler}"),
            )
        })
        .collect();
    (past, format!("user {turns}: {filler}"))
}

/// An Anthropic Messages body: one tool, a system block, `turns` turns, a breakpoint on the
/// last assistant message.
fn anthropic(turns: usize, tool_text: &str) -> String {
    let (past, next) = conversation_texts(turns);
    let mut messages = Vec::new();
    for (t, (user, assistant)) in past.into_iter().enumerate() {
        messages.push(json!({"role": "user", "content": [{"type": "text", "text": user}]}));
        let mut block = json!({"type": "text", "text": assistant});
        if t + 1 == turns {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
        messages.push(json!({"role": "assistant", "content": [block]}));
    }
    messages.push(json!({"role": "user", "content": next}));
    json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "tools": [{"name": "read", "description": tool_text, "input_schema": {"type": "object"}}],
        "system": [{"type": "text", "text": "You are a coding agent."}],
        "messages": messages,
    })
    .to_string()
}

/// An OpenAI Responses body of `turns` turns.
fn responses(turns: usize, tool: &str) -> String {
    let (past, next) = conversation_texts(turns);
    let mut input = Vec::new();
    for (user, assistant) in past {
        input.push(json!({"role": "user", "content": user}));
        input.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": assistant}]}));
    }
    input.push(json!({"role": "user", "content": next}));
    json!({
        "model": "gpt-5.6",
        "instructions": "You are a coding agent.",
        "tools": [{"type": "function", "name": tool, "parameters": {"type": "object"}}],
        "input": input,
    })
    .to_string()
}

/// The reply on `path` ([`MESSAGES`]: Anthropic's; else OpenAI Responses'), whole or
/// streamed: `input` tokens in all, `cached` of them read from the cache, the provider's cache
/// diagnostics when given.
fn provider_reply(
    path: &str,
    id: &str,
    input: u64,
    cached: u64,
    diagnostics: Option<&str>,
    stream: bool,
) -> Value {
    if path != MESSAGES {
        return responses_reply(id, input, cached, diagnostics, stream);
    }
    let usage = json!({"input_tokens": input - cached, "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0, "output_tokens": 2});
    let diag = diagnostics
        .map(|d| format!(r#","diagnostics":{d}"#))
        .unwrap_or_default();
    if !stream {
        let whole = format!(
            r#"{{"id":"{id}","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"ok"}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{usage}{diag}}}"#
        );
        return serde_json::from_str(&whole).unwrap();
    }
    Value::String(format!(
        "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"{id}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{usage}{diag}}}}}\n\n\
event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"ok\"}}}}\n\n\
event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":2}}}}\n\n\
event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
    ))
}

/// [`provider_reply`] of OpenAI Responses.
fn responses_reply(id: &str, input: u64, cached: u64, diag: Option<&str>, stream: bool) -> Value {
    let diag = diag
        .map(|d| format!(r#","prompt_cache_diagnostics":{d}"#))
        .unwrap_or_default();
    let whole = format!(
        r#"{{"id":"{id}","object":"response","status":"completed","model":"gpt-5.6","output":[{{"type":"message","id":"m_{id}","role":"assistant","status":"completed","content":[{{"type":"output_text","text":"OK","annotations":[]}}]}}],"usage":{{"input_tokens":{input},"input_tokens_details":{{"cached_tokens":{cached}}},"output_tokens":1,"output_tokens_details":{{"reasoning_tokens":0}},"total_tokens":{}}}{diag}}}"#,
        input + 1
    );
    if !stream {
        return serde_json::from_str(&whole).unwrap();
    }
    Value::String(format!(
        "event: response.created\ndata: {{\"type\":\"response.created\",\"sequence_number\":0,\"response\":{{\"id\":\"{id}\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"gpt-5.6\",\"output\":[]}}}}\n\n\
event: response.completed\ndata: {{\"type\":\"response.completed\",\"sequence_number\":1,\"response\":{whole}}}\n\n"
    ))
}

fn line(path: &str, body: &str, response: Value, ts: f64, against: Option<&str>) -> String {
    let mut l = json!({
        "path": path,
        "headers": {"session_id": "s1"},
        "ts": ts,
        "request": serde_json::from_str::<Value>(body).unwrap(),
        "response": response,
    });
    if let Some(id) = against {
        l["diagnosed_against"] = json!(id);
    }
    l.to_string()
}

fn run(lines: &[String]) -> Audited {
    let log = lines.join("\n");
    audit_bytes("provider.jsonl", log.as_bytes(), AuditConfig::default())
}

fn second(a: &Audited) -> &RequestAudit {
    &a.requests[1]
}

fn agreement(r: &RequestAudit) -> &Agreement {
    &r.provider_verdict
        .as_ref()
        .unwrap_or_else(|| panic!("no provider verdict: {}", verdict_text(r)))
        .agreement
}

const MESSAGES: &str = "/v1/messages";
const RESPONSES: &str = "/v1/responses";

/// `body` answered by `reply` on `path` ([`MESSAGES`] or [`RESPONSES`]), ten seconds after
/// a first request of two turns there, and diagnosed `against` a reply when given: every
/// pair below is audited through this.
fn after_first(
    path: &str,
    body: &str,
    reply: Value,
    stream: bool,
    against: Option<&str>,
) -> Audited {
    let (first, first_reply) = match path {
        MESSAGES => (
            anthropic(2, "Read a file."),
            provider_reply(MESSAGES, "msg_01", 9_000, 0, None, stream),
        ),
        _ => (
            responses(2, "read"),
            provider_reply(RESPONSES, "resp_01", 9_000, 0, None, stream),
        ),
    };
    run(&[
        line(path, &first, first_reply, 1000.0, None),
        line(path, body, reply, 1010.0, against),
    ])
}

/// Anthropic: the later request's one tool edited; the provider's answer as given.
fn anthropic_pair(
    diagnostics: Option<&str>,
    stream: bool,
    tool: &str,
    cached: u64,
    against: Option<&str>,
) -> Audited {
    let reply = provider_reply(MESSAGES, "msg_02", 13_000, cached, diagnostics, stream);
    after_first(MESSAGES, &anthropic(3, tool), reply, stream, against)
}

fn openai_pair(diagnostics: Option<&str>, stream: bool, tool: &str, cached: u64) -> Audited {
    let reply = provider_reply(RESPONSES, "resp_02", 13_000, cached, diagnostics, stream);
    after_first(RESPONSES, &responses(3, tool), reply, stream, None)
}

/// The engine names the edited tool and the provider's verdict agrees (both APIs' first case).
fn assert_both_say_tools_changed(r: &RequestAudit, stream: bool) {
    assert!(
        matches!(r.verdict.cause, Some(Cause::ToolsChanged { .. })),
        "{}",
        verdict_text(r)
    );
    assert_eq!(agreement(r), &Agreement::Agree, "stream {stream}");
}

/// The engine finds no cause in the bytes and the provider's verdict is provider-side too;
/// returns how many tokens the read fell short, when usage was reported.
fn provider_side_shortfall(r: &RequestAudit) -> Option<u64> {
    assert_eq!(
        r.verdict.cause,
        Some(Cause::ProviderSide),
        "{}",
        verdict_text(r)
    );
    match agreement(r) {
        Agreement::ProviderSide { short } => *short,
        other => panic!("{other:?}"),
    }
}

#[test]
fn anthropic_diagnostics_agree_disagree_and_provider_side_whole_and_streamed() {
    for stream in [false, true] {
        let tools =
            r#"{"cache_miss_reason":{"type":"tools_changed","cache_missed_input_tokens":12900}}"#;
        let a = anthropic_pair(Some(tools), stream, "Read any file.", 0, None);
        let r = second(&a);
        assert_both_say_tools_changed(r, stream);
        assert!(
            verdict_text(r).ends_with("; provider: tools_changed, ~12,900 tokens missed (agrees)"),
            "{}",
            verdict_text(r)
        );
        assert_eq!(a.summary.provider_verdicts.agree, 1);

        let messages =
            r#"{"cache_miss_reason":{"type":"messages_changed","cache_missed_input_tokens":4000}}"#;
        let a = anthropic_pair(Some(messages), stream, "Read any file.", 0, None);
        let r = second(&a);
        assert_eq!(
            agreement(r),
            &Agreement::Disagree {
                ours: "tools_changed".to_owned(),
                theirs: "messages_changed".to_owned()
            },
            "stream {stream}"
        );
        assert!(
            verdict_text(r).contains("; provider: messages_changed, ~4,000 tokens missed — we say tools_changed (disagrees)"),
            "{}",
            verdict_text(r)
        );
        assert_eq!(a.summary.provider_verdicts.disagree, 1);

        // The request extends its predecessor within the lifetime; the provider, asked by
        // the proxy, found no divergence (no `diagnostics`), yet read 300 of 13,000 tokens.
        let a = anthropic_pair(None, stream, "Read a file.", 300, Some("msg_01"));
        let r = second(&a);
        let short = provider_side_shortfall(r);
        assert!(short.is_some_and(|n| n > 5_000), "{short:?}");
        assert!(
            verdict_text(r).contains("fewer tokens read than expected (provider_side)"),
            "{}",
            verdict_text(r)
        );
        assert_eq!(a.summary.provider_verdicts.provider_side, 1);

        // Asked by the agent itself (its body names the previous reply): the same.
        let asked = anthropic(3, "Read a file.");
        let asked = format!(
            r#"{},"diagnostics":{{"previous_message_id":"msg_01"}}}}"#,
            &asked[..asked.len() - 1]
        );
        let reply = provider_reply(MESSAGES, "msg_02", 13_000, 300, None, stream);
        let a = after_first(MESSAGES, &asked, reply, stream, None);
        assert!(
            matches!(agreement(second(&a)), Agreement::ProviderSide { .. }),
            "{}",
            verdict_text(second(&a))
        );

        // Not asked, no diagnostics: no provider verdict at all.
        let a = anthropic_pair(None, stream, "Read a file.", 300, None);
        assert_eq!(second(&a).provider_verdict, None);
        assert!(!verdict_text(second(&a)).contains("provider:"));
    }
}

#[test]
fn openai_diagnostics_agree_disagree_provider_side_and_provider_only_whole_and_streamed() {
    for stream in [false, true] {
        let tools = r#"{"type":"cache_miss","reason":"tools_changed","cache_missed_tokens":12900,"comparison_reusable_tokens":9000}"#;
        let a = openai_pair(Some(tools), stream, "read_file", 0);
        let r = second(&a);
        assert_both_say_tools_changed(r, stream);
        assert_eq!(
            r.provider_verdict.as_ref().unwrap().diagnosis,
            Some(ProviderDiagnosis::Miss {
                reason: MissReason::ToolsChanged,
                missed_tokens: Some(12_900),
                reusable_tokens: Some(9_000)
            })
        );

        let input = r#"{"type":"cache_miss","reason":"input_changed","cache_missed_tokens":4000}"#;
        let a = openai_pair(Some(input), stream, "read_file", 0);
        assert_eq!(
            agreement(second(&a)),
            &Agreement::Disagree {
                ours: "tools_changed".to_owned(),
                theirs: "input_changed".to_owned()
            }
        );

        let hit = r#"{"type":"cache_hit"}"#;
        let a = openai_pair(Some(hit), stream, "read", 300);
        provider_side_shortfall(second(&a));

        // The provider names a parameter the bodies do not show changing.
        let tier =
            r#"{"type":"cache_miss","reason":"service_tier_changed","cache_missed_tokens":13000}"#;
        let a = openai_pair(Some(tier), stream, "read", 300);
        let r = second(&a);
        assert_eq!(
            agreement(r),
            &Agreement::ProviderOnly {
                name: "service_tier_changed".to_owned()
            }
        );
        assert!(
            verdict_text(r).contains("; provider: service_tier_changed, ~13,000 tokens missed — a cause the request's bytes do not show (provider_only)"),
            "{}",
            verdict_text(r)
        );
        assert_eq!(a.summary.provider_verdicts.provider_only, 1);
    }
    // A parameter the bodies do show changing: named alike, it agrees; another, it
    // disagrees. (OpenAI's page lists no name for reasoning effort: a `reasoning_changed`
    // is assumed here, as the reader takes any `*_changed` that names the parameter.)
    let effort = |b: String| b.replacen('{', r#"{"reasoning":{"effort":"high"},"#, 1);
    let pair = |diagnostics: &str| {
        let reply = provider_reply(RESPONSES, "resp_02", 13_000, 0, Some(diagnostics), false);
        after_first(RESPONSES, &effort(responses(3, "read")), reply, false, None)
    };
    let a =
        pair(r#"{"type":"cache_miss","reason":"reasoning_changed","cache_missed_tokens":13000}"#);
    let r = second(&a);
    assert!(
        matches!(r.verdict.cause, Some(Cause::HeaderOrParamChanged { .. })),
        "{}",
        verdict_text(r)
    );
    assert_eq!(agreement(r), &Agreement::Agree, "{}", verdict_text(r));
    let a = pair(
        r#"{"type":"cache_miss","reason":"service_tier_changed","cache_missed_tokens":13000}"#,
    );
    assert_eq!(
        agreement(second(&a)),
        &Agreement::Disagree {
            ours: "reasoning.effort changed".to_owned(),
            theirs: "service_tier_changed".to_owned()
        }
    );
}

#[test]
fn a_malformed_diagnostics_object_gives_a_verdict_saying_so() {
    for stream in [false, true] {
        let a = anthropic_pair(
            Some(r#"{"cache_miss_reason":{"cache_missed_input_tokens":"many"}}"#),
            stream,
            "Read any file.",
            0,
            None,
        );
        let r = second(&a);
        assert!(matches!(agreement(r), Agreement::Unreadable { .. }));
        assert!(
            verdict_text(r).contains("; provider: diagnostics unreadable ("),
            "{}",
            verdict_text(r)
        );
        // The engine's own verdict and the usage are unaffected.
        assert!(matches!(r.verdict.cause, Some(Cause::ToolsChanged { .. })));
        assert!(r.reported.is_some());
        let a = openai_pair(
            Some(r#"{"type":"cache_miss","reason":7}"#),
            stream,
            "read_file",
            0,
        );
        assert!(matches!(
            agreement(second(&a)),
            Agreement::Unreadable { .. }
        ));
        assert_eq!(a.summary.provider_verdicts.other, 1);
    }
}

#[test]
fn pending_and_not_found_are_not_counted_as_agreement() {
    let pending = r#"{"cache_miss_reason":null}"#;
    let a = anthropic_pair(Some(pending), false, "Read any file.", 0, None);
    assert_eq!(agreement(second(&a)), &Agreement::Pending);
    assert!(verdict_text(second(&a)).ends_with("; provider: comparison pending"));
    let gone = r#"{"type":"comparison_response_not_found"}"#;
    let a = openai_pair(Some(gone), true, "read_file", 0);
    assert!(matches!(
        agreement(second(&a)),
        Agreement::NotComparable { .. }
    ));
    assert_eq!(
        a.summary.provider_verdicts.agree + a.summary.provider_verdicts.disagree,
        0
    );
}
