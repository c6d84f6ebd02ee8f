//! Tool calls and their results: which calls are open, and which result answers which call.
//!
//! A result answers a call of the assistant message it follows, never a call of an earlier
//! turn: engines that number calls per message (`call_0`, `call_1`, … every turn) reuse ids,
//! so pairing by id alone across the history would pair a result with the wrong message.
//! Everything here is linear in the nodes it reads: each node is parsed once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use crate::json::{self, RawObject};
use crate::node::{Node, NodeKind, Producer};

/// The tool-call ids a message opens (an assistant's `tool_calls`) or answers (a tool
/// result's `tool_call_id`).
pub(crate) fn tool_links(bytes: &str) -> (Vec<String>, Option<String>) {
    let Ok(object) = RawObject::parse(bytes) else {
        return (Vec::new(), None);
    };
    let calls = object
        .get("tool_calls")
        .and_then(json::array_of)
        .map(|calls| {
            calls
                .into_iter()
                .filter_map(|call| {
                    RawObject::parse(call.get())
                        .ok()
                        .and_then(|c| c.str("id").map(Cow::into_owned))
                })
                .collect()
        })
        .unwrap_or_default();
    let answers = object.str("tool_call_id").map(Cow::into_owned);
    (calls, answers)
}

/// The calls of the last assistant message and whether each has a result yet, kept up to
/// date as nodes are appended (recording N results of one reply is linear in N).
#[derive(Debug, Clone, Default)]
pub(crate) struct OpenCalls {
    /// Call ids in call order, each with whether a result was recorded.
    calls: Vec<(String, bool)>,
    /// Positions in `calls` of each id not answered yet, in call order.
    waiting: HashMap<String, Vec<usize>>,
}

impl OpenCalls {
    /// The state after `nodes`, computed from scratch (after a removal, a compaction, a
    /// restore).
    pub(crate) fn of(nodes: &[Node]) -> Self {
        let mut open = Self::default();
        let from = nodes
            .iter()
            .rposition(|n| n.kind == NodeKind::Assistant)
            .unwrap_or(nodes.len());
        for node in &nodes[from..] {
            open.push(node.kind, &node.bytes);
        }
        open
    }

    /// Takes a node appended to the history.
    pub(crate) fn push(&mut self, kind: NodeKind, bytes: &str) {
        match kind {
            NodeKind::Assistant => {
                let (calls, _) = tool_links(bytes);
                self.waiting.clear();
                for (i, id) in calls.iter().enumerate() {
                    self.waiting.entry(id.clone()).or_default().push(i);
                }
                self.calls = calls.into_iter().map(|id| (id, false)).collect();
            }
            NodeKind::Tool => {
                if let (_, Some(id)) = tool_links(bytes) {
                    self.answer(&id);
                }
            }
            _ => {}
        }
    }

    fn answer(&mut self, id: &str) {
        let Some(positions) = self.waiting.get_mut(id) else {
            return;
        };
        if !positions.is_empty() {
            let at = positions.remove(0);
            if let Some(call) = self.calls.get_mut(at) {
                call.1 = true;
            }
        }
        if positions.is_empty() {
            self.waiting.remove(id);
        }
    }

    /// Whether `id` is a call of the last assistant message without a result yet.
    pub(crate) fn is_open(&self, id: &str) -> bool {
        self.waiting.contains_key(id)
    }

    /// Whether every call has its result.
    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The calls without a result, in call order.
    pub(crate) fn ids(&self) -> Vec<String> {
        self.calls
            .iter()
            .filter(|(_, answered)| !answered)
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// Every `(call node, result node, call id)` of `nodes`: a result is paired with a call of
/// the same id in the last assistant message before it, as [`OpenCalls`] counts them: the
/// k-th result with an id answers the k-th call with that id (a reply may repeat an id, and
/// then needs a result per call). A result beyond the calls with its id there is paired with
/// nothing. In result order.
pub(crate) fn pairs(nodes: &[Node]) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut assistant: Option<usize> = None;
    // Calls of the last assistant message not answered yet, by id.
    let mut waiting: HashMap<String, usize> = HashMap::new();
    for (j, node) in nodes.iter().enumerate() {
        match node.kind {
            NodeKind::Assistant => {
                assistant = Some(j);
                waiting.clear();
                for id in tool_links(&node.bytes).0 {
                    *waiting.entry(id).or_default() += 1;
                }
            }
            NodeKind::Tool => {
                if let (Some(i), (_, Some(id))) = (assistant, tool_links(&node.bytes))
                    && let Some(left) = waiting.get_mut(&id)
                    && *left > 0
                {
                    *left -= 1;
                    out.push((i, j, id));
                }
            }
            _ => {}
        }
    }
    out
}

/// The first tool call that removing `span` (but for the nodes whose producer `survives`)
/// separates from its result: its id, the index of the node that would be kept without its
/// partner, and what that node would lose (`results` or `call`).
pub(crate) fn split_tool_call(
    nodes: &[Node],
    span: &Range<usize>,
    survives: &dyn Fn(&Producer) -> bool,
) -> Option<(String, usize, &'static str)> {
    let removed = |i: usize| span.contains(&i) && !survives(&nodes[i].producer);
    pairs(nodes)
        .into_iter()
        .filter(|&(i, j, _)| removed(i) != removed(j))
        .map(|(i, j, id)| {
            if removed(i) {
                (j, (id, j, "call"))
            } else {
                (i, (id, i, "results"))
            }
        })
        .min_by_key(|(at, _)| *at)
        .map(|(_, found)| found)
}

/// The largest `cut` in `start..=len - keep` (at least `start`) such that removing
/// `start..cut` separates no call from its result. One pass over the pairs: each pair forbids
/// a range of cuts, marked in a difference array.
pub(crate) fn safe_cut(nodes: &[Node], start: usize, keep: usize) -> usize {
    let len = nodes.len();
    let start = start.min(len);
    let highest = len.saturating_sub(keep).max(start);
    // forbidden[c] > 0: cutting at c separates a pair.
    let mut delta = vec![0i64; len + 2];
    let mut forbid = |from: usize, to_inclusive: usize| {
        if from <= to_inclusive {
            delta[from] += 1;
            delta[to_inclusive + 1] -= 1;
        }
    };
    for (i, j, _) in pairs(nodes) {
        if i >= start {
            // The call is removed and its result kept when i < cut <= j.
            forbid(i + 1, j);
        } else if j >= start {
            // The call stays before the span; its result is removed when j < cut.
            forbid(j + 1, len);
        }
    }
    let mut forbidden = vec![false; len + 1];
    let mut running = 0i64;
    for (c, slot) in forbidden.iter_mut().enumerate() {
        running += delta[c];
        *slot = running > 0;
    }
    (start..=highest)
        .rev()
        .find(|&c| c == start || !forbidden[c])
        .unwrap_or(start)
}
