//! The composer: prefix freezing, tail updates, the prefix-change hard error, divergence.

use crate::support::{Date, PlanMode, ProjectRoot, Todo, components, id, known_ids};
use prompt_core::{
    Component, ComposeError, DeliveryStyle, Extensions, Placement, PrefixCheck, PromptPolicy,
    Request, Session, SessionContext, SessionOptions, delivery::UpdateRole,
    divergence::check_prefix, history::SystemPromptChange, node::NodeKind, node::Producer,
};
use serde_json::{Value, json};

const POLICY: &str = r#"
[prompt]
prefix_allow = ["assistant_instructions", "tool_schemas", "skill:*", "mcp:*"]
prefix_deny = ["mcp:*"]
[prompt.placement]
"skill:pdf" = "prefix"
"mcp:github" = "prefix"
"#;

/// Who writes the nodes of the first request, and of the first after a compaction (the
/// tail stated anew): session tails (mcp:github demoted, project_memory), then turn tails
/// by id, then the user.
const FIRST_STATED: [&str; 5] = [
    "mcp:github",
    "project_memory",
    "date",
    "todo_addendum",
    "user",
];

fn policy(src: &str, known: &[Component]) -> PromptPolicy {
    PromptPolicy::from_agent_toml(src, "agent.toml", known)
        .unwrap_or_else(|e| panic!("{e}"))
        .ignore_warnings()
}

