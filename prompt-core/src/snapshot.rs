//! Saving a session and resuming it, byte for byte.
//!
//! A desktop agent restarts and reloads yesterday's conversation; the server still holds its
//! prefix in cache, so the first request after the restart must be byte-identical to the
//! one the agent would have sent without restarting. [`Session::save`] writes everything
//! that decides the next request (the frozen prefix and tools, the history with producers
//! and content ids, the tail components' last outputs, the epoch, the counters, the
//! requests a branch can go back to, the delivery style) as a versioned JSON document,
//! [`SessionSnapshot`]; [`Session::restore`] rebuilds the session from it and from the
//! program's components and policy, and refuses, naming what changed, when they no longer
//! produce the frozen prefix (or starts a new cache epoch, when the caller asks for one).
//!
//! The document is checked, not trusted: every node carries its content-derived id (the
//! chain of its bytes, as the wire and the cache know it) and a seal chained over every
//! field of it, and every other section of the document is sealed on its own, so an edited,
//! truncated or extended document is refused with [`RestoreError::Edited`] naming the field.
//! (The seals are content hashes, not signatures: they catch an edit, a damaged file, a
//! hand-merged one, not someone who recomputes them.) Counters at their limit are refused.
//!
//! The format is documented in `docs/lifecycle.md`; [`SNAPSHOT_VERSION`] changes when a
//! field is removed or changes meaning.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Component;
use crate::adopt::content_text;
use crate::context::SessionContext;
use crate::delivery::{DeliveryStyle, PrefixRole, UpdateRole};
use crate::hash::{Digest128, Fingerprint};
use crate::history::{History, Pending, SystemPromptChange};
use crate::id::ComponentId;
use crate::input::chain;
use crate::json::RawObject;
use crate::node::{Node, NodeKind, Producer};
use crate::policy::PromptPolicy;
use crate::prefix::{FrozenPrefix, freeze_prefix};
use crate::session::{Checkpoint, ComposeError, MAX_COUNTER, Session, SessionOptions};
use crate::tools::{ToolDefinition, ToolSet, ToolSetError};

/// The `format` of a saved session.
pub const SNAPSHOT_FORMAT: &str = "cacheline-session";

/// The version of the saved-session format (2: sealed sections and nodes, the routing id,
/// the system prompt, the requests a branch can go back to).
pub const SNAPSHOT_VERSION: u32 = 2;

/// The largest saved session [`SessionSnapshot::from_json`] reads.
pub const MAX_SNAPSHOT_BYTES: usize = 1 << 30;

/// Most nodes, tails, checkpoints or pending texts a saved session may hold.
pub const MAX_SNAPSHOT_ITEMS: usize = 1 << 22;

/// A saved session: `Session::save` writes it, `Session::restore` reads it. Serialize it
/// with serde_json. Every message is kept as a JSON string of its exact bytes, so the bytes
/// survive any round trip, through `serde_json::Value` included (an embedded object would be
/// re-serialized there, its keys reordered, and the restore would refuse it as edited).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionSnapshot {
    format: String,
    version: u32,
    session_id: String,
    routing_id: String,
    delivery: DeliveryStyle,
    tools: Vec<ToolDefinition>,
    prefix: Option<SavedPrefix>,
    tails: Vec<SavedTail>,
    history: SavedHistory,
    /// A system prompt no request carries yet: held while tool calls wait for their
    /// results, or, before the first request, the one the prefix will freeze.
    pending_prompt: Option<String>,
    counters: SavedCounters,
    checkpoints: Vec<Checkpoint>,
    seals: Seals,
}

/// The frozen prefix, as sent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedPrefix {
    /// The prefix message exactly as sent (empty when it rides in the first user message, no
    /// component is in the prefix, or an adopted conversation carries message 0 itself).
    message: String,
    /// The prefix text.
    text: String,
    /// The application's system prompt at its head, if it is there.
    system_prompt: Option<String>,
    /// Each prefix component's text, in order.
    components: Vec<SavedPart>,
    /// The fingerprint (tools and prefix), hex.
    fingerprint: String,
}

/// One prefix component's text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SavedPart {
    /// The component.
    pub(crate) id: ComponentId,
    /// Its text as frozen (`None`: it had nothing to say).
    pub(crate) text: Option<String>,
}

/// A tail component's last output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedTail {
    id: ComponentId,
    last: Option<String>,
}

/// The history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedHistory {
    epoch: u64,
    nodes: Vec<SavedNode>,
    pending: Vec<SavedPending>,
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedNode {
    /// Its chained content id (its bytes after every earlier node's), hex.
    id: String,
    /// The seal chained over every field of it after the previous node's seal, hex.
    seal: String,
    producer: Producer,
    kind: NodeKind,
    epoch: u64,
    text: Option<String>,
    merged: Vec<(Producer, String)>,
    /// The message exactly as sent (its JSON text).
    message: String,
}

/// A text waiting for the next user message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedPending {
    producer: Producer,
    text: String,
    rendered: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SavedCounters {
    turn: u64,
    requests: u64,
    sent: usize,
}

