//! The body each provider receives, as a view over bytes converted once per node.

use std::io::{self, Write};
use std::sync::{Mutex, PoisonError};

use prompt_core::hash::{Fingerprint, NodeId};
use prompt_core::node::{Node, NodeKind};
use prompt_core::profile::{CacheTtl, Profile};
use prompt_core::tools::{ToolDefinition, ToolSet};
use prompt_core::{ApiKind, Request};

use crate::convert::{self, Call, Part, Role, Style};
use crate::error::WireError;
use crate::options::WireOptions;
use crate::raw::push_quoted;

/// An Anthropic breakpoint, as written inside the block it marks.
const CACHE_CONTROL: &str = r#","cache_control":{"type":"ephemeral"}"#;

/// The prefix breakpoints (tools, system) of a profile asking for the 1-hour TTL. Entries
/// of a longer TTL must come before shorter ones; tools and system come first.
const CACHE_CONTROL_1H: &str = r#","cache_control":{"type":"ephemeral","ttl":"1h"}"#;

/// The beta header Anthropic's cache diagnostics are asked for with, and its value.
pub const CACHE_DIAGNOSIS_BETA: (&str, &str) = ("anthropic-beta", "cache-diagnosis-2026-04-07");

/// The longest reply id kept for `diagnostics.previous_message_id`; a longer one is not a
/// provider's id, and is not sent.
const MAX_MESSAGE_ID: usize = 256;

/// Whether `api`'s bodies carry OpenAI's `prompt_cache_retention` when the profile asks.
pub(crate) fn writes_retention(api: ApiKind) -> bool {
    matches!(api, ApiKind::OpenAi | ApiKind::OpenAiResponses)
}

pub use prompt_core::profile::ANTHROPIC_LOOKBACK_BLOCKS;

/// How many blocks a breakpoint may move back from the block it belongs on, past blocks that
/// cannot carry one (thinking blocks, empty text).
const BREAKPOINT_SEARCH: usize = 8;

/// The `prompt_cache_key` of a request: its session's routing key
/// ([`Request::routing_key`]), as 32 hex digits. The one place the key is made, so its
/// contract can change here alone; the routing header ([`Wire::routing_header`]) carries the
/// same value.
///
/// ```
/// # use prompt_core::{Extensions, PromptPolicy, Session, SessionContext, SessionOptions};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let options = SessionOptions::default().with_session_id("conversation-42");
/// # let mut session = Session::start(vec![], &PromptPolicy::default(), SessionContext::default(), options)?;
/// let request = session.turn(Extensions::new(), "hi")?;
/// assert_eq!(prompt_wire::prompt_cache_key(&request), request.routing_key().to_string());
/// # Ok(()) }
/// ```
pub fn prompt_cache_key(request: &Request<'_>) -> String {
    request.routing_key().to_string()
}

/// At most 64 bytes of a session id, for an error message.
fn excerpt(id: &str) -> String {
    prompt_core::input::head(id, 64).to_owned()
}

/// How the parts of one item are introduced in the messages array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lead {
    /// First element of the array.
    Nothing,
    /// After an element (or a block of the same message).
    Comma,
    /// Opens the first message.
    Open(Role),
    /// Closes the open message and opens one of another role.
    CloseOpen(Role),
}

/// A history node in the API's shape, converted once, with where it lies in the array.
#[derive(Debug, Clone)]
struct Item {
    id: NodeId,
    role: Role,
    parts: Vec<Part>,
    lead: Lead,
    /// Bytes of the messages array section up to the end of this item.
    end_len: usize,
    /// Parts (elements, blocks) up to the end of this item.
    end_parts: usize,
    /// The message open after this item (grouping APIs).
    open_after: Option<Role>,
    /// The calls an assistant node opens.
    calls: Vec<Call>,
    assistant: bool,
    /// A leading system node of an API with one system field: its text goes there.
    system_text: Option<Box<str>>,
    /// Anthropic with native system messages: the blocks of a later system node, laid out
    /// after the user message of its turn ([`Wire::release`]), not at its own place.
    held: Vec<Part>,
    /// Bytes written before the lead: the system message of the turn this (assistant) item
    /// closes.
    release: Option<Box<str>>,
    /// The user's own message (a turn's start).
    user_turn: bool,
    /// Gemini: function calls without their signature.
    unsigned_calls: bool,
}

/// What is frozen at the first body: session-constant bytes.
#[derive(Debug)]
struct Frozen {
    /// The session this wire serves.
    session_id: Box<str>,
    fingerprint: Fingerprint,
    prefix: Option<String>,
    tools: Option<String>,
    head: String,
    /// The last leading system node the head holds (APIs with one system field).
    head_leading: Option<NodeId>,
    /// Whether the head ends with a message of the array (Chat's prefix message).
    head_element: bool,
    /// Whether the head has a system field (Anthropic: a breakpoint on its last block).
    head_system: bool,
    tail: String,
}

/// Where the previous body's stable part ended (its cache epoch and block count): what
/// Anthropic's second rolling breakpoint is placed by.
///
/// A [`Wire`] keeps it between bodies. A session saved and restored in another process
/// gets the same bodies as one that never stopped only if the new wire goes on from the
/// old wire's point: save [`Wire::resume_point`] beside the session's snapshot and give it
/// to [`Wire::resume_from`] before the first body. (Only Anthropic bodies depend on it.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResumePoint {
    epoch: u64,
    parts: usize,
}

type Previous = ResumePoint;

