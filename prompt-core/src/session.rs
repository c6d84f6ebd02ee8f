//! The session: renders the prefix once and appends everything else.
//!
//! Request layout, in this order:
//! 1. the **prefix**: one system message holding every component resolved to the prefix,
//!    ordered by stability (constant, then session, then turn) and then by id, joined by a
//!    blank line. It is frozen at the first turn and byte-identical in every request after;
//! 2. the **history**, oldest first, including, for this turn, an update node for each
//!    persisting tail component whose output differs from the last one it appended (same
//!    order as the prefix), then the user message;
//! 3. the **ephemeral tail**: output of ephemeral tail components, in this request only.
//!
//! Parts 1 and 2 are the *stable part* of the request: it is a byte prefix of every later
//! request in the same cache epoch. Part 3 and the closing `]` are the generation-dependent
//! trailing part.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use serde_json::Value;

use crate::component::{Component, Content, SourceLocation};
use crate::context::{Extensions, SessionContext, TurnContext};
use crate::delivery::{DeliveryStyle, PrefixRole, UpdateRole};
use crate::divergence::common_prefix_len;
use crate::hash::Fingerprint;
use crate::history::{
    Compaction, Framing, History, HistoryError, SystemPromptChange, check_message,
};
use crate::id::ComponentId;
use crate::json;
use crate::node::{Node, NodeKind, Producer};
use crate::placement::{Persist, Placement};
use crate::policy::{PromptPolicy, Resolution};
use crate::prefix::{FrozenPrefix, PrefixPart, freeze_prefix};
use crate::request::Request;

/// Why a session cannot start or a turn cannot be composed.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    /// Two components share an id.
    #[error("duplicate component id `{id}`: defined at {first} and at {second}")]
    DuplicateComponent {
        /// The id.
        id: ComponentId,
        /// The first definition.
        first: SourceLocation,
        /// The second definition.
        second: SourceLocation,
    },
    /// A prefix component rendered different bytes than the ones frozen for this session.
    /// No request is produced: a silent cache miss is never an option.
    #[error(
        "prefix component `{component}` ({source_location}) changed at turn {turn}: first difference at byte {offset} of its text (frozen {frozen_excerpt:?}, now {current_excerpt:?}); per-turn content belongs in the tail"
    )]
    PrefixChanged {
        /// The component.
        component: ComponentId,
        /// Where it is defined.
        source_location: SourceLocation,
        /// The turn, counting from 1.
        turn: u64,
        /// Byte offset of the first difference within the component's text.
        offset: usize,
        /// A few bytes of the frozen text from the offset.
        frozen_excerpt: String,
        /// A few bytes of the new text from the offset.
        current_excerpt: String,
    },
    /// A message could not be appended.
    #[error(transparent)]
    History(#[from] HistoryError),
}

/// A user turn's message.
#[derive(Debug, Clone)]
pub enum UserInput {
    /// Plain text, sent as `{"role":"user","content":text}`.
    Text(String),
    /// A full message object (content-part arrays, extra fields).
    Message(Value),
    /// A message as JSON text, kept byte-for-byte.
    Raw(String),
}

impl From<&str> for UserInput {
    fn from(text: &str) -> Self {
        UserInput::Text(text.to_owned())
    }
}

impl From<String> for UserInput {
    fn from(text: String) -> Self {
        UserInput::Text(text)
    }
}

impl From<Value> for UserInput {
    fn from(message: Value) -> Self {
        UserInput::Message(message)
    }
}

#[derive(Clone)]
struct TailSlot {
    component: Component,
    last: Option<Arc<str>>,
}

/// Options for a session.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// How update nodes are delivered.
    pub delivery: DeliveryStyle,
}

impl SessionOptions {
    /// Options for a hosted API or engine: the delivery style follows from it (a system
    /// message for OpenAI-style APIs, a user reminder for Anthropic and Gemini).
    pub fn for_api(kind: crate::delivery::ApiKind) -> Self {
        Self {
            delivery: kind.delivery(),
        }
    }
}