/// One seal per section of the document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Seals {
    identity: String,
    delivery: String,
    tools: String,
    prefix: String,
    tails: String,
    history: String,
    pending: String,
    counters: String,
    checkpoints: String,
}

/// Why a saved session cannot be resumed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Not a saved session of a version this library reads.
    #[error(
        "not a cacheline session of version {SNAPSHOT_VERSION}: format {format:?}, version {version}"
    )]
    Format {
        /// The format found (at most 64 bytes of it).
        format: String,
        /// The version found.
        version: u32,
    },
    /// The document is not JSON of the saved-session shape.
    #[error("the saved session does not parse: {}", chain(.0))]
    Json(#[source] serde_json::Error),
    /// Larger than [`MAX_SNAPSHOT_BYTES`], or more items than [`MAX_SNAPSHOT_ITEMS`].
    #[error("the saved session's {what} is {len}; at most {max} are read")]
    TooLarge {
        /// What: `document bytes`, `nodes`, …
        what: &'static str,
        /// Its size.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A field that does not match its seal, its content id or the rest of the document:
    /// the file was edited or damaged. Nothing is restored.
    #[error("the saved session was edited or damaged: {field} {problem}")]
    Edited {
        /// Where, e.g. `prefix`, `history.nodes[3].text`, `counters`.
        field: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A counter past [`MAX_COUNTER`]: no session counts that far.
    #[error("the saved session's {counter} is {value}, past its limit ({MAX_COUNTER})")]
    Limit {
        /// `counters.turn`, `counters.requests`, `history.epoch`.
        counter: &'static str,
        /// Its value.
        value: u64,
    },
    /// The program's components, policy or tools no longer produce the frozen prefix.
    #[error(
        "the frozen prefix changed since the session was saved ({}); resume with RestoreMode::NewEpoch to start a new cache epoch",
        .changes.summary()
    )]
    PrefixChanged {
        /// What changed.
        changes: Box<PrefixChanges>,
    },
    /// The session starts with other options.
    #[error("the delivery style changed since the session was saved: saved {saved:?}, now {now:?}")]
    DeliveryChanged {
        /// The saved style.
        saved: Box<DeliveryStyle>,
        /// The style of the options given.
        now: Box<DeliveryStyle>,
    },
    /// The saved tools do not form a tool set.
    #[error("the saved tools: {}", chain(.0))]
    Tools(#[source] ToolSetError),
    /// Starting the session failed.
    #[error("starting the session: {}", chain(.0))]
    Start(#[source] ComposeError),
    /// The saved message is not a valid message.
    #[error("saved node {index} is not a message object")]
    NotAMessage {
        /// The node's index.
        index: usize,
    },
}

/// How to resume when the prefix changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestoreMode {
    /// Refuse, naming what changed: the default, because a new prefix costs the whole cache.
    #[default]
    Strict,
    /// Accept the new prefix and tools and start a new cache epoch; the history is kept.
    NewEpoch,
}

/// A restored session, and what the restore changed.
#[derive(Debug)]
#[non_exhaustive]
pub struct Restored {
    /// The session, ready for its next request.
    pub session: Session,
    /// With [`RestoreMode::NewEpoch`]: what changed in the prefix, when it did.
    pub changes: Option<PrefixChanges>,
    /// When the options carried a system prompt other than the saved session's current
    /// one (the user edited the instructions while the app was closed): how it was taken
    /// in, as [`Session::set_system_prompt`] says (appended after the history, the saved
    /// prefix kept).
    pub system_prompt: Option<SystemPromptChange>,
}

/// What changed in the frozen prefix: per component, and in the tools.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PrefixChanges {
    /// Prefix components whose text changed.
    pub changed: Vec<ComponentId>,
    /// Components that entered the prefix.
    pub added: Vec<ComponentId>,
    /// Components that left it.
    pub removed: Vec<ComponentId>,
    /// Tools added (`source/name`).
    pub tools_added: Vec<String>,
    /// Tools removed.
    pub tools_removed: Vec<String>,
    /// Tools whose description or parameters changed.
    pub tools_changed: Vec<String>,
    /// The fingerprint before, hex.
    pub old_fingerprint: String,
    /// The fingerprint after, hex.
    pub new_fingerprint: String,
}

