//! Adopting an existing conversation without rewriting a byte the server has already seen.
//!
//! An agent that kept its conversation as an OpenAI-style message list moves onto a
//! [`Session`] with [`Session::adopt`]: the messages become sent history, each kept exactly
//! as given, with its producer inferred where the message says so:
//!
//! - a leading system message whose text equals what the prefix components render becomes
//!   the frozen prefix (its bytes as given); one that differs stays message 0 as it is, and
//!   the prefix the components render now reaches the model as an update appended at the end;
//! - a message in the delivery style's update role whose whole content is an update wrapper
//!   (`<system-update from="todo_addendum">…`) is that producer's update (with
//!   [`UpdateRole::MergedIntoUser`], a user message carrying it, as the style merges one);
//! - a system message starting with the compaction marker is a compaction summary;
//! - user, assistant and tool messages are the user's, the assistant's and a tool's;
//! - anything else (a system message in the middle, another role) is `foreign`.
//!
//! Tail components whose last update is in the adopted history do not repeat it. Each
//! message keeps its bytes; between messages a request writes a plain `,` (the whitespace of
//! a JSON array belongs to no message).

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::Component;
use crate::context::SessionContext;
use crate::delivery::{DeliveryStyle, PrefixRole, UpdateRole};
use crate::id::ComponentId;
use crate::input::chain;
use crate::json::{self, RawObject};
use crate::node::{NodeKind, Producer};
use crate::policy::PromptPolicy;
use crate::prefix::{FrozenPrefix, fingerprint, freeze_prefix};
use crate::session::{Checkpoint, ComposeError, Session, SessionOptions};

/// How to read an adopted conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdoptOptions {
    compaction_marker: Option<String>,
}

impl AdoptOptions {
    /// The defaults: no compaction marker.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same options with the text a compaction summary starts with, in the agent's own
    /// convention (a Jan-style agent stores summaries as `role: "system"` messages starting
    /// with a marker).
    pub fn with_compaction_marker(mut self, marker: impl Into<String>) -> Self {
        self.compaction_marker = Some(marker.into());
        self
    }

    /// The compaction marker, if any.
    pub fn compaction_marker(&self) -> Option<&str> {
        self.compaction_marker.as_deref()
    }
}

/// What adoption found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AdoptReport {
    /// Whether the leading system message became the frozen prefix.
    pub prefix_frozen: bool,
    /// Whether the prefix the components render was appended as an update (the leading
    /// system message differed from it, or there was none).
    pub prefix_appended: bool,
    /// Messages adopted.
    pub messages: usize,
    /// Messages whose writer could not be told.
    pub foreign: usize,
    /// Updates recognised, by producer.
    pub updates: Vec<String>,
    /// Compaction summaries recognised.
    pub summaries: usize,
}

