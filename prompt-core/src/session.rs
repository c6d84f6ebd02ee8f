//! The session: renders the prefix once and appends everything else.
//!
//! An agent's loop in four calls: [`Session::turn`] composes the request for a user message;
//! [`Session::record_assistant`] keeps the reply; when the reply called tools,
//! [`Session::record_tool`] keeps each result and [`Session::continuation`] composes the next
//! request without a user message; [`Session::compact`] summarizes the past when it grows.
//!
//! Request layout, in this order:
//! 1. the **prefix**: one system message holding every component resolved to the prefix,
//!    ordered by stability (constant, then session, then turn) and then by id, joined by a
//!    blank line. It is frozen at the first turn and byte-identical in every request after;
//! 2. the **history**, oldest first, including, for this turn, an update node for each
//!    persisting tail component whose output differs from the last one it appended (same
//!    order as the prefix), or, for one that has nothing to say after having had text, its
//!    [`cleared`](Component::cleared) text once (without one, its last text stands), then
//!    the user message;
//! 3. the **ephemeral tail**: output of ephemeral tail components, in this request only.
//!
//! Parts 1 and 2 are the *stable part* of the request: it is a byte prefix of every later
//! request in the same cache epoch. Part 3 and the closing `]` are the generation-dependent
//! trailing part.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use serde_json::Value;

use crate::component::{Component, Content, SourceLocation};
use crate::context::{Extensions, SessionContext, TurnContext};
use crate::delivery::{DeliveryStyle, PrefixRole, UpdateRole};
use crate::divergence::common_prefix_len;
use crate::hash::Fingerprint;
use crate::history::{Compaction, Framing, History, HistoryError, SystemPromptChange};
use crate::id::ComponentId;
use crate::json;
use crate::node::{Node, NodeKind, Producer};
use crate::placement::{Persist, Placement};
use crate::policy::{PromptPolicy, Resolution};
use crate::prefix::{FrozenPrefix, PrefixPart, freeze_prefix};
use crate::request::Request;
use crate::tools::ToolSet;

/// The largest value a session's counters (turns, requests, cache epochs) take: 2^53 − 1,
/// so a saved session kept in a JavaScript app's state (its numbers are doubles) reads
/// back exactly. A turn or request past it is refused ([`ComposeError::CounterLimit`]); a
/// new epoch past it stays there; a saved session with a counter past it is refused
/// ([`RestoreError::Limit`](crate::snapshot::RestoreError::Limit)).
pub const MAX_COUNTER: u64 = (1 << 53) - 1;

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
    /// The assistant called tools whose results are not recorded yet: nothing may come
    /// between a tool call and its results.
    #[error(
        "the assistant's tool calls {open:?} have no results yet; record them with Session::record_tool, then compose with Session::continuation"
    )]
    UnansweredToolCalls {
        /// The call ids without a result.
        open: Vec<String>,
    },
    /// A tool result for a call the assistant did not make (or already answered).
    #[error("tool result for `{call_id}` answers no open tool call (open: {open:?})")]
    UnknownToolCall {
        /// The id given.
        call_id: String,
        /// The calls waiting for a result.
        open: Vec<String>,
    },
    /// `continuation` with no tool result recorded since the last request.
    #[error(
        "nothing to continue: no tool result was recorded since the last request; a new user message goes through Session::turn"
    )]
    NothingToContinue,
    /// `resend` when there is no unanswered request to send again.
    #[error("nothing to send again: {reason}")]
    NothingToResend {
        /// Why: no request yet, or something was recorded after the last one.
        reason: &'static str,
    },
    /// A user turn while the last request has no reply: composing it would put a second
    /// user message after an unanswered one (a retry of a failed send with `turn` carries
    /// the question twice). Refused, so a turn is never composed twice.
    #[error(
        "request {request} has no reply yet: send it again with Session::resend (Next::resend with the client), or to send a different message make a branch first (Session::edit_user_message, Session::regenerate)"
    )]
    Unanswered {
        /// The unanswered request's number ([`Request::sequence`]).
        request: u64,
    },
    /// A counter is at [`MAX_COUNTER`] (a saved session's, read back): one more request
    /// cannot be numbered.
    #[error("the session's {counter} counter is at its limit ({value}); start a new session")]
    CounterLimit {
        /// `turn` or `requests`.
        counter: &'static str,
        /// Its value.
        value: u64,
    },
}

