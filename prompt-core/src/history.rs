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
    /// As a `role: "system"` message of its own: OpenAI-style APIs and ChatML templates that
    /// render a later system message in place.
    #[default]
    System,
    /// As a `role: "user"` message of its own: APIs with a single system field (Anthropic,
    /// Gemini) and templates that reject or hoist a later system message.
    UserReminder,
    /// Prepended to the content of the next user message, so no message is added: templates
    /// that demand strict user/assistant alternation. The update is then stored inside that
    /// user message (ephemeral tail output too: there is no other place for it).
    MergedIntoUser,
}

impl UpdateRole {
    /// The serde name: `system`, `user_reminder` or `merged_into_user`.
    pub fn as_str(self) -> &'static str {
        match self {
            UpdateRole::System => "system",
            UpdateRole::UserReminder => "user_reminder",
            UpdateRole::MergedIntoUser => "merged_into_user",
        }
    }
}

/// Where the session's frozen prefix goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefixRole {
    /// A system message at the head.
    #[default]
    System,
    /// Prepended to the session's first user message: templates that accept no system role.
    FirstUser,
}

impl PrefixRole {
    /// The serde name: `system` or `first_user`.
    pub fn as_str(self) -> &'static str {
        match self {
            PrefixRole::System => "system",
            PrefixRole::FirstUser => "first_user",
        }
    }
}

/// The session setting for update delivery: the role, the tag that wraps update text, and
/// where the prefix goes.
///
/// An update reads `<tag from="producer">\ntext\n</tag>`, so the model can tell which
/// writer changed, and so a `Vec<Value>` conversation can recognise its own updates without
/// any extra field in the message.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
pub struct DeliveryStyle {
    /// The role updates travel as.
    pub role: UpdateRole,
    /// The wrapping tag name.
    pub tag: String,
    /// Where the prefix goes.
    pub prefix: PrefixRole,
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
            prefix: PrefixRole::System,
        }
    }

    /// Updates as user messages wrapped in `tag`.
    pub fn user_reminder(tag: impl Into<String>) -> Self {
        Self {
            role: UpdateRole::UserReminder,
            tag: tag.into(),
            prefix: PrefixRole::System,
        }
    }

    /// Updates wrapped in `tag` and prepended to the next user message.
    pub fn merged_into_user(tag: impl Into<String>) -> Self {
        Self {
            role: UpdateRole::MergedIntoUser,
            tag: tag.into(),
            prefix: PrefixRole::System,
        }
    }

    /// The same style with the prefix placed as given.
    pub fn with_prefix(mut self, prefix: PrefixRole) -> Self {
        self.prefix = prefix;
        self
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

    /// The update message for `text` from `producer`, as a message of its own. With
    /// [`UpdateRole::MergedIntoUser`] this is the user message it would be merged into.
    pub fn message(&self, producer: &Producer, text: &str) -> Value {
        let role = match self.role {
            UpdateRole::System => "system",
            UpdateRole::UserReminder | UpdateRole::MergedIntoUser => "user",
        };
        serde_json::json!({ "role": role, "content": self.wrap(producer, text) })
    }
}

/// The kind of API or engine a session talks to; it picks the delivery style.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiKind {
    /// OpenAI Chat Completions and compatible APIs: a later system message is kept in place.
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages: one `system` field; every system message is hoisted there.
    Anthropic,
    /// Gemini: one `systemInstruction`; same as Anthropic.
    Gemini,
    /// llama.cpp's server: depends on the model's chat template (probe it); system by default.
    LlamaCpp,
}

impl ApiKind {
    /// The delivery style for this API.
    pub fn delivery(self) -> DeliveryStyle {
        match self {
            ApiKind::OpenAi | ApiKind::LlamaCpp => DeliveryStyle::system(),
            ApiKind::Anthropic | ApiKind::Gemini => DeliveryStyle::user_reminder("system-reminder"),
        }
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
    merged: Arc<[(Producer, Arc<str>)]>,
    epoch: u64,
}

impl Node {
    /// Updates merged into this user message ([`UpdateRole::MergedIntoUser`], or the prefix
    /// with [`PrefixRole::FirstUser`]): producer and unwrapped text.
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
    /// Texts waiting to be merged into the next user message.
    pending: Vec<Pending>,
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
    /// update from `producer`, or as-is when `wrapped` is false (the prefix).
    pub fn defer(&mut self, producer: Producer, text: &str, wrapped: bool) {
        let rendered = if wrapped {
            self.delivery.wrap(&producer, text)
        } else {
            text.to_owned()
        };
        self.pending.push(Pending {
            producer,
            text: text.into(),
            rendered,
        });
    }

    /// Like [`History::defer`], but ahead of everything already pending (the prefix must
    /// open the message it rides in).
    pub fn defer_first(&mut self, producer: Producer, text: &str, wrapped: bool) {
        self.defer(producer, text, wrapped);
        if let Some(last) = self.pending.pop() {
            self.pending.insert(0, last);
        }
    }

    /// Whether a text from `producer` is waiting for the next user message.
    pub fn has_pending_from(&self, producer: &Producer) -> bool {
        self.pending.iter().any(|p| &p.producer == producer)
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
    /// With [`UpdateRole::MergedIntoUser`] it is deferred to the next user message and
    /// `None` is returned.
    pub fn append_update(&mut self, producer: Producer, text: &str) -> Option<NodeId> {
        if self.delivery.role == UpdateRole::MergedIntoUser {
            self.defer(producer, text, true);
            return None;
        }
        let bytes = self.delivery.message(&producer, text).to_string();
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
            self.defer(Producer::SystemPrompt, prompt, false);
            return SystemPromptChange::Deferred;
        }
        if self.nodes.is_empty() {
            let bytes = serde_json::json!({"role": "system", "content": prompt}).to_string();
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
        let bytes = serde_json::json!({"role": role, "content": summary}).to_string();
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
