//! History nodes: who wrote them, what they are, and their frozen bytes.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hash::{Digest128, NodeId};
use crate::id::ComponentId;

/// Who wrote a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "id")]
pub enum Producer {
    /// A prompt component (tail updates).
    Component(ComponentId),
    /// The system prompt set through `set_system_prompt`.
    SystemPrompt,
    /// The user.
    User,
    /// The assistant.
    Assistant,
    /// A tool result.
    Tool,
    /// A compaction summary.
    Compaction,
    /// The session's frozen prefix.
    Prefix,
    /// A message of an adopted conversation whose writer the library cannot tell (a system
    /// message in the middle, written by the agent's own code).
    Foreign,
}

impl fmt::Display for Producer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Producer::Component(id) => write!(f, "{id}"),
            Producer::SystemPrompt => f.write_str("system_prompt"),
            Producer::User => f.write_str("user"),
            Producer::Assistant => f.write_str("assistant"),
            Producer::Tool => f.write_str("tool"),
            Producer::Compaction => f.write_str("compaction"),
            Producer::Prefix => f.write_str("prefix"),
            Producer::Foreign => f.write_str("foreign"),
        }
    }
}

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// A system message (the first system prompt, or the prefix).
    System,
    /// A user message.
    User,
    /// An assistant message, possibly with `tool_calls` and `reasoning_content`.
    Assistant,
    /// A tool result.
    Tool,
    /// An update appended after the history: a changed system prompt or tail component.
    Update,
    /// A compaction summary.
    CompactionSummary,
}

impl NodeKind {
    /// The serde name: `system`, `user`, `assistant`, `tool`, `update`,
    /// `compaction_summary`.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::System => "system",
            NodeKind::User => "user",
            NodeKind::Assistant => "assistant",
            NodeKind::Tool => "tool",
            NodeKind::Update => "update",
            NodeKind::CompactionSummary => "compaction_summary",
        }
    }
}

/// One appended message, frozen.
#[derive(Debug, Clone)]
pub struct Node {
    pub(crate) id: NodeId,
    pub(crate) producer: Producer,
    pub(crate) kind: NodeKind,
    pub(crate) bytes: Arc<str>,
    pub(crate) text: Option<Arc<str>>,
    pub(crate) merged: Arc<[(Producer, Arc<str>)]>,
    pub(crate) epoch: u64,
}

impl Node {
    /// Updates merged into this user message ([`UpdateRole::MergedIntoUser`](crate::delivery::UpdateRole::MergedIntoUser), or the prefix
    /// with [`PrefixRole::FirstUser`](crate::delivery::PrefixRole::FirstUser)): producer and unwrapped text.
    pub fn merged_updates(&self) -> &[(Producer, Arc<str>)] {
        &self.merged
    }

    /// The chained content id.
    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Hash of this node's bytes alone.
    pub fn content_hash(&self) -> Digest128 {
        Digest128::of(&[self.bytes.as_bytes()])
    }

    /// Who wrote it.
    pub fn producer(&self) -> &Producer {
        &self.producer
    }

    /// What it is.
    pub fn kind(&self) -> NodeKind {
        self.kind
    }

    /// Its serialized JSON message, exactly as sent.
    pub fn bytes(&self) -> &str {
        &self.bytes
    }

    /// For update and system-prompt nodes, the producer's unwrapped text.
    pub fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }

    /// The cache epoch it was appended in.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The message parsed back into a JSON value.
    pub fn message(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.bytes)
    }
}
