//! Property: over random lifetimes of a conversation (turns, tool rounds, removals, refreshes,
//! compactions, adoption, system-prompt edits, branches), a save and restore at any point,
//! as text or through `serde_json::Value`, gives back the session that was saved, byte for
//! byte; every edited or truncated document is refused with the field named; and a branch's
//! requests extend the request sent at its fork point.

use std::collections::HashMap;

use crate::support::{Date, PlanMode, ProjectRoot, Todo, components};
use prompt_core::adopt::AdoptOptions;
use prompt_core::node::{NodeKind, Producer};
use prompt_core::snapshot::{RestoreError, RestoreMode, Restored, SessionSnapshot};
use prompt_core::{
    DeliveryStyle, Extensions, PrefixCheck, PromptPolicy, Session, SessionContext, SessionOptions,
    delivery::PrefixRole,
};
use proptest::prelude::*;
use serde_json::{Value, json};

#[derive(Debug, Clone)]
enum Op {
    Turn { todo: u8, plan: bool, text: String },
    Reply { tool_calls: u8, continuation: bool },
    SystemPrompt(u8),
    Compact { keep_last: u8 },
    Remove,
    Refresh,
    SaveRestore { through_value: bool, edit: u8 },
    Regenerate,
    EditUser(u8),
    Rewind(u8),
    Fork,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..4, any::<bool>(), "[a-z \"é\n]{0,10}")
            .prop_map(|(todo, plan, text)| Op::Turn { todo, plan, text }),
        4 => (0u8..3, any::<bool>())
            .prop_map(|(tool_calls, continuation)| Op::Reply { tool_calls, continuation }),
        2 => (0u8..3).prop_map(Op::SystemPrompt),
        1 => (0u8..6).prop_map(|keep_last| Op::Compact { keep_last }),
        1 => Just(Op::Remove),
        1 => Just(Op::Refresh),
        3 => (any::<bool>(), 0u8..12).prop_map(|(through_value, edit)| Op::SaveRestore { through_value, edit }),
        1 => Just(Op::Regenerate),
        1 => any::<u8>().prop_map(Op::EditUser),
        1 => any::<u8>().prop_map(Op::Rewind),
        1 => Just(Op::Fork),
    ]
}

fn values(todo: u8, plan: bool) -> Extensions {
    Extensions::new()
        .with(Date("2026-12-01".into()))
        .with(Todo((0..todo).map(|i| format!("item {i}")).collect()))
        .with(PlanMode(plan))
}