/// A composing session.
///
/// ```
/// use prompt_core::{Component, ComponentId, Extensions, Placement, PromptPolicy, Session,
///                   SessionContext, SessionOptions};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// struct Todo(String);
/// let components = vec![
///     Component::constant(ComponentId::new("assistant_instructions")?, "You are terse.")
///         .placement(Placement::Prefix),
///     Component::turn(ComponentId::new("todo_addendum")?, |t| t.get::<Todo>().map(|t| t.0.clone())),
/// ];
/// let policy = PromptPolicy::from_agent_toml(
///     "[prompt]\nprefix_allow = [\"assistant_instructions\"]",
///     "agent.toml",
///     &components,
/// )?.policy;
/// let mut session = Session::start(components, &policy, SessionContext::default(), SessionOptions::default())?;
/// let first = session.turn(Extensions::new().with(Todo("- write tests".into())), "hi")?.stable_bytes();
/// session.record_assistant(&serde_json::json!({"role": "assistant", "content": "ok"}))?;
/// let second = session.turn(Extensions::new().with(Todo("- write docs".into())), "next")?;
/// assert!(second.extends(&first).is_prefix());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Session {
    context: Arc<SessionContext>,
    prefix_parts: Vec<PrefixPart>,
    prefix: Option<FrozenPrefix>,
    tails: Vec<TailSlot>,
    history: History,
    resolutions: Vec<(ComponentId, Resolution)>,
    turn: u64,
    /// History nodes before this index were in an earlier request (or survived a compaction).
    sent: usize,
}

impl Session {
    /// Starts a session: resolves every component's placement, renders the constant and
    /// session-stability prefix components once.
    pub fn start(
        components: Vec<Component>,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
    ) -> Result<Self, ComposeError> {
        let mut seen: HashMap<ComponentId, SourceLocation> = HashMap::new();
        for c in &components {
            if let Some(first) = seen.insert(c.id().clone(), c.source().clone()) {
                return Err(ComposeError::DuplicateComponent {
                    id: c.id().clone(),
                    first,
                    second: c.source().clone(),
                });
            }
        }
        let mut components = components;
        components.sort_by(|a, b| (a.stability(), a.id()).cmp(&(b.stability(), b.id())));

        let mut resolutions = Vec::with_capacity(components.len());
        let mut prefix_parts = Vec::new();
        let mut tails = Vec::new();
        for component in components {
            let resolution = policy.resolve(&component);
            let placement = resolution.placement;
            resolutions.push((component.id().clone(), resolution));
            if placement == Placement::Prefix {
                let rendered = match component.content() {
                    Content::Static(text) => Some(Some(text.to_string())),
                    Content::Session(render) => Some(render(&context)),
                    Content::Turn(_) => None,
                };
                prefix_parts.push(PrefixPart {
                    component,
                    rendered,
                });
            } else {
                tails.push(TailSlot {
                    component,
                    last: None,
                });
            }
        }
        Ok(Self {
            context: Arc::new(context),
            prefix_parts,
            prefix: None,
            tails,
            history: History::new(options.delivery),
            resolutions,
            turn: 0,
            sent: 0,
        })
    }

    /// Every component's resolution, in composition order.
    pub fn resolutions(&self) -> &[(ComponentId, Resolution)] {
        &self.resolutions
    }

    /// The history so far.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The session's frozen values.
    pub fn context(&self) -> &SessionContext {
        &self.context
    }

    /// Turns composed so far.
    pub fn turns(&self) -> u64 {
        self.turn
    }

    /// The prefix fingerprint, once the first turn has frozen the prefix.
    pub fn prefix_fingerprint(&self) -> Option<Fingerprint> {
        self.prefix.as_ref().map(|p| p.fingerprint)
    }

