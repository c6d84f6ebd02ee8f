//! Append-only history.
//!
//! A node's bytes are serialized once, when it is appended, and reused verbatim in every
//! later request. Nothing mutates an appended node; removal is by node id or by producer,
//! never by role, so a compaction summary stored as `role: "system"` survives any number of
//! system-prompt updates.

use std::ops::Range;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::delivery::{DeliveryStyle, PrefixRole, UpdateRole};
use crate::hash::{Digest128, NodeId};
use crate::json;
use crate::node::{Node, NodeKind, Producer};

/// Why a message cannot be appended or an edit cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The text is not JSON.
    #[error("message from {producer} is not valid JSON")]
    InvalidJson {
        /// Who sent it.
        producer: Producer,
        /// The parser's error, with line and column.
        source: serde_json::Error,
    },
    /// Valid JSON, but not an object with a string `role`.
    #[error("message from {producer} must be a JSON object with a string \"role\"; got {found}")]
    NotAMessage {
        /// Who sent it.
        producer: Producer,
        /// A short description of what was found.
        found: String,
    },
    /// A user message whose content cannot take merged updates.
    #[error("cannot merge pending updates into a user message whose content is {found}")]
    CannotMerge {
        /// What the content was.
        found: String,
    },
    /// A compaction span outside the history.
    #[error("compaction span {start}..{end} is outside the history of {len} nodes")]
    SpanOutOfRange {
        /// Start index.
        start: usize,
        /// End index (exclusive).
        end: usize,
        /// History length.
        len: usize,
    },
}

/// What `set_system_prompt` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "change", content = "index")]
pub enum SystemPromptChange {
    /// Same prompt as the current one: nothing was touched.
    Unchanged,
    /// Empty conversation: the prompt was placed first.
    Placed,
    /// The prompt changed: appended at this index; every earlier index is untouched.
    Appended(usize),
    /// The prompt changed and will be merged into the next user message
    /// ([`UpdateRole::MergedIntoUser`], or an empty history with [`PrefixRole::FirstUser`]).
    Deferred,
}

/// What a compaction removed and added.
#[derive(Debug, Clone)]
pub struct Compaction {
    /// The nodes taken out, in order, so the caller can archive them.
    pub removed: Vec<Node>,
    /// The summary node's id.
    pub summary: NodeId,
    /// The new epoch.
    pub epoch: u64,
}

/// An append-only conversation.
///
/// ```
/// use prompt_core::{DeliveryStyle, History, history::SystemPromptChange};
/// let mut history = History::new(DeliveryStyle::system());
/// assert_eq!(history.set_system_prompt("Be brief."), SystemPromptChange::Placed);
/// history.append_user("hi").unwrap();
/// let first = history.nodes()[0].bytes().to_owned();
/// assert_eq!(history.set_system_prompt("Be brief."), SystemPromptChange::Unchanged);
/// assert_eq!(history.set_system_prompt("Be very brief."), SystemPromptChange::Appended(2));
/// assert_eq!(history.nodes()[0].bytes(), first);
/// ```
#[derive(Debug, Default)]
pub struct History {
    nodes: Vec<Node>,
    epoch: u64,
    delivery: DeliveryStyle,
    total_bytes: usize,
    /// Texts waiting to be merged into the next user message.
    pending: Vec<Pending>,
}

/// How a deferred text is written into the user message it rides in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// In the delivery style's update wrapper.
    Wrapped,
    /// As it is (the frozen prefix).
    Verbatim,
}

/// A text that rides in the next user message.
#[derive(Debug, Clone)]
struct Pending {
    producer: Producer,
    /// The producer's text, for `system_prompt` and `last_update_from`.
    text: Arc<str>,
    /// What is written into the message (wrapped, or as-is for the prefix).
    rendered: String,
}

impl History {
    /// An empty history delivering updates in `delivery` style.
    pub fn new(delivery: DeliveryStyle) -> Self {
        Self {
            nodes: Vec::new(),
            epoch: 0,
            delivery,
            total_bytes: 0,
            pending: Vec::new(),
        }
    }

