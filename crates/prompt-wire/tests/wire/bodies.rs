//! The bodies of one scripted session per API: tools, tool calls answered in continuations,
//! a system-prompt change, updates, an ephemeral tail and a compaction.

use prompt_core::session::ToolResult;
use prompt_core::snapshot::RestoreMode;
use prompt_core::{ApiKind, Session, SessionContext};
use prompt_wire::{ResumePoint, Wire, WireError, WireOptions};
use serde_json::{Value, json};

use crate::common::{
    APIS, Sent, components, json, options, play, play_with, raw_field, reply, session, tools,
    values, wire,
};

fn byte_api(api: ApiKind) -> bool {
    api != ApiKind::Anthropic
}

/// Consecutive bodies of one epoch.
fn pairs(sent: &[Sent]) -> impl Iterator<Item = (&Sent, &Sent)> {
    sent.windows(2)
        .map(|w| (&w[0], &w[1]))
        .filter(|(a, b)| a.epoch == b.epoch)
}

#[test]
fn every_body_is_json_and_its_chunks_length_and_stable_part_agree() {
    for api in APIS {
        for s in play(api) {
            json(&s.bytes);
            json(&s.stable_body);
            assert_eq!(s.chunks, s.bytes, "{api:?} {}", s.label);
            assert_eq!(s.len, s.bytes.len(), "{api:?} {}", s.label);
            assert_eq!(s.stable, s.bytes[..s.stable.len()], "{api:?} {}", s.label);
            assert!(s.bytes.ends_with(&s.new_chunks), "{api:?} {}", s.label);
            assert!(!s.new_chunks.is_empty(), "{api:?} {}", s.label);
        }
    }
}

#[test]
fn every_body_carries_the_same_tools_bytes() {
    for api in APIS {
        let sent = play(api);
        let first = raw_field(&sent[0].bytes, "tools").unwrap().to_owned();
        assert!(
            first.contains("read_file") && first.contains("grep"),
            "{api:?}"
        );
        for s in &sent {
            assert_eq!(
                raw_field(&s.bytes, "tools"),
                Some(first.as_str()),
                "{api:?} {}",
                s.label
            );
        }
    }
}

#[test]
fn consecutive_bodies_extend_each_other_within_an_epoch_as_bytes_or_anthropic_blocks() {
    for api in APIS {
        let sent = play(api);
        assert!(
            sent.iter().any(|s| s.epoch > sent[0].epoch),
            "{api:?}: the script compacts"
        );
        let mut checked = 0;
        for (a, b) in pairs(&sent) {
            if byte_api(api) {
                assert!(
                    b.bytes.starts_with(&a.stable),
                    "{api:?} {} -> {}: the stable part is not a byte prefix\n{}\n{}",
                    a.label,
                    b.label,
                    String::from_utf8_lossy(&a.stable),
                    String::from_utf8_lossy(&b.bytes)
                );
            }
            // Every API: the blocks before the stable end come first in the next body.
            assert!(
                b.blocks.starts_with(&a.blocks),
                "{api:?} {} -> {}: {:?}\n{:?}",
                a.label,
                b.label,
                a.blocks,
                b.blocks
            );
            assert!(b.blocks.len() > a.blocks.len(), "{api:?} {}", b.label);
            checked += 1;
        }
        assert_eq!(checked, sent.len() - 2, "{api:?}: one epoch change");
    }
}

#[test]
fn anthropic_breakpoints_move_so_its_bytes_are_not_a_prefix_but_its_blocks_are() {
    let sent = play(ApiKind::Anthropic);
    let (a, b) = (&sent[0], &sent[1]);
    assert!(!b.bytes.starts_with(&a.stable));
    assert!(b.blocks.starts_with(&a.blocks));
}

#[test]
fn openai_bodies_keep_one_prompt_cache_key_throughout_the_session() {
    for api in [ApiKind::OpenAi, ApiKind::OpenAiResponses, ApiKind::LlamaCpp] {
        let sent = play(api);
        let key = format!("\"{}\"", sent[0].cache_key);
        assert_eq!(sent[0].cache_key.len(), 32);
        for s in &sent {
            assert_eq!(
                raw_field(&s.bytes, "prompt_cache_key"),
                Some(key.as_str()),
                "{api:?} {}",
                s.label
            );
        }
    }
    for s in play(ApiKind::LlamaCpp) {
        assert_eq!(raw_field(&s.bytes, "cache_prompt"), Some("true"));
    }
    for api in [ApiKind::Anthropic, ApiKind::Gemini] {
        for s in play(api) {
            assert_eq!(raw_field(&s.bytes, "prompt_cache_key"), None);
        }
    }
}