impl PrefixChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
            && self.added.is_empty()
            && self.removed.is_empty()
            && self.tools_added.is_empty()
            && self.tools_removed.is_empty()
            && self.tools_changed.is_empty()
            && self.old_fingerprint == self.new_fingerprint
    }

    /// One line: `changed: a; added: b; tools added: mcp:github/search`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        let list = |name: &str, items: &[String]| {
            (!items.is_empty()).then(|| format!("{name}: {}", items.join(", ")))
        };
        let ids = |items: &[ComponentId]| items.iter().map(ToString::to_string).collect::<Vec<_>>();
        parts.extend(list("changed", &ids(&self.changed)));
        parts.extend(list("added", &ids(&self.added)));
        parts.extend(list("removed", &ids(&self.removed)));
        parts.extend(list("tools added", &self.tools_added));
        parts.extend(list("tools removed", &self.tools_removed));
        parts.extend(list("tools changed", &self.tools_changed));
        if parts.is_empty() {
            parts.push(format!(
                "fingerprint {} → {}",
                self.old_fingerprint, self.new_fingerprint
            ));
        }
        parts.join("; ")
    }

    /// The differences between two frozen prefixes.
    pub(crate) fn between(
        old_parts: &[SavedPart],
        new_parts: &[SavedPart],
        old_tools: &ToolSet,
        new_tools: &ToolSet,
        old_fingerprint: Fingerprint,
        new_fingerprint: Fingerprint,
    ) -> Self {
        let mut changes = PrefixChanges {
            old_fingerprint: old_fingerprint.to_string(),
            new_fingerprint: new_fingerprint.to_string(),
            ..PrefixChanges::default()
        };
        for part in new_parts {
            match old_parts.iter().find(|o| o.id == part.id) {
                None => changes.added.push(part.id.clone()),
                Some(old) if old.text != part.text => changes.changed.push(part.id.clone()),
                Some(_) => {}
            }
        }
        for old in old_parts {
            if !new_parts.iter().any(|p| p.id == old.id) {
                changes.removed.push(old.id.clone());
            }
        }
        let key = |d: &ToolDefinition| format!("{}/{}", d.source, d.name);
        for tool in new_tools.definitions() {
            match old_tools
                .definitions()
                .iter()
                .find(|o| o.name == tool.name && o.source == tool.source)
            {
                None => changes.tools_added.push(key(tool)),
                Some(old) if old != tool => changes.tools_changed.push(key(tool)),
                Some(_) => {}
            }
        }
        for old in old_tools.definitions() {
            if !new_tools
                .definitions()
                .iter()
                .any(|t| t.name == old.name && t.source == old.source)
            {
                changes.tools_removed.push(key(old));
            }
        }
        changes
    }
}

/// The seal of one section: SHA-256/128 over the format, the section's name and its fields,
/// each length-prefixed (so no two field lists share an encoding).
struct Sealer(Sha256);

impl Sealer {
    fn new(section: &str) -> Self {
        let mut sealer = Self(Sha256::new());
        sealer
            .str(SNAPSHOT_FORMAT)
            .u64(u64::from(SNAPSHOT_VERSION))
            .str(section);
        sealer
    }

    fn str(&mut self, text: &str) -> &mut Self {
        let len = u64::try_from(text.len()).unwrap_or(u64::MAX);
        self.0.update(len.to_le_bytes());
        self.0.update(text.as_bytes());
        self
    }

    fn u64(&mut self, value: u64) -> &mut Self {
        self.0.update(value.to_le_bytes());
        self
    }

    fn len(&mut self, len: usize) -> &mut Self {
        self.u64(u64::try_from(len).unwrap_or(u64::MAX))
    }

    fn opt(&mut self, text: Option<&str>) -> &mut Self {
        match text {
            None => self.u64(0),
            Some(text) => self.u64(1).str(text),
        }
    }

    fn producer(&mut self, producer: &Producer) -> &mut Self {
        match producer {
            Producer::Component(id) => self.str("component").str(id.as_str()),
            other => self.str(&other.to_string()),
        }
    }

    fn finish(&mut self) -> String {
        let full = std::mem::take(&mut self.0).finalize();
        let mut out = [0u8; 16];
        out.copy_from_slice(&full[..16]);
        Digest128::from_bytes(out).to_string()
    }
}

fn node_seal(previous: &str, index: usize, node: &SavedNode) -> String {
    let mut s = Sealer::new("node");
    s.str(previous)
        .len(index)
        .str(&node.id)
        .producer(&node.producer)
        .str(node.kind.as_str())
        .u64(node.epoch)
        .opt(node.text.as_deref())
        .len(node.merged.len());
    for (producer, text) in &node.merged {
        s.producer(producer).str(text);
    }
    s.finish()
}