    /// The nodes, oldest first.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The cache epoch: starts at 0, increases at each compaction or removal.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The update delivery style.
    pub fn delivery(&self) -> &DeliveryStyle {
        &self.delivery
    }

    /// Total serialized bytes of all nodes (kept up to date on every change, so O(1)).
    pub fn serialized_len(&self) -> usize {
        self.total_bytes
    }

    fn last_id(&self) -> Option<NodeId> {
        self.nodes.last().map(|n| n.id)
    }

    fn push(
        &mut self,
        producer: Producer,
        kind: NodeKind,
        bytes: String,
        text: Option<Arc<str>>,
        merged: Arc<[(Producer, Arc<str>)]>,
    ) -> NodeId {
        let parent = self.last_id().map(|p| *p.as_bytes()).unwrap_or_default();
        let id = Digest128::of(&[&parent, bytes.as_bytes()]);
        self.total_bytes += bytes.len();
        self.nodes.push(Node {
            id,
            producer,
            kind,
            bytes: bytes.into(),
            text,
            merged,
            epoch: self.epoch,
        });
        id
    }

    /// Appends a message given as JSON text, keeping its bytes exactly (whitespace, key
    /// order, number spelling and unknown fields included). A user message first takes any
    /// pending merged updates, which changes its content and therefore its bytes.
    pub fn append_raw(
        &mut self,
        producer: Producer,
        kind: NodeKind,
        json: &str,
    ) -> Result<NodeId, HistoryError> {
        let value: Value =
            serde_json::from_str(json).map_err(|source| HistoryError::InvalidJson {
                producer: producer.clone(),
                source,
            })?;
        check_message(&producer, &value)?;
        if kind == NodeKind::User && !self.pending.is_empty() {
            return self.append_value(producer, kind, &value);
        }
        Ok(self.push(producer, kind, json.to_owned(), None, Arc::from([])))
    }

    /// Appends a message value, serialized once, compactly, keys in insertion order. A user
    /// message first takes any pending merged updates.
    pub fn append_value(
        &mut self,
        producer: Producer,
        kind: NodeKind,
        message: &Value,
    ) -> Result<NodeId, HistoryError> {
        check_message(&producer, message)?;
        if kind == NodeKind::User && !self.pending.is_empty() {
            let mut message = message.clone();
            merge_into_content(&mut message, &self.pending)?;
            let merged: Arc<[(Producer, Arc<str>)]> = self
                .pending
                .drain(..)
                .map(|p| (p.producer, p.text))
                .collect();
            return Ok(self.push(producer, kind, message.to_string(), None, merged));
        }
        Ok(self.push(producer, kind, message.to_string(), None, Arc::from([])))
    }

    /// Queues a text to be written at the start of the next user message: wrapped as an
    /// update from `producer`, or verbatim (the prefix).
    pub(crate) fn defer(&mut self, producer: Producer, text: &str, framing: Framing) {
        let rendered = match framing {
            Framing::Wrapped => self.delivery.wrap(&producer, text),
            Framing::Verbatim => text.to_owned(),
        };
        self.pending.push(Pending {
            producer,
            text: text.into(),
            rendered,
        });
    }

    /// Like [`History::defer`], but ahead of everything already pending (the prefix must
    /// open the message it rides in).
    pub(crate) fn defer_first(&mut self, producer: Producer, text: &str, framing: Framing) {
        self.defer(producer, text, framing);
        if let Some(last) = self.pending.pop() {
            self.pending.insert(0, last);
        }
    }

    /// Whether a text from `producer` is waiting for the next user message.
    pub(crate) fn has_pending_from(&self, producer: &Producer) -> bool {
        self.pending.iter().any(|p| &p.producer == producer)
    }

    /// Appends a plain user message.
    pub fn append_user(&mut self, content: &str) -> Result<NodeId, HistoryError> {
        self.append_raw(
            Producer::User,
            NodeKind::User,
            &json::text_message("user", content),
        )
    }