    /// Composes the next request: checks the prefix, appends changed tail updates and the
    /// user message, and adds ephemeral output at the end.
    ///
    /// On error nothing is appended and the turn counter does not advance.
    pub fn turn(
        &mut self,
        turn_values: Extensions,
        user: impl Into<UserInput>,
    ) -> Result<Request<'_>, ComposeError> {
        let turn = self.turn + 1;
        let ctx = TurnContext::new(&self.context, &turn_values, turn);

        // 1. The prefix: freeze it at the first turn, verify it on every later one.
        let mut first_render = Vec::new();
        for (i, part) in self.prefix_parts.iter().enumerate() {
            let Content::Turn(render) = part.component.content() else {
                continue;
            };
            let now = render(&ctx);
            match &part.rendered {
                None => first_render.push((i, now)),
                Some(frozen) if *frozen != now => {
                    return Err(prefix_changed(&part.component, turn, frozen, &now));
                }
                Some(_) => {}
            }
        }

        // 2. Validate the user message before anything is mutated.
        let user_json = match user.into() {
            UserInput::Text(text) => json::text_message("user", &text),
            UserInput::Message(value) => value.to_string(),
            UserInput::Raw(raw) => raw,
        };
        let delivery = self.history.delivery();
        let merging =
            delivery.role == UpdateRole::MergedIntoUser || delivery.prefix == PrefixRole::FirstUser;
        check_user_message(&user_json, merging)?;

        for (i, now) in first_render {
            if let Some(part) = self.prefix_parts.get_mut(i) {
                part.rendered = Some(now);
            }
        }
        if self.prefix.is_none() {
            let frozen = freeze_prefix(&self.prefix_parts, self.history.delivery().prefix);
            if self.history.delivery().prefix == PrefixRole::FirstUser && !frozen.text.is_empty() {
                self.history
                    .defer(Producer::Prefix, &frozen.text, Framing::Verbatim);
            }
            self.prefix = Some(frozen);
        }

        // 3. Persisting tail updates, then the user message. Nodes appended since the last
        //    request (a system-prompt update) count as new in this one.
        let start = self.sent.min(self.history.len());
        let merged = self.history.delivery().role == UpdateRole::MergedIntoUser;
        let mut ephemeral = Vec::new();
        for slot in &mut self.tails {
            let rendered = match slot.component.content() {
                Content::Static(text) => Some(text.to_string()),
                Content::Session(render) => render(&self.context),
                Content::Turn(render) => render(&ctx),
            };
            let Some(text) = rendered else { continue };
            let producer = Producer::Component(slot.component.id().clone());
            match slot.component.persist_mode() {
                Persist::History => {
                    if slot.last.as_deref() != Some(text.as_str()) {
                        self.history.append_update(producer, &text);
                        slot.last = Some(text.into());
                    }
                }
                Persist::Ephemeral if merged => {
                    // Strict alternation leaves no message of its own for it: it rides in
                    // (and is stored with) this turn's user message.
                    self.history.defer(producer, &text, Framing::Wrapped);
                }
                Persist::Ephemeral => {
                    let bytes = self.history.delivery().message_json(&producer, &text);
                    ephemeral.push((slot.component.id().clone(), bytes));
                }
            }
        }
        self.history
            .append_raw(Producer::User, NodeKind::User, &user_json)?;
        self.turn = turn;
        self.sent = self.history.len();

