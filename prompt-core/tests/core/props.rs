//! Property: within a cache epoch every request's stable bytes are a byte prefix of the next
//! request, and no appended node's bytes ever change, over random sequences of turns, tail
//! changes, system-prompt updates, tool calls with continuations, compactions, refreshes
//! and save/restore round trips; a restore never changes a byte.

use std::collections::HashMap;

use crate::support::{Date, PlanMode, ProjectRoot, Todo, components};
use prompt_core::refresh::Refresh;
use prompt_core::snapshot::{RestoreMode, Restored, SessionSnapshot};
use prompt_core::tools::{ToolSet, ToolSource};
use prompt_core::{
    DeliveryStyle, Extensions, PrefixCheck, PromptPolicy, Session, SessionContext, SessionOptions,
    delivery::PrefixRole, divergence::check_prefix, hash::NodeId,
};
use proptest::prelude::*;
use serde_json::json;

#[derive(Debug, Clone)]
enum Op {
    Turn {
        day: u8,
        todo: u8,
        plan: bool,
        text: String,
    },
    Reply {
        tool_calls: u8,
        continuation: bool,
    },
    SystemPrompt(u8),
    Compact {
        keep_last: u8,
    },
    Refresh {
        tools: u8,
    },
    SaveRestore,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, 0u8..4, any::<bool>(), "[a-z \"\\\\é\n]{0,12}")
            .prop_map(|(day, todo, plan, text)| Op::Turn { day, todo, plan, text }),
        4 => (0u8..3, any::<bool>())
            .prop_map(|(tool_calls, continuation)| Op::Reply { tool_calls, continuation }),
        2 => (0u8..3).prop_map(Op::SystemPrompt),
        1 => (0u8..6).prop_map(|keep_last| Op::Compact { keep_last }),
        1 => (0u8..3).prop_map(|tools| Op::Refresh { tools }),
        1 => Just(Op::SaveRestore),
    ]
}

fn values(day: u8, todo: u8, plan: bool) -> Extensions {
    Extensions::new()
        .with(Date(format!("2026-12-0{}", day + 1)))
        .with(Todo((0..todo).map(|i| format!("item {i}")).collect()))
        .with(PlanMode(plan))
}

fn policy() -> PromptPolicy {
    let c = components();
    PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"assistant_instructions\", \"tool_schemas\", \"skill:*\"]\n[prompt.placement]\n\"skill:pdf\" = \"prefix\"\n",
        "agent.toml",
        &c,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .ignore_warnings()
}

fn context() -> SessionContext {
    SessionContext::new(Extensions::new().with(ProjectRoot("/repo".into())))
}

/// `n` tools, named `t0`…
fn tools(n: u8) -> ToolSet {
    let listing = serde_json::Value::Array(
        (0..n)
            .map(|i| json!({"type": "function", "function": {"name": format!("t{i}"), "description": "d", "parameters": {"type": "object"}}}))
            .collect(),
    );
    ToolSet::from_openai(&[(ToolSource::builtin(), &listing)]).unwrap_or_else(|e| panic!("{e}"))
}

fn options(delivery: DeliveryStyle, n: u8) -> SessionOptions {
    SessionOptions::new()
        .with_delivery(delivery)
        .with_tools(tools(n))
}

