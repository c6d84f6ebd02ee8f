//! Property: within a cache epoch every request's stable bytes are a byte prefix of the next
//! request, and no appended node's bytes ever change, over random sequences of turns, tail
//! changes, system-prompt updates, tool calls and compactions.

use std::collections::HashMap;

use crate::support::{Date, PlanMode, ProjectRoot, Todo, components};
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
    },
    SystemPrompt(u8),
    Compact {
        keep_last: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, 0u8..4, any::<bool>(), "[a-z \"\\\\é\n]{0,12}")
            .prop_map(|(day, todo, plan, text)| Op::Turn { day, todo, plan, text }),
        4 => (0u8..3).prop_map(|tool_calls| Op::Reply { tool_calls }),
        2 => (0u8..3).prop_map(Op::SystemPrompt),
        1 => (0u8..6).prop_map(|keep_last| Op::Compact { keep_last }),
    ]
}

fn values(day: u8, todo: u8, plan: bool) -> Extensions {
    Extensions::new()
        .with(Date(format!("2026-12-0{}", day + 1)))
        .with(Todo((0..todo).map(|i| format!("item {i}")).collect()))
        .with(PlanMode(plan))
}

fn start(delivery: DeliveryStyle) -> Session {
    let c = components();
    let policy = PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"assistant_instructions\", \"tool_schemas\", \"skill:*\"]\n[prompt.placement]\n\"skill:pdf\" = \"prefix\"\n",
        "agent.toml",
        &c,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .policy;
    let ctx = SessionContext::new(Extensions::new().with(ProjectRoot("/repo".into())));
    Session::start(c, &policy, ctx, SessionOptions { delivery }).unwrap_or_else(|e| panic!("{e}"))
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
        let mut s = start(delivery);
        // (epoch, stable bytes) of the previous request.
        let mut previous: Option<(u64, Vec<u8>)> = None;
        let mut seen: HashMap<NodeId, String> = HashMap::new();
        let mut calls = 0u32;
        for op in ops {
            match op {
                Op::Turn { day, todo, plan, text } => {
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
                Op::Reply { tool_calls } => {
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
                }
                Op::SystemPrompt(v) => {
                    s.set_system_prompt(&format!("Instructions v{v}"));
                }
                Op::Compact { keep_last } => {
                    let len = s.history().len();
                    let end = len.saturating_sub(usize::from(keep_last));
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