impl SessionSnapshot {
    fn seals(&self) -> Seals {
        let identity = Sealer::new("identity")
            .str(&self.session_id)
            .str(&self.routing_id)
            .finish();
        let delivery = Sealer::new("delivery")
            .str(self.delivery.role.as_str())
            .str(&self.delivery.tag)
            .str(self.delivery.prefix.as_str())
            .finish();
        let mut s = Sealer::new("tools");
        s.len(self.tools.len());
        for t in &self.tools {
            s.str(t.source.as_str())
                .str(&t.name)
                .str(&t.description)
                .str(&t.parameters);
        }
        let tools = s.finish();
        let mut s = Sealer::new("prefix");
        match &self.prefix {
            None => {
                s.u64(0);
            }
            Some(p) => {
                s.u64(1)
                    .str(&p.message)
                    .str(&p.text)
                    .opt(p.system_prompt.as_deref())
                    .str(&p.fingerprint)
                    .len(p.components.len());
                for part in &p.components {
                    s.str(part.id.as_str()).opt(part.text.as_deref());
                }
            }
        }
        let prefix = s.finish();
        let mut s = Sealer::new("tails");
        s.len(self.tails.len());
        for t in &self.tails {
            s.str(t.id.as_str()).opt(t.last.as_deref());
        }
        let tails = s.finish();
        let last = self
            .history
            .nodes
            .last()
            .map_or("", |n| n.seal.as_str())
            .to_owned();
        let history = Sealer::new("history")
            .u64(self.history.epoch)
            .len(self.history.nodes.len())
            .str(&last)
            .finish();
        let mut s = Sealer::new("pending");
        s.opt(self.pending_prompt.as_deref())
            .len(self.history.pending.len());
        for p in &self.history.pending {
            s.producer(&p.producer).str(&p.text).str(&p.rendered);
        }
        let pending = s.finish();
        let counters = Sealer::new("counters")
            .u64(self.counters.turn)
            .u64(self.counters.requests)
            .len(self.counters.sent)
            .finish();
        let mut s = Sealer::new("checkpoints");
        s.len(self.checkpoints.len());
        for c in &self.checkpoints {
            s.u64(c.sequence).len(c.nodes).u64(c.turn);
        }
        let checkpoints = s.finish();
        Seals {
            identity,
            delivery,
            tools,
            prefix,
            tails,
            history,
            pending,
            counters,
            checkpoints,
        }
    }

    /// Recomputes every node id and seal, and every section's seal, from the document's
    /// fields: what a program forging a document would do (the seals are content-derived,
    /// not keyed). For the fuzz harness and the tests, whose documents must get past the seals
    /// to reach the checks behind them; only with the `fuzzing` feature.
    #[cfg(any(test, feature = "fuzzing"))]
    #[doc(hidden)]
    pub fn reseal(&mut self) {
        let mut previous_id = None;
        let mut previous_seal = String::new();
        for (index, node) in self.history.nodes.iter_mut().enumerate() {
            let id = History::chained_id(previous_id, &node.message);
            node.id = id.to_string();
            node.seal = node_seal(&previous_seal, index, node);
            previous_id = Some(id);
            previous_seal.clone_from(&node.seal);
        }
        self.seals = self.seals();
    }

    /// Reads a saved session from JSON, at most [`MAX_SNAPSHOT_BYTES`]. (Deserializing it
    /// with serde_json directly reads the same document; [`Session::restore`] checks it
    /// either way.)
    pub fn from_json(bytes: &[u8]) -> Result<Self, RestoreError> {
        if bytes.len() > MAX_SNAPSHOT_BYTES {
            return Err(RestoreError::TooLarge {
                what: "document bytes",
                len: bytes.len(),
                max: MAX_SNAPSHOT_BYTES,
            });
        }
        serde_json::from_slice(bytes).map_err(RestoreError::Json)
    }

