//! Provider profiles on the wire (issue 19): what each profile makes of the scripted
//! session's bodies, API by API, checked against the providers' documented shapes
//! (`tests/fixtures/*/README.md` name the pages).

use std::collections::BTreeSet;

use prompt_core::delivery::UpdateRole;
use prompt_core::profile::{CacheTtl, DeliveryRisk, LaterSystem, Profile, Provider, Retention};
use prompt_core::{ApiKind, Extensions};
use prompt_wire::engine::provider::{Agreement, ProviderVerdict};
use prompt_wire::engine::{Block, Canonical, Engine, EngineConfig, Exchange};
use prompt_wire::{
    CACHE_DIAGNOSIS_BETA, Cause, MissReason, ProviderDiagnosis, Verdict, Wire, WireError, compare,
};
use serde_json::{Value, json};

use crate::common::{Sent, json, play_profile, profile_session, profile_wire, raw_field, reply};
use crate::fixtures::{fixture_in, paths};

fn messages(body: &[u8]) -> Vec<Value> {
    json(body)["messages"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn role(m: &Value) -> &str {
    m["role"].as_str().unwrap_or("")
}

/// The texts of a message's content (a string, or its text blocks).
fn texts(m: &Value) -> Vec<String> {
    match &m["content"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

fn deepseek() -> Profile {
    Profile::lookup(ApiKind::OpenAi, "deepseek-chat", None)
}

fn opus() -> Profile {
    Profile::lookup(ApiKind::Anthropic, "claude-opus-4-8", None)
}

fn sonnet() -> Profile {
    Profile::lookup(ApiKind::Anthropic, "claude-sonnet-4-5", None)
}

fn undocumented(bodies: &[Sent], documented: &[(&str, &str)]) -> Vec<String> {
    let mut known = BTreeSet::new();
    for (folder, file) in documented {
        paths(&json(&fixture_in(folder, file)), "", &mut known);
    }
    let mut ours = BTreeSet::new();
    for b in bodies {
        paths(&json(&b.bytes), "", &mut ours);
    }
    ours.difference(&known).cloned().collect()
}

#[test]
fn profile_deepseek_chat_bodies_have_no_system_message_after_the_first() {
    let profile = deepseek();
    assert_eq!(profile.provider(), Some(Provider::DeepSeek));
    assert_eq!(profile.later_system(), LaterSystem::Hoisted);
    assert_eq!(profile.delivery().role, UpdateRole::UserReminder);
    let bodies = play_profile(ApiKind::OpenAi, &profile);
    let mut reminders = BTreeSet::new();
    for b in &bodies {
        let m = messages(&b.bytes);
        assert_eq!(role(&m[0]), "system", "{}: the prefix leads", b.label);
        for (i, msg) in m.iter().enumerate().skip(1) {
            assert_ne!(
                role(msg),
                "system",
                "{}: message {i} is a system message",
                b.label
            );
            for text in texts(msg) {
                if let Some(rest) = text.strip_prefix("<system-reminder") {
                    reminders.insert(rest.split(['>', '\n']).next().unwrap_or("").to_owned());
                }
            }
        }
    }
    // The updates, the changed system prompt and the compaction summary all reached the
    // model, as user reminders.
    assert!(reminders.contains(" from=\"todo\""), "{reminders:?}");
    assert!(
        reminders.contains(" from=\"system_prompt\""),
        "{reminders:?}"
    );
    assert!(
        reminders.contains(""),
        "the compaction summary: {reminders:?}"
    );
    // Byte-prefix stability holds within each epoch.
    for w in bodies.windows(2).filter(|w| w[0].epoch == w[1].epoch) {
        assert!(
            w[1].bytes.starts_with(&w[0].stable),
            "{} -> {}",
            w[0].label,
            w[1].label
        );
    }
    let extra = undocumented(
        &bodies,
        &[
            ("openai_chat", "request.json"),
            ("deepseek", "request.json"),
        ],
    );
    assert!(extra.is_empty(), "{extra:#?}");

    // Forced system delivery is honoured (the operator decides), and the profile says what
    // it costs; the bodies then do carry later system messages.
    let forced = deepseek().with_updates(UpdateRole::System);
    assert_eq!(forced.delivery_risk(), Some(DeliveryRisk::Hoisted));
    let forced_bodies = play_profile(ApiKind::OpenAi, &forced);
    assert!(
        forced_bodies.iter().any(|b| messages(&b.bytes)
            .iter()
            .skip(1)
            .any(|m| role(m) == "system")),
        "a forced system delivery is sent as asked"
    );
}

#[test]
fn profile_opus_4_8_sends_updates_as_system_messages_where_the_placement_rules_allow() {
    let profile = opus();
    assert_eq!(profile.later_system(), LaterSystem::Native);
    assert_eq!(profile.delivery().role, UpdateRole::System);
    let bodies = play_profile(ApiKind::Anthropic, &profile);
    let mut system_texts = Vec::new();
    let mut trailing = 0;
    for b in &bodies {
        let m = messages(&b.bytes);
        assert_ne!(role(&m[0]), "system", "{}: not the first entry", b.label);
        for (i, msg) in m.iter().enumerate() {
            if role(msg) != "system" {
                for text in texts(msg) {
                    assert!(!text.starts_with("<system-reminder"), "{}: {text}", b.label);
                }
                continue;
            }
            // The placement rules of the mid-conversation system messages page.
            assert_eq!(
                role(&m[i - 1]),
                "user",
                "{}: message {i} follows a user message",
                b.label
            );
            match m.get(i + 1) {
                None => trailing += 1,
                Some(next) => assert_eq!(role(next), "assistant", "{}: message {i}", b.label),
            }
            for block in msg["content"].as_array().unwrap() {
                assert_eq!(block["type"], "text", "{}: text blocks only", b.label);
            }
            system_texts.extend(texts(msg));
        }
    }
    assert!(trailing > 0, "some bodies end with a system message");
    assert!(
        system_texts
            .iter()
            .any(|t| t.starts_with("<system-update from=\"todo\">"))
    );
    assert!(
        system_texts
            .iter()
            .any(|t| t.contains("Answer in English."))
    );
    let extra = undocumented(
        &bodies,
        &[
            ("anthropic", "request.json"),
            ("anthropic", "request_mid_conversation_system.json"),
        ],
    );
    assert!(extra.is_empty(), "{extra:#?}");

    // A model without them: user reminders, no system message inside `messages`.
    let sonnet = sonnet();
    assert_eq!(sonnet.later_system(), LaterSystem::Rejected);
    let mut reminders = 0;
    for b in play_profile(ApiKind::Anthropic, &sonnet) {
        for msg in messages(&b.bytes) {
            assert_ne!(role(&msg), "system", "{}", b.label);
            reminders += texts(&msg)
                .iter()
                .filter(|t| t.starts_with("<system-reminder from=\"todo\">"))
                .count();
        }
    }
    assert!(reminders > 0);
    // Opus 4.8 elsewhere than the Claude API has no mid-conversation system messages.
    let bedrock = Profile::lookup(
        ApiKind::Anthropic,
        "us.anthropic.claude-opus-4-8-20260528-v1:0",
        Some("https://bedrock-runtime.us-east-1.amazonaws.com"),
    );
    assert_eq!(bedrock.later_system(), LaterSystem::Rejected);
    assert_eq!(bedrock.delivery().role, UpdateRole::UserReminder);
    assert!(bedrock.platform_note().is_some());
}

#[test]
fn profile_anthropic_bodies_never_put_a_breakpoint_on_a_trailing_system_message() {
    for profile in [opus(), sonnet(), opus().with_ttl(CacheTtl::OneHour)] {
        let bodies = play_profile(ApiKind::Anthropic, &profile);
        let mut rolling = 0;
        for b in &bodies {
            let m = messages(&b.bytes);
            for msg in &m {
                for block in msg["content"].as_array().into_iter().flatten() {
                    if block.get("cache_control").is_some() {
                        assert_ne!(role(msg), "system", "{} {}: {block}", profile, b.label);
                        rolling += 1;
                    }
                }
            }
            // The last message is never a system message carrying a breakpoint.
            let last = m.last().unwrap();
            if role(last) == "system" {
                assert!(
                    !String::from_utf8_lossy(&b.bytes)
                        .rsplit("\"role\":\"system\"")
                        .next()
                        .unwrap()
                        .contains("cache_control")
                );
            }
        }
        assert!(
            rolling >= bodies.len(),
            "every body has its rolling breakpoint"
        );
    }
}

#[test]
fn profile_native_system_bodies_extend_each_other_within_an_epoch() {
    let bodies = play_profile(ApiKind::Anthropic, &opus());
    for w in bodies.windows(2).filter(|w| w[0].epoch == w[1].epoch) {
        assert!(
            compare(&w[0].stable_body, &w[1].bytes).unwrap().extends(),
            "{} -> {}",
            w[0].label,
            w[1].label
        );
        // The blocks before the stable end are the next body's first blocks.
        assert!(
            w[1].blocks.starts_with(&w[0].blocks),
            "{} -> {}",
            w[0].label,
            w[1].label
        );
    }
    let at = bodies
        .windows(2)
        .position(|w| w[0].epoch != w[1].epoch)
        .unwrap();
    assert!(
        !compare(&bodies[at].stable_body, &bodies[at + 1].bytes)
            .unwrap()
            .extends()
    );
}

#[test]
fn profile_ttl_1h_is_written_on_the_prefix_breakpoints_in_the_frozen_part() {
    let bodies = play_profile(ApiKind::Anthropic, &opus().with_ttl(CacheTtl::OneHour));
    for b in &bodies {
        let body = json(&b.bytes);
        let tools = body["tools"].as_array().unwrap();
        assert_eq!(
            tools.last().unwrap()["cache_control"],
            json!({"type": "ephemeral", "ttl": "1h"})
        );
        let system = body["system"].as_array().unwrap();
        assert_eq!(
            system.last().unwrap()["cache_control"]["ttl"],
            "1h",
            "{}",
            b.label
        );
        // The rolling breakpoints keep the default 5 minutes: longer TTLs come first.
        for msg in messages(&b.bytes) {
            for block in msg["content"].as_array().into_iter().flatten() {
                if let Some(control) = block.get("cache_control") {
                    assert_eq!(control, &json!({"type": "ephemeral"}), "{}", b.label);
                }
            }
        }
    }
    // Frozen: the tools field is byte-identical in every body.
    let first = raw_field(&bodies[0].bytes, "tools").unwrap().to_owned();
    assert!(
        bodies
            .iter()
            .all(|b| raw_field(&b.bytes, "tools") == Some(first.as_str()))
    );
    // Without the profile's TTL, no `ttl` at all (the 5-minute default is not written).
    for b in play_profile(ApiKind::Anthropic, &opus().with_ttl(CacheTtl::FiveMinutes)) {
        assert!(
            !String::from_utf8_lossy(&b.bytes).contains("\"ttl\""),
            "{}",
            b.label
        );
    }
    // A provider without it ignores it.
    assert_eq!(deepseek().with_ttl(CacheTtl::OneHour).ttl(), None);
}

#[test]
fn profile_openai_retention_is_written_once_after_the_messages() {
    let profile = Profile::lookup(ApiKind::OpenAi, "gpt-5.1", None)
        .with_retention(Retention::TwentyFourHours);
    for api in [ApiKind::OpenAi, ApiKind::OpenAiResponses] {
        let bodies = play_profile(api, &profile);
        for b in &bodies {
            assert_eq!(
                raw_field(&b.bytes, "prompt_cache_retention"),
                Some("\"24h\""),
                "{api:?}"
            );
            let text = String::from_utf8_lossy(&b.bytes);
            let array = if api == ApiKind::OpenAi {
                "\"messages\":"
            } else {
                "\"input\":"
            };
            assert!(
                text.find("\"prompt_cache_retention\"") > text.find(array),
                "{api:?}"
            );
        }
        for w in bodies.windows(2).filter(|w| w[0].epoch == w[1].epoch) {
            assert!(
                w[1].bytes.starts_with(&w[0].stable),
                "{api:?} {}",
                w[1].label
            );
        }
    }
    let chat = play_profile(ApiKind::OpenAi, &profile);
    let extra = undocumented(
        &chat,
        &[
            ("openai_chat", "request.json"),
            ("openai_chat", "request_retention.json"),
        ],
    );
    assert!(extra.is_empty(), "{extra:#?}");
    // Set by the profile, the key may not also be a parameter.
    let options = prompt_wire::WireOptions::for_profile(&profile)
        .param("prompt_cache_retention", &json!("in_memory"));
    assert!(matches!(
        Wire::new(ApiKind::OpenAi, options),
        Err(WireError::ReservedParameter { .. })
    ));
}

#[test]
fn profile_cache_diagnostics_name_the_previous_reply_and_do_not_break_the_cache() {
    let profile = opus().with_cache_diagnostics();
    assert!(profile.cache_diagnostics());
    let with = play_profile(ApiKind::Anthropic, &profile);
    let without = play_profile(ApiKind::Anthropic, &opus());
    assert_eq!(with.len(), without.len());
    for (k, (a, b)) in with.iter().zip(&without).enumerate() {
        let expected = if k == 0 {
            json!({"previous_message_id": null})
        } else {
            // The script's replies are `msg_1`, `msg_2`, …: the last one recorded.
            json!({"previous_message_id": format!("msg_{k}")})
        };
        assert_eq!(json(&a.bytes)["diagnostics"], expected, "{}", a.label);
        // The field is the body's last key: removing it gives the body without
        // diagnostics, byte for byte, so it moves no byte of the prompt.
        let text = String::from_utf8(a.bytes.clone()).unwrap();
        let at = text.rfind(",\"diagnostics\":").unwrap();
        let stripped = format!("{}}}", &text[..at]);
        assert_eq!(stripped.as_bytes(), b.bytes.as_slice(), "{}", a.label);
        assert_eq!(
            (a.stable_body.clone(), a.blocks.clone()),
            (b.stable_body.clone(), b.blocks.clone())
        );
    }
    // The guard gives consecutive bodies, diagnostics and all, the verdicts it gives them
    // without.
    for (w, v) in with.windows(2).zip(without.windows(2)) {
        assert_eq!(
            compare(&w[0].bytes, &w[1].bytes).unwrap(),
            compare(&v[0].bytes, &v[1].bytes).unwrap(),
            "{} -> {}",
            w[0].label,
            w[1].label
        );
        if w[0].epoch == w[1].epoch {
            assert!(compare(&w[0].stable_body, &w[1].bytes).unwrap().extends());
        }
    }
    let extra = undocumented(
        &with,
        &[
            ("anthropic", "request.json"),
            ("anthropic", "request_mid_conversation_system.json"),
            ("anthropic", "request_cache_diagnostics_first.json"),
        ],
    );
    assert!(extra.is_empty(), "{extra:#?}");
    // The header goes with every request; not on Bedrock, not without the profile asking.
    let wire = profile_wire(ApiKind::Anthropic, &profile);
    assert_eq!(wire.cache_diagnostics_header(), Some(CACHE_DIAGNOSIS_BETA));
    assert_eq!(
        CACHE_DIAGNOSIS_BETA,
        ("anthropic-beta", "cache-diagnosis-2026-04-07")
    );
    let bedrock = Profile::lookup(
        ApiKind::Anthropic,
        "claude-opus-4-8",
        Some("https://bedrock-runtime.us-east-1.amazonaws.com"),
    )
    .with_cache_diagnostics();
    assert!(bedrock.cache_diagnostics_unavailable());
    assert_eq!(
        profile_wire(ApiKind::Anthropic, &bedrock).cache_diagnostics_header(),
        None
    );
    assert_eq!(
        profile_wire(ApiKind::Anthropic, &opus()).cache_diagnostics_header(),
        None
    );
}

/// A session and wire of the Opus 4.8 profile with diagnostics; the first turn's body (as
/// sent) and the second's, the first reply recorded between them.
fn two_turns() -> (prompt_core::Session, Wire, Vec<u8>, Vec<u8>) {
    let profile = opus().with_cache_diagnostics();
    let mut session = profile_session(&profile);
    let mut wire = profile_wire(ApiKind::Anthropic, &profile);
    let values = || Extensions::new().with(crate::common::Todo("a"));
    let first = wire
        .body(&session.turn(values(), "What's in src/?").unwrap())
        .unwrap()
        .to_bytes();
    wire.record_reply(
        &mut session,
        reply(ApiKind::Anthropic, 1, "Two files.", &[]).as_bytes(),
    )
    .unwrap();
    let second = wire
        .body(&session.turn(values(), "And in tests/?").unwrap())
        .unwrap()
        .to_bytes();
    (session, wire, first, second)
}

/// The second body as a client that broke its cache would have sent it: `from` replaced by
/// `to` once, every other byte as the wire wrote it.
fn edited(body: &[u8], from: &str, to: &str) -> Vec<u8> {
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(text.contains(from), "{from} is not in the body");
    text.replacen(from, to, 1).into_bytes()
}

#[test]
fn profile_a_reply_with_diagnostics_is_read_into_reply_and_the_guard_names_the_same_reason() {
    let cases = [
        (
            "model_changed",
            "\"model\":\"claude-opus-4-8\"",
            "\"model\":\"claude-sonnet-4-5\"",
        ),
        (
            "system_changed",
            "You are a careful coding assistant.",
            "You are a careful coding assistant. Today is Monday.",
        ),
        ("tools_changed", "Search files.", "Search files, fast."),
        (
            "messages_changed",
            "What's in src/?",
            "What's in src/ and lib/?",
        ),
    ];
    for (reason, from, to) in cases {
        let (mut session, wire, first, second) = two_turns();
        let later = edited(&second, from, to);
        // The provider's answer to the later request, in the documented shape.
        let body = String::from_utf8(fixture_in("anthropic", "response_diagnostics.json"))
            .unwrap()
            .replace("\"tools_changed\"", &format!("\"{reason}\""));
        let reply = wire.record_reply(&mut session, body.as_bytes()).unwrap();
        assert_eq!(reply.id.as_deref(), Some("msg_02Bq9w938a90dw8r"));
        let raw = reply
            .diagnostics
            .as_deref()
            .expect("the reply's diagnostics object");
        let provider = ProviderDiagnosis::parse(ApiKind::Anthropic, raw).unwrap();
        assert_eq!(
            provider,
            ProviderDiagnosis::Miss {
                reason: MissReason::from_name(reason),
                missed_tokens: Some(1203),
                reusable_tokens: None,
            }
        );
        // The guard, on the same pair of bodies, under the same name; the engine's verdict
        // reconciled with the provider's agrees.
        let verdict = compare(&first, &later).unwrap();
        let Verdict::Breaks(at) = &verdict else {
            panic!("{reason}: {verdict:?}")
        };
        assert_eq!(at.cause.miss_reason().as_str(), reason, "{at}");
        assert_eq!(
            agreement(&first, &later, provider),
            Agreement::Agree,
            "{reason}"
        );
        if reason == "tools_changed" {
            assert_eq!(
                at.cause,
                Cause::ToolsChanged {
                    change: prompt_wire::ToolChange::Edited,
                    name: "grep".into()
                }
            );
        }
        // The next body names this reply.
        assert_eq!(
            wire.previous_message_id().as_deref(),
            Some("msg_02Bq9w938a90dw8r")
        );
    }
    // The unchanged second body extends the first (its system message included), and a
    // reply without a `diagnostics` object (nothing diverged) agrees.
    let (_, _, first, second) = two_turns();
    let verdict = compare(&first, &second).unwrap();
    assert_eq!(
        verdict,
        Verdict::Extends {
            shape: ApiKind::Anthropic
        }
    );
    assert_eq!(
        agreement(&first, &second, ProviderDiagnosis::NoChange),
        Agreement::Agree
    );
    assert_eq!(
        Cause::TailDropped.miss_reason(),
        MissReason::MessagesChanged
    );
    // A pending comparison, a not-found previous reply: no verdict to agree with.
    let anthropic = |json: &str| ProviderDiagnosis::parse(ApiKind::Anthropic, json);
    let pending = anthropic(r#"{"cache_miss_reason":null}"#).unwrap();
    assert_eq!(pending, ProviderDiagnosis::Pending);
    assert_eq!(agreement(&first, &second, pending), Agreement::Pending);
    let gone = anthropic(r#"{"cache_miss_reason":{"type":"previous_message_not_found"}}"#).unwrap();
    assert_eq!(gone, ProviderDiagnosis::NotFound);
    assert!(matches!(
        agreement(&first, &second, gone),
        Agreement::NotComparable { .. }
    ));
    assert!(anthropic(r#"{"cache_miss_reason":{"type":1}}"#).is_err());
    assert!(
        anthropic(r#"{"cache_miss_reason":{"type":"x","cache_missed_input_tokens":-1}}"#).is_err()
    );
}

/// The engine's verdict on `later` after `first`, reconciled with what the provider said.
fn agreement(first: &[u8], later: &[u8], said: ProviderDiagnosis) -> Agreement {
    let mut engine = Engine::new(EngineConfig::default());
    let count = &mut |_: &Canonical<'_>, b: &Block| b.len;
    engine.analyze(&Exchange::body(first), 1, count).unwrap();
    let analysis = engine.analyze(&Exchange::body(later), 2, count).unwrap();
    ProviderVerdict::reconcile(said, &analysis, ApiKind::Anthropic).agreement
}

#[test]
fn profile_deepseek_usage_is_reported_as_deepseek() {
    let profile = deepseek();
    let mut session = profile_session(&profile);
    let mut wire = profile_wire(ApiKind::OpenAi, &profile);
    wire.body(&session.turn(Extensions::new(), "hi").unwrap())
        .unwrap();
    let reply = wire
        .record_reply(&mut session, &fixture_in("deepseek", "response.json"))
        .unwrap();
    let usage = reply.usage.unwrap();
    assert_eq!(usage.provider, Provider::DeepSeek);
    assert_eq!(usage.provider.as_str(), "deepseek");
    let usage: Value = serde_json::from_str(&usage.json).unwrap();
    assert_eq!(usage["prompt_cache_hit_tokens"], 1216);
    // OpenAI's own usage stays `openai`.
    let openai =
        prompt_wire::read_reply(ApiKind::OpenAi, reply_bytes(ApiKind::OpenAi).as_bytes()).unwrap();
    assert_eq!(openai.usage.unwrap().provider, Provider::OpenAi);
}

fn reply_bytes(api: ApiKind) -> String {
    reply(api, 1, "ok", &[])
}

#[test]
fn profile_gemini_3_refuses_function_calls_replayed_without_their_signatures() {
    let play = |model: &str, recorded_through_wire: bool| -> Result<(), WireError> {
        let profile = Profile::lookup(ApiKind::Gemini, model, None);
        let mut session = profile_session(&profile);
        let mut wire = profile_wire(ApiKind::Gemini, &profile);
        wire.body(&session.turn(Extensions::new(), "Read main.rs").unwrap())?;
        let id = if recorded_through_wire {
            let body = json!({"candidates": [{"content": {"role": "model", "parts": [
                {"functionCall": {"name": "read_file", "args": {"path": "main.rs"}},
                 "thoughtSignature": "CiQB0e2Kb1xyz"}]}, "finishReason": "STOP"}]});
            wire.record_reply(&mut session, body.to_string().as_bytes())
                .unwrap()
                .tool_calls[0]
                .id
                .clone()
        } else {
            // An OpenAI-shaped assistant message (an adopted conversation, another
            // provider's reply): the wire builds its functionCall part, without signature.
            session
                .record_assistant(
                    &json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "read_file", "arguments": "{\"path\":\"main.rs\"}"}}]}),
                )
                .unwrap();
            "call_1".to_owned()
        };
        session
            .record_tool(&prompt_core::session::ToolResult::text(&id, "fn main() {}"))
            .unwrap();
        wire.body(&session.continuation(Extensions::new()).unwrap())?;
        Ok(())
    };
    let profile = Profile::lookup(ApiKind::Gemini, "gemini-3-pro-preview", None);
    assert!(profile.signatures_required());
    assert!(matches!(
        play("gemini-3-pro-preview", false),
        Err(WireError::UnsignedCalls { index: 1, .. })
    ));
    assert!(play("gemini-3-pro-preview", true).is_ok());
    assert!(play("gemini-2.5-flash", false).is_ok());
    // Gemini 3.1 is of the Gemini 3 family; the error says what to do.
    let err = play("gemini-3.1-pro-preview", false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("thoughtSignature"), "{err}");
}

/// One step of a generated session.
#[derive(Debug, Clone)]
enum Step {
    /// A user turn: the todo list's text (an update when it changes), whether the git state
    /// (the per-request tail) is there, and how many tool calls the reply makes (answered in
    /// one continuation).
    Turn { todo: u8, git: bool, calls: u8 },
    /// The system prompt edited.
    SystemPrompt(u8),
    /// A compaction keeping the last two nodes.
    Compact,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (0u8..3, any::<bool>(), 0u8..3).prop_map(|(todo, git, calls)| Step::Turn { todo, git, calls }),
        1 => (0u8..3).prop_map(Step::SystemPrompt),
        1 => Just(Step::Compact),
    ]
}

/// Plays `steps` under `profile` on `api`; every body sent, as (epoch, bytes, stable body).
fn play_steps(api: ApiKind, profile: &Profile, steps: &[Step]) -> Vec<(u64, Vec<u8>, Vec<u8>)> {
    const TODOS: [&str; 3] = ["a", "b", "c"];
    let mut session = profile_session(profile);
    let mut wire = profile_wire(api, profile);
    let mut out = Vec::new();
    let mut n = 0;
    for step in steps {
        match step {
            Step::Turn { todo, git, calls } => {
                n += 1;
                let mut values = Extensions::new().with(crate::common::Todo(TODOS[*todo as usize]));
                if *git {
                    values = values.with(crate::common::Git(format!("git: {n} files changed")));
                }
                let request = session.turn(values, format!("Request {n}.")).unwrap();
                let epoch = request.epoch();
                let body = wire.body(&request).unwrap();
                out.push((epoch, body.to_bytes(), body.stable_body()));
                let calls: Vec<(String, &str, Value)> = (0..*calls)
                    .map(|k| (format!("call_{n}_{k}"), "grep", json!({"pattern": "x"})))
                    .collect();
                let refs: Vec<(&str, &str, Value)> = calls
                    .iter()
                    .map(|(i, f, a)| (i.as_str(), *f, a.clone()))
                    .collect();
                let text = if refs.is_empty() { "Done." } else { "" };
                let ids: Vec<String> = wire
                    .record_reply(&mut session, reply(api, n, text, &refs).as_bytes())
                    .unwrap()
                    .tool_calls
                    .into_iter()
                    .map(|c| c.id)
                    .collect();
                if !ids.is_empty() {
                    for id in &ids {
                        session
                            .record_tool(&prompt_core::session::ToolResult::text(id, "found"))
                            .unwrap();
                    }
                    n += 1;
                    let request = session.continuation(Extensions::new()).unwrap();
                    let epoch = request.epoch();
                    let body = wire.body(&request).unwrap();
                    out.push((epoch, body.to_bytes(), body.stable_body()));
                    wire.record_reply(&mut session, reply(api, n, "Found it.", &[]).as_bytes())
                        .unwrap();
                }
            }
            Step::SystemPrompt(k) => {
                session.set_system_prompt(&format!("Answer in language {k}."));
            }
            Step::Compact => {
                let len = session.history().len();
                if len > 2 {
                    let cut = session.history().safe_cut(0, 2);
                    if cut > 0 {
                        session
                            .compact(0..cut, "Summary of the work so far.")
                            .unwrap();
                    }
                }
            }
        }
    }
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Whatever the session does, Opus 4.8's bodies are JSON, follow the placement rules of
    /// mid-conversation system messages, carry no breakpoint on a system message, and extend
    /// each other within an epoch; DeepSeek's have no system message after the first.
    #[test]
    fn profile_bodies_keep_their_provider_rules_for_any_session(
        steps in proptest::collection::vec(step(), 1..10)
    ) {
        for (api, profile) in [(ApiKind::Anthropic, opus()), (ApiKind::OpenAi, deepseek())] {
            let bodies = play_steps(api, &profile, &steps);
            for (_, bytes, _) in &bodies {
                let body = json(bytes);
                let m = messages(bytes);
                if api == ApiKind::OpenAi {
                    proptest::prop_assert!(m.iter().skip(1).all(|x| role(x) != "system"), "{body}");
                    continue;
                }
                proptest::prop_assert!(m.first().is_none_or(|x| role(x) != "system"), "{body}");
                for (i, msg) in m.iter().enumerate().filter(|(_, x)| role(x) == "system") {
                    proptest::prop_assert_eq!(role(&m[i - 1]), "user", "{}", body);
                    proptest::prop_assert!(
                        m.get(i + 1).is_none_or(|next| role(next) == "assistant"),
                        "{}", body
                    );
                    for block in msg["content"].as_array().into_iter().flatten() {
                        proptest::prop_assert_eq!(&block["type"], "text");
                        proptest::prop_assert!(block.get("cache_control").is_none());
                    }
                }
                // Strict alternation of the other roles.
                let roles: Vec<&str> = m.iter().map(role).filter(|r| *r != "system").collect();
                proptest::prop_assert!(roles.windows(2).all(|w| w[0] != w[1]), "{}", body);
            }
            for w in bodies.windows(2).filter(|w| w[0].0 == w[1].0) {
                proptest::prop_assert!(
                    compare(&w[0].2, &w[1].1).unwrap().extends(),
                    "{:?}: {} -> {}",
                    api,
                    String::from_utf8_lossy(&w[0].2),
                    String::from_utf8_lossy(&w[1].1)
                );
            }
        }
    }
}

#[test]
fn profile_a_streamed_reply_carries_its_id_and_diagnostics_as_the_whole_reply_does() {
    // Anthropic's stream opens with the message, its id and (asked for) its diagnostics.
    let whole = String::from_utf8(fixture_in("anthropic", "response_diagnostics.json")).unwrap();
    let stream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_02Bq9w938a90dw8r\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-opus-4-8\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":40,\"cache_creation_input_tokens\":1203,\"cache_read_input_tokens\":0,\"cache_creation\":{\"ephemeral_5m_input_tokens\":1203,\"ephemeral_1h_input_tokens\":0},\"output_tokens\":1},\"diagnostics\":{\"cache_miss_reason\":{\"type\":\"tools_changed\",\"cache_missed_input_tokens\":1203}}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"It will rain tomorrow.\"}}\n\n\
event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":12}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let streamed = prompt_wire::stream::read_stream(ApiKind::Anthropic, stream.as_bytes()).unwrap();
    let read = prompt_wire::read_reply(ApiKind::Anthropic, whole.as_bytes()).unwrap();
    assert_eq!(streamed.id.as_deref(), Some("msg_02Bq9w938a90dw8r"));
    assert_eq!(streamed.id, read.id);
    let (a, b) = (streamed.diagnostics.unwrap(), read.diagnostics.unwrap());
    assert_eq!(
        ProviderDiagnosis::parse(ApiKind::Anthropic, &a).unwrap(),
        ProviderDiagnosis::parse(ApiKind::Anthropic, &b).unwrap()
    );
    // The other shapes' streams carry their id too (the fixtures' chunks name it).
    for api in [ApiKind::OpenAi, ApiKind::Gemini] {
        let file = if api == ApiKind::Gemini {
            "gemini"
        } else {
            "openai_chat"
        };
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(file);
        let sse = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|e| e == "sse"))
            .unwrap_or_else(|| panic!("no stream fixture in {}", dir.display()));
        let reply = prompt_wire::stream::read_stream(api, &std::fs::read(&sse).unwrap()).unwrap();
        assert!(reply.id.is_some(), "{api:?}: {}", sse.display());
    }
}