    /// Appends an update from `producer`, wrapped and delivered in this history's style.
    /// With [`UpdateRole::MergedIntoUser`] it is deferred to the next user message and
    /// `None` is returned.
    pub fn append_update(&mut self, producer: Producer, text: &str) -> Option<NodeId> {
        if self.delivery.role == UpdateRole::MergedIntoUser {
            self.defer(producer, text, Framing::Wrapped);
            return None;
        }
        let bytes = self.delivery.message_json(&producer, text);
        Some(self.push(
            producer,
            NodeKind::Update,
            bytes,
            Some(text.into()),
            Arc::from([]),
        ))
    }

    /// The newest text from `producer`: pending, merged into a user message, or in a node
    /// of one of `kinds`.
    fn latest_from(&self, producer: &Producer, kinds: &[NodeKind]) -> Option<&str> {
        if let Some(p) = self.pending.iter().rev().find(|p| &p.producer == producer) {
            return Some(&p.text);
        }
        self.nodes.iter().rev().find_map(|n| {
            if &n.producer == producer && kinds.contains(&n.kind) {
                return n.text();
            }
            n.merged
                .iter()
                .rev()
                .find(|(p, _)| p == producer)
                .map(|(_, t)| &**t)
        })
    }

    /// The current system prompt: the newest text set through `set_system_prompt`.
    pub fn system_prompt(&self) -> Option<&str> {
        self.latest_from(
            &Producer::SystemPrompt,
            &[NodeKind::System, NodeKind::Update],
        )
    }

    /// Sets the system prompt without rewriting anything already sent.
    ///
    /// Unchanged → no mutation. Empty history → placed first as a system message (with
    /// [`PrefixRole::FirstUser`]: deferred into the first user message). Changed → appended
    /// as an update node (with [`UpdateRole::MergedIntoUser`]: deferred into the next user
    /// message); every earlier node stays byte-identical. Nothing is ever removed, so
    /// compaction summaries survive.
    pub fn set_system_prompt(&mut self, prompt: &str) -> SystemPromptChange {
        if self.system_prompt() == Some(prompt) {
            return SystemPromptChange::Unchanged;
        }
        if self.nodes.is_empty() && self.delivery.prefix == PrefixRole::FirstUser {
            // A later change before the first user message replaces the pending one.
            self.pending
                .retain(|p| p.producer != Producer::SystemPrompt);
            self.defer(Producer::SystemPrompt, prompt, Framing::Verbatim);
            return SystemPromptChange::Deferred;
        }
        if self.nodes.is_empty() {
            let bytes = json::text_message("system", prompt);
            self.push(
                Producer::SystemPrompt,
                NodeKind::System,
                bytes,
                Some(prompt.into()),
                Arc::from([]),
            );
            return SystemPromptChange::Placed;
        }
        match self.append_update(Producer::SystemPrompt, prompt) {
            Some(_) => SystemPromptChange::Appended(self.nodes.len() - 1),
            None => SystemPromptChange::Deferred,
        }
    }

    /// The latest text appended (or deferred, or merged) by `producer` as an update.
    pub fn last_update_from(&self, producer: &Producer) -> Option<&str> {
        self.latest_from(producer, &[NodeKind::Update])
    }

    /// Removes the node with this id; returns it. Starts a new cache epoch when a node is
    /// removed, since every later request diverges there.
    pub fn remove(&mut self, id: NodeId) -> Option<Node> {
        let at = self.nodes.iter().position(|n| n.id == id)?;
        self.epoch += 1;
        let node = self.nodes.remove(at);
        self.total_bytes -= node.bytes.len();
        Some(node)
    }

    /// Removes every node written by `producer`; returns them in order. Never matches by
    /// role: removing the system prompt's nodes leaves a `role: "system"` compaction summary.
    pub fn remove_by_producer(&mut self, producer: &Producer) -> Vec<Node> {
        let (removed, kept): (Vec<Node>, Vec<Node>) = std::mem::take(&mut self.nodes)
            .into_iter()
            .partition(|n| &n.producer == producer);
        self.nodes = kept;
        self.total_bytes -= removed.iter().map(|n| n.bytes.len()).sum::<usize>();
        if !removed.is_empty() {
            self.epoch += 1;
        }
        removed
    }