fn session_with(components: Vec<Component>, src: &str) -> Session {
    let p = policy(src, &components);
    let ctx = SessionContext::new(Extensions::new().with(ProjectRoot("/repo".into())));
    Session::start(components, &p, ctx, SessionOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

/// A session over the fixture components with `POLICY` and the given delivery style.
fn session_delivering(delivery: DeliveryStyle) -> Session {
    let components = components();
    let p = policy(POLICY, &components);
    Session::start(
        components,
        &p,
        SessionContext::default(),
        SessionOptions::new().with_delivery(delivery),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn turn_values(date: &str, todo: &[&str], plan: bool) -> Extensions {
    Extensions::new()
        .with(Date(date.into()))
        .with(Todo(todo.iter().map(|s| (*s).to_owned()).collect()))
        .with(PlanMode(plan))
}

/// Who wrote each node that is new in this request.
fn new_producers(request: &Request<'_>) -> Vec<String> {
    request
        .new_nodes()
        .iter()
        .map(|n| n.producer().to_string())
        .collect()
}

fn messages(bytes: &[u8]) -> Vec<Value> {
    serde_json::from_slice(bytes).unwrap_or_else(|e| panic!("request is not JSON: {e}"))
}

#[test]
fn prefix_holds_allowed_components_in_documented_order_and_tail_gets_the_rest() {
    let mut s = session_with(components(), POLICY);
    let req = s
        .turn(turn_values("2026-11-30", &["a"], false), "hi")
        .unwrap();
    let msgs = messages(&req.to_bytes());
    // Constant components first (by id), then session ones; mcp:github was denied.
    assert_eq!(
        msgs[0],
        json!({"role": "system", "content": "You are a careful coding assistant.\n\n[{\"name\":\"read_file\",\"parameters\":{\"path\":\"string\"}}]\n\nSkill: read PDFs."})
    );
    assert_eq!(
        req.prefix_components(),
        vec![
            id("assistant_instructions"),
            id("tool_schemas"),
            id("skill:pdf")
        ]
    );
    let producers = new_producers(&req);
    // Session tails (mcp:github demoted, project_memory), then turn tails by id, then the user.
    assert_eq!(producers, FIRST_STATED);
    // plan_addendum is ephemeral: last message, not in history.
    assert_eq!(req.ephemeral().len(), 1);
    let last = msgs.last().unwrap();
    assert_eq!(
        last["content"],
        "<system-update from=\"plan_addendum\">\nPlan mode is off.\n</system-update>"
    );
    let mcp = s
        .resolutions()
        .iter()
        .find(|(i, _)| i == &id("mcp:github"))
        .unwrap();
    assert!(
        mcp.1
            .reason
            .to_string()
            .contains("denied by prefix_deny `mcp:*`")
    );
}

#[test]
fn tail_update_is_appended_only_when_it_changes() {
    let mut s = session_with(components(), POLICY);
    s.turn(turn_values("2026-11-30", &["a"], false), "t1")
        .unwrap();
    s.record_assistant(&json!({"role": "assistant", "content": "r1"}))
        .unwrap();
    let r2 = s
        .turn(turn_values("2026-11-30", &["a"], false), "t2")
        .unwrap();
    let p2: Vec<_> = r2
        .new_nodes()
        .iter()
        .map(|n| n.producer().clone())
        .collect();
    // New in this request: the recorded reply and the user message; no tail update.
    assert_eq!(
        p2,
        vec![Producer::Assistant, Producer::User],
        "nothing changed, nothing appended"
    );
    s.record_assistant(&json!({"role": "assistant", "content": "r2"}))
        .unwrap();
    let r3 = s
        .turn(turn_values("2026-12-01", &["a", "b"], true), "t3")
        .unwrap();
    let p3: Vec<_> = r3
        .new_nodes()
        .iter()
        .map(|n| n.producer().to_string())
        .collect();
    assert_eq!(p3, ["assistant", "date", "todo_addendum", "user"]);
    assert!(r3.new_nodes()[1].bytes().contains("Today is 2026-12-01."));
    assert_eq!(r3.new_nodes()[1].kind(), NodeKind::Update);
}

#[test]
fn consecutive_requests_extend_each_other_through_updates_and_tool_calls() {
    let mut s = session_with(components(), POLICY);
    // The ephemeral plan_addendum ends each request: only the stable part must carry over.
    let r1 = s
        .turn(turn_values("2026-11-30", &[], false), "t1")
        .unwrap()
        .stable_bytes();
    s.record_assistant_raw(r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{}"}}]}"#).unwrap();
    s.record_tool_result("c1", "file body").unwrap();
    s.record_assistant(&json!({"role": "assistant", "content": "done", "reasoning_content": "r"}))
        .unwrap();
    assert!(matches!(
        s.set_system_prompt("New instructions."),
        SystemPromptChange::Appended(_)
    ));
    let r2 = s
        .turn(turn_values("2026-12-01", &["x"], true), "t2")
        .unwrap();
    assert_eq!(r2.extends(&r1), PrefixCheck::Prefix);
    assert_eq!(check_prefix(&r1, &r2.to_bytes()), PrefixCheck::Prefix);
    assert_eq!(r2.prefix_fingerprint(), s_fingerprint(&r1));
}

/// The fingerprint recomputed from a request's stable bytes: the hash of message 0.
fn s_fingerprint(stable: &[u8]) -> prompt_core::hash::Fingerprint {
    let request = [stable, b"]"].concat();
    let raw: Vec<&serde_json::value::RawValue> = serde_json::from_slice(&request).unwrap();
    // The documented formula: the tools field (none: `[]`), then message 0 as sent.
    prompt_core::hash::Digest128::of(&[b"tools\0", b"[]", b"\0prefix\0", raw[0].get().as_bytes()])
}

/// A per-turn component can no longer reach the prefix: the loader refuses the file that
/// promotes it, and a hand-built policy resolves it to the tail, so the session never fails
/// at turn 2 (the runtime `PrefixChanged` check stays as the last line of defence).
#[test]
fn turn_component_promoted_by_config_is_refused_at_load_and_kept_in_the_tail() {
    let src = "[prompt]\nprefix_allow = [\"date\"]\n[prompt.placement]\ndate = \"prefix\"\n";
    let known = components();
    let errors = match PromptPolicy::from_agent_toml(src, "agent.toml", &known) {
        Err(errors) => errors.to_string(),
        Ok(_) => panic!("a per-turn component promoted by configuration must not load"),
    };
    assert!(
        errors.contains("agent.toml:2:17: `date` in prefix_allow renders every turn"),
        "{errors}"
    );
    assert!(
        errors.contains("agent.toml:4:1: `date` in [prompt.placement] requests the prefix"),
        "{errors}"
    );
    let hand_built = PromptPolicy {
        prefix_allow: vec![prompt_core::policy::IdPattern::parse("date").unwrap()],
        placement: [(id("date"), Placement::Prefix)].into(),
        ..PromptPolicy::default()
    };
    let ctx = SessionContext::new(Extensions::new().with(ProjectRoot("/repo".into())));
    let mut s = Session::start(known, &hand_built, ctx, SessionOptions::default()).unwrap();
    let r1 = s.turn(turn_values("2026-11-30", &[], false), "t1").unwrap();
    assert!(!r1.prefix_components().contains(&id("date")));
    let r1 = r1.stable_bytes();
    s.record_assistant(&json!({"role": "assistant", "content": "ok"}))
        .unwrap();
    let r2 = s.turn(turn_values("2026-12-01", &[], false), "t2").unwrap();
    assert_eq!(r2.extends(&r1), PrefixCheck::Prefix);
    assert_eq!(s.turns(), 2);
}

#[test]
fn divergence_checker_names_message_and_producer() {
    let mut a = session_with(components(), POLICY);
    let r1 = a
        .turn(turn_values("2026-11-30", &["a"], false), "first")
        .unwrap()
        .to_bytes();
    // Same conversation, but the old code rewrote the prompt at the head.
    let mut b = session_with(
        vec![
            Component::constant(
                id("assistant_instructions"),
                "You are a careless coding assistant.",
            )
            .placement(Placement::Prefix),
        ],
        "[prompt]\nprefix_allow = [\"assistant_instructions\"]\n",
    );
    let r2 = b.turn(Extensions::new(), "first").unwrap();
    match r2.extends(&r1) {
        PrefixCheck::Diverged(d) => {
            assert_eq!(d.message_index, Some(0));
            assert_eq!(d.producer.as_deref(), Some("assistant_instructions"));
            assert_eq!(&r1[..d.byte_offset], &r2.to_bytes()[..d.byte_offset]);
            assert_eq!(&r1[d.byte_offset..d.byte_offset + 6], b"ful co");
        }
        PrefixCheck::Prefix => panic!("must diverge"),
    }
    // A history edit: diverges at the edited message.
    let t1 = br#"[{"role":"system","content":"S"},{"role":"user","content":"q1"},{"role":"assistant","content":"a1"}]"#;
    let t2 = br#"[{"role":"system","content":"S"},{"role":"user","content":"q1 (edited)"},{"role":"assistant","content":"a1"},{"role":"user","content":"q2"}]"#;
    match check_prefix(t1, t2) {
        PrefixCheck::Diverged(d) => assert_eq!(d.message_index, Some(1)),
        PrefixCheck::Prefix => panic!("must diverge"),
    }
}

#[test]
fn user_reminder_delivery_puts_updates_in_user_messages() {
    let mut s = session_delivering(DeliveryStyle::user_reminder("system-reminder"));
    let req = s
        .turn(turn_values("2026-11-30", &["a"], false), "hi")
        .unwrap();
    let msgs = messages(&req.to_bytes());
    assert_eq!(
        msgs[0]["role"], "system",
        "the prefix stays the system message"
    );
    for m in &msgs[1..] {
        assert_eq!(m["role"], "user", "{m}");
    }
    assert_eq!(UpdateRole::UserReminder, s.history().delivery().role);
}

#[test]
fn compaction_keeps_the_prefix_and_re_appends_compacted_tail_state() {
    let mut s = session_with(components(), POLICY);
    let fp = s
        .turn(turn_values("2026-11-30", &["a"], false), "t1")
        .unwrap()
        .prefix_fingerprint();
    s.record_assistant(&json!({"role": "assistant", "content": "r1"}))
        .unwrap();
    let len = s.history().len();
    let c = s.compact(0..len, "Summary: greeted.").unwrap();
    assert_eq!(c.removed.len(), len);
    let r = s
        .turn(turn_values("2026-11-30", &["a"], false), "t2")
        .unwrap();
    assert_eq!(r.prefix_fingerprint(), fp);
    assert_eq!(r.epoch(), 1);
    let producers = new_producers(&r);
    // The todo and date updates were compacted away, so they are stated again.
    assert_eq!(producers, FIRST_STATED);
}

#[test]
fn duplicate_component_ids_are_rejected_with_both_locations() {
    let mut c = components();
    c.push(Component::constant(id("date"), "again"));
    let p = policy("", &[]);
    let err = match Session::start(c, &p, SessionContext::default(), SessionOptions::default()) {
        Err(e) => e,
        Ok(_) => panic!("duplicates must be rejected"),
    };
    let text = err.to_string();
    assert!(text.contains("duplicate component id `date`"), "{text}");
    assert_eq!(text.matches(".rs:").count(), 2, "{text}");
}

#[test]
fn invalid_user_message_is_an_error_and_changes_nothing() {
    let mut s = session_with(components(), POLICY);
    let err = s.turn(
        turn_values("d", &[], false),
        prompt_core::session::UserInput::Raw("{oops".into()),
    );
    assert!(matches!(err, Err(ComposeError::History(_))));
    assert_eq!(s.history().len(), 0);
    assert_eq!(s.turns(), 0);
    assert!(known_ids().len() > 3);
}

fn roles(bytes: &[u8]) -> Vec<String> {
    messages(bytes)
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// A later turn of the merged-delivery test: the assistant answers `ok`, the app sets the
/// system prompt "Be terse." (as it does before every turn, `change` is what that does),
/// and the user asks `question` with the same turn values each time.
fn answer_then_ask_tersely<'s>(
    s: &'s mut Session,
    change: SystemPromptChange,
    question: &str,
) -> Request<'s> {
    s.record_assistant(&json!({"role": "assistant", "content": "ok"}))
        .unwrap();
    assert_eq!(s.set_system_prompt("Be terse."), change);
    s.turn(turn_values("2026-12-01", &["a", "b"], true), question)
        .unwrap()
}

#[test]
fn merged_delivery_keeps_strict_alternation_and_a_stable_prefix() {
    let mut s = session_delivering(DeliveryStyle::merged_into_user("system-reminder"));
    let r1 = s
        .turn(turn_values("2026-11-30", &["a"], false), "first")
        .unwrap();
    let b1 = r1.to_bytes();
    assert_eq!(roles(&b1), ["system", "user"]);
    let user = &messages(&b1)[1]["content"];
    let text = user.as_str().unwrap();
    assert!(
        text.starts_with("<system-reminder from=\"mcp:github\">"),
        "{text}"
    );
    assert!(text.contains(
        "<system-reminder from=\"plan_addendum\">\nPlan mode is off.\n</system-reminder>"
    ));
    assert!(text.ends_with("\n\nfirst"), "{text}");
    assert!(
        r1.ephemeral().is_empty(),
        "ephemeral output rides in the user message"
    );
    let stable1 = r1.stable_bytes();
    let r2 = answer_then_ask_tersely(&mut s, SystemPromptChange::Deferred, "second");
    let b2 = r2.to_bytes();
    assert_eq!(roles(&b2), ["system", "user", "assistant", "user"]);
    assert_eq!(r2.extends(&stable1), PrefixCheck::Prefix);
    let last = messages(&b2)[3]["content"].as_str().unwrap().to_owned();
    assert!(
        last.contains("from=\"system_prompt\">\nBe terse.\n"),
        "{last}"
    );
    assert!(last.contains("Today is 2026-12-01."), "{last}");
    assert_eq!(s.history().system_prompt().as_deref(), Some("Be terse."));
    // Unchanged tail output is not repeated; the system prompt is remembered as merged.
    let r3 = answer_then_ask_tersely(&mut s, SystemPromptChange::Unchanged, "third");
    let third = messages(&r3.to_bytes())[5]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        !third.contains("todo_addendum") && !third.contains("system_prompt"),
        "{third}"
    );
    assert!(
        third.contains("plan_addendum"),
        "ephemeral output is stated each turn: {third}"
    );
}

#[test]
fn first_user_prefix_has_no_system_message_and_survives_compaction() {
    let mut s = session_delivering(
        DeliveryStyle::merged_into_user("system-reminder")
            .with_prefix(prompt_core::delivery::PrefixRole::FirstUser),
    );
    let r1 = s
        .turn(turn_values("2026-11-30", &[], false), "first")
        .unwrap();
    let fp = r1.prefix_fingerprint();
    let b1 = r1.to_bytes();
    assert_eq!(roles(&b1), ["user"]);
    let content = messages(&b1)[0]["content"].as_str().unwrap().to_owned();
    assert!(
        content.starts_with("You are a careful coding assistant.\n\n"),
        "{content}"
    );
    assert!(content.ends_with("first"));
    let stable = r1.stable_bytes();
    s.record_assistant(&json!({"role": "assistant", "content": "ok"}))
        .unwrap();
    let r2 = s
        .turn(turn_values("2026-11-30", &[], false), "second")
        .unwrap();
    assert_eq!(r2.extends(&stable), PrefixCheck::Prefix);
    assert_eq!(r2.prefix_fingerprint(), fp);
    s.record_assistant(&json!({"role": "assistant", "content": "ok"}))
        .unwrap();
    let len = s.history().len();
    s.compact(0..len, "Summary.").unwrap();
    let r3 = s
        .turn(turn_values("2026-11-30", &[], false), "third")
        .unwrap();
    let msgs = messages(&r3.to_bytes());
    assert!(msgs.iter().all(|m| m["role"] != "system"), "{msgs:?}");
    let last = msgs.last().unwrap()["content"].as_str().unwrap().to_owned();
    assert!(
        last.starts_with("You are a careful coding assistant."),
        "prefix restated after compaction: {last}"
    );
}

#[test]
fn api_kind_picks_the_delivery_style() {
    use prompt_core::ApiKind;
    assert_eq!(ApiKind::OpenAi.delivery().role, UpdateRole::System);
    assert_eq!(ApiKind::LlamaCpp.delivery().role, UpdateRole::System);
    assert_eq!(ApiKind::Anthropic.delivery().role, UpdateRole::UserReminder);
    assert_eq!(ApiKind::Gemini.delivery().role, UpdateRole::UserReminder);
    let kind: ApiKind = serde_json::from_str("\"openai\"").unwrap();
    assert_eq!(kind, ApiKind::OpenAi);
    let kind: ApiKind = serde_json::from_str("\"llama_cpp\"").unwrap();
    assert_eq!(kind, ApiKind::LlamaCpp);
}

#[test]
fn first_user_prefix_opens_the_message_even_with_a_deferred_prompt_after_compaction() {
    let mut s = session_delivering(
        DeliveryStyle::merged_into_user("system-reminder")
            .with_prefix(prompt_core::delivery::PrefixRole::FirstUser),
    );
    s.turn(turn_values("2026-11-30", &[], false), "first")
        .unwrap();
    s.record_assistant(&json!({"role": "assistant", "content": "ok"}))
        .unwrap();
    assert_eq!(
        s.set_system_prompt("New rules."),
        SystemPromptChange::Deferred
    );
    let len = s.history().len();
    s.compact(0..len, "Summary.").unwrap();
    let r = s
        .turn(turn_values("2026-11-30", &[], false), "next")
        .unwrap();
    let last = messages(&r.to_bytes()).last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        last.starts_with("You are a careful coding assistant."),
        "{last}"
    );
    assert!(last.contains("New rules."), "{last}");
}

#[test]
fn session_options_for_anthropic_deliver_updates_as_user_reminders() {
    let components = components();
    let p = policy(POLICY, &components);
    let options = SessionOptions::for_api(prompt_core::ApiKind::Anthropic);
    let mut s = Session::start(components, &p, SessionContext::default(), options).unwrap();
    let req = s
        .turn(turn_values("2026-11-30", &["a"], false), "hi")
        .unwrap();
    let msgs = messages(&req.to_bytes());
    assert_eq!(msgs[0]["role"], "system");
    assert!(msgs[1..].iter().all(|m| m["role"] == "user"), "{msgs:?}");
    assert!(
        msgs[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("<system-reminder from=")
    );
}
