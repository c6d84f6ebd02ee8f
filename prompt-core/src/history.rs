//! Append-only history.
//!
//! A node's bytes are serialized once, when it is appended, and reused verbatim in every
//! later request. Nothing mutates an appended node; removal is by node id or by producer,
//! never by role, so a compaction summary stored as `role: "system"` survives any number of
//! system-prompt updates.

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::hash::{Digest128, NodeId};
use crate::id::ComponentId;

/// Who wrote a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
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
        }
    }
}

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
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

/// How update nodes are delivered to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateRole {
    /// As `role: "system"`: OpenAI-style APIs and ChatML templates that render a later
    /// system message in place.
    #[default]
    System,
    /// As a user message: APIs with a single system field (Anthropic, Gemini) and templates
    /// that reject or hoist a later system message.
    UserReminder,
}

/// The session setting for update delivery: the role and the tag that wraps update text.
///
/// An update reads `<tag from="producer">\ntext\n</tag>`, so the model can tell which
/// writer changed, and so a `Vec<Value>` conversation can recognise its own updates without
/// any extra field in the message.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct DeliveryStyle {
    /// The role updates travel as.
    pub role: UpdateRole,
    /// The wrapping tag name.
    pub tag: String,
}

impl Default for DeliveryStyle {
    fn default() -> Self {
        Self::system()
    }
}

impl DeliveryStyle {
    /// The default tag.
    pub const DEFAULT_TAG: &'static str = "system-update";

    /// Updates as system messages.
    pub fn system() -> Self {
        Self {
            role: UpdateRole::System,
            tag: Self::DEFAULT_TAG.to_owned(),
        }
    }

    /// Updates as user messages wrapped in `tag`.
    pub fn user_reminder(tag: impl Into<String>) -> Self {
        Self {
            role: UpdateRole::UserReminder,
            tag: tag.into(),
        }
    }

    /// The wrapped text of an update.
    pub fn wrap(&self, producer: &Producer, text: &str) -> String {
        format!(
            "<{tag} from=\"{producer}\">\n{text}\n</{tag}>",
            tag = self.tag
        )
    }

    /// The text inside a wrapper from `producer`, if `content` is one.
    pub fn unwrap<'c>(&self, producer: &Producer, content: &'c str) -> Option<&'c str> {
        let open = format!("<{} from=\"{producer}\">\n", self.tag);
        let close = format!("\n</{}>", self.tag);
        content.strip_prefix(&open)?.strip_suffix(&close)
    }

    /// The update message for `text` from `producer`.
    pub fn message(&self, producer: &Producer, text: &str) -> Value {
        let role = match self.role {
            UpdateRole::System => "system",
            UpdateRole::UserReminder => "user",
        };
        serde_json::json!({ "role": role, "content": self.wrap(producer, text) })
    }
}

/// One appended message, frozen.
#[derive(Debug, Clone)]
pub struct Node {
    id: NodeId,
    producer: Producer,
    kind: NodeKind,
    bytes: Arc<str>,
    text: Option<Arc<str>>,
    epoch: u64,
}

impl Node {
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

/// Why a message cannot be appended or an edit cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The text is not JSON.
    #[error("message from {producer} is not valid JSON: {source}")]
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
/// use prompt_core::{DeliveryStyle, History, SystemPromptChange};
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
}

impl History {
    /// An empty history delivering updates in `delivery` style.
    pub fn new(delivery: DeliveryStyle) -> Self {
        Self {
            nodes: Vec::new(),
            epoch: 0,
            delivery,
            total_bytes: 0,
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
            epoch: self.epoch,
        });
        id
    }

    /// Appends a message given as JSON text, keeping its bytes exactly (whitespace, key
    /// order, number spelling and unknown fields included).
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
        Ok(self.push(producer, kind, json.to_owned(), None))
    }

    /// Appends a message value, serialized once, compactly, keys in insertion order.
    pub fn append_value(
        &mut self,
        producer: Producer,
        kind: NodeKind,
        message: &Value,
    ) -> Result<NodeId, HistoryError> {
        check_message(&producer, message)?;
        Ok(self.push(producer, kind, message.to_string(), None))
    }

    /// Appends a plain user message.
    pub fn append_user(&mut self, content: &str) -> Result<NodeId, HistoryError> {
        self.append_value(
            Producer::User,
            NodeKind::User,
            &serde_json::json!({"role": "user", "content": content}),
        )
    }

    /// Appends an update from `producer`, wrapped and delivered in this history's style.
    pub fn append_update(&mut self, producer: Producer, text: &str) -> NodeId {
        let bytes = self.delivery.message(&producer, text).to_string();
        self.push(producer, NodeKind::Update, bytes, Some(text.into()))
    }

    /// The current system prompt: the text of the newest system-prompt node.
    pub fn system_prompt(&self) -> Option<&str> {
        self.nodes
            .iter()
            .rev()
            .find(|n| n.producer == Producer::SystemPrompt)
            .and_then(|n| n.text())
    }

    /// Sets the system prompt without rewriting anything already sent.
    ///
    /// Unchanged → no mutation. Empty history → placed first as a system message. Changed →
    /// appended as an update node; every earlier node stays byte-identical. Nothing is ever
    /// removed, so compaction summaries survive.
    pub fn set_system_prompt(&mut self, prompt: &str) -> SystemPromptChange {
        if self.system_prompt() == Some(prompt) {
            return SystemPromptChange::Unchanged;
        }
        if self.nodes.is_empty() {
            let bytes = serde_json::json!({"role": "system", "content": prompt}).to_string();
            self.push(
                Producer::SystemPrompt,
                NodeKind::System,
                bytes,
                Some(prompt.into()),
            );
            return SystemPromptChange::Placed;
        }
        self.append_update(Producer::SystemPrompt, prompt);
        SystemPromptChange::Appended(self.nodes.len() - 1)
    }

    /// The latest text appended by `producer` as an update, if any.
    pub fn last_update_from(&self, producer: &Producer) -> Option<&str> {
        self.nodes
            .iter()
            .rev()
            .find(|n| &n.producer == producer && n.kind == NodeKind::Update)
            .and_then(|n| n.text())
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
        let bytes = serde_json::json!({"role": "system", "content": summary}).to_string();
        let summary_id = self.push(
            Producer::Compaction,
            NodeKind::CompactionSummary,
            bytes,
            Some(summary.into()),
        );
        // Kept nodes keep their bytes; only their epoch and chained ids are renewed, because
        // the prefix they sit on changed.
        for node in kept_tail {
            self.push(node.producer, node.kind, node.bytes.to_string(), node.text);
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
        }
    }
}

fn check_message(producer: &Producer, value: &Value) -> Result<(), HistoryError> {
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