/// The wire of one session to one API: turns each request into the exact body the API
/// receives.
///
/// Each history node is converted into the API's shape once, memoized by its
/// [`NodeId`](prompt_core::hash::NodeId) (which chains every earlier node, so one comparison
/// tells that a whole history prefix is unchanged), and the tools field, the system field
/// and the keys around the messages array are written once per session. A body is a view
/// over those bytes: composing one costs the new nodes, not the history.
#[derive(Debug)]
pub struct Wire {
    api: ApiKind,
    options: WireOptions,
    frozen: Option<Frozen>,
    items: Vec<Item>,
    /// Leading items whose text went to the system field.
    leading: usize,
    last_assistant: Option<usize>,
    previous: Option<Previous>,
    /// The id of the last reply recorded: Anthropic's `diagnostics.previous_message_id`.
    previous_message: Mutex<Option<Box<str>>>,
    /// The `prompt_cache_key` an app sent before the library wrote its bodies
    /// ([`Wire::keep_cache_key`]); `Some(None)`: it sent none, and none is written.
    kept_key: Option<Option<Box<str>>>,
    /// The tools field an app sent before the library wrote its bodies
    /// ([`Wire::keep_tools_field`]), without `cache_control`.
    kept_tools: Option<Box<str>>,
    /// Parameters as an app sent them ([`Wire::keep_parameters`]).
    kept_params: Vec<(Box<str>, Box<str>)>,
}

/// The longest `prompt_cache_key` [`Wire::keep_cache_key`] keeps.
pub const MAX_KEPT_CACHE_KEY: usize = 1024;

fn grouped(api: ApiKind) -> bool {
    matches!(api, ApiKind::Anthropic | ApiKind::Gemini)
}

fn opener(api: ApiKind, role: Role) -> &'static str {
    match (api, role) {
        (ApiKind::Gemini, Role::User) => r#"{"role":"user","parts":["#,
        (ApiKind::Gemini, Role::Assistant) => r#"{"role":"model","parts":["#,
        (_, Role::User) => r#"{"role":"user","content":["#,
        (_, Role::Assistant) => r#"{"role":"assistant","content":["#,
        (_, Role::System) => r#"{"role":"system","content":["#,
    }
}

fn lead_len(api: ApiKind, lead: Lead) -> usize {
    match lead {
        Lead::Nothing => 0,
        Lead::Comma => 1,
        Lead::Open(role) => opener(api, role).len(),
        Lead::CloseOpen(role) => 3 + opener(api, role).len(),
    }
}

fn parts_len(parts: &[Part]) -> usize {
    parts.iter().map(|p| p.text.len()).sum::<usize>() + parts.len().saturating_sub(1)
}

impl Wire {
    /// A wire for one session to `api`. Anthropic requires `max_tokens` among the
    /// parameters; a parameter the library writes itself (`messages`, `tools`, …) is
    /// refused.
    pub fn new(api: ApiKind, options: WireOptions) -> Result<Self, WireError> {
        options.check(api)?;
        Ok(Self {
            api,
            options,
            frozen: None,
            items: Vec::new(),
            leading: 0,
            last_assistant: None,
            previous: None,
            previous_message: Mutex::new(None),
            kept_key: None,
            kept_tools: None,
            kept_params: Vec::new(),
        })
    }

    /// Writes `key` as every body's `prompt_cache_key` (OpenAI Chat Completions and
    /// Responses, llama.cpp) instead of the session's routing key, or no key at all for
    /// `None`: what an app that adopts a conversation sent before
    /// ([`Conversation::continue_from`](crate::Conversation::continue_from) reads it from
    /// the app's last body), so the server routes the next request to the cache that holds
    /// the conversation. Refused over [`MAX_KEPT_CACHE_KEY`] bytes. Call it before the first
    /// body; it is saved with the conversation and kept by branches.
    pub fn keep_cache_key(&mut self, key: Option<&str>) -> Result<(), WireError> {
        if let Some(key) = key
            && key.len() > MAX_KEPT_CACHE_KEY
        {
            return Err(WireError::CacheKeyTooLong {
                len: key.len(),
                max: MAX_KEPT_CACHE_KEY,
            });
        }
        self.kept_key = Some(key.map(Box::from));
        // After a body: the next one freezes its session-constant bytes again, with this key.
        self.frozen = None;
        Ok(())
    }

    /// Writes `tools` (a tools field as an app sent it: a JSON array) as the body's tools
    /// field, byte-for-byte (Anthropic: without its `cache_control` markers, the wire's own
    /// breakpoint on its last tool), whenever it holds the same definitions as the session's
    /// tools in any order and key order; otherwise the wire writes the session's tools its own
    /// way. What an app that adopts a conversation sent: the server renders a tool's schema
    /// with its keys in the order sent, so other bytes re-process the whole prompt once.
    /// Call it before the first body; it is saved with the conversation and kept by branches.
    pub fn keep_tools_field(&mut self, tools: Option<&str>) {
        self.kept_tools = tools.map(|t| Box::from(prompt_engine::without_cache_control(t).trim()));
        self.frozen = None;
    }