/// A user turn's message.
#[derive(Debug, Clone)]
pub enum UserInput {
    /// Plain text, sent as `{"role":"user","content":text}`.
    Text(String),
    /// A full message object (content-part arrays, extra fields), written with its keys
    /// sorted ([`raw_json::canonical`](crate::raw_json::canonical)).
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
pub(crate) struct TailSlot {
    pub(crate) component: Component,
    pub(crate) last: Option<Arc<str>>,
}

/// Options for a session: how updates are delivered, the tools, the session's identity.
///
/// Built with methods, so a field added later breaks no caller:
///
/// ```
/// use prompt_core::{ApiKind, DeliveryStyle, SessionOptions};
/// use prompt_core::delivery::PrefixRole;
/// let options = SessionOptions::for_api(ApiKind::Anthropic).with_session_id("conversation-42");
/// assert_eq!(options.delivery(), &DeliveryStyle::user_reminder("system-reminder"));
/// // A custom delivery style: reminders in a tag of the agent's own, prefix in the first user turn.
/// let custom = SessionOptions::new()
///     .with_delivery(DeliveryStyle::user_reminder("agent-note").with_prefix(PrefixRole::FirstUser));
/// assert_eq!(custom.delivery().tag, "agent-note");
/// assert_eq!(custom.session_id(), None);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SessionOptions {
    delivery: DeliveryStyle,
    tools: ToolSet,
    session_id: Option<String>,
    system_prompt: Option<String>,
}

impl SessionOptions {
    /// The defaults: updates as system messages ([`DeliveryStyle::system`]), no tools, a
    /// random session id.
    pub fn new() -> Self {
        Self::default()
    }

    /// Options for a hosted API or engine: the delivery style follows from it (a system
    /// message for OpenAI-style APIs, a user reminder for Anthropic and Gemini).
    pub fn for_api(kind: crate::delivery::ApiKind) -> Self {
        Self::new().with_delivery(kind.delivery())
    }

    /// Options for the provider behind the API, as its profile has it
    /// ([`crate::profile::Profile::delivery`]): DeepSeek's user reminders, Claude Opus 4.8's
    /// system messages, the safe default for a model nobody knows.
    pub fn for_profile(profile: &crate::profile::Profile) -> Self {
        Self::new().with_delivery(profile.delivery())
    }

    /// The same options with this delivery style.
    pub fn with_delivery(mut self, delivery: DeliveryStyle) -> Self {
        self.delivery = delivery;
        self
    }

    /// The same options with these tools, sent in every request's `tools` field and frozen
    /// for the session.
    pub fn with_tools(mut self, tools: ToolSet) -> Self {
        self.tools = tools;
        self
    }

    /// The same options with this session id: the session's identity, for routing
    /// (`prompt_cache_key`, a router's routing key). Give the agent's own conversation id,
    /// stable across restarts; without one a random id is made at start. Saved with the
    /// session either way.
    pub fn with_session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = Some(id.into());
        self
    }

    /// The same options with the system prompt the application owns: the assistant
    /// instructions a user edits in the app's settings. Its text when the session sends its
    /// first request is frozen at the head of the prefix; a later edit goes through
    /// [`Session::set_system_prompt`], which appends it once as an update (setting the same
    /// text again changes nothing, so an app may call it every turn). On
    /// [`Session::restore`] this is the app's current text: when it differs from the saved
    /// session's, the saved prefix is kept and the edit is appended.
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> Self {
        self.system_prompt = Some(prompt.into());
        self
    }

    /// How update nodes are delivered.
    pub fn delivery(&self) -> &DeliveryStyle {
        &self.delivery
    }

    /// The tools.
    pub fn tools(&self) -> &ToolSet {
        &self.tools
    }

    /// The session id given, if any.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The system prompt given, if any.
    pub fn system_prompt(&self) -> Option<&str> {
        self.system_prompt.as_deref()
    }
}