/// Why a conversation cannot be adopted.
#[derive(Debug, thiserror::Error)]
pub enum AdoptError {
    /// Not a JSON array.
    #[error("the conversation is not a JSON array of messages: {}", chain(.0))]
    NotAnArray(#[source] serde_json::Error),
    /// An element that is not a message object.
    #[error("message {index} is not a JSON object with a string \"role\"")]
    NotAMessage {
        /// Its index.
        index: usize,
    },
    /// Starting the session failed.
    #[error("starting the session: {}", chain(.0))]
    Start(#[source] ComposeError),
}

/// The text of a message's content: a string, or text parts joined.
pub(crate) fn content_text(object: &RawObject<'_>) -> Option<String> {
    let raw = object.get("content")?;
    if let Some(text) = json::string_of(raw) {
        return Some(text.into_owned());
    }
    let parts = json::array_of(raw)?;
    let mut text = String::new();
    for part in parts {
        let part = RawObject::parse(part.get()).ok()?;
        if part.str("type").as_deref() != Some("text") {
            return None;
        }
        text.push_str(&part.str("text")?);
    }
    Some(text)
}

/// `(producer, text)` of an update wrapper in `style`: `<tag from="producer">\ntext\n</tag>`.
fn parse_update<'c>(style: &DeliveryStyle, content: &'c str) -> Option<(Producer, &'c str)> {
    let rest = content.strip_prefix(&format!("<{} from=\"", style.tag))?;
    let (name, rest) = rest.split_once("\">\n")?;
    let text = rest.strip_suffix(&format!("\n</{}>", style.tag))?;
    let producer = match name {
        "system_prompt" => Producer::SystemPrompt,
        "prefix" => Producer::Prefix,
        other => Producer::Component(ComponentId::new(other).ok()?),
    };
    Some((producer, text))
}

impl Session {
    /// Adopts a conversation given as a JSON array of messages, each kept byte-for-byte.
    /// See the [module documentation](crate::adopt) for the rules.
    ///
    /// ```
    /// use prompt_core::{Component, ComponentId, Extensions, Placement, PrefixCheck, PromptPolicy,
    ///                   Session, SessionContext, SessionOptions};
    /// use prompt_core::adopt::AdoptOptions;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let components = vec![Component::constant(ComponentId::new("assistant_instructions")?, "Be brief.")
    ///     .placement(Placement::Prefix)];
    /// let policy = PromptPolicy::from_agent_toml("[prompt]\nprefix_allow = [\"assistant_instructions\"]",
    ///     "agent.toml", &components)?.deny_warnings()?;
    /// let saved = r#"[{"role": "system", "content": "Be brief."},{"role":"user","content":"hi"},{"role":"assistant","content":"Hello."}]"#;
    /// let (mut session, report) = Session::adopt(components, &policy, SessionContext::default(),
    ///     SessionOptions::default(), saved, &AdoptOptions::default())?;
    /// assert!(report.prefix_frozen);
    /// let next = session.turn(Extensions::new(), "And now?")?.to_bytes();
    /// // Every byte the server saw is still there, as it was.
    /// assert!(next.starts_with(&saved.as_bytes()[..saved.len() - 1]));
    /// # Ok(()) }
    /// ```
    pub fn adopt(
        components: Vec<Component>,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        conversation: &str,
        adopt: &AdoptOptions,
    ) -> Result<(Session, AdoptReport), AdoptError> {
        let messages: Vec<&RawValue> =
            serde_json::from_str(conversation).map_err(AdoptError::NotAnArray)?;
        let mut session =
            Session::start(components, policy, context, options).map_err(AdoptError::Start)?;
        // Turn components render at the first request; an adopted session freezes now.
        for part in &mut session.prefix_parts {
            if part.rendered.is_none() {
                part.rendered = Some(None);
            }
        }
        let role = session.history.delivery().prefix;
        // The app's system prompt, if it gave one, heads the prefix it would freeze now.
        let system_prompt = session.system_prompt.take();
        let rendered = freeze_prefix(
            &session.prefix_parts,
            role,
            &session.tools,
            system_prompt.as_deref(),
        );
        let components_only = freeze_prefix(&session.prefix_parts, role, &session.tools, None);
        let style = session.history.delivery().clone();
        let update_role = style.update_role();
        let mut report = AdoptReport {
            messages: messages.len(),
            ..AdoptReport::default()
        };
        let mut frozen: Option<FrozenPrefix> = None;
        for (index, raw) in messages.iter().enumerate() {
            let bytes = raw.get();
            let object = RawObject::parse(bytes).map_err(|_| AdoptError::NotAMessage { index })?;
            let role = object
                .str("role")
                .ok_or(AdoptError::NotAMessage { index })?;
            let text = content_text(&object);
            if index == 0 && role == "system" && style.prefix == PrefixRole::System {
                if text.as_deref() == Some(&*rendered.text) && !rendered.text.is_empty() {
                    frozen = Some(FrozenPrefix {
                        bytes: Arc::from(bytes),
                        text: rendered.text.clone(),
                        parts: if *rendered.bytes == *bytes {
                            rendered.parts.clone()
                        } else {
                            Vec::new()
                        },
                        fingerprint: fingerprint(&session.tools, bytes.as_bytes()),
                        system_prompt: rendered.system_prompt.clone(),
                    });
                    report.prefix_frozen = true;
                } else {
                    session.history.push_verbatim(
                        Producer::SystemPrompt,
                        NodeKind::System,
                        bytes.to_owned(),
                        text.as_deref().map(Arc::from),
                    );
                }
                continue;
            }
            let update = (role == update_role)
                .then(|| text.as_deref().and_then(|t| parse_update(&style, t)))
                .flatten();
            let (producer, kind, stored_text) = match (role.as_ref(), update) {
                // A merged style has no update message of its own: a user message that is
                // only a reminder is a user message carrying that update, as the style
                // itself would have merged it.
                (_, Some((producer, inner))) if style.role == UpdateRole::MergedIntoUser => {
                    report.updates.push(producer.to_string());
                    session
                        .history
                        .push_merged(bytes.to_owned(), Arc::from([(producer, Arc::from(inner))]));
                    session.turn = session.turn.saturating_add(1);
                    continue;
                }
                (_, Some((producer, inner))) => {
                    report.updates.push(producer.to_string());
                    (producer, NodeKind::Update, Some(inner.to_owned()))
                }
                ("system", None)
                    if adopt
                        .compaction_marker
                        .as_deref()
                        .is_some_and(|m| text.as_deref().is_some_and(|t| t.starts_with(m))) =>
                {
                    report.summaries += 1;
                    (Producer::Compaction, NodeKind::CompactionSummary, text)
                }
                ("user", None) => (Producer::User, NodeKind::User, None),
                ("assistant", None) => (Producer::Assistant, NodeKind::Assistant, None),
                ("tool", None) => (Producer::Tool, NodeKind::Tool, None),
                _ => {
                    report.foreign += 1;
                    (Producer::Foreign, NodeKind::System, None)
                }
            };
            session.history.push_verbatim(
                producer,
                kind,
                bytes.to_owned(),
                stored_text.as_deref().map(Arc::from),
            );
            match kind {
                NodeKind::User => session.turn = session.turn.saturating_add(1),
                // The request that this reply answered carried every node before it.
                NodeKind::Assistant => {
                    session.requests = session.requests.saturating_add(1);
                    session.checkpoints.push(Checkpoint {
                        sequence: session.requests,
                        nodes: session.history.len() - 1,
                        turn: session.turn,
                    });
                }
                _ => {}
            }
        }
        // Everything adopted was sent; what follows is new.
        session.sent = session.history.len();
        match frozen {
            Some(frozen) => session.prefix = Some(frozen),
            None => {
                // What the conversation lacks goes after what the server has seen: the app's
                // system prompt when the conversation carries another (an edit, as
                // `set_system_prompt` appends one), then the prefix components.
                if let Some(prompt) = system_prompt.as_deref()
                    && session.history.latest_system_prompt() != Some(prompt)
                {
                    session.history.set_system_prompt(prompt);
                    report.prefix_appended = true;
                }
                if !components_only.text.is_empty() {
                    session
                        .history
                        .append_update(Producer::Prefix, &components_only.text);
                    report.prefix_appended = true;
                }
                session.prefix = Some(FrozenPrefix {
                    bytes: Arc::from(""),
                    text: components_only.text.clone(),
                    parts: Vec::new(),
                    fingerprint: fingerprint(&session.tools, b""),
                    system_prompt: None,
                });
            }
        }
        for slot in &mut session.tails {
            let producer = Producer::Component(slot.component.id().clone());
            slot.last = session.history.last_update_from(&producer).map(Arc::from);
        }
        Ok((session, report))
    }

    /// [`Session::adopt`] for a `Vec<Value>` conversation. A `Value` has no bytes of its
    /// own: each message is written once, compactly, and kept so from then on; pass the
    /// conversation as text to [`Session::adopt`] to keep the bytes the server saw.
    pub fn adopt_values(
        components: Vec<Component>,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        messages: &[Value],
        adopt: &AdoptOptions,
    ) -> Result<(Session, AdoptReport), AdoptError> {
        let text = format!(
            "[{}]",
            messages
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        Self::adopt(components, policy, context, options, &text, adopt)
    }
}
