//! Property: tool calls and their results stay paired through any sequence of cuts and
//! compactions, when replies reuse call ids (within a message and across turns). The k-th
//! result with an id answers the k-th call with that id of the assistant message before it.

use std::collections::HashMap;

use prompt_core::node::{Node, NodeKind, Producer};
use prompt_core::{DeliveryStyle, History};
use proptest::prelude::*;
use serde_json::Value;

/// The ids calls are drawn from: few, so that ids repeat.
const IDS: [&str; 2] = ["call_0", "call_1"];

#[derive(Debug, Clone)]
enum Op {
    User,
    /// An assistant message with these calls (ids from [`IDS`]); no calls: a text reply.
    Calls(Vec<u8>),
    /// The result for this id, recorded only while a call with it is open (as a session
    /// refuses any other).
    Result(u8),
    /// Compacts `start..safe_cut(start, keep)`.
    SafeCut {
        start: u8,
        keep: u8,
    },
    /// Compacts an arbitrary span; a refusal is fine.
    Compact {
        start: u8,
        end: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::User),
        3 => prop::collection::vec(0u8..2, 0..4).prop_map(Op::Calls),
        4 => (0u8..2).prop_map(Op::Result),
        2 => (0u8..4, 0u8..6).prop_map(|(start, keep)| Op::SafeCut { start, keep }),
        2 => (0u8..16, 0u8..16).prop_map(|(start, end)| Op::Compact { start, end }),
    ]
}

fn calls(ids: &[u8]) -> String {
    if ids.is_empty() {
        return r#"{"role":"assistant","content":"done"}"#.to_owned();
    }
    let calls: Vec<String> = ids
        .iter()
        .map(|&i| {
            format!(
                r#"{{"id":"{}","type":"function","function":{{"name":"read","arguments":"{{}}"}}}}"#,
                IDS[usize::from(i) % IDS.len()]
            )
        })
        .collect();
    format!(
        r#"{{"role":"assistant","content":null,"tool_calls":[{}]}}"#,
        calls.join(",")
    )
}

/// Per node: for an assistant message, how many of its calls have a result; for a tool
/// result, whether it answers a call; `None` for a tool result that answers none. Computed
/// here, independently of the library.
fn links(nodes: &[Node]) -> Vec<Option<usize>> {
    let mut out = vec![Some(0); nodes.len()];
    let mut assistant: Option<usize> = None;
    let mut waiting: HashMap<String, usize> = HashMap::new();
    for (j, node) in nodes.iter().enumerate() {
        let value: Value = serde_json::from_str(node.bytes()).unwrap_or(Value::Null);
        match node.kind() {
            NodeKind::Assistant => {
                assistant = Some(j);
                waiting.clear();
                for call in value["tool_calls"].as_array().into_iter().flatten() {
                    if let Some(id) = call["id"].as_str() {
                        *waiting.entry(id.to_owned()).or_default() += 1;
                    }
                }
            }
            NodeKind::Tool => {
                let left = value["tool_call_id"]
                    .as_str()
                    .and_then(|id| waiting.get_mut(id))
                    .filter(|left| **left > 0);
                match (assistant, left) {
                    (Some(i), Some(left)) => {
                        *left -= 1;
                        out[i] = out[i].map(|n| n + 1);
                        out[j] = Some(1);
                    }
                    _ => out[j] = None,
                }
            }
            _ => {}
        }
    }
    out
}

/// Every tool result is preceded by its call, and every call kept in the history that had
/// a result still has it (`before` are the links of the nodes outside the compacted span,
/// in order; `after` those of the nodes that are not the summary).
fn check(h: &History, before: &[(String, Option<usize>)], what: &str) -> Result<(), TestCaseError> {
    let now = links(h.nodes());
    for (k, link) in now.iter().enumerate() {
        prop_assert!(
            link.is_some(),
            "after {}: node {} is a tool result without its call: {:?}",
            what,
            k,
            h.nodes().iter().map(Node::bytes).collect::<Vec<_>>()
        );
    }
    let kept: Vec<(String, Option<usize>)> = h
        .nodes()
        .iter()
        .zip(now)
        .filter(|(n, _)| n.producer() != &Producer::Compaction)
        .map(|(n, l)| (n.bytes().to_owned(), l))
        .collect();
    prop_assert_eq!(kept.as_slice(), before, "after {}", what);
    Ok(())
}

/// The nodes outside `span`, with their links, and the summaries (which a compaction does
/// not keep as they are).
fn outside(h: &History, span: std::ops::Range<usize>) -> Vec<(String, Option<usize>)> {
    h.nodes()
        .iter()
        .zip(links(h.nodes()))
        .enumerate()
        .filter(|(k, (n, _))| !span.contains(k) && n.producer() != &Producer::Compaction)
        .map(|(_, (n, l))| (n.bytes().to_owned(), l))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn no_cut_or_compaction_leaves_a_tool_result_without_its_call(
        ops in prop::collection::vec(op(), 1..40),
    ) {
        let mut h = History::new(DeliveryStyle::system());
        for op in ops {
            match op {
                Op::User => {
                    h.append_user("go on").map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
                Op::Calls(ids) => {
                    h.append_raw(Producer::Assistant, NodeKind::Assistant, &calls(&ids))
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
                Op::Result(i) => {
                    let id = IDS[usize::from(i) % IDS.len()];
                    if h.is_open_tool_call(id) {
                        let result = format!(r#"{{"role":"tool","tool_call_id":"{id}","content":"ok"}}"#);
                        h.append_raw(Producer::Tool, NodeKind::Tool, &result)
                            .map_err(|e| TestCaseError::fail(e.to_string()))?;
                    }
                }
                Op::SafeCut { start, keep } => {
                    let start = usize::from(start).min(h.len());
                    let cut = h.safe_cut(start, usize::from(keep));
                    let before = outside(&h, start..cut);
                    let compacted = h.compact(start..cut, "summary");
                    prop_assert!(compacted.is_ok(), "a safe cut is allowed: {:?}", compacted);
                    check(&h, &before, &format!("the safe cut {start}..{cut}"))?;
                }
                Op::Compact { start, end } => {
                    let span = usize::from(start.min(end))..usize::from(start.max(end));
                    let before = outside(&h, span.clone());
                    if span.end <= h.len() && h.compact(span.clone(), "summary").is_ok() {
                        check(&h, &before, &format!("compacting {span:?}"))?;
                    }
                }
            }
        }
    }
}