/// One request a session composed: its number, how many history nodes it carried, and the
/// user turn it belonged to. A branch can go back to any request of its current cache epoch
/// ([`Session::rewind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    /// The request's number ([`Request::sequence`]), from 1.
    pub sequence: u64,
    /// History nodes the request carried.
    pub nodes: usize,
    /// The user turn ([`Request::turn`]).
    pub turn: u64,
}

/// A random session id: 32 hex digits from the standard library's per-process random hash
/// keys, the time and a counter (unique within and across processes, not secret).
pub(crate) fn new_session_id() -> Arc<str> {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let word = |salt: u64| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(salt);
        h.write_u64(count);
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.finish()
    };
    Arc::from(format!("{:016x}{:016x}", word(1), word(2)).as_str())
}

/// A tool result: what the tool returned for one call, in any shape a provider accepts.
///
/// Stored as `{"role":"tool","tool_call_id":…,"name":…,"content":…,"is_error":true}` (`name`
/// and `is_error` only when given); each wire format maps it to its own shape.
///
/// ```
/// use prompt_core::session::ToolResult;
/// use serde_json::json;
/// let text = ToolResult::text("call_1", "fn main() {}").name("read_file");
/// assert_eq!(text.to_json(),
///     r#"{"role":"tool","tool_call_id":"call_1","name":"read_file","content":"fn main() {}"}"#);
/// let failed = ToolResult::text("call_2", "no such file").error();
/// assert!(failed.to_json().ends_with(r#","is_error":true}"#));
/// let parts = ToolResult::parts("call_3", &json!([{"type": "text", "text": "a"}]));
/// assert!(parts.to_json().contains(r#""content":[{"text":"a","type":"text"}]"#));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    call_id: String,
    name: Option<String>,
    /// The `content` value, as JSON text.
    content: String,
    is_error: bool,
}

impl ToolResult {
    /// A text result.
    pub fn text(call_id: impl Into<String>, text: &str) -> Self {
        Self {
            call_id: call_id.into(),
            name: None,
            content: json::quote(text),
            is_error: false,
        }
    }

    /// A result of content parts (`[{"type":"text",…},{"type":"image_url",…}]`).
    pub fn parts(call_id: impl Into<String>, parts: &Value) -> Self {
        Self {
            call_id: call_id.into(),
            name: None,
            content: json::canonical(parts),
            is_error: false,
        }
    }

    /// The tool's name, for providers that want it beside the call id (Gemini).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Marks the result as a failure (Anthropic's `is_error`).
    pub fn error(mut self) -> Self {
        self.is_error = true;
        self
    }