    /// Replaces `span` with one summary node (producer `compaction`, `role: "system"`) and
    /// keeps everything after it. Starts a new cache epoch. The removed nodes are returned
    /// so no data is lost.
    ///
    /// With [`PrefixRole::FirstUser`] (templates without a system role) the summary is a
    /// `role: "user"` message; for templates that also demand strict user/assistant
    /// alternation, choose a span whose kept tail starts with an assistant message.
    pub fn compact(
        &mut self,
        span: Range<usize>,
        summary: &str,
    ) -> Result<Compaction, HistoryError> {
        if span.start > span.end || span.end > self.nodes.len() {
            return Err(HistoryError::SpanOutOfRange {
                start: span.start,
                end: span.end,
                len: self.nodes.len(),
            });
        }
        self.epoch += 1;
        let kept_tail = self.nodes.split_off(span.end);
        let removed = self.nodes.split_off(span.start);
        self.total_bytes = self.nodes.iter().map(|n| n.bytes.len()).sum();
        // Templates without a system role get the summary as a user message.
        let role = match self.delivery.prefix {
            PrefixRole::System => "system",
            PrefixRole::FirstUser => "user",
        };
        let bytes = json::text_message(role, summary);
        let summary_id = self.push(
            Producer::Compaction,
            NodeKind::CompactionSummary,
            bytes,
            Some(summary.into()),
            Arc::from([]),
        );
        // Kept nodes keep their bytes; only their epoch and chained ids are renewed, because
        // the prefix they sit on changed.
        for node in kept_tail {
            self.push(
                node.producer,
                node.kind,
                node.bytes.to_string(),
                node.text,
                node.merged,
            );
        }
        Ok(Compaction {
            removed,
            summary: summary_id,
            epoch: self.epoch,
        })
    }
}

impl Clone for History {
    /// Keeps the original's spare capacity, so appending to a clone has the same amortized
    /// cost as appending to the original instead of reallocating on the first push.
    fn clone(&self) -> Self {
        let mut nodes = Vec::with_capacity(self.nodes.capacity());
        nodes.extend(self.nodes.iter().cloned());
        Self {
            nodes,
            epoch: self.epoch,
            delivery: self.delivery.clone(),
            total_bytes: self.total_bytes,
            pending: self.pending.clone(),
        }
    }
}

/// Writes the pending texts at the start of a user message's content.
fn merge_into_content(message: &mut Value, pending: &[Pending]) -> Result<(), HistoryError> {
    let head = pending
        .iter()
        .map(|p| p.rendered.as_str())
        .collect::<Vec<_>>()
        .join("\n\n");
    let Some(map) = message.as_object_mut() else {
        return Err(HistoryError::CannotMerge {
            found: "not an object".to_owned(),
        });
    };
    match map.get_mut("content") {
        None | Some(Value::Null) => {
            map.insert("content".to_owned(), Value::String(head));
        }
        Some(Value::String(text)) => *text = format!("{head}\n\n{text}"),
        Some(Value::Array(parts)) => {
            parts.insert(0, serde_json::json!({"type": "text", "text": head}));
        }
        Some(other) => {
            return Err(HistoryError::CannotMerge {
                found: format!("{other}"),
            });
        }
    }
    Ok(())
}

pub(crate) fn check_message(producer: &Producer, value: &Value) -> Result<(), HistoryError> {
    let found = match value {
        Value::Object(map) => match map.get("role") {
            Some(Value::String(_)) => return Ok(()),
            Some(_) => "an object whose \"role\" is not a string".to_owned(),
            None => "an object without \"role\"".to_owned(),
        },
        Value::Array(_) => "an array".to_owned(),
        Value::String(_) => "a string".to_owned(),
        Value::Number(_) => "a number".to_owned(),
        Value::Bool(_) => "a boolean".to_owned(),
        Value::Null => "null".to_owned(),
    };
    Err(HistoryError::NotAMessage {
        producer: producer.clone(),
        found,
    })
}