        Ok(Request {
            prefix: self.prefix.as_ref(),
            nodes: self.history.nodes(),
            history_bytes: self.history.serialized_len(),
            new_from: start,
            ephemeral,
            turn,
            epoch: self.history.epoch(),
        })
    }

    /// Records the assistant's reply, given as a message value (`tool_calls`,
    /// `reasoning_content` and any extra fields are kept).
    pub fn record_assistant(&mut self, message: &Value) -> Result<(), ComposeError> {
        self.history
            .append_value(Producer::Assistant, NodeKind::Assistant, message)?;
        Ok(())
    }

    /// Records the assistant's reply as JSON text, byte-for-byte.
    pub fn record_assistant_raw(&mut self, json: &str) -> Result<(), ComposeError> {
        self.history
            .append_raw(Producer::Assistant, NodeKind::Assistant, json)?;
        Ok(())
    }

    /// Records a tool result for `tool_call_id`.
    pub fn record_tool_result(
        &mut self,
        tool_call_id: &str,
        content: &str,
    ) -> Result<(), ComposeError> {
        self.history.append_raw(
            Producer::Tool,
            NodeKind::Tool,
            &json::tool_message(tool_call_id, content),
        )?;
        Ok(())
    }

    /// Sets the system prompt: unchanged → nothing; changed → appended as an update node.
    pub fn set_system_prompt(&mut self, prompt: &str) -> SystemPromptChange {
        self.history.set_system_prompt(prompt)
    }

    /// Replaces history `span` with a summary node; starts a new cache epoch. The prefix
    /// stays. Tail components whose last update was compacted away re-append their current
    /// output next turn.
    pub fn compact(
        &mut self,
        span: Range<usize>,
        summary: &str,
    ) -> Result<Compaction, ComposeError> {
        let compaction = self.history.compact(span, summary)?;
        self.resync_tails();
        Ok(compaction)
    }

    /// Removes every node written by `producer`; starts a new cache epoch if any was removed.
    pub fn remove_by_producer(&mut self, producer: &Producer) -> Vec<Node> {
        let removed = self.history.remove_by_producer(producer);
        self.resync_tails();
        removed
    }

    fn resync_tails(&mut self) {
        self.sent = self.history.len();
        // Without a system role the prefix lives in the first user message: if that was
        // compacted or removed, it rides in the next user message again.
        if let Some(prefix) = &self.prefix {
            let prefix_kept = self.history.nodes().iter().any(|n| {
                n.merged_updates()
                    .iter()
                    .any(|(p, _)| *p == Producer::Prefix)
            });
            if self.history.delivery().prefix == PrefixRole::FirstUser
                && !prefix.text.is_empty()
                && !prefix_kept
                && !self.history.has_pending_from(&Producer::Prefix)
            {
                self.history
                    .defer_first(Producer::Prefix, &prefix.text, Framing::Verbatim);
            }
        }
        for slot in &mut self.tails {
            let producer = Producer::Component(slot.component.id().clone());
            slot.last = self.history.last_update_from(&producer).map(Arc::from);
        }
    }
}

/// Rejects, before anything is mutated, a user message that is not a message, or (when
/// updates are merged into it) whose content cannot take merged text: only a string, an
/// array of parts, or no content can.
fn check_user_message(user_json: &str, merging: bool) -> Result<(), HistoryError> {
    let value: Value =
        serde_json::from_str(user_json).map_err(|source| HistoryError::InvalidJson {
            producer: Producer::User,
            source,
        })?;
    check_message(&Producer::User, &value)?;
    match value.get("content") {
        Some(other @ (Value::Bool(_) | Value::Number(_) | Value::Object(_))) if merging => {
            Err(HistoryError::CannotMerge {
                found: other.to_string(),
            })
        }
        _ => Ok(()),
    }
}

fn prefix_changed(
    component: &Component,
    turn: u64,
    frozen: &Option<String>,
    now: &Option<String>,
) -> ComposeError {
    let a = frozen.as_deref().unwrap_or("");
    let b = now.as_deref().unwrap_or("");
    let offset = common_prefix_len(a.as_bytes(), b.as_bytes());
    let excerpt = |s: &str| {
        let start = s.floor_char_boundary(offset);
        let end = s.floor_char_boundary(offset.saturating_add(24));
        s[start..end].to_owned()
    };
    ComposeError::PrefixChanged {
        component: component.id().clone(),
        source_location: component.source().clone(),
        turn,
        offset,
        frozen_excerpt: excerpt(a),
        current_excerpt: excerpt(b),
    }
}
