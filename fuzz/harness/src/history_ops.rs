//! `history_ops`: arbitrary sequences of history operations, and the invariants of the
//! append-only history.

use std::collections::HashMap;
use std::ops::Range;

use prompt_core::delivery::PrefixRole;
use prompt_core::hash::NodeId;
use prompt_core::history::{Compaction, SystemPromptChange};
use prompt_core::node::{Node, NodeKind, Producer};
use prompt_core::{ComponentId, DeliveryStyle, History};

use crate::shared::Program;

/// The longest text an operation writes.
const TEXT: u8 = 48;

/// The call ids of an assistant message op 2 appends (`#` is a counter, fresh each time).
const CALL_SHAPES: [&[&str]; 4] = [
    &["c#"],
    &["call_0", "call_0"],
    &["call_0", "call_1"],
    &["c#", "call_0", "c#"],
];

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
                // Calls with fresh ids, or with ids reused within the message (engines that
                // number calls per message, and replies that repeat an id), then all their
                // results or none.
                calls += 1;
                let shape = usize::from(op / 9 / 2) % CALL_SHAPES.len();
                let ids: Vec<String> = CALL_SHAPES[shape]
                    .iter()
                    .map(|id| id.replace('#', &calls.to_string()))
                    .collect();
                let list: Vec<String> = ids
                    .iter()
                    .map(|id| {
                        format!(
                            r#"{{"id":"{id}","type":"function","function":{{"name":"f","arguments":"{{}}"}}}}"#
                        )
                    })
                    .collect();
                let call = format!(
                    r#"{{"role":"assistant","content":null,"tool_calls":[{}]}}"#,
                    list.join(",")
                );
                let _ = history.append_raw(Producer::Assistant, NodeKind::Assistant, &call);
                if op / 9 % 2 == 0 {
                    for id in &ids {
                        let result = format!(
                            r#"{{"role":"tool","tool_call_id":"{id}","content":{}}}"#,
                            serde_json::Value::String(ops.text(TEXT))
                        );
                        let _ = history.append_raw(Producer::Tool, NodeKind::Tool, &result);
                    }
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
                let links = answered(history.nodes());
                if let Ok(compaction) = history.compact(span.clone(), &ops.text(TEXT)) {
                    assert_eq!(history.system_prompt().as_deref(), before.as_deref());
                    assert_pairs_kept(&links, span, &compaction, history.nodes());
                    seen.clear();
                }
            }
            _ => {
                let keep = usize::from(ops.byte().unwrap_or(0)) % 8;
                let cut = history.safe_cut(0, keep);
                assert!(history.len() - cut >= keep.min(history.len()));
                let before = history.system_prompt().map(|p| p.into_owned());
                let links = answered(history.nodes());
                let compaction = match history.compact(0..cut, "summary") {
                    Ok(compaction) => compaction,
                    Err(e) => panic!("a safe cut is always allowed: {e}"),
                };
                assert_eq!(history.system_prompt().as_deref(), before.as_deref());
                assert_pairs_kept(&links, 0..cut, &compaction, history.nodes());
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

/// Per node, what it is in the pairing of calls and results, read independently of the
/// library: for an assistant message, how many of its calls have a result; for a tool
/// result, 1 if it answers a call (the k-th result with an id answers the k-th call with
/// that id of the last assistant message before it), else 0; for any other node, 0. With
/// the node's bytes, to line nodes up across a compaction.
fn answered(nodes: &[Node]) -> Vec<(String, usize)> {
    let mut out: Vec<(String, usize)> = nodes.iter().map(|n| (n.bytes().to_owned(), 0)).collect();
    let mut assistant: Option<usize> = None;
    let mut waiting: HashMap<String, usize> = HashMap::new();
    for (j, node) in nodes.iter().enumerate() {
        let value: serde_json::Value =
            serde_json::from_str(node.bytes()).unwrap_or(serde_json::Value::Null);
        match node.kind() {
            NodeKind::Assistant => {
                assistant = Some(j);
                waiting.clear();
                for call in value
                    .get("tool_calls")
                    .and_then(serde_json::Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if let Some(id) = call.get("id").and_then(serde_json::Value::as_str) {
                        *waiting.entry(id.to_owned()).or_default() += 1;
                    }
                }
            }
            NodeKind::Tool => {
                let id = value
                    .get("tool_call_id")
                    .and_then(serde_json::Value::as_str);
                if let (Some(i), Some(left)) = (assistant, id.and_then(|id| waiting.get_mut(id)))
                    && *left > 0
                {
                    *left -= 1;
                    out[i].1 += 1;
                    out[j].1 = 1;
                }
            }
            _ => {}
        }
    }
    out
}

/// After `compaction` of `span` out of the nodes `before` described: every node outside the
/// span is still there, after the summary (and the system prompt re-established) when it
/// followed the span, and each call and result that was paired still is (a cut never leaves
/// a result without its call, nor a call without its results).
fn assert_pairs_kept(
    before: &[(String, usize)],
    span: Range<usize>,
    compaction: &Compaction,
    nodes: &[Node],
) {
    let after = answered(nodes);
    // What replaced the span: its nodes out, the summary and perhaps the prompt in.
    let shift = |k: usize| {
        if compaction.is_empty() || k < span.start {
            Some(k)
        } else if k < span.end {
            None
        } else {
            (k + after.len()).checked_sub(before.len())
        }
    };
    for (k, (bytes, links)) in before.iter().enumerate() {
        let Some(at) = shift(k) else {
            continue;
        };
        let Some((now_bytes, now)) = after.get(at) else {
            panic!("node {k}, outside the compacted span {span:?}, is gone: {bytes}");
        };
        assert_eq!(now_bytes, bytes, "node {k} moved to {at}");
        assert!(
            now >= links,
            "node {k} (outside the compacted span {span:?}) had {links} call/result links and \
             now has {now}: {bytes}"
        );
    }
}
