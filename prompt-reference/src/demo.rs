//! A scripted session over the reference components: what `cacheline demo` prints.
//!
//! The session is [`crate::scenario`]'s script, the one `cacheline simulate` measures in
//! tokens: the date rolls over midnight, the todo list changes, plan mode toggles, the
//! assistant instructions are edited, tools are called and the history is compacted; the demo
//! also registers an MCP server's guidance at run time. It is composed under the operator's
//! policy as the `cacheline` strategy, and as `replace_at_head` (every writer rewritten into
//! message 0 each turn). For every turn the report gives the request size and the bytes reused
//! from the previous request (their longest common prefix) under both.

use std::collections::HashSet;

use prompt_registry::divergence::common_prefix_len;
use prompt_registry::node::{NodeKind, Producer};
use prompt_registry::{Component, ComponentId, Namespace, PromptPolicy, Registry, RegistryError};
use serde::Serialize;

use crate::scenario::{RequestLabels, ScenarioError, ScenarioSize, request_events};

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Registry problem (duplicate id, bad namespace).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The scripted session could not be composed.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
}

/// One appended node.
#[derive(Debug, Clone, Serialize)]
pub struct Appended {
    /// Who wrote it.
    pub producer: String,
    /// Its kind.
    pub kind: NodeKind,
    /// Its size in bytes.
    pub bytes: usize,
    /// Why it was appended.
    pub why: String,
}

/// One request of the demo: a turn's user request, or a continuation after tool results.
#[derive(Debug, Clone, Serialize)]
pub struct DemoTurn {
    /// Turn number, from 1.
    pub turn: u64,
    /// The request's label: `3` for turn 3's user request, `3.1` for its first continuation.
    pub label: String,
    /// Whether the request continues after tool results (no new user message).
    pub continuation: bool,
    /// What happened before this turn's request.
    pub events: Vec<String>,
    /// Serialized request size.
    pub request_bytes: usize,
    /// Bytes shared with the previous request (its longest common prefix).
    pub reused_bytes: usize,
    /// Replace-at-head: request size.
    pub head_rewrite_bytes: usize,
    /// Replace-at-head: bytes shared with its previous request.
    pub head_rewrite_reused: usize,
    /// Nodes appended this turn (tail updates, system prompt updates, the user message).
    pub appended: Vec<Appended>,
    /// Ephemeral messages at the end of this request only.
    pub ephemeral: Vec<String>,
    /// The prefix fingerprint.
    pub fingerprint: String,
}

/// Why a node was appended, for the report. `first` is whether its producer appears in
/// the history for the first time in this epoch.
fn why(producer: &Producer, first: bool) -> &'static str {
    match producer {
        Producer::User => "the user's message",
        Producer::Assistant => "the assistant's previous reply",
        Producer::Tool => "a tool result",
        Producer::SystemPrompt => "system prompt changed: appended, message 0 untouched",
        Producer::Compaction => "compaction summary",
        Producer::Foreign => "a message of the adopted conversation",
        Producer::Component(_) | Producer::Prefix if first => {
            "its first output in this cache epoch"
        }
        Producer::Component(_) | Producer::Prefix => {
            "its output changed since the update it last appended"
        }
    }
}

/// `registry` plus the guidance of a GitHub MCP server, registered at run time.
fn with_mcp_server(registry: &Registry) -> Result<Registry, RegistryError> {
    let mut registry = registry.clone();
    let mcp_id = ComponentId::new("mcp:github").map_err(|source| RegistryError::InvalidId {
        location: prompt_registry::component::SourceLocation::caller(),
        source,
    })?;
    registry.register_dynamic(
        Namespace::Mcp,
        Component::session(mcp_id, |_| {
            Some("GitHub MCP server: use github_search before opening issues.".to_owned())
        })
        .describe("guidance sent by the GitHub MCP server"),
    )?;
    Ok(registry)
}

/// Runs the scripted session for `turns` turns under `policy`.
pub fn run(
    registry: &Registry,
    policy: &PromptPolicy,
    turns: u64,
) -> Result<Vec<DemoTurn>, DemoError> {
    run_with_progress(registry, policy, turns, |_| {})
}

/// [`run`], calling `progress` with the number of requests composed so far (each turn is
/// composed twice: the library's way, then replace-at-head).
pub fn run_with_progress(
    registry: &Registry,
    policy: &PromptPolicy,
    turns: u64,
    mut progress: impl FnMut(u64),
) -> Result<Vec<DemoTurn>, DemoError> {
    let registry = with_mcp_server(registry)?;
    let mut previous = Vec::new();
    let mut seen: HashSet<Producer> = HashSet::new();
    let mut epoch = 0;
    let mut labels = RequestLabels::default();
    let paired = ScenarioSize::Full.paired_with(&registry, policy, turns, |step, request| {
        let bytes = request.to_bytes();
        if request.epoch() != epoch {
            epoch = request.epoch();
            seen.clear();
            // What survived the compaction was already said in this epoch.
            let kept = request.nodes().len() - request.new_nodes().len();
            for node in &request.nodes()[..kept] {
                seen.insert(node.producer().clone());
            }
        }
        progress(step.turn);
        let turn = DemoTurn {
            turn: step.turn,
            label: labels.next(step.turn, request.is_continuation()),
            continuation: request.is_continuation(),
            events: request_events(step, request)
                .iter()
                .map(ToString::to_string)
                .collect(),
            request_bytes: bytes.len(),
            reused_bytes: common_prefix_len(&previous, &bytes),
            head_rewrite_bytes: 0,
            head_rewrite_reused: 0,
            appended: request
                .new_nodes()
                .iter()
                .map(|n| Appended {
                    producer: n.producer().to_string(),
                    kind: n.kind(),
                    bytes: n.bytes().len(),
                    why: why(n.producer(), seen.insert(n.producer().clone())).to_owned(),
                })
                .collect(),
            ephemeral: request
                .ephemeral()
                .iter()
                .map(|(id, _)| id.to_string())
                .collect(),
            fingerprint: request.prefix_fingerprint().to_string(),
        };
        previous = bytes;
        Ok(turn)
    })?;
    let mut previous = Vec::new();
    let mut out = Vec::with_capacity(paired.len());
    for (mut t, head) in paired {
        let bytes = head.to_bytes();
        t.head_rewrite_bytes = bytes.len();
        t.head_rewrite_reused = common_prefix_len(&previous, &bytes);
        previous = bytes;
        progress(turns.saturating_add(t.turn));
        out.push(t);
    }
    Ok(out)
}