/// Every `cache_control` in a body: the JSON path of the object carrying it.
fn breakpoints(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(map) => {
            if map.contains_key("cache_control") {
                out.push((path.clone(), v.clone()));
            }
            for (k, x) in map {
                breakpoints(x, format!("{path}.{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                breakpoints(x, format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn anthropic_bodies_have_at_most_four_breakpoints_and_none_on_ephemeral_content() {
    for s in play(ApiKind::Anthropic) {
        let body = json(&s.bytes);
        let mut found = Vec::new();
        breakpoints(&body, String::new(), &mut found);
        assert!(found.len() <= 4, "{}: {found:?}", s.label);
        assert_eq!(found.len(), s.breakpoints, "{}", s.label);
        let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
        // End of tools, end of system, and the rolling one on the last stable block.
        assert!(paths.contains(&".tools[1]"), "{}: {paths:?}", s.label);
        // The system field: the prefix, and after the compaction the summary that heads the
        // history.
        let last_system = format!(".system[{}]", body["system"].as_array().unwrap().len() - 1);
        assert!(
            paths.contains(&last_system.as_str()),
            "{}: {paths:?}",
            s.label
        );
        let rolling = paths.iter().filter(|p| p.starts_with(".messages[")).count();
        assert!((1..=2).contains(&rolling), "{}: {paths:?}", s.label);
        for (_, block) in &found {
            let text = block.to_string();
            assert!(
                s.ephemeral.iter().all(|e| !text.contains(e.as_str())),
                "{}: a breakpoint on ephemeral content: {text}",
                s.label
            );
            assert!(
                !matches!(
                    block["type"].as_str(),
                    Some("thinking" | "redacted_thinking")
                ),
                "{}",
                s.label
            );
        }
        // The rolling breakpoint is on the last stable block: the ephemeral blocks follow it
        // in the same (last) user message.
        let messages = body["messages"].as_array().unwrap();
        let last = messages.last().unwrap()["content"].as_array().unwrap();
        let marked = last
            .iter()
            .rposition(|b| b.get("cache_control").is_some())
            .unwrap();
        assert_eq!(marked + 1 + s.ephemeral.len(), last.len(), "{}", s.label);
    }
}

/// Anthropic: records a reply with `calls` parallel `read_file` calls and a result for each
/// (the blocks appended before the continuation, shared by the rolling-breakpoint tests).
fn record_parallel_reads(s: &mut Session, w: &mut Wire, calls: usize) {
    let args: Vec<(String, Value)> = (0..calls)
        .map(|i| {
            (
                format!("toolu_{i:02}"),
                json!({"path": format!("src/{i}.rs")}),
            )
        })
        .collect();
    let refs: Vec<(&str, &str, Value)> = args
        .iter()
        .map(|(id, a)| (id.as_str(), "read_file", a.clone()))
        .collect();
    let reply = w
        .record_reply(s, reply(ApiKind::Anthropic, 1, "", &refs).as_bytes())
        .unwrap();
    for call in &reply.tool_calls {
        s.record_tool(&ToolResult::text(&call.id, "…")).unwrap();
    }
}

/// Anthropic: turn 1, then a reply with `calls` parallel tool calls, their results, and the
/// continuation; returns both bodies.
fn parallel_calls(calls: usize) -> (Value, Value, usize) {
    let api = ApiKind::Anthropic;
    let mut s = session(api);
    let mut w = wire(api);
    let first = json(
        &w.body(&s.turn(values("a", 1), "Read everything.").unwrap())
            .unwrap()
            .to_bytes(),
    );
    record_parallel_reads(&mut s, &mut w, calls);
    let body = w.body(&s.continuation(values("a", 2)).unwrap()).unwrap();
    let count = body.breakpoint_count();
    (first, json(&body.to_bytes()), count)
}

#[test]
fn anthropic_adds_a_second_rolling_breakpoint_when_more_than_20_blocks_were_appended() {
    // 1 thinking + 11 tool_use + 11 tool_result = 23 blocks since the previous breakpoint.
    let (first, second, count) = parallel_calls(11);
    let rolling = |body: &Value| {
        let mut found = Vec::new();
        breakpoints(body, String::new(), &mut found);
        let all = found.len();
        let messages: Vec<String> = found
            .into_iter()
            .map(|(p, _)| p)
            .filter(|p| p.starts_with(".messages["))
            .collect();
        (all, messages)
    };
    let (all, found) = rolling(&second);
    assert_eq!((count, all), (4, 4), "{found:?}");
    // The previous request's rolling breakpoint was on its last stable block (the user
    // message, before the ephemeral git state): the second one is on that very block.
    let (_, before) = rolling(&first);
    assert_eq!(before, [".messages[0].content[1]"]);
    assert_eq!(
        found,
        [".messages[0].content[1]", ".messages[2].content[10]"]
    );

    // 1 thinking + 2 tool_use + 2 tool_result = 5: one rolling breakpoint is enough.
    let (_, second, count) = parallel_calls(2);
    let mut found = Vec::new();
    breakpoints(&second, String::new(), &mut found);
    assert_eq!((count, found.len()), (3, 3), "{found:?}");
}

#[test]
fn a_wire_resumed_from_its_point_in_a_new_process_writes_the_body_the_old_wire_would_have() {
    // The 23 blocks of `parallel_calls(11)` put a second rolling breakpoint where the previous
    // body's stable part ended: a fresh wire knows that place only from the saved point.
    let api = ApiKind::Anthropic;
    let policy = crate::common::policy();
    let mut s = session(api);
    let mut w = wire(api);
    w.body(&s.turn(values("a", 1), "Read everything.").unwrap())
        .unwrap();
    record_parallel_reads(&mut s, &mut w, 11);
    // Saved here, as an agent stopping between the results and the next request would.
    let snapshot = s.save();
    let point = w.resume_point().unwrap();
    let point: ResumePoint = serde_json::from_str(&serde_json::to_string(&point).unwrap()).unwrap();
    let one_run = w
        .body(&s.continuation(values("a", 2)).unwrap())
        .unwrap()
        .to_bytes();

    let restore = |resume: Option<ResumePoint>| {
        let prompt_core::Restored {
            session: mut restored,
            changes,
            ..
        } = Session::restore(
            &snapshot,
            components(),
            &policy,
            SessionContext::default(),
            prompt_wire::session_options(api, tools()),
            RestoreMode::Strict,
        )
        .unwrap();
        assert!(changes.is_none());
        let mut fresh = wire(api);
        if let Some(point) = resume {
            fresh.resume_from(point);
        }
        let body = fresh
            .body(&restored.continuation(values("a", 2)).unwrap())
            .unwrap();
        (body.breakpoint_count(), body.to_bytes())
    };
    let (count, resumed) = restore(Some(point));
    assert_eq!(count, 4);
    assert_eq!(
        String::from_utf8_lossy(&resumed),
        String::from_utf8_lossy(&one_run)
    );
    // Without the point the second rolling breakpoint is missing: the point is what keeps it.
    let (count, forgetful) = restore(None);
    assert_eq!(count, 3);
    assert_ne!(forgetful, one_run);
}

#[test]
fn updates_and_the_changed_system_prompt_are_appended_where_each_api_keeps_them_in_place() {
    for api in APIS {
        let sent = play(api);
        // "2.1": after the results of turn 2, the todo list changed.
        let s = sent.iter().find(|s| s.label == "2.1").unwrap();
        let body = json(&s.bytes);
        let system_field = match api {
            ApiKind::Anthropic => body["system"].to_string(),
            ApiKind::Gemini => body["systemInstruction"].to_string(),
            ApiKind::OpenAiResponses => body["instructions"].to_string(),
            _ => body["messages"][0].to_string(),
        };
        assert!(system_field.contains("careful coding assistant"), "{api:?}");
        for text in ["Answer in English.", "Open tasks: b"] {
            assert!(!system_field.contains(text), "{api:?}: {text} hoisted");
            let (array, role, at) = match api {
                ApiKind::OpenAi | ApiKind::LlamaCpp => ("messages", "system", "content"),
                ApiKind::OpenAiResponses => ("input", "system", "content"),
                ApiKind::Anthropic => ("messages", "user", "content"),
                ApiKind::Gemini => ("contents", "user", "parts"),
            };
            let holder = body[array]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m[at].to_string().contains(text))
                .unwrap_or_else(|| panic!("{api:?}: {text} missing"));
            assert_eq!(holder["role"], role, "{api:?}: {text}");
        }
    }
}

#[test]
fn the_ephemeral_tail_comes_after_the_stable_end_and_is_not_carried_over() {
    for api in APIS {
        let sent = play(api);
        for (i, s) in sent.iter().enumerate() {
            assert_eq!(s.ephemeral.len(), 1, "{api:?}");
            let text = &s.ephemeral[0];
            let found = String::from_utf8_lossy(&s.bytes);
            let stable = String::from_utf8_lossy(&s.stable);
            assert!(
                found.contains(text.as_str()) && !stable.contains(text.as_str()),
                "{api:?} {}",
                s.label
            );
            assert!(!String::from_utf8_lossy(&s.stable_body).contains(text.as_str()));
            if let Some(next) = sent.get(i + 1) {
                assert!(
                    !String::from_utf8_lossy(&next.bytes).contains(text.as_str()),
                    "{api:?} {}",
                    s.label
                );
            }
        }
    }
}

#[test]
fn anthropic_and_gemini_keep_strict_alternation_by_merging_user_role_nodes() {
    for (api, array, content, assistant) in [
        (ApiKind::Anthropic, "messages", "content", "assistant"),
        (ApiKind::Gemini, "contents", "parts", "model"),
    ] {
        for s in play(api) {
            let body = json(&s.bytes);
            let messages = body[array].as_array().unwrap();
            for (i, m) in messages.iter().enumerate() {
                let expected = if i % 2 == 0 { "user" } else { assistant };
                assert_eq!(m["role"], expected, "{api:?} {}: {m}", s.label);
                assert!(!m[content].as_array().unwrap().is_empty());
            }
        }
        // The continuation after two parallel results and a todo update: one user message
        // carries both results, then the update.
        let sent = play(api);
        let body = json(&sent.iter().find(|s| s.label == "2.1").unwrap().bytes);
        let last = body[array].as_array().unwrap().last().unwrap()[content].clone();
        let kinds: Vec<String> = last
            .as_array()
            .unwrap()
            .iter()
            .map(|b| {
                b["type"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| b.as_object().unwrap().keys().next().unwrap().clone())
            })
            .collect();
        let expected: &[&str] = if api == ApiKind::Anthropic {
            &["tool_result", "tool_result", "text", "text"]
        } else {
            &["functionResponse", "functionResponse", "text", "text"]
        };
        assert_eq!(kinds, expected, "{api:?}: {last}");
    }
}

#[test]
fn tool_results_take_each_api_shape_and_failures_stay_failures_where_the_api_can_say_so() {
    let find = |api: ApiKind| -> String {
        let sent = play(api);
        String::from_utf8(
            sent.iter()
                .find(|s| s.label == "2.1")
                .unwrap()
                .bytes
                .clone(),
        )
        .unwrap()
    };
    let chat = find(ApiKind::OpenAi);
    assert!(
        chat.contains(r#"{"role":"tool","tool_call_id":"call_3","content":"no such file"}"#),
        "{chat}"
    );
    assert!(!chat.contains("is_error"));
    let responses = find(ApiKind::OpenAiResponses);
    assert!(
        responses.contains(
            r#"{"type":"function_call_output","call_id":"call_3","output":"no such file"}"#
        )
    );
    let anthropic = find(ApiKind::Anthropic);
    assert!(anthropic.contains(
        r#"{"type":"tool_result","tool_use_id":"call_3","content":"no such file","is_error":true}"#
    ));
    let gemini = find(ApiKind::Gemini);
    assert!(
        gemini.contains(
            r#"{"functionResponse":{"name":"read_file","response":{"error":"no such file"}}}"#
        ),
        "{gemini}"
    );
    assert!(gemini.contains(
        r#"{"functionResponse":{"name":"grep","response":{"output":"src/parser.rs:12: fn parse"}}}"#
    ));
}

#[test]
fn a_compaction_summary_starts_a_new_epoch_the_wire_follows() {
    for api in APIS {
        let sent = play(api);
        let after = sent.iter().find(|s| s.label == "4").unwrap();
        let text = String::from_utf8_lossy(&after.bytes);
        assert!(
            text.contains("Summary: the parser lives in src/parser.rs."),
            "{api:?}"
        );
        assert!(
            !text.contains("Request 1:"),
            "{api:?}: compacted content sent"
        );
        let before = sent.iter().find(|s| s.label == "3").unwrap();
        assert!(after.epoch > before.epoch);
    }
}

#[test]
fn a_request_of_another_session_is_refused() {
    let api = ApiKind::OpenAi;
    let mut w = wire(api);
    let mut a = session(api);
    w.body(&a.turn(values("a", 1), "hi").unwrap()).unwrap();
    let mut other = prompt_core::Session::start(
        vec![],
        &prompt_core::PromptPolicy::default(),
        prompt_core::SessionContext::default(),
        prompt_core::SessionOptions::default(),
    )
    .unwrap();
    let err = w
        .body(&other.turn(values("a", 1), "hi").unwrap())
        .unwrap_err();
    assert!(matches!(err, WireError::OtherSession { .. }), "{err}");
}

#[test]
fn parameters_the_library_writes_are_refused_and_anthropic_requires_max_tokens() {
    let err = Wire::new(
        ApiKind::OpenAi,
        WireOptions::new("m").param("messages", &json!([])),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "parameter \"messages\" is written by the library for OpenAI Chat Completions bodies; it cannot be set as an extra parameter"
    );
    let err = Wire::new(ApiKind::Anthropic, WireOptions::new("m")).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::MissingParameter {
                key: "max_tokens",
                ..
            }
        ),
        "{err}"
    );
    assert!(WireOptions::new("m").param_raw("x", "{").is_err());
}

#[test]
fn parameters_go_after_the_messages_array_in_name_order() {
    let mut s = session(ApiKind::OpenAi);
    let mut w = Wire::new(
        ApiKind::OpenAi,
        WireOptions::new("m")
            .param("temperature", &json!(0.5))
            .param_raw("stream", "true")
            .unwrap(),
    )
    .unwrap();
    let body = String::from_utf8(
        w.body(&s.turn(values("a", 1), "hi").unwrap())
            .unwrap()
            .to_bytes(),
    )
    .unwrap();
    assert!(
        body.starts_with(r#"{"model":"m","tools":[{"type":"function","function":{"name":"grep""#),
        "{body}"
    );
    let tail = &body[body.rfind(']').unwrap()..];
    assert!(tail.starts_with(r#"],"prompt_cache_key":""#), "{tail}");
    assert!(
        tail.ends_with(r#","stream":true,"temperature":0.5}"#),
        "{tail}"
    );
}

#[test]
fn a_reply_is_carried_byte_for_byte_in_every_later_body_of_the_epoch() {
    for api in APIS {
        let sent = play(api);
        for (i, s) in sent.iter().enumerate() {
            let Some(message) = &s.reply else { continue };
            let Some(next) = sent.get(i + 1).filter(|n| n.epoch == s.epoch) else {
                continue;
            };
            let stored: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
                serde_json::from_str(message).unwrap();
            // What the provider sent, as the next body must carry it.
            let verbatim: Vec<String> = match api {
                ApiKind::OpenAi | ApiKind::LlamaCpp => vec![message.clone()],
                ApiKind::OpenAiResponses => elements(stored["output"].get()),
                ApiKind::Anthropic => elements(stored["content"].get()),
                ApiKind::Gemini => elements(stored["parts"].get()),
            };
            let text = String::from_utf8_lossy(&next.bytes);
            for piece in verbatim {
                assert!(
                    text.contains(piece.as_str()),
                    "{api:?} {}: {piece} not carried",
                    s.label
                );
            }
        }
    }
}

fn elements(array: &str) -> Vec<String> {
    let items: Vec<&serde_json::value::RawValue> = serde_json::from_str(array).unwrap();
    items.iter().map(|r| r.get().to_owned()).collect()
}

#[test]
fn chat_messages_are_the_requests_messages_array_byte_for_byte() {
    for api in [ApiKind::OpenAi, ApiKind::LlamaCpp] {
        let mut s = session(api);
        let mut w = wire(api);
        for turn in 1..=3 {
            let request = s.turn(values("a", turn), "Question?").unwrap();
            let messages = request.to_bytes();
            let body = w.body(&request).unwrap().to_bytes();
            assert_eq!(
                raw_field(&body, "messages").unwrap().as_bytes(),
                messages,
                "{api:?}"
            );
            let answer = reply(api, turn as usize, "Answer.", &[]);
            w.record_reply(&mut s, answer.as_bytes()).unwrap();
        }
    }
}

#[test]
fn a_tail_in_its_own_message_leaves_the_stable_part_as_it_was_and_bodies_still_extend() {
    for (api, array, content) in [
        (ApiKind::Anthropic, "messages", "content"),
        (ApiKind::Gemini, "contents", "parts"),
    ] {
        let merged = play(api);
        let own = play_with(
            api,
            Wire::new(api, options(api).tail_in_own_message()).unwrap(),
        );
        assert_eq!(merged.len(), own.len());
        let mut split = 0;
        for (m, o) in merged.iter().zip(&own) {
            assert_eq!(
                String::from_utf8_lossy(&m.stable_body),
                String::from_utf8_lossy(&o.stable_body),
                "{api:?} {}",
                o.label
            );
            let body = json(&o.bytes);
            let messages = body[array].as_array().unwrap();
            let last = &messages[messages.len() - 1];
            assert_eq!(last["role"], "user", "{api:?} {}", o.label);
            // The tail alone, after a user message of its own whenever the history ends
            // with one (a tool result, an update).
            assert_eq!(last[content].as_array().unwrap().len(), 1, "{api:?} {last}");
            assert!(last.to_string().contains(o.ephemeral[0].as_str()));
            let merged_body = json(&m.bytes);
            let merged_messages = merged_body[array].as_array().unwrap();
            let merged_last = &merged_messages[merged_messages.len() - 1];
            if merged_last[content].as_array().unwrap().len() > 1 {
                assert_eq!(
                    messages.len(),
                    merged_messages.len() + 1,
                    "{api:?} {}",
                    o.label
                );
                assert_eq!(messages[messages.len() - 2]["role"], "user");
                split += 1;
            }
        }
        assert!(split > 0, "{api:?}: no tail was split from a user message");
        for pair in own.windows(2).filter(|w| w[0].epoch == w[1].epoch) {
            let verdict = prompt_wire::compare(&pair[0].bytes, &pair[1].bytes).unwrap();
            let tail_only = match &verdict {
                prompt_wire::Verdict::Extends { .. } => true,
                prompt_wire::Verdict::Breaks(b) => b.cause == prompt_wire::Cause::TailDropped,
            };
            assert!(tail_only, "{api:?} {}: {verdict:?}", pair[1].label);
        }
    }
}

/// Issue 12: the routing header carries the body's `prompt_cache_key` under the router's
/// name (sglang-router's by default, another when configured), for every API.
#[test]
fn the_routing_header_carries_the_session_key_under_a_configurable_name() {
    for api in APIS {
        let mut s = session(api);
        let request = s.turn(values("a", 1), "hi").unwrap();
        let w = wire(api);
        let (name, value) = w.routing_header(&request);
        assert_eq!(name, prompt_wire::DEFAULT_ROUTING_HEADER);
        assert_eq!(name, "X-SMG-Routing-Key");
        assert_eq!(value, prompt_wire::prompt_cache_key(&request));
        assert_eq!(value, request.routing_key().to_string());
        let renamed = Wire::new(api, options(api).routing_header("X-Session-Affinity")).unwrap();
        assert_eq!(
            renamed.routing_header(&request),
            ("X-Session-Affinity", value.clone())
        );
        let other = session(api)
            .turn(values("a", 1), "hi")
            .unwrap()
            .routing_key();
        assert_ne!(
            other.to_string(),
            value,
            "{api:?}: another session, another key"
        );
    }
}