    /// The call this answers.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The message, as stored.
    pub fn to_json(&self) -> String {
        let mut out = format!(
            r#"{{"role":"tool","tool_call_id":{}"#,
            json::quote(&self.call_id)
        );
        if let Some(name) = &self.name {
            out.push_str(r#","name":"#);
            out.push_str(&json::quote(name));
        }
        out.push_str(r#","content":"#);
        out.push_str(&self.content);
        if self.is_error {
            out.push_str(r#","is_error":true"#);
        }
        out.push('}');
        out
    }
}

/// What the next request is composed for.
enum Next {
    /// A user turn, with its message (validated).
    User(String),
    /// A continuation after tool results.
    Continuation,
    /// The last request again (a retry, a regenerated reply): no new message.
    Resend,
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
/// )?.deny_warnings()?;
/// let mut session = Session::start(components, &policy, SessionContext::default(), SessionOptions::default())?;
/// let first = session.turn(Extensions::new().with(Todo("- write tests".into())), "hi")?.stable_bytes();
/// session.record_assistant(&serde_json::json!({"role": "assistant", "content": "ok"}))?;
/// let second = session.turn(Extensions::new().with(Todo("- write docs".into())), "next")?;
/// assert!(second.extends(&first).is_prefix());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Session {
    pub(crate) context: Arc<SessionContext>,
    pub(crate) prefix_parts: Vec<PrefixPart>,
    pub(crate) prefix: Option<FrozenPrefix>,
    pub(crate) tails: Vec<TailSlot>,
    pub(crate) history: History,
    pub(crate) resolutions: Vec<(ComponentId, Resolution)>,
    pub(crate) tools: ToolSet,
    /// The session's identity (given, or made at start): what a wire follows.
    pub(crate) session_id: Arc<str>,
    /// What the routing key is made from: the session id, or the id of the session a branch
    /// was made from (its requests go where that session's cache lives).
    pub(crate) routing_id: Arc<str>,
    /// The system prompt given in the options, until the prefix freezes it.
    pub(crate) system_prompt: Option<Arc<str>>,
    /// Every request of the current epoch still in the history (see [`Checkpoint`]).
    pub(crate) checkpoints: Vec<Checkpoint>,
    /// User turns composed so far.
    pub(crate) turn: u64,
    /// Requests composed so far (turns and continuations).
    pub(crate) requests: u64,
    /// History nodes before this index were in an earlier request (or survived a compaction).
    pub(crate) sent: usize,
    /// A system prompt set while tool calls wait for their results: appended after them.
    pub(crate) pending_prompt: Option<String>,
    /// A refresh held until the next compaction.
    pub(crate) deferred_refresh: Option<Box<crate::refresh::Replacement>>,
    /// What the compaction that applied a held refresh found.
    pub(crate) refresh_report: Option<crate::refresh::Refresh>,
}

impl std::fmt::Debug for Session {
    /// The session's identity and counters, not its contents (a history can be large).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("session_id", &self.session_id)
            .field("turn", &self.turn)
            .field("requests", &self.requests)
            .field("nodes", &self.history.len())
            .field("epoch", &self.history.epoch())
            .field("delivery", self.history.delivery())
            .field("prefix_fingerprint", &self.prefix_fingerprint())
            .field("tools", &self.tools.len())
            .finish_non_exhaustive()
    }
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
        Self::start_shared(components, policy, Arc::new(context), options)
    }

    /// [`Session::start`] over values another session already holds.
    pub(crate) fn start_shared(
        components: Vec<Component>,
        policy: &PromptPolicy,
        context: Arc<SessionContext>,
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
        let session_id: Arc<str> = options
            .session_id
            .map_or_else(new_session_id, |id| Arc::from(id.as_str()));

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
                    Content::Session(render) => Some(render(context.as_ref())),
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
            context,
            prefix_parts,
            prefix: None,
            tails,
            history: History::new(options.delivery),
            resolutions,
            tools: options.tools,
            routing_id: Arc::clone(&session_id),
            session_id,
            system_prompt: options.system_prompt.map(Arc::from),
            checkpoints: Vec::new(),
            turn: 0,
            requests: 0,
            sent: 0,
            pending_prompt: None,
            deferred_refresh: None,
            refresh_report: None,
        })
    }

    /// Every component's resolution, in composition order.
    pub fn resolutions(&self) -> &[(ComponentId, Resolution)] {
        &self.resolutions
    }

    /// The session's identity: given in [`SessionOptions::session_id`], saved and restored
    /// with the session, else made at random at start.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// What the routing key is made from ([`Request::routing_key`]): the session id, or, for
    /// a branch, the id of the session it was made from.
    pub fn routing_id(&self) -> &str {
        &self.routing_id
    }

    /// The routing key of this session's requests ([`Request::routing_key`]), once the
    /// first request has frozen the prefix.
    pub fn routing_key(&self) -> Option<crate::hash::Digest128> {
        let prefix = self.prefix.as_ref()?;
        Some(crate::request::routing_key(
            prefix.fingerprint,
            &self.routing_id,
        ))
    }

    /// The requests of the current cache epoch, oldest first: where [`Session::rewind`] can
    /// go back to.
    pub fn checkpoints(&self) -> &[Checkpoint] {
        &self.checkpoints
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

    /// Requests composed so far: turns and continuations.
    pub fn requests(&self) -> u64 {
        self.requests
    }

    /// The tools frozen for the session.
    pub fn tools(&self) -> &ToolSet {
        &self.tools
    }

    /// The prefix fingerprint (frozen prefix and tools), once the first turn has frozen the
    /// prefix.
    pub fn prefix_fingerprint(&self) -> Option<Fingerprint> {
        self.prefix.as_ref().map(|p| p.fingerprint)
    }

    /// The current system prompt: the newest text given through
    /// [`SessionOptions::with_system_prompt`] or [`Session::set_system_prompt`], wherever it
    /// is (held while tool calls wait for their results, appended as an update, frozen in
    /// the prefix).
    pub fn system_prompt(&self) -> Option<Cow<'_, str>> {
        self.current_system_prompt().map(Cow::Borrowed)
    }

    fn current_system_prompt(&self) -> Option<&str> {
        self.pending_prompt
            .as_deref()
            .or_else(|| self.settled_system_prompt())
    }

    /// The system prompt the next request carries, without one held for open tool calls.
    pub(crate) fn settled_system_prompt(&self) -> Option<&str> {
        match &self.prefix {
            Some(prefix) => self
                .history
                .latest_system_prompt()
                .or(prefix.system_prompt.as_deref()),
            // Before the first request the text to freeze is the current one.
            None => self
                .system_prompt
                .as_deref()
                .or_else(|| self.history.latest_system_prompt()),
        }
    }

    /// The number of the last request when no reply was recorded after it: it failed, is
    /// still in flight, or is a branch's request to send again. [`Session::turn`] is then
    /// refused ([`ComposeError::Unanswered`]); [`Session::resend`] sends it again. Read from
    /// the history and the checkpoints, so a restored session answers as the saved one.
    pub fn unanswered_request(&self) -> Option<u64> {
        let last = self.checkpoints.last()?;
        let after = self.history.nodes().get(last.nodes..).unwrap_or_default();
        (!after.iter().any(|n| n.kind() == NodeKind::Assistant)).then_some(last.sequence)
    }

    /// The tool calls of the last assistant message that have no result yet.
    pub fn open_tool_calls(&self) -> Vec<String> {
        self.history.open_tool_calls()
    }

    /// Composes the next request: checks the prefix, appends changed tail updates and the
    /// user message, and adds ephemeral output at the end.
    ///
    /// On error nothing is appended and the turn counter does not advance. Refused while
    /// the assistant's tool calls wait for their results: record them, then compose with
    /// [`Session::continuation`].
    ///
    /// Refused too while the last request has no reply ([`Session::unanswered_request`],
    /// [`ComposeError::Unanswered`]): a failed send is retried with [`Session::resend`],
    /// which sends the same bytes again. The history is never rolled back instead: the
    /// library cannot know whether a send that failed reached the server (a connection
    /// that broke after the body went out was billed and cached), the request stays what
    /// was sent, and the same refusal holds for every transport, the app's own included.
    pub fn turn(
        &mut self,
        turn_values: Extensions,
        user: impl Into<UserInput>,
    ) -> Result<Request<'_>, ComposeError> {
        let user_json = match user.into() {
            UserInput::Text(text) => json::text_message("user", &text),
            UserInput::Message(value) => json::canonical(&value),
            UserInput::Raw(raw) => raw,
        };
        self.compose(turn_values, Next::User(user_json))
    }

    /// Composes the request after tool results, with no new user message: the model reads
    /// the results and goes on. Tail updates that changed meanwhile go after the results,
    /// never between a call and its results (merged styles write them into the message that
    /// carries the last result, after it); ephemeral output ends the request as usual.
    ///
    /// Refused while a call of the last assistant message has no result, and when no result
    /// was recorded since the last request.
    pub fn continuation(&mut self, turn_values: Extensions) -> Result<Request<'_>, ComposeError> {
        self.compose(turn_values, Next::Continuation)
    }

    /// Composes the last request again, with no new message: after a failed request (retry
    /// after an error: nothing was recorded), or on a branch made by
    /// [`Session::regenerate`] or [`Session::rewind`]. Its stable part is the one the last
    /// request sent (plus any tail update that changed since), so a server serves it from
    /// its cache; ephemeral output is rendered anew.
    ///
    /// Refused before the first request, and when anything was recorded after the last one
    /// (make a branch first).
    pub fn resend(&mut self, turn_values: Extensions) -> Result<Request<'_>, ComposeError> {
        self.compose(turn_values, Next::Resend)
    }

    fn compose(
        &mut self,
        turn_values: Extensions,
        next: Next,
    ) -> Result<Request<'_>, ComposeError> {
        let next_count = |counter: &'static str, value: u64| {
            value
                .checked_add(1)
                .filter(|next| *next <= MAX_COUNTER)
                .ok_or(ComposeError::CounterLimit { counter, value })
        };
        let turn = match next {
            Next::User(_) => next_count("turn", self.turn)?,
            Next::Continuation | Next::Resend => self.turn.max(1),
        };
        let sequence = next_count("requests", self.requests)?;
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

        // 2. Validate before anything is mutated.
        if self.history.has_open_tool_calls() {
            return Err(ComposeError::UnansweredToolCalls {
                open: self.history.open_tool_calls(),
            });
        }
        match &next {
            Next::User(user_json) => {
                if let Some(request) = self.unanswered_request() {
                    return Err(ComposeError::Unanswered { request });
                }
                let delivery = self.history.delivery();
                let merging = delivery.role == UpdateRole::MergedIntoUser
                    || delivery.prefix == PrefixRole::FirstUser;
                self.history
                    .check_merging(&Producer::User, NodeKind::User, user_json, merging)?;
            }
            Next::Continuation => {
                let unsent = self.history.nodes().get(self.sent..).unwrap_or_default();
                if self.prefix.is_none() || !unsent.iter().any(|n| n.kind() == NodeKind::Tool) {
                    return Err(ComposeError::NothingToContinue);
                }
            }
            Next::Resend => {
                // Updates the library appended since (a system prompt, a branch's carried
                // state) go with the request; a reply or a result recorded means it was
                // answered.
                let unsent = self.history.nodes().get(self.sent..).unwrap_or_default();
                let last_message = self
                    .history
                    .nodes()
                    .iter()
                    .rev()
                    .find(|n| !matches!(n.kind(), NodeKind::Update | NodeKind::System));
                let reason = if self.prefix.is_none() {
                    Some("no request was sent yet")
                } else if unsent.iter().any(|n| {
                    matches!(
                        n.kind(),
                        NodeKind::Assistant | NodeKind::Tool | NodeKind::User
                    )
                }) {
                    Some(
                        "something was recorded after the last request; branch first (Session::regenerate)",
                    )
                } else if last_message.is_some_and(|n| n.kind() == NodeKind::Assistant) {
                    Some("the last request was answered; branch first (Session::regenerate)")
                } else {
                    None
                };
                if let Some(reason) = reason {
                    return Err(ComposeError::NothingToResend { reason });
                }
            }
        }

        for (i, now) in first_render {
            if let Some(part) = self.prefix_parts.get_mut(i) {
                part.rendered = Some(now);
            }
        }
        if self.prefix.is_none() {
            let frozen = freeze_prefix(
                &self.prefix_parts,
                self.history.delivery().prefix,
                &self.tools,
                self.system_prompt.as_deref(),
            );
            if self.history.delivery().prefix == PrefixRole::FirstUser && !frozen.text.is_empty() {
                self.history
                    .defer(Producer::Prefix, &frozen.text, Framing::Verbatim);
            }
            self.prefix = Some(frozen);
        }
        // A prompt set while tools ran goes after their results.
        if let Some(prompt) = self.pending_prompt.take() {
            self.history.set_system_prompt(&prompt);
        }

        // 3. Persisting tail updates, then the user message (or, for a continuation, the
        //    merge into the last tool result). Nodes appended since the last request (tool
        //    results, a system-prompt update) count as new in this one.
        let start = self.sent.min(self.history.len());
        let merged = self.history.delivery().role == UpdateRole::MergedIntoUser;
        let mut ephemeral = Vec::new();
        for slot in &mut self.tails {
            let rendered = match slot.component.content() {
                Content::Static(text) => Some(text.to_string()),
                Content::Session(render) => render(&self.context),
                Content::Turn(render) => render(&ctx),
            };
            let producer = Producer::Component(slot.component.id().clone());
            let Some(text) = rendered else {
                // Nothing to say after having had text: the writer's `cleared` text, once,
                // so its last text does not stand as its last word. Without one, it does.
                if slot.component.persist_mode() == Persist::History
                    && let Some(cleared) = slot.component.cleared_text()
                    && slot.last.as_deref().is_some_and(|last| last != cleared)
                {
                    self.history.append_update(producer, cleared);
                    slot.last = Some(cleared.into());
                }
                continue;
            };
            match slot.component.persist_mode() {
                Persist::History => {
                    if slot.last.as_deref() != Some(text.as_str()) {
                        self.history.append_update(producer, &text);
                        slot.last = Some(text.into());
                    }
                }
                // Sent again, a request has no new message for merged text to ride in.
                Persist::Ephemeral if merged && matches!(next, Next::Resend) => {}
                Persist::Ephemeral if merged => {
                    // Strict alternation leaves no message of its own for it: it rides in
                    // (and is stored with) this request's last message.
                    self.history.defer(producer, &text, Framing::Wrapped);
                }
                Persist::Ephemeral => {
                    let bytes = self.history.delivery().message_json(&producer, &text);
                    ephemeral.push((slot.component.id().clone(), bytes));
                }
            }
        }
        match next {
            Next::User(user_json) => {
                self.history
                    .append_raw(Producer::User, NodeKind::User, &user_json)?;
                self.turn = turn;
            }
            Next::Continuation => self.history.merge_pending_into_last(self.sent)?,
            Next::Resend => {}
        }
        self.requests = sequence;
        self.sent = self.history.len();
        self.checkpoints.push(Checkpoint {
            sequence,
            nodes: self.sent,
            turn,
        });

        Ok(Request {
            prefix: self.prefix.as_ref(),
            tools: &self.tools,
            session_id: &self.session_id,
            routing_id: &self.routing_id,
            nodes: self.history.nodes(),
            history_bytes: self.history.serialized_len(),
            new_from: start,
            ephemeral,
            turn,
            sequence: self.requests,
            epoch: self.history.epoch(),
        })
    }

    /// Records the assistant's reply, given as a message value (`tool_calls`,
    /// `reasoning_content` and any extra fields are kept).
    pub fn record_assistant(&mut self, message: &Value) -> Result<(), ComposeError> {
        self.refuse_open_calls()?;
        self.history
            .append_value(Producer::Assistant, NodeKind::Assistant, message)?;
        Ok(())
    }

    /// Records the assistant's reply as JSON text, byte-for-byte.
    pub fn record_assistant_raw(&mut self, json: &str) -> Result<(), ComposeError> {
        self.refuse_open_calls()?;
        self.history
            .append_raw(Producer::Assistant, NodeKind::Assistant, json)?;
        Ok(())
    }

    /// An assistant message may not come between a tool call and its results.
    fn refuse_open_calls(&self) -> Result<(), ComposeError> {
        if !self.history.has_open_tool_calls() {
            Ok(())
        } else {
            Err(ComposeError::UnansweredToolCalls {
                open: self.history.open_tool_calls(),
            })
        }
    }

    /// Records a text tool result for `tool_call_id`: [`Session::record_tool`] with
    /// [`ToolResult::text`].
    pub fn record_tool_result(
        &mut self,
        tool_call_id: &str,
        content: &str,
    ) -> Result<(), ComposeError> {
        self.record_tool(&ToolResult::text(tool_call_id, content))
    }

    /// Records a tool result in any shape. It must answer an open call of the last
    /// assistant message.
    pub fn record_tool(&mut self, result: &ToolResult) -> Result<(), ComposeError> {
        self.record_tool_raw(&result.to_json())
    }

    /// Records a tool result message given as JSON text (`role: "tool"`, a `tool_call_id`
    /// answering an open call), kept byte-for-byte but for neutralized update tags.
    pub fn record_tool_raw(&mut self, json: &str) -> Result<(), ComposeError> {
        self.history.check(&Producer::Tool, NodeKind::Tool, json)?;
        let call_id = json::RawObject::parse(json)
            .ok()
            .and_then(|m| m.str("tool_call_id").map(|s| s.into_owned()))
            .unwrap_or_default();
        if !self.history.is_open_tool_call(&call_id) {
            return Err(ComposeError::UnknownToolCall {
                call_id,
                open: self.history.open_tool_calls(),
            });
        }
        self.history
            .append_raw(Producer::Tool, NodeKind::Tool, json)?;
        Ok(())
    }

    /// Sets the system prompt: the same text as [`Session::system_prompt`] → nothing
    /// ([`SystemPromptChange::Unchanged`], so an app may call it every turn); before the first
    /// request → it becomes the text frozen at the head of the prefix
    /// ([`SystemPromptChange::Placed`], as [`SessionOptions::with_system_prompt`] would have
    /// it); after → appended as an update node, once. While tool calls wait for their
    /// results it is held, and appended after them by the next [`Session::continuation`]
    /// ([`SystemPromptChange::Deferred`]).
    pub fn set_system_prompt(&mut self, prompt: &str) -> SystemPromptChange {
        if self.current_system_prompt() == Some(prompt) {
            return SystemPromptChange::Unchanged;
        }
        if self.prefix.is_none() {
            // Nothing was sent: the text to freeze is simply this one.
            self.system_prompt = Some(Arc::from(prompt));
            return SystemPromptChange::Placed;
        }
        if self.history.has_open_tool_calls() {
            if self.settled_system_prompt() == Some(prompt) {
                // Back to the prompt the history already carries: nothing to hold.
                self.pending_prompt = None;
                return SystemPromptChange::Unchanged;
            }
            self.pending_prompt = Some(prompt.to_owned());
            return SystemPromptChange::Deferred;
        }
        self.pending_prompt = None;
        self.history.set_system_prompt(prompt)
    }

    /// Replaces history `span` with a summary node; starts a new cache epoch. The prefix
    /// stays. Tail components whose last update was compacted away re-append their current
    /// output next turn. An empty span changes nothing ([`Compaction::is_empty`]).
    pub fn compact(
        &mut self,
        span: Range<usize>,
        summary: &str,
    ) -> Result<Compaction, ComposeError> {
        self.compact_keeping(span, summary, &|_| false)
    }

    /// [`Session::compact`], keeping the span's nodes whose producer `survives` (see
    /// [`History::compact_keeping`]). A refresh held by
    /// [`Session::refresh_at_next_compaction`] is applied here, in the new epoch the
    /// compaction starts.
    pub fn compact_keeping(
        &mut self,
        span: Range<usize>,
        summary: &str,
        survives: &dyn Fn(&Producer) -> bool,
    ) -> Result<Compaction, ComposeError> {
        let start = span.start;
        let compaction = self.history.compact_keeping(span, summary, survives)?;
        if compaction.is_empty() {
            // No new epoch: a held refresh waits for a compaction that starts one.
            return Ok(compaction);
        }
        // Requests that carried only nodes before the span were sent as they still are.
        self.checkpoints.retain(|c| c.nodes <= start);
        if let Some(replacement) = self.deferred_refresh.take() {
            self.refresh_report = Some(self.install(*replacement));
        }
        self.resync_tails();
        Ok(compaction)
    }

    /// Removes every node written by `producer`; starts a new cache epoch if any was removed.
    pub fn remove_by_producer(&mut self, producer: &Producer) -> Vec<Node> {
        let first = self
            .history
            .nodes()
            .iter()
            .position(|n| n.producer() == producer);
        let removed = self.history.remove_by_producer(producer);
        if let Some(first) = first {
            self.checkpoints.retain(|c| c.nodes <= first);
        }
        self.resync_tails();
        removed
    }

    pub(crate) fn resync_tails(&mut self) {
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