fn policy() -> PromptPolicy {
    PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"assistant_instructions\", \"tool_schemas\"]\n",
        "agent.toml",
        &components(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .ignore_warnings()
}

fn context() -> SessionContext {
    SessionContext::new(Extensions::new().with(ProjectRoot("/repo".into())))
}

fn options(delivery: &DeliveryStyle, prompt: u8) -> SessionOptions {
    SessionOptions::new()
        .with_delivery(delivery.clone())
        .with_system_prompt(format!("Instructions v{prompt}"))
}

/// Conversations an app may bring: message 0 the prefix, a differing one, none.
fn adopted(shape: u8) -> String {
    let rest = r#"{"role":"user","content":"earlier question"},{"role":"assistant","content":"earlier answer"}"#;
    match shape {
        0 => format!("[{rest}]"),
        1 => format!(r#"[{{"role":"system","content":"You are Jan."}},{rest}]"#),
        _ => format!(
            r#"[{{"role":"system","content":"Instructions v0\n\nYou are a careful coding assistant.\n\n[{{\"name\":\"read_file\",\"parameters\":{{\"path\":\"string\"}}}}]"}},{rest}]"#
        ),
    }
}

/// One edit of a saved document and the field its refusal must name; `None` when the
/// document has no such field to edit.
fn edit(doc: &mut Value, which: u8) -> Option<&'static str> {
    let nodes = doc["history"]["nodes"].as_array().map_or(0, Vec::len);
    let last = nodes.checked_sub(1);
    match (which, last) {
        (0, Some(i)) => {
            doc["history"]["nodes"][i]["text"] = json!("edited text");
            Some("text")
        }
        (1, Some(i)) => {
            doc["history"]["nodes"][i]["producer"] =
                json!({"kind": "component", "id": "edited_writer"});
            Some("producer")
        }
        (2, Some(i)) => {
            let kind = if doc["history"]["nodes"][i]["kind"] == "tool" {
                "assistant"
            } else {
                "tool"
            };
            doc["history"]["nodes"][i]["kind"] = json!(kind);
            Some("kind")
        }
        (3, Some(i)) => {
            let epoch = doc["history"]["epoch"].as_u64().unwrap_or(0);
            doc["history"]["nodes"][i]["epoch"] = json!(epoch + 1);
            Some("epoch")
        }
        (4, Some(i)) => {
            doc["history"]["nodes"][i]["message"] =
                json!(r#"{"role":"user","content":"injected"}"#);
            Some("message")
        }
        (5, Some(_)) => {
            doc["history"]["nodes"].as_array_mut().map(Vec::pop);
            Some("history.nodes")
        }
        (6, _) => {
            doc["session_id"] = json!("another");
            Some("session_id")
        }
        (7, _) => {
            doc["counters"]["turn"] = json!(u64::MAX);
            Some("counters")
        }
        (8, _) if !doc["prefix"].is_null() => {
            doc["prefix"] = Value::Null;
            Some("prefix")
        }
        (9, _) => {
            doc["history"]["pending"] =
                json!([{"producer": {"kind": "user"}, "text": "x", "rendered": "x"}]);
            Some("history.pending")
        }
        (10, _) if doc["checkpoints"].as_array().is_some_and(|c| !c.is_empty()) => {
            doc["checkpoints"][0]["turn"] = json!(99);
            Some("checkpoints")
        }
        (11, _) if doc["tails"].as_array().is_some_and(|t| !t.is_empty()) => {
            doc["tails"][0]["last"] = json!("edited");
            Some("tails")
        }
        _ => None,
    }
}

/// A request's turn values, its epoch and its stable bytes.
type Sent = ((u8, bool), u64, Vec<u8>);

fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn every_restore_is_the_session_that_was_saved_and_every_edit_is_refused_with_its_field(
        ops in prop::collection::vec(op(), 1..32),
        style in 0u8..4,
        start in 0u8..4,
    ) {
        let delivery = match style {
            0 => DeliveryStyle::system(),
            1 => DeliveryStyle::user_reminder("system-reminder"),
            2 => DeliveryStyle::merged_into_user("system-reminder"),
            _ => DeliveryStyle::merged_into_user("system-reminder").with_prefix(PrefixRole::FirstUser),
        };
        let mut prompt = 0u8;
        let mut s = if start == 3 {
            Session::start(components(), &policy(), context(), options(&delivery, prompt)).map_err(fail)?
        } else {
            Session::adopt(components(), &policy(), context(), options(&delivery, prompt),
                &adopted(start), &AdoptOptions::default()).map_err(fail)?.0
        };
        // Each request's values and stable bytes, by number: what a branch must send again.
        let mut sent: HashMap<u64, Sent> = HashMap::new();
        let mut last_values = (0u8, false);
        let mut previous: Option<(u64, Vec<u8>)> = None;
        let mut calls = 0u32;
        for op in ops {
            match op {
                Op::Turn { todo, plan, text } => {
                    if !s.open_tool_calls().is_empty() { continue; }
                    // A turn while the last request has no reply is refused, and changes nothing.
                    if let Some(request) = s.unanswered_request() {
                        let len = s.history().len();
                        let refused = s.turn(values(todo, plan), text).err();
                        prop_assert!(
                            matches!(refused, Some(prompt_core::ComposeError::Unanswered { request: r }) if r == request),
                            "{:?}", refused
                        );
                        prop_assert_eq!(s.history().len(), len);
                        continue;
                    }
                    last_values = (todo, plan);
                    let req = s.turn(values(todo, plan), text).map_err(fail)?;
                    if let Some((_, before)) = previous.as_ref().filter(|(e, _)| *e == req.epoch()) {
                        prop_assert_eq!(req.extends(before), PrefixCheck::Prefix);
                    }
                    sent.insert(req.sequence(), (last_values, req.epoch(), req.stable_bytes()));
                    previous = Some((req.epoch(), req.stable_bytes()));
                }
                Op::Reply { tool_calls, continuation } => {
                    if !s.open_tool_calls().is_empty() || s.requests() == 0 { continue; }
                    if s.history().nodes().last().is_some_and(|n| n.kind() == NodeKind::Assistant) { continue; }
                    // Ids reused across turns, as engines that number calls per message do.
                    let calls_json: Vec<_> = (0..tool_calls).map(|i| json!({
                        "id": format!("call_{i}"), "type": "function",
                        "function": {"name": "read_file", "arguments": "{}"}})).collect();
                    let reply = if calls_json.is_empty() {
                        json!({"role": "assistant", "content": "done"})
                    } else {
                        json!({"role": "assistant", "content": null, "tool_calls": calls_json})
                    };
                    s.record_assistant(&reply).map_err(fail)?;
                    for i in 0..tool_calls {
                        s.record_tool_result(&format!("call_{i}"), "ok").map_err(fail)?;
                    }
                    calls += u32::from(tool_calls);
                    if continuation && tool_calls > 0 {
                        let req = s.continuation(values(last_values.0, last_values.1)).map_err(fail)?;
                        if let Some((_, before)) = previous.as_ref().filter(|(e, _)| *e == req.epoch()) {
                            prop_assert_eq!(req.extends(before), PrefixCheck::Prefix);
                        }
                        sent.insert(req.sequence(), (last_values, req.epoch(), req.stable_bytes()));
                        previous = Some((req.epoch(), req.stable_bytes()));
                    }
                }
                Op::SystemPrompt(v) => {
                    prompt = v;
                    s.set_system_prompt(&format!("Instructions v{v}"));
                    let expected = format!("Instructions v{v}");
                    let current = s.system_prompt().map(|p| p.into_owned());
                    prop_assert_eq!(current.as_deref(), Some(expected.as_str()));
                }
                Op::Compact { keep_last } => {
                    let end = s.history().safe_cut(0, usize::from(keep_last));
                    s.compact(0..end, "Summary so far.").map_err(fail)?;
                }
                Op::Remove => {
                    s.remove_by_producer(&Producer::Component(crate::support::id("todo_addendum")));
                }
                Op::Refresh => {
                    s.refresh(components(), &policy(), prompt_core::tools::ToolSet::empty(), None).map_err(fail)?;
                }
                Op::SaveRestore { through_value, edit: which } => {
                    let text = s.save().to_json();
                    let snapshot: SessionSnapshot = if through_value {
                        let value: Value = serde_json::from_str(&text).map_err(fail)?;
                        serde_json::from_value(value).map_err(fail)?
                    } else {
                        SessionSnapshot::from_json(text.as_bytes()).map_err(fail)?
                    };
                    let Restored { session: restored, changes, system_prompt, .. } = Session::restore(
                        &snapshot, components(), &policy(), context(),
                        options(&delivery, prompt), RestoreMode::Strict,
                    ).map_err(fail)?;
                    prop_assert!(changes.is_none());
                    // The app's current prompt is the session's: nothing is appended.
                    prop_assert_eq!(system_prompt, None);
                    prop_assert_eq!(restored.save(), s.save(), "a restore changes nothing");
                    if s.open_tool_calls().is_empty() {
                        // The next request: a turn, or the unanswered request sent again.
                        prop_assert_eq!(s.unanswered_request(), restored.unanswered_request());
                        let probe = |mut session: Session| -> Result<Vec<u8>, TestCaseError> {
                            Ok(if session.unanswered_request().is_some() {
                                session.resend(values(1, false)).map_err(fail)?.to_bytes()
                            } else {
                                session.turn(values(1, false), "probe").map_err(fail)?.to_bytes()
                            })
                        };
                        prop_assert_eq!(probe(s.clone())?, probe(restored.clone())?);
                    }
                    let mut doc: Value = serde_json::from_str(&text).map_err(fail)?;
                    if let Some(field) = edit(&mut doc, which) {
                        let edited: Result<SessionSnapshot, _> = serde_json::from_value(doc);
                        let outcome = edited.map_err(RestoreError::Json).and_then(|d| Session::restore(
                            &d, components(), &policy(), context(), options(&delivery, prompt), RestoreMode::Strict));
                        match outcome {
                            Err(RestoreError::Edited { field: found, .. }) => {
                                prop_assert!(found.contains(field), "edit {} named {:?}, expected {:?}", which, found, field);
                            }
                            Err(RestoreError::Limit { .. }) if field == "counters" => {}
                            other => prop_assert!(false, "edit {} ({}) was not refused: {:?}", which, field, other.map(|_| ())),
                        }
                    }
                    s = restored;
                }
                Op::Regenerate | Op::Rewind(_) => {
                    let checkpoint = match op {
                        Op::Rewind(n) if !s.checkpoints().is_empty() => {
                            s.checkpoints()[usize::from(n) % s.checkpoints().len()]
                        }
                        Op::Regenerate => match s.checkpoints().last() { Some(c) => *c, None => continue },
                        _ => continue,
                    };
                    let mut branch = if matches!(op, Op::Regenerate) { s.regenerate() } else { s.rewind(checkpoint.sequence) }.map_err(fail)?;
                    prop_assert_eq!(branch.routing_id(), s.routing_id());
                    prop_assert_ne!(branch.session_id(), s.session_id());
                    if branch.history().nodes().last().is_some_and(|n| n.kind() == NodeKind::Assistant) {
                        continue;
                    }
                    let Some((at_values, epoch, bytes)) = sent.get(&checkpoint.sequence).cloned() else { continue };
                    let req = branch.resend(values(at_values.0, at_values.1)).map_err(fail)?;
                    if epoch == req.epoch() {
                        prop_assert_eq!(req.extends(&bytes), PrefixCheck::Prefix, "a branch sends what was sent");
                    }
                    sent.insert(req.sequence(), (at_values, req.epoch(), req.stable_bytes()));
                    previous = Some((req.epoch(), req.stable_bytes()));
                    last_values = at_values;
                    s = branch;
                }
                Op::EditUser(n) => {
                    let users: Vec<usize> = s.history().nodes().iter().enumerate()
                        .filter(|(_, node)| node.kind() == NodeKind::User).map(|(i, _)| i).collect();
                    if users.is_empty() { continue; }
                    let k = users[usize::from(n) % users.len()];
                    let mut branch = s.edit_user_message(k).map_err(fail)?;
                    for (a, b) in branch.history().nodes()[..k].iter().zip(s.history().nodes()) {
                        prop_assert_eq!(a.bytes(), b.bytes());
                        prop_assert_eq!(a.id(), b.id());
                    }
                    if !branch.open_tool_calls().is_empty() || branch.unanswered_request().is_some() { continue; }
                    let before = s.checkpoints().iter().rev().find(|c| c.nodes <= k).and_then(|c| sent.get(&c.sequence)).cloned();
                    let req = branch.turn(values(last_values.0, last_values.1), "edited").map_err(fail)?;
                    if let Some((_, epoch, bytes)) = before.filter(|(_, e, _)| *e == req.epoch()) {
                        prop_assert_eq!(req.extends(&bytes), PrefixCheck::Prefix, "an edit keeps what came before it");
                        let _ = epoch;
                    }
                    sent.insert(req.sequence(), (last_values, req.epoch(), req.stable_bytes()));
                    previous = Some((req.epoch(), req.stable_bytes()));
                    s = branch;
                }
                Op::Fork => {
                    let fork = s.fork();
                    prop_assert_eq!(fork.routing_id(), s.routing_id());
                    s = fork;
                }
            }
        }
        let _ = calls;
    }
}
