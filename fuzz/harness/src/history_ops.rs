//! `history_ops`: arbitrary sequences of history operations, and the invariants of the
//! append-only history.

use std::collections::HashMap;

use prompt_core::delivery::PrefixRole;
use prompt_core::hash::NodeId;
use prompt_core::history::SystemPromptChange;
use prompt_core::node::{NodeKind, Producer};
use prompt_core::{ComponentId, DeliveryStyle, History};

use crate::shared::Program;

/// The longest text an operation writes.
const TEXT: u8 = 48;

const STYLES: [fn() -> DeliveryStyle; 4] = [
    DeliveryStyle::system,
    || DeliveryStyle::user_reminder("system-reminder"),
    || DeliveryStyle::merged_into_user("system-reminder"),
    || DeliveryStyle::merged_into_user("system-reminder").with_prefix(PrefixRole::FirstUser),
];

/// Drives a [`History`] with the operations `data` spells, checking after each one that no
/// node's bytes changed within an epoch, that the system prompt reads back as set, and that
/// a compaction keeps the current prompt.
pub fn history_ops(data: &[u8]) {
    let mut ops = Program::new(data);
    let style = STYLES[usize::from(ops.byte().unwrap_or(0)) % STYLES.len()]();
    let mut history = History::new(style);
    let mut seen: HashMap<NodeId, String> = HashMap::new();
    let mut calls = 0u32;
    while let Some(op) = ops.byte() {
        match op % 9 {
            0 => {
                let _ = history.append_user(&ops.text(TEXT));
            }
            1 => {
                // Arbitrary text as a raw message: refused or kept, never a panic.
                let kind =
                    [NodeKind::User, NodeKind::Assistant, NodeKind::Tool][usize::from(op / 9) % 3];
                let producer = match kind {
                    NodeKind::User => Producer::User,
                    NodeKind::Tool => Producer::Tool,
                    _ => Producer::Assistant,
                };
                let raw = ops.text(TEXT);
                if let Ok(id) = history.append_raw(producer, kind, &raw)
                    && kind == NodeKind::Assistant
                {
                    let stored = history.nodes().iter().find(|n| n.id() == id);
                    assert_eq!(stored.map(|n| n.bytes()), Some(raw.as_str()));
                }
            }
            2 => {
                calls += 1;
                let call = format!(
                    r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c{calls}","type":"function","function":{{"name":"f","arguments":"{{}}"}}}}]}}"#
                );
                let _ = history.append_raw(Producer::Assistant, NodeKind::Assistant, &call);
                if op / 9 % 2 == 0 {
                    let result = format!(
                        r#"{{"role":"tool","tool_call_id":"c{calls}","content":{}}}"#,
                        serde_json::Value::String(ops.text(TEXT))
                    );
                    let _ = history.append_raw(Producer::Tool, NodeKind::Tool, &result);
                }
            }
            3 | 4 => {
                let prompt = ops.text(TEXT);
                let change = history.set_system_prompt(&prompt);
                assert_eq!(history.system_prompt().as_deref(), Some(prompt.as_str()));
                assert_eq!(
                    history.set_system_prompt(&prompt),
                    SystemPromptChange::Unchanged,
                    "{change:?}"
                );
            }
            5 => {
                let id = ComponentId::new(["todo_addendum", "date"][usize::from(op / 9) % 2]);
                if let Ok(id) = id {
                    history.append_update(Producer::Component(id), &ops.text(TEXT));
                }
            }
            6 | 7 => {
                let len = history.len();
                let a = usize::from(ops.byte().unwrap_or(0)) % (len + 1);
                let b = usize::from(ops.byte().unwrap_or(0)) % (len + 1);
                let span = a.min(b)..a.max(b);
                let before = history.system_prompt().map(|p| p.into_owned());
                if history.compact(span, &ops.text(TEXT)).is_ok() {
                    assert_eq!(history.system_prompt().as_deref(), before.as_deref());
                    seen.clear();
                }
            }
            _ => {
                let keep = usize::from(ops.byte().unwrap_or(0)) % 8;
                let cut = history.safe_cut(0, keep);
                assert!(history.len() - cut >= keep.min(history.len()));
                let before = history.system_prompt().map(|p| p.into_owned());
                let compacted = history.compact(0..cut, "summary");
                assert!(
                    compacted.is_ok(),
                    "a safe cut is always allowed: {compacted:?}"
                );
                assert_eq!(history.system_prompt().as_deref(), before.as_deref());
                seen.clear();
            }
        }
        for node in history.nodes() {
            let bytes = seen
                .entry(node.id())
                .or_insert_with(|| node.bytes().to_owned());
            assert_eq!(bytes.as_str(), node.bytes(), "node {} changed", node.id());
        }
    }
}
