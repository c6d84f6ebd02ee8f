//! Saving a session and resuming it, byte for byte.
//!
//! A desktop agent restarts and reloads yesterday's conversation; the server still holds its
//! prefix in cache, so the first request after the restart must be byte-identical to the
//! one the agent would have sent without restarting. [`Session::save`] writes everything
//! that decides the next request (the frozen prefix and tools, the history with producers
//! and content ids, the tail components' last outputs, the epoch, the counters, the
//! delivery style) as a versioned JSON document, [`SessionSnapshot`]; [`Session::restore`]
//! rebuilds the session from it and from the program's components and policy, and refuses,
//! naming what changed, when they no longer produce the frozen prefix (or starts a new cache
//! epoch, when the caller asks for one).
//!
//! The format is documented in `docs/lifecycle.md`; [`SNAPSHOT_VERSION`] changes when a
//! field is removed or changes meaning.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::Component;
use crate::context::SessionContext;
use crate::delivery::DeliveryStyle;
use crate::hash::{Digest128, Fingerprint};
use crate::history::{History, Pending};
use crate::id::ComponentId;
use crate::node::{Node, NodeKind, Producer};
use crate::policy::PromptPolicy;
use crate::prefix::freeze_prefix;
use crate::session::{ComposeError, Session, SessionOptions};
use crate::tools::{ToolDefinition, ToolSet, ToolSetError};

/// The `format` of a saved session.
pub const SNAPSHOT_FORMAT: &str = "cacheline-session";

/// The version of the saved-session format.
pub const SNAPSHOT_VERSION: u32 = 1;

/// A saved session: `Session::save` writes it, `Session::restore` reads it. Serialize it
/// with serde_json. Every message is kept as a JSON string of its exact bytes, so the bytes
/// survive any round trip, through `serde_json::Value` included (an embedded object would be
/// re-serialized there, its keys reordered, and the restore would refuse it as damaged).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionSnapshot {
    /// [`SNAPSHOT_FORMAT`].
    pub format: String,
    /// [`SNAPSHOT_VERSION`].
    pub version: u32,
    /// How updates are delivered.
    pub delivery: DeliveryStyle,
    /// The tools, in canonical order.
    pub tools: Vec<ToolDefinition>,
    /// The frozen prefix; `None` before the first request.
    pub prefix: Option<SavedPrefix>,
    /// Each tail component's last output, by id.
    pub tails: Vec<SavedTail>,
    /// The history.
    pub history: SavedHistory,
    /// User turns composed.
    pub turn: u64,
    /// Requests composed (turns and continuations).
    pub requests: u64,
    /// Nodes before this index were sent.
    pub sent: usize,
    /// A system prompt set while tool calls waited for their results.
    pub pending_prompt: Option<String>,
    /// The session's identity, which its routing key is made from. (Absent in a file
    /// written without one: the restored session keeps the id of its options, or a new one.)
    #[serde(default)]
    pub session_id: Option<String>,
}

/// The frozen prefix, as sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedPrefix {
    /// The prefix message exactly as sent (empty when it rides in the first user message or
    /// no component is in the prefix).
    pub message: String,
    /// The prefix text.
    pub text: String,
    /// Each prefix component's text, in order.
    pub components: Vec<SavedPart>,
    /// The fingerprint (tools and prefix), hex.
    pub fingerprint: String,
}

/// One prefix component's text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavedPart {
    /// The component.
    pub id: ComponentId,
    /// Its text as frozen (`None`: it had nothing to say).
    pub text: Option<String>,
}

/// A tail component's last output.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedTail {
    /// The component.
    pub id: ComponentId,
    /// The last output it appended.
    pub last: Option<String>,
}

/// The history.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedHistory {
    /// The cache epoch.
    pub epoch: u64,
    /// The nodes, oldest first.
    pub nodes: Vec<SavedNode>,
    /// Texts waiting for the next user message.
    pub pending: Vec<SavedPending>,
}

/// One node.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedNode {
    /// Its chained content id, hex: checked on restore.
    pub id: String,
    /// Who wrote it.
    pub producer: Producer,
    /// What it is.
    pub kind: NodeKind,
    /// The epoch it was appended in.
    pub epoch: u64,
    /// For updates and prompts, the producer's text.
    pub text: Option<String>,
    /// Updates merged into it.
    pub merged: Vec<(Producer, String)>,
    /// The message exactly as sent (its JSON text).
    pub message: String,
}

/// A text waiting for the next user message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SavedPending {
    /// Who wrote it.
    pub producer: Producer,
    /// Its text.
    pub text: String,
    /// What is written into the message.
    pub rendered: String,
}