    /// Writes each parameter of the options whose value equals one of `sent` (the
    /// parameters as an app sent them: key, JSON text) with the app's bytes instead of the
    /// options' (the cache keys on some, `thinking`, `tool_choice`, as written). A value
    /// that differs is written as the options say. Call it before the first body; it is
    /// saved with the conversation and kept by branches.
    pub fn keep_parameters<'a>(&mut self, sent: impl IntoIterator<Item = (&'a str, &'a str)>) {
        self.kept_params = sent
            .into_iter()
            .map(|(k, v)| (Box::from(k), Box::from(v.trim())))
            .collect();
        self.frozen = None;
    }

    /// The parameters set by [`Wire::keep_parameters`].
    pub fn kept_parameters(&self) -> impl Iterator<Item = (&str, &str)> {
        self.kept_params.iter().map(|(k, v)| (&**k, &**v))
    }

    /// The bytes to write for parameter `key` of the options' `value`.
    fn parameter<'s>(&'s self, key: &str, value: &'s str) -> &'s str {
        let Some((_, sent)) = self.kept_params.iter().find(|(k, _)| &**k == key) else {
            return value;
        };
        let same = serde_json::from_str::<serde_json::Value>(sent)
            .ok()
            .zip(serde_json::from_str::<serde_json::Value>(value).ok())
            .is_some_and(|(a, b)| a == b);
        if same { sent } else { value }
    }

    /// The tools field set by [`Wire::keep_tools_field`], without `cache_control`.
    pub fn kept_tools_field(&self) -> Option<&str> {
        self.kept_tools.as_deref()
    }

    /// The kept tools field when it holds the same tools as `own` (the field the wire
    /// writes), with the API's breakpoint on its last tool; `None` otherwise.
    fn kept_tools_for(&self, own: &str) -> Option<String> {
        let kept = self.kept_tools.as_deref()?;
        let definitions = |field: &str| -> Option<Vec<String>> {
            let field = prompt_engine::without_cache_control(field);
            let values: Vec<serde_json::Value> = serde_json::from_str(&field).ok()?;
            // Maps serialize with sorted keys: one string per definition, whatever its
            // key order.
            let mut out: Vec<String> = values.iter().map(serde_json::Value::to_string).collect();
            out.sort_unstable();
            Some(out)
        };
        if definitions(kept)? != definitions(own)? {
            return None;
        }
        if self.api != ApiKind::Anthropic {
            return Some(kept.to_owned());
        }
        // The breakpoint inside the last tool, as the wire writes its own.
        let body = kept.strip_suffix(']')?.trim_end().strip_suffix('}')?;
        Some(format!("{body}{}}}]", self.prefix_cache_control()))
    }

    /// The key set by [`Wire::keep_cache_key`]: `None` when the session's routing key is
    /// written, `Some(None)` when no key is.
    pub fn kept_cache_key(&self) -> Option<Option<&str>> {
        self.kept_key.as_ref().map(|k| k.as_deref())
    }

    /// The API.
    pub fn api(&self) -> ApiKind {
        self.api
    }

    /// The options.
    pub fn options(&self) -> &WireOptions {
        &self.options
    }

    /// The HTTP header that pins this session's requests to one replica behind a router
    /// ([`WireOptions::routing_header`], `X-SMG-Routing-Key` by default) and its value, the
    /// session's routing key: send it with every request of the session.
    pub fn routing_header(&self, request: &Request<'_>) -> (&str, String) {
        (
            self.options.routing_header_name(),
            prompt_cache_key(request),
        )
    }

    /// Where the last body's stable part ended; `None` before the first body. Save it with
    /// the session to go on in another process ([`ResumePoint`]).
    pub fn resume_point(&self) -> Option<ResumePoint> {
        self.previous
    }

    /// Goes on from a point saved by [`Wire::resume_point`] in an earlier process, so the
    /// next body is the one the earlier wire would have written. A point of another epoch
    /// or beyond the history is ignored, as after a compaction.
    pub fn resume_from(&mut self, point: ResumePoint) {
        self.previous = Some(point);
    }

    /// A wire for the branch with session id `branch` (a branch of the session this wire
    /// serves: [`Session::branch`](prompt_core::Session::branch) and the calls built on it).
    /// It keeps every node already converted, so the branch's first body costs only its new
    /// nodes. (The branch's history is the parent's up to the fork point: the first body
    /// drops the rest.)
    pub fn fork_for(&self, branch: &str) -> Self {
        let mut wire = Self {
            api: self.api,
            options: self.options.clone(),
            frozen: None,
            items: Vec::new(),
            leading: 0,
            last_assistant: None,
            previous: self.previous,
            previous_message: Mutex::new(self.previous_message_id().map(Box::from)),
            kept_key: self.kept_key.clone(),
            kept_tools: self.kept_tools.clone(),
            kept_params: self.kept_params.clone(),
        };
        if let Some(frozen) = &self.frozen {
            wire.frozen = Some(Frozen {
                session_id: branch.into(),
                fingerprint: frozen.fingerprint,
                prefix: frozen.prefix.clone(),
                tools: frozen.tools.clone(),
                head: frozen.head.clone(),
                head_leading: frozen.head_leading,
                head_element: frozen.head_element,
                head_system: frozen.head_system,
                tail: frozen.tail.clone(),
            });
            wire.items = self.items.clone();
            wire.leading = self.leading;
            wire.last_assistant = self.last_assistant;
        }
        wire
    }

    /// The body of `request`: converts the nodes new since the previous body, and returns a
    /// view over the session's bytes.
    ///
    /// The wire follows its session (the session id of the first request): a refresh of
    /// the session's prefix or tools is a new epoch on the same wire. Refused for a request
    /// of another session ([`WireError::OtherSession`]), and for a node that cannot be
    /// written in the API's
    /// shape ([`WireError::Node`]).
    pub fn body(&mut self, request: &Request<'_>) -> Result<Body<'_>, WireError> {
        match &self.frozen {
            Some(frozen) if *frozen.session_id != *request.session_id() => {
                return Err(WireError::OtherSession {
                    expected: excerpt(&frozen.session_id),
                    found: excerpt(request.session_id()),
                });
            }
            // The same session after a refresh: a new prefix or tools, in a new epoch. The
            // converted nodes stay valid (a node's shape does not depend on the prefix)…
            Some(frozen) if frozen.fingerprint != request.prefix_fingerprint() => {
                let had_prefix = frozen.prefix.is_some();
                self.frozen = Some(self.freeze(request));
                self.previous = None;
                // …but for a profile that sends later system messages as user messages,
                // whether a first system node is the body's first message does.
                if self.style(false).system_as_user && had_prefix != request.has_prefix() {
                    self.items.clear();
                    self.leading = 0;
                    self.last_assistant = None;
                }
            }
            Some(_) => {}
            None => self.frozen = Some(self.freeze(request)),
        }
        let truncated = self.sync(request.nodes())?;
        if truncated {
            self.previous = None;
        }
        self.refresh_head();
        self.refuse_unsigned_calls()?;

        let api = self.api;
        let mut ephemeral = Vec::new();
        let mut ephemeral_system = false;
        for (component, message) in request.ephemeral() {
            let converted = convert::convert(api, message, &|_| None, self.style(false)).map_err(
                |problem| WireError::Node {
                    index: request.nodes().len(),
                    producer: prompt_core::node::Producer::Component(component.clone()),
                    api: crate::api_name(api),
                    problem,
                },
            )?;
            ephemeral_system |= converted.native_system;
            ephemeral.extend(converted.parts);
        }
        let release = self.release(self.items.len());
        let open_before = match &release {
            Some((_, Role::System)) => Some(Role::System),
            Some(_) => Some(Role::User),
            None => self.items.last().and_then(|i| i.open_after),
        };
        let parts_before = self.items.last().map_or(0, |i| i.end_parts);
        let head_element = self.frozen.as_ref().is_some_and(|f| f.head_element);
        let ephemeral_lead = if ephemeral.is_empty() {
            Lead::Nothing
        } else if open_before == Some(Role::System) {
            // After a system message only the reply may come: the tail goes into it.
            Lead::Comma
        } else if ephemeral_system && open_before == Some(Role::User) {
            Lead::CloseOpen(Role::System)
        } else if grouped(api)
            && self.options.tail_is_own_message()
            && open_before == Some(Role::User)
        {
            Lead::CloseOpen(Role::User)
        } else {
            self.lead(Role::User, open_before, parts_before, head_element)
        };
        let open_end = if grouped(api) && !ephemeral.is_empty() {
            Some(Role::User)
        } else {
            open_before
        };

        let breakpoints = if api == ApiKind::Anthropic {
            self.breakpoints(request.epoch())
        } else {
            Vec::new()
        };
        let trailer = self.diagnostics_trailer();

        let (head_len, tail_len) = self
            .frozen
            .as_ref()
            .map_or((0, 0), |f| (f.head.len(), f.tail.len()));
        let section = self.items.last().map_or(0, |i| i.end_len);
        let release_len = release.as_ref().map_or(0, |(r, _)| r.len());
        let stable_len = head_len + section + release_len + breakpoints.len() * CACHE_CONTROL.len();
        let ephemeral_len = if ephemeral.is_empty() {
            0
        } else {
            lead_len(api, ephemeral_lead) + parts_len(&ephemeral)
        };
        let closer = if open_end.is_some() { 2 } else { 0 };
        let trailer_len = trailer.as_ref().map_or(0, String::len);
        // The tail starts with the array's closing bracket.
        let len = stable_len + ephemeral_len + closer + tail_len + trailer_len;
        let new_from = request.nodes().len() - request.new_nodes().len();
        Ok(Body {
            wire: self,
            ephemeral,
            ephemeral_lead,
            open_end,
            release: release.map(|(r, _)| r),
            trailer,
            breakpoints,
            new_from,
            stable_len,
            len,
        })
    }

    /// The provider profile the options apply, if any.
    fn profile(&self) -> Option<&Profile> {
        self.options.provider_profile()
    }

    /// What the profile asks of a later system message. `first_message`: the node would be
    /// the body's first message (no prefix before it), which stays a system message.
    fn style(&self, first_message: bool) -> Style {
        let Some(profile) = self.profile() else {
            return Style::default();
        };
        let sends = profile.sends_later_system();
        Style {
            system_as_user: !sends
                && !first_message
                && matches!(
                    self.api,
                    ApiKind::OpenAi | ApiKind::LlamaCpp | ApiKind::OpenAiResponses
                ),
            native_system: sends && self.api == ApiKind::Anthropic,
        }
    }

    /// The HTTP header to send with every request when the profile asks for Anthropic's
    /// cache diagnostics ([`CACHE_DIAGNOSIS_BETA`]; add its value to any other
    /// `anthropic-beta` values, comma-separated); `None` otherwise.
    pub fn cache_diagnostics_header(&self) -> Option<(&'static str, &'static str)> {
        self.asks_cache_diagnostics()
            .then_some(CACHE_DIAGNOSIS_BETA)
    }

    fn asks_cache_diagnostics(&self) -> bool {
        self.api == ApiKind::Anthropic && self.profile().is_some_and(Profile::cache_diagnostics)
    }

    /// The id of the last reply [`Wire::record_reply`] recorded: the next body's
    /// `diagnostics.previous_message_id` when cache diagnostics are on.
    pub fn previous_message_id(&self) -> Option<String> {
        self.previous_message
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_deref()
            .map(str::to_owned)
    }

    /// Sets the id the next body names as `diagnostics.previous_message_id` (a wire
    /// restored in another process: the id of the last reply of the saved session).
    pub fn set_previous_message_id(&mut self, id: Option<&str>) {
        let id = id.filter(|id| id.len() <= MAX_MESSAGE_ID).map(Box::from);
        *self
            .previous_message
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = id;
    }

    /// Remembers a recorded reply's id (from [`Wire::record_reply`], which borrows the wire
    /// shared).
    pub(crate) fn remember_reply(&self, id: Option<&str>) {
        let id = id.filter(|id| id.len() <= MAX_MESSAGE_ID).map(Box::from);
        *self
            .previous_message
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = id;
    }

    /// `,"diagnostics":{"previous_message_id":…}` when the profile asks for cache
    /// diagnostics: the body's last key, after every byte of the prompt (`null` before the
    /// first reply, as Anthropic's opt-in has it).
    fn diagnostics_trailer(&self) -> Option<String> {
        if !self.asks_cache_diagnostics() {
            return None;
        }
        let mut out = String::from(r#","diagnostics":{"previous_message_id":"#);
        match self.previous_message_id() {
            Some(id) => push_quoted(&mut out, &id),
            None => out.push_str("null"),
        }
        out.push('}');
        Some(out)
    }

    /// The system message of the open turn (the items after the last laid-out assistant
    /// item, before `upto`) when a native-system profile holds system nodes in it: after
    /// the turn's user message, as Anthropic's placement rules require (a system message
    /// follows a user message and is the last one or followed by the reply). A turn with
    /// no user message gets its system text as a user message instead. The bytes, and the
    /// role of the message they leave open.
    fn release(&self, upto: usize) -> Option<(Box<str>, Role)> {
        let before = &self.items[..upto];
        let start = before
            .iter()
            .rposition(|i| i.role == Role::Assistant && !i.parts.is_empty())
            .map_or(0, |at| at + 1);
        let run = &before[start..];
        if run.iter().all(|i| i.held.is_empty()) {
            return None;
        }
        let user = run
            .iter()
            .any(|i| i.role == Role::User && !i.parts.is_empty());
        let open = before.last().and_then(|i| i.open_after);
        let (role, mut out) = if user {
            (Role::System, String::from("]},"))
        } else if open.is_some() {
            (Role::User, String::from("]},"))
        } else {
            (Role::User, String::new())
        };
        out.push_str(opener(self.api, role));
        for (k, part) in run.iter().flat_map(|i| &i.held).enumerate() {
            if k > 0 {
                out.push(',');
            }
            out.push_str(&part.text);
        }
        Some((out.into(), role))
    }

    /// Gemini 3 answers 400 to a function call of the current turn replayed without its
    /// `thoughtSignature`: with a profile that requires signatures, a body whose current
    /// turn (since the user's last message) holds calls the wire built from an
    /// OpenAI-shaped message is refused.
    fn refuse_unsigned_calls(&self) -> Result<(), WireError> {
        if !self.profile().is_some_and(Profile::signatures_required) {
            return Ok(());
        }
        let current = self
            .items
            .iter()
            .rposition(|i| i.user_turn)
            .map_or(0, |at| at + 1);
        match self.items[current..].iter().position(|i| i.unsigned_calls) {
            Some(at) => Err(WireError::UnsignedCalls {
                index: current + at,
                api: crate::api_name(self.api),
                model: excerpt(self.options.model()),
            }),
            None => Ok(()),
        }
    }

    fn lead(
        &self,
        role: Role,
        open: Option<Role>,
        parts_before: usize,
        head_element: bool,
    ) -> Lead {
        if grouped(self.api) {
            match open {
                Some(r) if r == role => Lead::Comma,
                Some(_) => Lead::CloseOpen(role),
                None => Lead::Open(role),
            }
        } else if parts_before > 0 || head_element {
            Lead::Comma
        } else {
            Lead::Nothing
        }
    }

    /// Keeps the converted items whose node is unchanged, converts the rest. Returns whether
    /// any item was dropped (a compaction or a removal: a new epoch).
    fn sync(&mut self, nodes: &[Node]) -> Result<bool, WireError> {
        let n = self.items.len().min(nodes.len());
        let same = |k: usize| k == 0 || self.items[k - 1].id == nodes[k - 1].id();
        // Ids chain: node k's id is unchanged only if every earlier one is, so the matching
        // length is found by bisection.
        let keep = if n == self.items.len() && same(n) {
            n
        } else {
            let (mut lo, mut hi) = (0, n);
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if same(mid) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            lo
        };
        let truncated = keep < self.items.len();
        if truncated {
            self.items.truncate(keep);
            self.leading = self.leading.min(keep);
            self.last_assistant = self.items.iter().rposition(|i| i.assistant);
        }
        for (index, node) in nodes.iter().enumerate().skip(keep) {
            self.push(index, node)?;
        }
        Ok(truncated)
    }

    fn push(&mut self, index: usize, node: &Node) -> Result<(), WireError> {
        let api = self.api;
        let converted = {
            let calls = self
                .last_assistant
                .and_then(|at| self.items.get(at))
                .map(|i| &i.calls);
            let answered = |id: &str| {
                let calls = calls?;
                let at = calls.binary_search_by(|c| c.id.as_str().cmp(id)).ok()?;
                calls.get(at).cloned()
            };
            let first_message =
                index == 0 && self.frozen.as_ref().is_some_and(|f| f.prefix.is_none());
            convert::convert(api, node.bytes(), &answered, self.style(first_message)).map_err(
                |problem| WireError::Node {
                    index,
                    producer: node.producer().clone(),
                    api: crate::api_name(api),
                    problem,
                },
            )?
        };
        let leading = grouped(api)
            && self.leading == self.items.len()
            && converted.system_text.is_some()
            && matches!(node.kind(), NodeKind::System | NodeKind::CompactionSummary);
        let (parts, system_text, held) = if leading {
            self.leading += 1;
            (Vec::new(), converted.system_text.map(Box::from), Vec::new())
        } else if converted.native_system {
            (Vec::new(), None, converted.parts)
        } else {
            (converted.parts, None, Vec::new())
        };
        // An assistant message closes its turn: the turn's system message goes before it.
        let release = if converted.role == Role::Assistant && !parts.is_empty() {
            self.release(self.items.len()).map(|(r, _)| r)
        } else {
            None
        };
        let before = self.items.last();
        let open_before = before.and_then(|i| i.open_after);
        let parts_before = before.map_or(0, |i| i.end_parts);
        let len_before = before.map_or(0, |i| i.end_len);
        let head_element = self.frozen.as_ref().is_some_and(|f| f.head_element);
        let (lead, open_after, len) = if parts.is_empty() {
            (Lead::Nothing, open_before, 0)
        } else {
            let lead = if release.is_some() {
                Lead::CloseOpen(converted.role)
            } else {
                self.lead(converted.role, open_before, parts_before, head_element)
            };
            let open = grouped(api).then_some(converted.role);
            let released = release.as_ref().map_or(0, |r| r.len());
            (
                lead,
                open,
                released + lead_len(api, lead) + parts_len(&parts),
            )
        };
        let assistant = matches!(node.kind(), NodeKind::Assistant);
        self.items.push(Item {
            id: node.id(),
            role: converted.role,
            end_len: len_before + len,
            end_parts: parts_before + parts.len(),
            parts,
            lead,
            open_after,
            calls: converted.calls,
            assistant,
            system_text,
            held,
            release,
            user_turn: matches!(node.kind(), NodeKind::User),
            unsigned_calls: api == ApiKind::Gemini && converted.unsigned_calls,
        });
        if assistant {
            self.last_assistant = Some(self.items.len() - 1);
        }
        Ok(())
    }

    /// Writes what is frozen for the session: the tools field, the keys around the
    /// messages array, the prefix.
    fn freeze(&self, request: &Request<'_>) -> Frozen {
        let prefix = request
            .has_prefix()
            .then(|| request.prefix_text().to_owned());
        let tools = tools_field(self.api, request.tools(), self.prefix_cache_control())
            .map(|own| self.kept_tools_for(&own).unwrap_or(own));
        let key = match &self.kept_key {
            None => Some(prompt_cache_key(request)),
            Some(kept) => kept.as_deref().map(str::to_owned),
        };
        let mut tail = String::from("]");
        if matches!(
            self.api,
            ApiKind::OpenAi | ApiKind::LlamaCpp | ApiKind::OpenAiResponses
        ) && let Some(key) = key
        {
            tail.push_str(r#","prompt_cache_key":"#);
            push_quoted(&mut tail, &key);
        }
        // Frozen with the session, after the messages: it never moves a stable byte.
        if let Some(retention) = self
            .profile()
            .and_then(Profile::retention)
            .filter(|_| writes_retention(self.api))
        {
            tail.push_str(r#","prompt_cache_retention":"#);
            push_quoted(&mut tail, retention.as_str());
        }
        if self.api == ApiKind::LlamaCpp {
            tail.push_str(r#","cache_prompt":true"#);
        }
        for (k, v) in self.options.params() {
            tail.push(',');
            push_quoted(&mut tail, k);
            tail.push(':');
            tail.push_str(self.parameter(k, v));
        }
        tail.push('}');
        let mut frozen = Frozen {
            session_id: request.session_id().into(),
            fingerprint: request.prefix_fingerprint(),
            prefix,
            tools,
            head: String::new(),
            head_leading: None,
            head_element: false,
            head_system: false,
            tail,
        };
        frozen.head_element =
            matches!(self.api, ApiKind::OpenAi | ApiKind::LlamaCpp) && frozen.prefix.is_some();
        (frozen.head, frozen.head_system) = head(
            self.api,
            &self.options,
            &frozen,
            &[],
            self.prefix_cache_control(),
        );
        frozen
    }

    /// The breakpoint of the tools and the system field: with the 1-hour TTL when the
    /// profile asks for it.
    fn prefix_cache_control(&self) -> &'static str {
        match self.profile().and_then(Profile::ttl) {
            Some(CacheTtl::OneHour) => CACHE_CONTROL_1H,
            Some(CacheTtl::FiveMinutes) | None => CACHE_CONTROL,
        }
    }

    /// Rewrites the head when the leading system nodes changed (only at the first body of
    /// an epoch: later nodes never lead).
    fn refresh_head(&mut self) {
        if !grouped(self.api) {
            return;
        }
        let key = self.leading.checked_sub(1).map(|i| self.items[i].id);
        let control = self.prefix_cache_control();
        let Some(frozen) = self.frozen.as_mut() else {
            return;
        };
        if frozen.head_leading == key && !frozen.head.is_empty() {
            return;
        }
        let texts: Vec<&str> = self.items[..self.leading]
            .iter()
            .filter_map(|i| i.system_text.as_deref())
            .collect();
        (frozen.head, frozen.head_system) = head(self.api, &self.options, frozen, &texts, control);
        frozen.head_leading = key;
    }

    /// Anthropic's breakpoints in the messages: the rolling one on the last stable block,
    /// and, when more than [`ANTHROPIC_LOOKBACK_BLOCKS`] blocks were appended since the
    /// previous body, a second one where the previous body's stable part ended.
    fn breakpoints(&mut self, epoch: u64) -> Vec<usize> {
        let total = self.items.last().map_or(0, |i| i.end_parts);
        let previous = self
            .previous
            .filter(|p| p.epoch == epoch && p.parts <= total);
        self.previous = Some(Previous {
            epoch,
            parts: total,
        });
        let mut out = Vec::with_capacity(2);
        if let Some(second) = previous
            .filter(|p| total - p.parts > ANTHROPIC_LOOKBACK_BLOCKS)
            .and_then(|p| p.parts.checked_sub(1))
            .and_then(|at| self.cacheable_at_or_before(at))
        {
            out.push(second);
        }
        if let Some(rolling) = total
            .checked_sub(1)
            .and_then(|at| self.cacheable_at_or_before(at))
            && !out.contains(&rolling)
        {
            out.push(rolling);
        }
        out
    }

    /// The part with global index `at`, and the item holding it.
    fn part(&self, at: usize) -> Option<&Part> {
        let item = self.items.partition_point(|i| i.end_parts <= at);
        let item = self.items.get(item)?;
        let first = item.end_parts - item.parts.len();
        item.parts.get(at - first)
    }

    fn cacheable_at_or_before(&self, at: usize) -> Option<usize> {
        (0..=at)
            .rev()
            .take(BREAKPOINT_SEARCH)
            .find(|&g| self.part(g).is_some_and(|p| p.cacheable))
    }
}

/// The tools field's value for `api`, written once; `None` without tools.
fn tools_field(api: ApiKind, tools: &ToolSet, control: &str) -> Option<String> {
    if tools.is_empty() {
        return None;
    }
    let defs = tools.definitions();
    let mut out = String::from("[");
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => return Some(tools.openai_json().to_owned()),
        ApiKind::OpenAiResponses => {
            for (i, d) in defs.iter().enumerate() {
                push_tool(
                    &mut out,
                    i,
                    r#"{"type":"function","name":"#,
                    d,
                    r#","parameters":"#,
                );
                out.push_str(r#","strict":false}"#);
            }
        }
        ApiKind::Anthropic => {
            for (i, d) in defs.iter().enumerate() {
                push_tool(&mut out, i, r#"{"name":"#, d, r#","input_schema":"#);
                if i + 1 == defs.len() {
                    out.push_str(control);
                }
                out.push('}');
            }
        }
        ApiKind::Gemini => {
            out.push_str(r#"{"functionDeclarations":["#);
            for (i, d) in defs.iter().enumerate() {
                push_tool(&mut out, i, r#"{"name":"#, d, r#","parameters":"#);
                out.push('}');
            }
            out.push_str("]}");
        }
    }
    out.push(']');
    Some(out)
}

/// Tool `i` of a tools list, left open for the API's own closing: a comma before all but
/// the first, `open` up to the name, then the name, the description and the schema after
/// `schema_key` (the fields every API writes alike).
fn push_tool(out: &mut String, i: usize, open: &str, tool: &ToolDefinition, schema_key: &str) {
    if i > 0 {
        out.push(',');
    }
    out.push_str(open);
    push_quoted(out, &tool.name);
    out.push_str(r#","description":"#);
    push_quoted(out, &tool.description);
    out.push_str(schema_key);
    out.push_str(&tool.parameters);
}

/// Everything before the first history message, in the documented key order, and whether
/// it has a system field.
fn head(
    api: ApiKind,
    options: &WireOptions,
    frozen: &Frozen,
    leading: &[&str],
    control: &str,
) -> (String, bool) {
    let mut out = String::from("{");
    let mut system = false;
    let tools = frozen.tools.as_deref();
    let model = |out: &mut String| {
        out.push_str(r#""model":"#);
        push_quoted(out, options.model());
    };
    // Anthropic's and Gemini's system field: the frozen prefix, then the leading texts.
    let system_texts = || -> Vec<&str> {
        frozen
            .prefix
            .as_deref()
            .into_iter()
            .chain(leading.iter().copied())
            .filter(|t| !t.is_empty())
            .collect()
    };
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => {
            model(&mut out);
            if let Some(tools) = tools {
                out.push_str(r#","tools":"#);
                out.push_str(tools);
            }
            out.push_str(r#","messages":["#);
            if let Some(prefix) = &frozen.prefix {
                out.push_str(r#"{"role":"system","content":"#);
                push_quoted(&mut out, prefix);
                out.push('}');
            }
        }
        ApiKind::OpenAiResponses => {
            model(&mut out);
            if let Some(prefix) = &frozen.prefix {
                out.push_str(r#","instructions":"#);
                push_quoted(&mut out, prefix);
            }
            if let Some(tools) = tools {
                out.push_str(r#","tools":"#);
                out.push_str(tools);
            }
            out.push_str(r#","input":["#);
        }
        ApiKind::Anthropic => {
            model(&mut out);
            if let Some(tools) = tools {
                out.push_str(r#","tools":"#);
                out.push_str(tools);
            }
            let texts = system_texts();
            if !texts.is_empty() {
                system = true;
                out.push_str(r#","system":["#);
                for (i, text) in texts.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(r#"{"type":"text","text":"#);
                    push_quoted(&mut out, text);
                    if i + 1 == texts.len() {
                        out.push_str(control);
                    }
                    out.push('}');
                }
                out.push(']');
            }
            out.push_str(r#","messages":["#);
        }
        ApiKind::Gemini => {
            let texts = system_texts();
            if !texts.is_empty() {
                system = true;
                out.push_str(r#""systemInstruction":{"parts":["#);
                for (i, text) in texts.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(r#"{"text":"#);
                    push_quoted(&mut out, text);
                    out.push('}');
                }
                out.push_str("]},");
            }
            if let Some(tools) = tools {
                out.push_str(r#""tools":"#);
                out.push_str(tools);
                out.push(',');
            }
            out.push_str(r#""contents":["#);
        }
    }
    (out, system)
}

/// One body: a view over the wire's bytes and this request's ephemeral content. Its
/// [`chunks`](Body::chunks) concatenate to the exact body.
#[derive(Debug)]
pub struct Body<'w> {
    wire: &'w Wire,
    ephemeral: Vec<Part>,
    ephemeral_lead: Lead,
    open_end: Option<Role>,
    /// The open turn's system message (native-system profiles), after its last node.
    release: Option<Box<str>>,
    /// The body's last key, after the prompt: Anthropic's `diagnostics`.
    trailer: Option<String>,
    /// Global indices of the message blocks carrying an Anthropic breakpoint.
    breakpoints: Vec<usize>,
    new_from: usize,
    stable_len: usize,
    len: usize,
}

/// One content block (Anthropic), part (Gemini) or array element (OpenAI) of a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block<'a> {
    /// The role of the message holding it (`user`, `assistant`; Gemini `model`); `None` for
    /// OpenAI's elements, which are messages or items themselves.
    pub role: Option<&'static str>,
    /// The block as sent, without a `cache_control`.
    pub json: &'a str,
}

impl<'w> Body<'w> {
    /// Whether this body extends `earlier` (a body sent before, as sent or its
    /// [`stable_body`](Body::stable_body)) as the provider caches it: [`compare`](crate::compare)
    /// of `earlier` and this body's bytes, the one comparison engine
    /// ([`crate::engine`]). [`Verdict::extends`](crate::Verdict::extends) says yes or no; a
    /// [`Verdict::Breaks`](crate::Verdict::Breaks) names where and why.
    pub fn extends(&self, earlier: &[u8]) -> Result<crate::Verdict, crate::GuardError> {
        crate::compare(earlier, &self.to_bytes())
    }

    /// The API.
    pub fn api(&self) -> ApiKind {
        self.wire.api
    }

    /// Length of the body in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a body has at least its braces.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Byte length of the stable part: everything up to the end of the last history node.
    /// For every API but Anthropic it is a byte prefix of every later body in the same
    /// epoch; Anthropic's breakpoints move, so there the invariant is on the blocks
    /// ([`Body::stable_blocks`]).
    pub fn stable_len(&self) -> usize {
        self.stable_len
    }

    /// Number of Anthropic breakpoints in the body (tools, system, rolling ones); 0 for
    /// other APIs.
    pub fn breakpoint_count(&self) -> usize {
        if self.wire.api != ApiKind::Anthropic {
            return 0;
        }
        let frozen = self.wire.frozen.as_ref();
        let tools = frozen.is_some_and(|f| f.tools.is_some());
        let system = frozen.is_some_and(|f| f.head_system);
        usize::from(tools) + usize::from(system) + self.breakpoints.len()
    }

    fn emit<'b>(&'b self, from: usize, head: bool, ephemeral: bool, out: &mut dyn FnMut(&'b [u8])) {
        let api = self.wire.api;
        let lead = |lead: Lead, out: &mut dyn FnMut(&'b [u8])| match lead {
            Lead::Nothing => {}
            Lead::Comma => out(b","),
            Lead::Open(role) => out(opener(api, role).as_bytes()),
            Lead::CloseOpen(role) => {
                out(b"]},");
                out(opener(api, role).as_bytes());
            }
        };
        let frozen = self.wire.frozen.as_ref();
        if head && let Some(f) = frozen {
            out(f.head.as_bytes());
        }
        for item in self.wire.items.iter().skip(from) {
            if item.parts.is_empty() {
                continue;
            }
            if let Some(release) = &item.release {
                out(release.as_bytes());
            }
            lead(item.lead, out);
            let first = item.end_parts - item.parts.len();
            for (j, part) in item.parts.iter().enumerate() {
                if j > 0 {
                    out(b",");
                }
                let text = part.text.as_bytes();
                match text.split_last() {
                    Some((b'}', body)) if self.breakpoints.contains(&(first + j)) => {
                        out(body);
                        out(CACHE_CONTROL.as_bytes());
                        out(b"}");
                    }
                    _ => out(text),
                }
            }
        }
        if let Some(release) = &self.release {
            out(release.as_bytes());
        }
        let open_end = if ephemeral && !self.ephemeral.is_empty() {
            lead(self.ephemeral_lead, out);
            for (j, part) in self.ephemeral.iter().enumerate() {
                if j > 0 {
                    out(b",");
                }
                out(part.text.as_bytes());
            }
            self.open_end
        } else if self.release.is_some() {
            Some(Role::System)
        } else {
            self.wire.items.last().and_then(|i| i.open_after)
        };
        if open_end.is_some() {
            out(b"]}");
        }
        if let Some(f) = frozen {
            // The tail ends with the body's closing brace; the trailer goes before it.
            match (ephemeral, &self.trailer, f.tail.as_bytes().split_last()) {
                (true, Some(trailer), Some((close, tail))) => {
                    out(tail);
                    out(trailer.as_bytes());
                    out(std::slice::from_ref(close));
                }
                _ => out(f.tail.as_bytes()),
            }
        }
    }

    /// The serialized pieces in order; their concatenation is the body. Borrowing, not
    /// copying: the history's bytes were written once, when each node was converted.
    pub fn chunks(&self) -> Vec<&[u8]> {
        let mut out = Vec::with_capacity(self.wire.items.len() * 2 + 8);
        self.emit(0, true, true, &mut |c| out.push(c));
        out
    }

    /// The pieces from the first node new in this request to the end: what a client that
    /// kept the previous body's stable part has not sent yet.
    pub fn new_chunks(&self) -> Vec<&[u8]> {
        let mut out = Vec::new();
        self.emit(self.new_from, false, true, &mut |c| out.push(c));
        out
    }

    /// Writes the body.
    pub fn write_to<W: Write>(&self, mut out: W) -> io::Result<()> {
        let mut result = Ok(());
        self.emit(0, true, true, &mut |c| {
            if result.is_ok() {
                result = out.write_all(c);
            }
        });
        result
    }

    /// The body as one buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        self.emit(0, true, true, &mut |c| out.extend_from_slice(c));
        out
    }

    /// The stable part as one buffer: a byte prefix of every later body of the epoch (but
    /// Anthropic's, whose breakpoints move).
    pub fn stable_bytes(&self) -> Vec<u8> {
        let mut out = self.to_bytes();
        out.truncate(self.stable_len);
        out
    }

    /// The body without this request's ephemeral content: a whole JSON body, which the
    /// next body of the epoch extends. Give it to [`compare`](crate::compare) as the
    /// earlier body.
    pub fn stable_body(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        self.emit(0, true, false, &mut |c| out.extend_from_slice(c));
        out
    }

    /// The blocks (Anthropic), parts (Gemini) or array elements (OpenAI) of the messages
    /// before the stable end, without `cache_control`: the unit every later body of the
    /// epoch starts with, whatever its breakpoints. Leading system nodes that went to a
    /// system field are not among them, nor is Chat Completions' prefix message.
    pub fn stable_blocks(&self) -> Vec<Block<'w>> {
        let api = self.wire.api;
        let role = |role: Role| {
            grouped(api).then_some(match (api, role) {
                (_, Role::User) => "user",
                (ApiKind::Gemini, Role::Assistant) => "model",
                (_, Role::Assistant) => "assistant",
                (_, Role::System) => "system",
            })
        };
        self.wire
            .items
            .iter()
            .flat_map(|i| {
                let role = role(i.role);
                i.parts.iter().map(move |p| Block {
                    role,
                    json: &p.text,
                })
            })
            .collect()
    }
}