fn start(delivery: DeliveryStyle) -> Session {
    Session::start(components(), &policy(), context(), options(delivery, 0))
        .unwrap_or_else(|e| panic!("{e}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn requests_extend_each_other_and_nodes_never_change(
        ops in prop::collection::vec(op(), 1..40),
        style in 0u8..4,
    ) {
        let delivery = match style {
            0 => DeliveryStyle::system(),
            1 => DeliveryStyle::user_reminder("system-reminder"),
            2 => DeliveryStyle::merged_into_user("system-reminder"),
            _ => DeliveryStyle::merged_into_user("system-reminder").with_prefix(PrefixRole::FirstUser),
        };
        let mut s = start(delivery.clone());
        let mut tool_count = 0u8;
        let mut last_values = (0u8, 0u8, false);
        // (epoch, stable bytes) of the previous request.
        let mut previous: Option<(u64, Vec<u8>)> = None;
        let mut seen: HashMap<NodeId, String> = HashMap::new();
        let mut calls = 0u32;
        for op in ops {
            match op {
                Op::Turn { day, todo, plan, text } => {
                    // A turn while the last request has no reply is refused, and changes nothing.
                    if let Some(request) = s.unanswered_request() {
                        let len = s.history().len();
                        let refused = s.turn(values(day, todo, plan), text).err();
                        prop_assert!(
                            matches!(refused, Some(prompt_core::ComposeError::Unanswered { request: r }) if r == request),
                            "{:?}", refused
                        );
                        prop_assert_eq!(s.history().len(), len);
                        continue;
                    }
                    last_values = (day, todo, plan);
                    let req = s.turn(values(day, todo, plan), text).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let full = req.to_bytes();
                    let stable = req.stable_bytes();
                    prop_assert!(full.starts_with(&stable));
                    prop_assert_eq!(full.len(), req.len());
                    prop_assert!(serde_json::from_slice::<serde_json::Value>(&full).is_ok());
                    if let Some((_, before)) = previous.as_ref().filter(|(e, _)| *e == req.epoch()) {
                        prop_assert_eq!(req.extends(before), PrefixCheck::Prefix);
                        prop_assert_eq!(check_prefix(before, &full), PrefixCheck::Prefix);
                    }
                    previous = Some((req.epoch(), stable));
                }
                Op::Reply { tool_calls, continuation } => {
                    let calls_json: Vec<_> = (0..tool_calls).map(|i| json!({
                        "id": format!("call_{}", calls + u32::from(i)), "type": "function",
                        "function": {"name": "read_file", "arguments": "{\"path\":\"a.rs\"}"}})).collect();
                    let reply = if calls_json.is_empty() {
                        json!({"role": "assistant", "content": "done", "reasoning_content": "thinking"})
                    } else {
                        json!({"role": "assistant", "content": null, "tool_calls": calls_json})
                    };
                    s.record_assistant(&reply).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    for i in 0..tool_calls {
                        s.record_tool_result(&format!("call_{}", calls + u32::from(i)), "fn main() {}")
                            .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    }
                    calls += u32::from(tool_calls);
                    if continuation && tool_calls > 0 && s.requests() > 0 {
                        let (day, todo, plan) = last_values;
                        let req = s.continuation(values(day, todo, plan)).map_err(|e| TestCaseError::fail(e.to_string()))?;
                        let full = req.to_bytes();
                        prop_assert!(serde_json::from_slice::<serde_json::Value>(&full).is_ok());
                        // Nothing between a call and its results: the last assistant message
                        // is followed right away by its results.
                        let new: Vec<_> = req.new_nodes().iter().map(|n| n.kind()).collect();
                        let call = new.iter().rposition(|k| *k == prompt_core::node::NodeKind::Assistant);
                        prop_assert!(call.is_some());
                        let call = call.unwrap_or_default();
                        let results = new.get(call + 1..=call + usize::from(tool_calls));
                        prop_assert!(results.is_some_and(|r| r.iter().all(|k| *k == prompt_core::node::NodeKind::Tool)), "{:?}", new);
                        if let Some((_, before)) = previous.as_ref().filter(|(e, _)| *e == req.epoch()) {
                            prop_assert_eq!(req.extends(before), PrefixCheck::Prefix);
                        }
                        previous = Some((req.epoch(), req.stable_bytes()));
                    }
                }
                Op::Refresh { tools: n } => {
                    let before: Vec<String> = s.history().nodes().iter().map(|n| n.bytes().to_owned()).collect();
                    let epoch = s.history().epoch();
                    let outcome = s
                        .refresh(components(), &policy(), tools(n), None)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let after: Vec<String> = s.history().nodes().iter().map(|n| n.bytes().to_owned()).collect();
                    prop_assert_eq!(before, after, "a refresh never touches the history's bytes");
                    if n == tool_count {
                        prop_assert_eq!(outcome, Refresh::Unchanged);
                        prop_assert_eq!(s.history().epoch(), epoch);
                    } else {
                        prop_assert!(matches!(outcome, Refresh::NewEpoch(_)));
                        tool_count = n;
                    }
                }
                Op::SaveRestore => {
                    let snapshot = s.save();
                    let text = serde_json::to_string(&snapshot).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let read: SessionSnapshot = serde_json::from_str(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    let Restored { session: restored, changes, .. } = Session::restore(
                        &read, components(), &policy(), context(), options(delivery.clone(), tool_count), RestoreMode::Strict,
                    ).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert!(changes.is_none());
                    let again = serde_json::to_string(&restored.save())
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    prop_assert_eq!(&text, &again, "a restore changes nothing");
                    s = restored;
                }
                Op::SystemPrompt(v) => {
                    s.set_system_prompt(&format!("Instructions v{v}"));
                }
                Op::Compact { keep_last } => {
                    let end = s.history().safe_cut(0, usize::from(keep_last));
                    prop_assert!(s.history().len() - end >= usize::from(keep_last).min(s.history().len()));
                    s.compact(0..end, "Summary so far.").map_err(|e| TestCaseError::fail(e.to_string()))?;
                    seen.clear();
                }
            }
            for node in s.history().nodes() {
                let bytes = seen.entry(node.id()).or_insert_with(|| node.bytes().to_owned());
                prop_assert_eq!(bytes.as_str(), node.bytes(), "node {} changed", node.id());
            }
        }
    }
}