/// Why a saved session cannot be resumed.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Not a saved session of a version this library reads.
    #[error(
        "not a cacheline session of version {SNAPSHOT_VERSION}: format {format:?}, version {version}"
    )]
    Format {
        /// The format found.
        format: String,
        /// The version found.
        version: u32,
    },
    /// A node whose bytes do not hash to its saved id: the file was edited or damaged.
    #[error(
        "history node {index} does not match its saved id: the saved session was edited or damaged"
    )]
    Corrupt {
        /// The node's index.
        index: usize,
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
    #[error("the saved tools")]
    Tools(#[source] ToolSetError),
    /// Starting the session failed.
    #[error("starting the session")]
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

impl Session {
    /// Everything that decides the next request, as a versioned document.
    pub fn save(&self) -> SessionSnapshot {
        let prefix = self.prefix.as_ref().map(|p| SavedPrefix {
            message: p.bytes.to_string(),
            text: p.text.to_string(),
            components: self.saved_parts(),
            fingerprint: p.fingerprint.to_string(),
        });
        let nodes = self
            .history
            .nodes()
            .iter()
            .map(|n| SavedNode {
                id: n.id().to_string(),
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
            })
            .collect();
        SessionSnapshot {
            format: SNAPSHOT_FORMAT.to_owned(),
            version: SNAPSHOT_VERSION,
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
            turn: self.turn,
            requests: self.requests,
            sent: self.sent,
            pending_prompt: self.pending_prompt.clone(),
            session_id: Some(self.session_id.to_string()),
        }
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
    /// The components, policy and `options.tools` must reproduce the frozen prefix. When
    /// they do not, [`RestoreMode::Strict`] refuses with [`RestoreError::PrefixChanged`]
    /// naming what changed; [`RestoreMode::NewEpoch`] resumes with the new prefix and tools
    /// in a new cache epoch, the history kept, and returns the changes.
    pub fn restore(
        snapshot: &SessionSnapshot,
        components: Vec<Component>,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        mode: RestoreMode,
    ) -> Result<(Session, Option<PrefixChanges>), RestoreError> {
        if snapshot.format != SNAPSHOT_FORMAT || snapshot.version != SNAPSHOT_VERSION {
            return Err(RestoreError::Format {
                format: snapshot.format.clone(),
                version: snapshot.version,
            });
        }
        if *options.delivery() != snapshot.delivery {
            return Err(RestoreError::DeliveryChanged {
                saved: Box::new(snapshot.delivery.clone()),
                now: Box::new(options.delivery().clone()),
            });
        }
        let saved_tools = ToolSet::new(snapshot.tools.clone()).map_err(RestoreError::Tools)?;
        let mut session =
            Session::start(components, policy, context, options).map_err(RestoreError::Start)?;
        let history = restore_history(snapshot)?;

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
            let frozen = freeze_prefix(
                &session.prefix_parts,
                history.delivery().prefix,
                &session.tools,
            );
            let same = frozen.bytes.as_ref() == saved.message
                && frozen.text.as_ref() == saved.text
                && saved_tools == session.tools;
            if same {
                session.prefix = Some(frozen);
            } else {
                let old_fingerprint = parse_digest(&saved.fingerprint);
                let found = PrefixChanges::between(
                    &saved.components,
                    &session.saved_parts(),
                    &saved_tools,
                    &session.tools,
                    old_fingerprint,
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
        session.turn = snapshot.turn;
        session.requests = snapshot.requests;
        session.sent = snapshot.sent.min(session.history.len());
        session.pending_prompt = snapshot.pending_prompt.clone();
        if let Some(id) = &snapshot.session_id {
            // The saved identity wins: the resumed session routes where it did.
            session.session_id = Arc::from(id.as_str());
        }
        Ok((session, changes))
    }
}

/// The saved history, every id checked against the bytes it names.
fn restore_history(snapshot: &SessionSnapshot) -> Result<History, RestoreError> {
    let mut nodes: Vec<Node> = Vec::with_capacity(snapshot.history.nodes.len());
    for (index, saved) in snapshot.history.nodes.iter().enumerate() {
        let bytes = saved.message.as_str();
        if crate::json::RawObject::parse(bytes).is_err() {
            return Err(RestoreError::NotAMessage { index });
        }
        let id = History::chained_id(nodes.last().map(Node::id), bytes);
        if id.to_string() != saved.id {
            return Err(RestoreError::Corrupt { index });
        }
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
    Ok(History::restored(
        snapshot.delivery.clone(),
        snapshot.history.epoch,
        nodes,
        pending,
    ))
}

fn parse_digest(hex: &str) -> Digest128 {
    let mut bytes = [0u8; 16];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = hex
            .get(i * 2..i * 2 + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .unwrap_or(0);
    }
    Digest128::from_bytes(bytes)
}