    /// The document as JSON.
    pub fn to_json(&self) -> String {
        // A struct of strings, numbers and lists: serializing it cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// One seal over every section's seal: what a document embedding this one (a saved
    /// conversation) seals it by.
    pub fn seal(&self) -> String {
        let seals = &self.seals;
        Sealer::new("document")
            .str(&seals.identity)
            .str(&seals.delivery)
            .str(&seals.tools)
            .str(&seals.prefix)
            .str(&seals.tails)
            .str(&seals.history)
            .str(&seals.pending)
            .str(&seals.counters)
            .str(&seals.checkpoints)
            .finish()
    }

    /// The saved session's identity ([`Session::session_id`]).
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// What its routing key is made from ([`Session::routing_id`]).
    pub fn routing_id(&self) -> &str {
        &self.routing_id
    }

    /// User turns composed.
    pub fn turns(&self) -> u64 {
        self.counters.turn
    }

    /// Requests composed.
    pub fn requests(&self) -> u64 {
        self.counters.requests
    }

    /// History nodes.
    pub fn node_count(&self) -> usize {
        self.history.nodes.len()
    }

    /// Checks the format, the limits and every seal; names the first field that does not
    /// match.
    fn verify(&self) -> Result<(), RestoreError> {
        if self.format != SNAPSHOT_FORMAT || self.version != SNAPSHOT_VERSION {
            let end = self.format.floor_char_boundary(64);
            return Err(RestoreError::Format {
                format: self.format[..end].to_owned(),
                version: self.version,
            });
        }
        for (what, len) in [
            ("nodes", self.history.nodes.len()),
            ("pending texts", self.history.pending.len()),
            ("tails", self.tails.len()),
            ("checkpoints", self.checkpoints.len()),
            ("tools", self.tools.len()),
        ] {
            if len > MAX_SNAPSHOT_ITEMS {
                return Err(RestoreError::TooLarge {
                    what,
                    len,
                    max: MAX_SNAPSHOT_ITEMS,
                });
            }
        }
        let expected = self.seals();
        let edited = |field: &str| RestoreError::Edited {
            field: field.to_owned(),
            problem: "does not match its seal",
        };
        for (field, saved, now) in [
            (
                "session_id or routing_id",
                &self.seals.identity,
                &expected.identity,
            ),
            ("delivery", &self.seals.delivery, &expected.delivery),
            ("tools", &self.seals.tools, &expected.tools),
            ("prefix", &self.seals.prefix, &expected.prefix),
            ("tails", &self.seals.tails, &expected.tails),
            (
                "history.pending or pending_prompt",
                &self.seals.pending,
                &expected.pending,
            ),
            ("counters", &self.seals.counters, &expected.counters),
            (
                "checkpoints",
                &self.seals.checkpoints,
                &expected.checkpoints,
            ),
        ] {
            if saved != now {
                return Err(edited(field));
            }
        }
        self.verify_nodes()?;
        if self.seals.history != expected.history {
            return Err(RestoreError::Edited {
                field: "history.nodes".to_owned(),
                problem: "were removed, added or reordered, or history.epoch was edited",
            });
        }
        for (counter, value) in [
            ("counters.turn", self.counters.turn),
            ("counters.requests", self.counters.requests),
            ("history.epoch", self.history.epoch),
        ] {
            if value > MAX_COUNTER {
                return Err(RestoreError::Limit { counter, value });
            }
        }
        let len = self.history.nodes.len();
        if self.counters.sent > len {
            return Err(RestoreError::Edited {
                field: "counters.sent".to_owned(),
                problem: "is beyond the history",
            });
        }
        let ordered = self.checkpoints.windows(2).all(|w| {
            w[0].sequence < w[1].sequence && w[0].nodes <= w[1].nodes && w[0].turn <= w[1].turn
        });
        let inside = self
            .checkpoints
            .iter()
            .all(|c| c.nodes <= len && c.sequence <= self.counters.requests);
        if !ordered || !inside {
            return Err(RestoreError::Edited {
                field: "checkpoints".to_owned(),
                problem: "are out of order or beyond the history",
            });
        }
        Ok(())
    }

    /// Every node: its message, its id (the chain of the bytes), what its fields say about
    /// its message, and its seal.
    fn verify_nodes(&self) -> Result<(), RestoreError> {
        let mut previous_id: Option<Digest128> = None;
        let mut previous_seal = String::new();
        let mut previous_epoch = 0;
        for (index, node) in self.history.nodes.iter().enumerate() {
            let field = |name: &str| format!("history.nodes[{index}].{name}");
            let object =
                RawObject::parse(&node.message).map_err(|_| RestoreError::NotAMessage { index })?;
            let id = History::chained_id(previous_id, &node.message);
            if id.to_string() != node.id {
                return Err(RestoreError::Edited {
                    field: field("message"),
                    problem: "does not hash to the node's id (or a node before it was removed, added or reordered)",
                });
            }
            if let Some((name, problem)) = self.inconsistency(node, &object, previous_epoch) {
                return Err(RestoreError::Edited {
                    field: field(name),
                    problem,
                });
            }
            let seal = node_seal(&previous_seal, index, node);
            if seal != node.seal {
                return Err(RestoreError::Edited {
                    field: format!(
                        "history.nodes[{index}] (producer, kind, epoch, text or merged)"
                    ),
                    problem: "does not match its seal",
                });
            }
            previous_id = Some(id);
            previous_seal = seal;
            previous_epoch = node.epoch;
        }
        Ok(())
    }

    /// The first field of `node` that contradicts its own message or its place: what an
    /// edit most likely touched, so the error can name it.
    fn inconsistency(
        &self,
        node: &SavedNode,
        object: &RawObject<'_>,
        previous_epoch: u64,
    ) -> Option<(&'static str, &'static str)> {
        let style = &self.delivery;
        let role = object.str("role");
        let role = role.as_deref();
        let summary_role = match style.prefix {
            PrefixRole::System => "system",
            PrefixRole::FirstUser => "user",
        };
        let role_ok = match (node.kind, &node.producer) {
            (NodeKind::User, _) => role == Some("user"),
            (NodeKind::Assistant, _) => role == Some("assistant"),
            (NodeKind::Tool, _) => role == Some("tool"),
            (NodeKind::Update, _) => role == Some(style.update_role()),
            (NodeKind::CompactionSummary, _) => {
                role == Some(summary_role) || role == Some("system")
            }
            (NodeKind::System, Producer::Foreign) => role.is_some(),
            (NodeKind::System, _) => role == Some("system"),
        };
        if !role_ok {
            return Some(("kind", "does not fit the message's role"));
        }
        let producer_ok = match node.kind {
            NodeKind::User => node.producer == Producer::User,
            NodeKind::Assistant => node.producer == Producer::Assistant,
            NodeKind::Tool => node.producer == Producer::Tool,
            NodeKind::CompactionSummary => node.producer == Producer::Compaction,
            NodeKind::System => matches!(node.producer, Producer::SystemPrompt | Producer::Foreign),
            NodeKind::Update => matches!(
                node.producer,
                Producer::Component(_) | Producer::SystemPrompt | Producer::Prefix
            ),
        };
        if !producer_ok {
            return Some(("producer", "cannot have written a node of this kind"));
        }
        let content = content_text(object);
        let text_ok = match (node.kind, &node.producer) {
            (NodeKind::Update, producer) => {
                let unwrapped = content.as_deref().and_then(|c| style.unwrap(producer, c));
                if unwrapped.is_none() {
                    return Some(("producer", "is not the writer the message names"));
                }
                node.text.as_deref() == unwrapped
            }
            (NodeKind::System, Producer::SystemPrompt) | (NodeKind::CompactionSummary, _) => {
                node.text.is_none() || node.text.as_deref() == content.as_deref()
            }
            _ => node.text.is_none(),
        };
        if !text_ok {
            return Some(("text", "is not the text of its message"));
        }
        if !node.merged.is_empty() {
            // Each merged text is in the message's text, verbatim (the prefix) or wrapped.
            let all_text = text_of_parts(object);
            let merged_ok = matches!(node.kind, NodeKind::User | NodeKind::Tool)
                && node
                    .merged
                    .iter()
                    .all(|(_, text)| all_text.contains(text.as_str()));
            if !merged_ok {
                return Some(("merged", "are not in the message's content"));
            }
        }
        if node.epoch < previous_epoch || node.epoch > self.history.epoch {
            return Some(("epoch", "is out of order"));
        }
        // The merged updates of a merged-delivery session ride in user messages only.
        if node.kind == NodeKind::Update && style.role == UpdateRole::MergedIntoUser {
            return Some(("kind", "is an update of its own in a merged delivery style"));
        }
        None
    }
}

/// Every text of a message's content: a string, or the `text` of each part, joined.
fn text_of_parts(object: &RawObject<'_>) -> String {
    let Some(content) = object.get("content") else {
        return String::new();
    };
    if let Some(text) = crate::json::string_of(content) {
        return text.into_owned();
    }
    crate::json::array_of(content)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|part| {
            RawObject::parse(part.get())
                .ok()?
                .str("text")
                .map(|t| t.into_owned())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl Session {
    /// Everything that decides the next request, as a versioned, sealed document.
    pub fn save(&self) -> SessionSnapshot {
        let prefix = self.prefix.as_ref().map(|p| SavedPrefix {
            message: p.bytes.to_string(),
            text: p.text.to_string(),
            system_prompt: p.system_prompt.as_deref().map(str::to_owned),
            components: self.saved_parts(),
            fingerprint: p.fingerprint.to_string(),
        });
        let mut nodes: Vec<SavedNode> = Vec::with_capacity(self.history.len());
        let mut previous_seal = String::new();
        for (index, n) in self.history.nodes().iter().enumerate() {
            let mut node = SavedNode {
                id: n.id().to_string(),
                seal: String::new(),
                producer: n.producer().clone(),
                kind: n.kind(),
                epoch: n.epoch(),
                text: n.text().map(str::to_owned),
                merged: n
                    .merged_updates()
                    .iter()
                    .map(|(p, t)| (p.clone(), t.to_string()))
                    .collect(),
                message: n.bytes().to_owned(),
            };
            node.seal = node_seal(&previous_seal, index, &node);
            previous_seal.clone_from(&node.seal);
            nodes.push(node);
        }
        let mut snapshot = SessionSnapshot {
            format: SNAPSHOT_FORMAT.to_owned(),
            version: SNAPSHOT_VERSION,
            session_id: self.session_id.to_string(),
            routing_id: self.routing_id.to_string(),
            delivery: self.history.delivery().clone(),
            tools: self.tools.definitions().to_vec(),
            prefix,
            tails: self
                .tails
                .iter()
                .map(|t| SavedTail {
                    id: t.component.id().clone(),
                    last: t.last.as_deref().map(str::to_owned),
                })
                .collect(),
            history: SavedHistory {
                epoch: self.history.epoch(),
                nodes,
                pending: self
                    .history
                    .pending()
                    .iter()
                    .map(|p| SavedPending {
                        producer: p.producer.clone(),
                        text: p.text.to_string(),
                        rendered: p.rendered.clone(),
                    })
                    .collect(),
            },
            // Before the first request the prompt to freeze is held here: nothing was sent
            // to carry it yet.
            pending_prompt: match &self.prefix {
                Some(_) => self.pending_prompt.clone(),
                None => self.system_prompt.as_deref().map(str::to_owned),
            },
            counters: SavedCounters {
                turn: self.turn,
                requests: self.requests,
                sent: self.sent,
            },
            checkpoints: self.checkpoints.clone(),
            seals: Seals {
                identity: String::new(),
                delivery: String::new(),
                tools: String::new(),
                prefix: String::new(),
                tails: String::new(),
                history: String::new(),
                pending: String::new(),
                counters: String::new(),
                checkpoints: String::new(),
            },
        };
        snapshot.seals = snapshot.seals();
        snapshot
    }

    /// The prefix components' texts, as frozen (or as rendered, before the first request).
    pub(crate) fn saved_parts(&self) -> Vec<SavedPart> {
        self.prefix_parts
            .iter()
            .map(|p| SavedPart {
                id: p.component.id().clone(),
                text: p.rendered.clone().flatten(),
            })
            .collect()
    }

    /// Resumes a saved session with the program's components and policy: the next request
    /// is byte-identical to the one the saved session would have composed.
    ///
    /// The document is checked first ([`RestoreError::Edited`] names an edited field). The
    /// components, policy and `options.tools` must then reproduce the frozen prefix's
    /// components and tools; the saved prefix itself is kept as it was sent (an adopted
    /// conversation's message 0 included). When they do not, [`RestoreMode::Strict`]
    /// refuses with [`RestoreError::PrefixChanged`] naming what changed;
    /// [`RestoreMode::NewEpoch`] resumes with the new prefix and tools in a new cache epoch,
    /// the history kept. A system prompt in `options` is the app's current one: when it
    /// differs from the session's, it is appended as an update ([`Restored::system_prompt`]);
    /// before the first request it is simply the text to freeze (`Placed`), and without one
    /// the saved session's is kept.
    pub fn restore(
        snapshot: &SessionSnapshot,
        components: Vec<Component>,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        mode: RestoreMode,
    ) -> Result<Restored, RestoreError> {
        snapshot.verify()?;
        if *options.delivery() != snapshot.delivery {
            return Err(RestoreError::DeliveryChanged {
                saved: Box::new(snapshot.delivery.clone()),
                now: Box::new(options.delivery().clone()),
            });
        }
        let saved_tools = ToolSet::new(snapshot.tools.clone()).map_err(RestoreError::Tools)?;
        let current_prompt = options.system_prompt().map(str::to_owned);
        let mut session =
            Session::start(components, policy, context, options).map_err(RestoreError::Start)?;
        let history = restore_history(snapshot);

        let mut changes = None;
        if let Some(saved) = &snapshot.prefix {
            // Turn components render at the first request: take their frozen text.
            for part in &mut session.prefix_parts {
                if part.rendered.is_none()
                    && let Some(old) = saved
                        .components
                        .iter()
                        .find(|o| &o.id == part.component.id())
                {
                    part.rendered = Some(old.text.clone());
                }
            }
            let parts = session.saved_parts();
            if parts == saved.components && saved_tools == session.tools {
                session.prefix = Some(saved_prefix(&session, saved));
            } else {
                let frozen = freeze_prefix(
                    &session.prefix_parts,
                    history.delivery().prefix,
                    &session.tools,
                    saved.system_prompt.as_deref(),
                );
                let found = PrefixChanges::between(
                    &saved.components,
                    &parts,
                    &saved_tools,
                    &session.tools,
                    parse_digest(&saved.fingerprint),
                    frozen.fingerprint,
                );
                if mode == RestoreMode::Strict {
                    return Err(RestoreError::PrefixChanged {
                        changes: Box::new(found),
                    });
                }
                session.prefix = Some(frozen);
                changes = Some(found);
            }
            session.system_prompt = None;
        }
        session.history = history;
        if changes.is_some() {
            session.history.start_epoch();
        }
        for slot in &mut session.tails {
            slot.last = snapshot
                .tails
                .iter()
                .find(|t| &t.id == slot.component.id())
                .and_then(|t| t.last.as_deref())
                .map(Arc::from);
        }
        session.turn = snapshot.counters.turn;
        session.requests = snapshot.counters.requests;
        session.sent = snapshot.counters.sent;
        if snapshot.prefix.is_some() {
            session.pending_prompt = snapshot.pending_prompt.clone();
        } else {
            // Nothing was sent: the saved prompt is the one to freeze.
            session.system_prompt = snapshot.pending_prompt.as_deref().map(Arc::from);
        }
        session.checkpoints = if changes.is_some() {
            Vec::new()
        } else {
            snapshot.checkpoints.clone()
        };
        // The saved identity wins: the resumed session routes where it did.
        session.session_id = Arc::from(snapshot.session_id.as_str());
        session.routing_id = Arc::from(snapshot.routing_id.as_str());
        // The app's current text: appended as an edit, or, when nothing was sent, simply
        // the one to freeze.
        let system_prompt = current_prompt.and_then(|prompt| {
            let change = session.set_system_prompt(&prompt);
            (change != SystemPromptChange::Unchanged).then_some(change)
        });
        Ok(Restored {
            session,
            changes,
            system_prompt,
        })
    }
}

/// The saved prefix as it was sent, with the byte ranges of the components' texts when the
/// message is the one this library writes.
fn saved_prefix(session: &Session, saved: &SavedPrefix) -> FrozenPrefix {
    let rewritten = freeze_prefix(
        &session.prefix_parts,
        session.history.delivery().prefix,
        &session.tools,
        saved.system_prompt.as_deref(),
    );
    FrozenPrefix {
        parts: if *rewritten.bytes == *saved.message {
            rewritten.parts
        } else {
            Vec::new()
        },
        bytes: Arc::from(saved.message.as_str()),
        text: Arc::from(saved.text.as_str()),
        fingerprint: parse_digest(&saved.fingerprint),
        system_prompt: saved.system_prompt.as_deref().map(Arc::from),
    }
}

/// The saved history (already verified).
fn restore_history(snapshot: &SessionSnapshot) -> History {
    let mut nodes: Vec<Node> = Vec::with_capacity(snapshot.history.nodes.len());
    for saved in &snapshot.history.nodes {
        let bytes = saved.message.as_str();
        let id = History::chained_id(nodes.last().map(Node::id), bytes);
        nodes.push(Node {
            id,
            producer: saved.producer.clone(),
            kind: saved.kind,
            bytes: Arc::from(bytes),
            text: saved.text.as_deref().map(Arc::from),
            merged: saved
                .merged
                .iter()
                .map(|(p, t)| (p.clone(), Arc::from(t.as_str())))
                .collect(),
            epoch: saved.epoch,
        });
    }
    let pending = snapshot
        .history
        .pending
        .iter()
        .map(|p| Pending {
            producer: p.producer.clone(),
            text: Arc::from(p.text.as_str()),
            rendered: p.rendered.clone(),
        })
        .collect();
    History::restored(
        snapshot.delivery.clone(),
        snapshot.history.epoch,
        nodes,
        pending,
    )
}

fn parse_digest(hex: &str) -> Fingerprint {
    let mut bytes = [0u8; 16];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = hex
            .get(i * 2..i * 2 + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0);
    }
    Digest128::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Component, ComponentId, Extensions, Placement};

    fn setup() -> (Vec<Component>, PromptPolicy) {
        let Ok(id) = ComponentId::new("house_rules") else {
            panic!("a valid id")
        };
        let components = vec![Component::constant(id, "Be careful.").placement(Placement::Prefix)];
        let policy = match PromptPolicy::from_agent_toml(
            "[prompt]\nprefix_allow = [\"house_rules\"]",
            "agent.toml",
            &components,
        ) {
            Ok(loaded) => loaded.ignore_warnings(),
            Err(e) => panic!("{e}"),
        };
        (components, policy)
    }

    fn start() -> Session {
        let (components, policy) = setup();
        Session::start(
            components,
            &policy,
            SessionContext::default(),
            SessionOptions::new(),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn restore(snapshot: &SessionSnapshot) -> Result<Restored, RestoreError> {
        let (components, policy) = setup();
        Session::restore(
            snapshot,
            components,
            &policy,
            SessionContext::default(),
            SessionOptions::new(),
            RestoreMode::Strict,
        )
    }

    /// A saved session with one turn, each counter set as `edit` says, resealed as a program
    /// forging the document would.
    fn forged(edit: impl Fn(&mut SessionSnapshot)) -> SessionSnapshot {
        let mut session = start();
        if let Err(e) = session.turn(Extensions::new(), "hi") {
            panic!("{e}");
        }
        let reply = serde_json::json!({"role": "assistant", "content": "hello"});
        session
            .record_assistant(&reply)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut snapshot = session.save();
        edit(&mut snapshot);
        snapshot.reseal();
        snapshot
    }

    #[test]
    fn snapshot_counters_past_the_limit_are_refused_even_when_resealed() {
        type Edit = fn(&mut SessionSnapshot, u64);
        let edits: [(&str, Edit); 3] = [
            ("counters.turn", |s, v| s.counters.turn = v),
            ("counters.requests", |s, v| s.counters.requests = v),
            ("history.epoch", |s, v| s.history.epoch = v),
        ];
        for (counter, edit) in edits {
            for value in [MAX_COUNTER + 1, u64::MAX] {
                match restore(&forged(|s| edit(s, value))) {
                    Err(RestoreError::Limit {
                        counter: named,
                        value: read,
                    }) => {
                        assert_eq!((named, read), (counter, value));
                    }
                    other => panic!("{counter} = {value}: expected Limit, got {other:?}"),
                }
            }
        }
    }

    #[test]
    fn snapshot_counters_at_the_limit_restore_and_the_next_request_is_refused_typed() {
        let snapshot = forged(|s| {
            s.counters.turn = MAX_COUNTER;
            s.counters.requests = MAX_COUNTER - 1;
            s.history.epoch = MAX_COUNTER;
        });
        let mut session = restore(&snapshot).unwrap_or_else(|e| panic!("{e}")).session;
        assert!(matches!(
            session.turn(Extensions::new(), "one more"),
            Err(ComposeError::CounterLimit {
                counter: "turn",
                value: MAX_COUNTER
            })
        ));
        // A new epoch at the limit stays there, and the session saved again restores.
        session.history.start_epoch();
        assert_eq!(session.history.epoch(), MAX_COUNTER);
        let again = session.save();
        assert!(
            restore(&again).is_ok(),
            "a session at its limits saves and restores"
        );
        // The requests counter: one more request reaches the limit, the next is refused.
        let mut session = restore(&forged(|s| s.counters.requests = MAX_COUNTER - 1))
            .unwrap_or_else(|e| panic!("{e}"))
            .session;
        assert!(session.turn(Extensions::new(), "last").is_ok());
        let reply = serde_json::json!({"role": "assistant", "content": "ok"});
        session
            .record_assistant(&reply)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            session.turn(Extensions::new(), "past"),
            Err(ComposeError::CounterLimit {
                counter: "requests",
                value: MAX_COUNTER
            })
        ));
        assert!(restore(&session.save()).is_ok());
    }
}
