//! The guard for integrators who build bodies themselves: does the later body extend the
//! earlier one, and if not, where and why not.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};

use rustc_hash::{FxBuildHasher, FxHasher};

use prompt_core::input::excerpt;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::engine::{Break, Canonical, Context, diff};
use crate::raw::{self, Object, offset_in};

/// The largest body the guard reads; a longer one is refused before parsing.
pub const MAX_AUDIT_BODY_BYTES: usize = 32 << 20;

/// The shape of a body, recognised from its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// OpenAI Chat Completions (and llama.cpp's server): `messages` with system messages.
    ChatCompletions,
    /// OpenAI Responses: `instructions` and `input`.
    Responses,
    /// Anthropic Messages: `system` and `messages` of content blocks.
    Anthropic,
    /// Gemini `generateContent`: `systemInstruction` and `contents`.
    Gemini,
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Shape::ChatCompletions => "Chat Completions",
            Shape::Responses => "Responses",
            Shape::Anthropic => "Anthropic Messages",
            Shape::Gemini => "Gemini",
        })
    }
}

/// Which of the two bodies (or the one body read by [`body_parts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Which {
    /// The earlier body.
    Earlier,
    /// The later body.
    Later,
    /// A body read alone ([`body_parts`]).
    Request,
}

impl fmt::Display for Which {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Which::Earlier => "earlier",
            Which::Later => "later",
            Which::Request => "request",
        })
    }
}

/// Why two bodies cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// A body over [`MAX_AUDIT_BODY_BYTES`]; nothing was read.
    #[error("the {body} body is {len} bytes, over the {max}-byte limit")]
    TooLarge {
        /// Which body.
        body: Which,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A body that is not one JSON object with unique keys.
    #[error("the {body} body is {problem}")]
    NotAnObject {
        /// Which body.
        body: Which,
        /// What it is instead.
        problem: String,
    },
    /// A body of none of the known shapes.
    #[error(
        "the {body} body has none of `messages`, `input`/`instructions`, `contents`/`systemInstruction` (keys: {keys})"
    )]
    UnknownShape {
        /// Which body.
        body: Which,
        /// Its top-level keys, comma-separated (at most 200 bytes).
        keys: String,
    },
    /// Two bodies of different APIs.
    #[error("the earlier body is a {earlier} body, the later one a {later} body")]
    ShapeMismatch {
        /// The earlier body's shape.
        earlier: Shape,
        /// The later body's shape.
        later: Shape,
    },
    /// A known shape with a field of the wrong type.
    #[error("the {body} body's {at} is {problem}")]
    Malformed {
        /// Which body.
        body: Which,
        /// Where (`messages[3].content`).
        at: String,
        /// What is wrong.
        problem: String,
    },
}

/// What [`compare`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Every message and block of the earlier body is unchanged at the head of the later
    /// one (for Anthropic ignoring `cache_control`), with the same model, key and tools.
    Extends {
        /// The bodies' shape.
        shape: Shape,
    },
    /// It does not.
    Breaks(Break),
}

impl Verdict {
    /// Whether the later body extends the earlier one.
    pub fn extends(&self) -> bool {
        matches!(self, Verdict::Extends { .. })
    }
}

/// How an element of a body is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Form {
    /// As sent.
    Exact,
    /// A content block, a tool or a system block: without `cache_control` (breakpoints, which
    /// move between requests), and a text block (`type` and `text` only) by its text,
    /// whatever its keys' order or spacing.
    Block,
    /// A string that stands for the text block `{"type":"text","text":…}`.
    Text,
    /// A message: its other fields, then its content (`content`, Gemini `parts`) as the array
    /// of its blocks, each as a [`Form::Block`] (a string content as one text block).
    Message(ContentKey),
}

/// Where a message keeps its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ContentKey {
    Content,
    Parts,
}

impl ContentKey {
    fn as_str(self) -> &'static str {
        match self {
            ContentKey::Content => "content",
            ContentKey::Parts => "parts",
        }
    }
}

/// One element of a body: its bytes as sent (a slice of the body, so its offset is known),
/// and how it is compared. The compared form is computed when needed, never kept: bodies of
/// a million small messages hold two words and a tag per element.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Elem<'a> {
    pub(crate) raw: &'a str,
    pub(crate) form: Form,
}

impl<'a> Elem<'a> {
    pub(crate) fn new(raw: &'a RawValue, form: Form) -> Self {
        Self {
            raw: raw.get(),
            form,
        }
    }

    /// The element as compared.
    pub(crate) fn norm(&self) -> Cow<'a, str> {
        match self.form {
            Form::Exact => compact(self.raw),
            Form::Text => match text_block_of_literal(self.raw) {
                Some(block) => Cow::Owned(block),
                None => Cow::Borrowed(self.raw),
            },
            Form::Block => match compact(self.raw) {
                Cow::Borrowed(raw) => block_norm(raw),
                Cow::Owned(raw) => Cow::Owned(block_norm(&raw).into_owned()),
            },
            Form::Message(key) => message_norm(self.raw, key),
        }
    }

    /// A message without its content: its other fields (empty for other elements).
    pub(crate) fn rest(&self) -> Cow<'a, str> {
        match (self.form, Object::parse(self.raw)) {
            (Form::Message(key), Ok(o)) => o
                .without(key.as_str())
                .map_or(Cow::Borrowed(self.raw), Cow::Owned),
            _ => Cow::Borrowed(""),
        }
    }

    /// Where it starts in `body`.
    fn offset(&self, body: &str) -> usize {
        offset_in(body, self.raw).unwrap_or(0)
    }
}

/// JSON text without the whitespace between its tokens (a string's own is kept): what a
/// provider parses is the same whatever the spacing, so a value re-sent with other spacing
/// (another JSON writer, pretty-printed) is the same value.
pub(crate) fn compact(raw: &str) -> Cow<'_, str> {
    let spaced = |c: u8| matches!(c, b' ' | b'\n' | b'\r' | b'\t');
    // Nothing is copied until the first whitespace outside a string.
    let mut out: Option<Vec<u8>> = None;
    let (mut in_string, mut escaped) = (false, false);
    for (i, &c) in raw.as_bytes().iter().enumerate() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
        } else if c == b'"' {
            in_string = true;
        } else if spaced(c) {
            out.get_or_insert_with(|| {
                let mut v = Vec::with_capacity(raw.len());
                v.extend_from_slice(&raw.as_bytes()[..i]);
                v
            });
            continue;
        }
        if let Some(out) = out.as_mut() {
            out.push(c);
        }
    }
    match out {
        None => Cow::Borrowed(raw),
        // Only ASCII whitespace was dropped: still UTF-8.
        Some(out) => String::from_utf8(out).map_or(Cow::Borrowed(raw), Cow::Owned),
    }
}

/// A block as compared: a text block (`type: "text"` and a string `text`, and nothing else
/// but `cache_control`) as its text; otherwise without `cache_control`.
fn block_norm(raw: &str) -> Cow<'_, str> {
    if !raw.starts_with('{') {
        return Cow::Borrowed(raw);
    }
    let Ok(object) = Object::parse(raw) else {
        return Cow::Borrowed(raw);
    };
    let meaning = object
        .fields
        .iter()
        .filter(|(k, _)| k != "cache_control")
        .count();
    if meaning == 2
        && object.str("type").as_deref() == Some("text")
        && let Some(canonical) = object
            .get("text")
            .and_then(|t| text_block_of_literal(t.get()))
    {
        return if canonical == raw {
            Cow::Borrowed(raw)
        } else {
            Cow::Owned(canonical)
        };
    }
    object
        .without("cache_control")
        .map_or(Cow::Borrowed(raw), Cow::Owned)
}

/// A message as compared: its fields but `cache_control`, a string or array content as the
/// array of its blocks as compared.
fn message_norm(raw: &str, key: ContentKey) -> Cow<'_, str> {
    match Object::parse(raw) {
        Ok(object) => Cow::Owned(message_norm_of(&object, key)),
        Err(_) => Cow::Borrowed(raw),
    }
}

/// [`message_norm`] of a message already read.
fn message_norm_of(object: &Object<'_>, key: ContentKey) -> String {
    let content = object
        .get(key.as_str())
        .filter(|c| c.get().starts_with(['"', '[']))
        .map(|c| {
            // Sized once: a text block adds its wrapper to the text.
            let mut out = String::with_capacity(c.get().len() + 32);
            out.push('[');
            for (i, block) in content_blocks(object, key).iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&block.norm());
            }
            out.push(']');
            out
        });
    // Keys in sorted order: a message whose keys were sent in another order is the same
    // message to the provider, which renders it through its template.
    let mut fields: Vec<_> = object
        .fields
        .iter()
        .filter(|(k, _)| k != "cache_control")
        .collect();
    fields.sort_by(|a, b| a.0.cmp(&b.0));
    let size: usize = fields
        .iter()
        .map(|(k, v)| k.len() + v.get().len() + 4)
        .sum();
    let mut out = String::with_capacity(size + content.as_ref().map_or(0, |c| c.len()) + 2);
    out.push('{');
    for (k, v) in fields {
        if out.len() > 1 {
            out.push(',');
        }
        raw::push_quoted(&mut out, k);
        out.push(':');
        match &content {
            Some(content) if k == key.as_str() => out.push_str(content),
            _ => out.push_str(&compact(v.get())),
        }
    }
    out.push('}');
    out
}

/// A message's content blocks: a string as one text block, an array's elements as blocks.
pub(crate) fn content_blocks<'a>(object: &Object<'a>, key: ContentKey) -> Vec<Elem<'a>> {
    match object.get(key.as_str()) {
        Some(content) if content.get().starts_with('"') => vec![Elem::new(content, Form::Text)],
        Some(content) => raw::array_of(content)
            .unwrap_or_default()
            .into_iter()
            .map(|b| Elem::new(b, Form::Block))
            .collect(),
        None => Vec::new(),
    }
}

/// The text of a message's content: a string, or its blocks' `text`, a newline between.
fn content_text(raw: &str, key: ContentKey) -> String {
    let Ok(object) = Object::parse(raw) else {
        return String::new();
    };
    let Some(content) = object.get(key.as_str()) else {
        return String::new();
    };
    if let Some(s) = raw::string_of(content) {
        return s.into_owned();
    }
    let mut text = String::new();
    for block in raw::array_of(content).unwrap_or_default() {
        if let Some(t) = Object::of(block).ok().and_then(|b| b.str("text")) {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(&t);
        }
    }
    text
}

#[derive(Debug)]
pub(crate) struct Tool<'a> {
    pub(crate) name: String,
    pub(crate) elem: Elem<'a>,
}

#[derive(Debug)]
pub(crate) struct Msg<'a> {
    pub(crate) index: usize,
    pub(crate) role: Cow<'a, str>,
    /// The whole message, compared as a [`Form::Message`] (a Responses `input` string: as
    /// sent). Its blocks are read again when needed, at a break.
    pub(crate) elem: Elem<'a>,
    /// A hash of the message as compared.
    pub(crate) hash: u64,
    /// A hash of its bytes as sent, when the reading computed it (a memoized reading).
    pub(crate) raw_hash: Option<u64>,
}

impl<'a> Msg<'a> {
    /// `norm` is the message as compared, for its hash.
    fn new(index: usize, role: Cow<'a, str>, elem: Elem<'a>, norm: &str) -> Self {
        Self {
            index,
            role,
            elem,
            hash: element_hash(norm),
            raw_hash: None,
        }
    }
}

/// Evidence of the API a `messages` body is for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Evidence {
    anthropic: bool,
    chat: bool,
}

/// What a body is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// A comparison: every message is also read as compared, for its hash.
    Compare,
    /// Its parts alone ([`body_parts`]): as sent, in order.
    Parts,
}

/// What reading a message once said: its hash as compared, its role and the evidence of
/// the API it gave.
#[derive(Debug, Clone)]
pub(crate) struct Memoized {
    norm: u64,
    role: Box<str>,
    evidence: Evidence,
}

/// Messages read before, by the hash of their bytes and the body's class: bounded to two
/// generations of `capacity` entries (the older dropped when the newer is full).
#[derive(Debug, Default)]
pub(crate) struct MessageMemo {
    current: HashMap<u64, Memoized, FxBuildHasher>,
    previous: HashMap<u64, Memoized, FxBuildHasher>,
    capacity: usize,
}

impl MessageMemo {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            ..Self::default()
        }
    }

    /// The entry of `key`, moved to the newer generation when found in the older.
    fn get(&mut self, key: u64) -> Option<&Memoized> {
        if !self.current.contains_key(&key) {
            let hit = self.previous.remove(&key)?;
            self.insert(key, hit);
        }
        self.current.get(&key)
    }

    fn insert(&mut self, key: u64, value: Memoized) {
        if self.current.len() >= self.capacity {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, value);
    }

    /// The hash as compared of an element (a tool, a system block) whose bytes hash to
    /// `raw_hash`, compared in `form`: remembered, or `norm()` now.
    pub(crate) fn element(&mut self, raw_hash: u64, form: Form, norm: impl FnOnce() -> u64) -> u64 {
        let mut h = FxHasher::default();
        (raw_hash, form).hash(&mut h);
        let key = h.finish();
        if let Some(hit) = self.get(key) {
            return hit.norm;
        }
        let hash = norm();
        self.insert(
            key,
            Memoized {
                norm: hash,
                role: Box::default(),
                evidence: Evidence::default(),
            },
        );
        hash
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

/// Roles (and Responses item types) a remembered message names without a copy.
const COMMON_ROLES: [&str; 10] = [
    "user",
    "assistant",
    "system",
    "developer",
    "tool",
    "model",
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
];

/// The hash of an element's text, as sent or as compared: the one hash the engine keeps
/// and compares elements by (64 bits; not a defence against crafted collisions, which no
/// hash with a public key is).
pub(crate) fn element_hash(text: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(text.as_bytes());
    h.write_usize(text.len());
    h.finish()
}

/// A message's key in a [`MessageMemo`]: its bytes in a body of its class (a Gemini
/// content's blocks are its `parts`, others' their `content`).
fn memo_key(raw_hash: u64, class: Class) -> u64 {
    let mut h = FxHasher::default();
    (raw_hash, class as u8).hash(&mut h);
    h.finish()
}

#[derive(Debug)]
pub(crate) struct Parsed<'a> {
    pub(crate) which: Which,
    pub(crate) reading: Reading,
    pub(crate) text: &'a str,
    pub(crate) class: Class,
    pub(crate) evidence: Evidence,
    pub(crate) model: Option<&'a RawValue>,
    pub(crate) cache_key: Option<&'a RawValue>,
    pub(crate) params: Vec<(&'static str, Option<&'a RawValue>)>,
    pub(crate) tools: Vec<Tool<'a>>,
    pub(crate) tools_end: usize,
    /// The system field's blocks, and for Chat/Responses the leading system messages.
    pub(crate) system: Vec<Elem<'a>>,
    pub(crate) system_end: usize,
    pub(crate) messages: Vec<Msg<'a>>,
    pub(crate) messages_end: usize,
    /// The tools field and the system field, as sent.
    pub(crate) tools_field: Option<&'a RawValue>,
    pub(crate) system_field: Option<&'a RawValue>,
    /// Fields that name a session (`metadata.user_id`, `user`, `previous_response_id`,
    /// `conversation`), as sent.
    pub(crate) session_hints: Vec<(&'static str, &'a RawValue)>,
}

impl Parsed<'_> {
    /// The shape `evidence` (this body's, or both bodies' of a comparison) says it has.
    pub(crate) fn shape(&self, evidence: Evidence) -> Shape {
        match self.class {
            Class::Gemini => Shape::Gemini,
            Class::Responses => Shape::Responses,
            Class::Messages if evidence.anthropic && !evidence.chat => Shape::Anthropic,
            Class::Messages => Shape::ChatCompletions,
        }
    }

    fn content_key(&self) -> ContentKey {
        if self.class == Class::Gemini {
            ContentKey::Parts
        } else {
            ContentKey::Content
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Messages,
    Responses,
    Gemini,
}

const ANTHROPIC_BLOCKS: [&str; 6] = [
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "image",
    "document",
];

/// Compares two consecutive bodies of any supported API (recognised from their keys):
/// [`Verdict::Extends`], or the first place the later body stops extending the earlier one
/// and why — tools changed, the system field rewritten or grown by hoisting, a message
/// edited, inserted, removed or reordered.
///
/// Pass the earlier body as sent (its per-request tail then shows as
/// [`crate::Cause::TailDropped`]) or without its per-request tail
/// ([`Body::stable_body`](crate::Body::stable_body)). Anthropic bodies are compared block by
/// block ignoring `cache_control`, since breakpoints move between requests. Each body is
/// at most [`MAX_AUDIT_BODY_BYTES`]; the work is linear in their size.
///
/// ```
/// use prompt_wire::{compare, Cause};
/// let earlier = br#"{"model":"m","system":"Be brief.","messages":[{"role":"user","content":"hi"}]}"#;
/// let later = br#"{"model":"m","system":"Be brief.\n\nToday is Monday.","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"and?"}]}"#;
/// let verdict = compare(earlier, later).unwrap();
/// let prompt_wire::Verdict::Breaks(b) = verdict else { panic!("{verdict:?}") };
/// assert!(matches!(b.cause, Cause::InsertAboveHistory { hoisted: Some(_), .. }));
/// ```
pub fn compare(earlier: &[u8], later: &[u8]) -> Result<Verdict, GuardError> {
    let e = parse(earlier, Which::Earlier, Reading::Compare)?;
    let l = parse(later, Which::Later, Reading::Compare)?;
    if e.class != l.class {
        return Err(GuardError::ShapeMismatch {
            earlier: e.shape(e.evidence),
            later: l.shape(l.evidence),
        });
    }
    let evidence = Evidence {
        anthropic: e.evidence.anthropic || l.evidence.anthropic,
        chat: e.evidence.chat || l.evidence.chat,
    };
    let shape = e.shape(evidence);
    // One engine: the guard's verdict is its first change that loses tokens.
    let context = Context::default();
    let e = Canonical::from_parsed(e, shape, context, None);
    let l = Canonical::from_parsed(l, shape, context, None);
    let found = diff(&e, &l);
    Ok(match found.first_break() {
        None => Verdict::Extends { shape },
        Some(change) => Verdict::Breaks(Break {
            shape,
            place: change.place.clone(),
            cause: change.cause.clone(),
            divergence: change.divergence.clone(),
        }),
    })
}

/// One request body's parts as the guard reads them, each as sent: what a consumer that
/// measures a body part by part (`cacheline audit`) reads instead of parsing each API again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyParts<'a> {
    /// The body's shape, from its keys (a `messages` body with nothing only Anthropic sends
    /// reads as Chat Completions).
    pub shape: Shape,
    /// The tools field (`tools`; Gemini's holds `functionDeclarations`), when present and
    /// not null.
    pub tools: Option<&'a str>,
    /// The system field of the APIs that keep it beside the messages (Anthropic `system`,
    /// Responses `instructions`, Gemini `systemInstruction`), when present and not null.
    /// Chat Completions' system messages are among [`BodyParts::messages`].
    pub system: Option<&'a str>,
    /// Each message in order: Chat and Anthropic `messages`, Responses `input` items (or
    /// its one string), Gemini `contents`.
    pub messages: Vec<&'a str>,
}

/// Reads one request body of any shape [`compare`] knows into its parts, with the checks
/// `compare` makes of each body (one JSON object of unique keys, at most
/// [`MAX_AUDIT_BODY_BYTES`], whose strings decode; tools and messages objects); an error
/// names the body [`Which::Request`]. Messages are read whole only while they may tell the
/// shape. Linear in the body's size; nothing is copied.
///
/// ```
/// use prompt_wire::{body_parts, Shape};
/// let body = br#"{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":"hi"}]}"#;
/// let parts = body_parts(body).unwrap();
/// assert_eq!(parts.shape, Shape::Responses);
/// assert_eq!(parts.system, Some(r#""Be brief.""#));
/// assert_eq!(parts.messages, [r#"{"role":"user","content":"hi"}"#]);
/// ```
pub fn body_parts(body: &[u8]) -> Result<BodyParts<'_>, GuardError> {
    let parsed = parse(body, Which::Request, Reading::Parts)?;
    Ok(BodyParts {
        shape: parsed.shape(parsed.evidence),
        tools: parsed.tools_field.map(RawValue::get),
        system: parsed.system_field.map(RawValue::get),
        messages: parsed.messages.iter().map(|m| m.elem.raw).collect(),
    })
}

/// How deep [`without_cache_control`] looks: an array of parts, a message, its content, a
/// `tool_result` block and its own content; past that, blocks are left as sent.
const CACHE_CONTROL_DEPTH: usize = 6;

/// `part` (a tools or system field, a message, or an array of them, as [`body_parts`] gives
/// them) without `cache_control`, on it and on the content blocks within it, as the guard
/// compares bodies: Anthropic's breakpoints move between requests, and its cache does not
/// key on them. The bytes as sent when it has none; the keys kept in their order, each value
/// as sent. Linear in the part's size.
///
/// ```
/// use prompt_wire::without_cache_control;
/// let marked = r#"{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}"#;
/// assert_eq!(without_cache_control(marked), r#"{"role":"user","content":[{"type":"text","text":"hi"}]}"#);
/// ```
pub fn without_cache_control(part: &str) -> Cow<'_, str> {
    strip_cache_control(part, CACHE_CONTROL_DEPTH)
}

fn strip_cache_control(part: &str, depth: usize) -> Cow<'_, str> {
    if depth == 0 || !part.contains("\"cache_control\"") {
        return Cow::Borrowed(part);
    }
    if part.starts_with('[') {
        let Some(items) = serde_json::from_str::<&RawValue>(part)
            .ok()
            .and_then(raw::array_of)
        else {
            return Cow::Borrowed(part);
        };
        let mut out = String::with_capacity(part.len());
        out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&strip_cache_control(item.get(), depth - 1));
        }
        out.push(']');
        return Cow::Owned(out);
    }
    let Ok(object) = Object::parse(part) else {
        return Cow::Borrowed(part);
    };
    let mut out = String::with_capacity(part.len());
    out.push('{');
    for (k, v) in object.fields.iter().filter(|(k, _)| k != "cache_control") {
        if out.len() > 1 {
            out.push(',');
        }
        raw::push_quoted(&mut out, k);
        out.push(':');
        if k == "content" && v.get().starts_with('[') {
            out.push_str(&strip_cache_control(v.get(), depth - 1));
        } else {
            out.push_str(v.get());
        }
    }
    out.push('}');
    Cow::Owned(out)
}

impl<'a> Parsed<'a> {
    fn malformed(&self, at: impl Into<String>, problem: impl Into<String>) -> GuardError {
        GuardError::Malformed {
            body: self.which,
            at: at.into(),
            problem: problem.into(),
        }
    }

    fn end_of(&self, raw: &RawValue) -> usize {
        offset_in(self.text, raw.get()).map_or(0, |o| o + raw.get().len().saturating_sub(1))
    }

    fn array(&self, raw: &'a RawValue, at: &str) -> Result<Vec<&'a RawValue>, GuardError> {
        raw::array_of(raw)
            .ok_or_else(|| self.malformed(at, format!("{}, not an array", raw::kind_of(raw))))
    }

    fn object(&self, raw: &'a RawValue, at: &str) -> Result<Object<'a>, GuardError> {
        Object::of(raw).map_err(|p| self.malformed(at, p.to_string()))
    }

    /// Reads `tools`: each tool's name and bytes (Gemini: each function declaration).
    fn read_tools(&mut self, raw: &'a RawValue) -> Result<(), GuardError> {
        self.tools_end = self.end_of(raw);
        for (i, tool) in self.array(raw, "tools")?.into_iter().enumerate() {
            let at = format!("tools[{i}]");
            let object = self.object(tool, &at)?;
            if self.class == Class::Gemini {
                if let Some(decls) = object.get("functionDeclarations") {
                    for decl in self.array(decls, &format!("{at}.functionDeclarations"))? {
                        let name = Object::of(decl)
                            .ok()
                            .and_then(|d| d.str("name").map(Cow::into_owned))
                            .unwrap_or_default();
                        self.tools.push(Tool {
                            name,
                            elem: Elem::new(decl, Form::Block),
                        });
                    }
                } else {
                    let name = object.fields.first().map(|(k, _)| k.to_string());
                    self.tools.push(Tool {
                        name: name.unwrap_or_default(),
                        elem: Elem::new(tool, Form::Block),
                    });
                }
                continue;
            }
            let function = object.get("function").and_then(|f| Object::of(f).ok());
            if function.is_some() {
                self.evidence.chat = true;
            }
            if object.has("input_schema") {
                self.evidence.anthropic = true;
            }
            let name = function
                .as_ref()
                .and_then(|f| f.str("name"))
                .or_else(|| object.str("name"))
                .or_else(|| object.str("type"))
                .map(Cow::into_owned)
                .unwrap_or_default();
            self.tools.push(Tool {
                name,
                elem: Elem::new(tool, Form::Block),
            });
        }
        Ok(())
    }

    /// Whether the next message must be read whole: always for a comparison; for its parts
    /// alone only while it may still tell the shape (a `messages` body not yet known to be
    /// Chat Completions', since evidence of Chat decides it).
    fn reads_whole_messages(&self) -> bool {
        self.reading == Reading::Compare || (self.class == Class::Messages && !self.evidence.chat)
    }

    /// A message kept as sent, checked to be an object: what [`body_parts`] needs of it.
    fn push_message_as_sent(&mut self, index: usize, raw: &'a RawValue) -> Result<(), GuardError> {
        if !raw.get().starts_with('{') {
            return Err(self.malformed(
                format!("messages[{index}]"),
                format!("{}, not an object", raw::kind_of(raw)),
            ));
        }
        let key = self.content_key();
        self.messages.push(Msg::new(
            index,
            Cow::Borrowed(""),
            Elem::new(raw, Form::Message(key)),
            "",
        ));
        Ok(())
    }

    /// [`Parsed::read_message`], looked up in `memo` by the message's bytes first; a
    /// message read now is remembered there.
    fn read_message_memoized(
        &mut self,
        index: usize,
        raw: &'a RawValue,
        memo: &mut MessageMemo,
    ) -> Result<(), GuardError> {
        let raw_hash = element_hash(raw.get());
        let key = memo_key(raw_hash, self.class);
        if let Some(hit) = memo.get(key) {
            self.evidence.anthropic |= hit.evidence.anthropic;
            self.evidence.chat |= hit.evidence.chat;
            let form = Form::Message(self.content_key());
            let role = match COMMON_ROLES.iter().find(|r| **r == hit.role.as_ref()) {
                Some(r) => Cow::Borrowed(*r),
                None => Cow::Owned(hit.role.to_string()),
            };
            self.messages.push(Msg {
                index,
                role,
                elem: Elem::new(raw, form),
                hash: hit.norm,
                raw_hash: Some(raw_hash),
            });
            return Ok(());
        }
        // This message's own evidence, apart from the body's so far.
        let before = std::mem::take(&mut self.evidence);
        let read = self.read_message(index, raw);
        let own = self.evidence;
        self.evidence = Evidence {
            anthropic: before.anthropic || own.anthropic,
            chat: before.chat || own.chat,
        };
        read?;
        if let Some(m) = self.messages.last_mut() {
            m.raw_hash = Some(raw_hash);
            memo.insert(
                key,
                Memoized {
                    norm: m.hash,
                    role: m.role.as_ref().into(),
                    evidence: own,
                },
            );
        }
        Ok(())
    }

    /// Reads one message (or Responses input item, or Gemini content).
    fn read_message(&mut self, index: usize, raw: &'a RawValue) -> Result<(), GuardError> {
        let at = format!("messages[{index}]");
        let object = self.object(raw, &at)?;
        let role = object
            .str("role")
            .or_else(|| object.str("type"))
            .unwrap_or(Cow::Borrowed("user"));
        // A `role: "system"` message is no evidence either way: Anthropic accepts one inside
        // `messages` too (Claude Opus 4.8's mid-conversation system messages), and a body
        // with no evidence at all is read as Chat Completions anyway.
        if matches!(role.as_ref(), "developer" | "tool") || object.has("tool_calls") {
            self.evidence.chat = true;
        }
        let key = self.content_key();
        if let Some(content) = object.get(key.as_str())
            && content.get().starts_with('[')
        {
            for block in self.array(content, &format!("{at}.{}", key.as_str()))? {
                if let Ok(b) = Object::of(block)
                    && b.str("type")
                        .is_some_and(|t| ANTHROPIC_BLOCKS.contains(&t.as_ref()))
                    && !b.has("image_url")
                {
                    self.evidence.anthropic = true;
                }
            }
        }
        // Only a comparison needs the message as compared (a copy of it).
        let norm = match self.reading {
            Reading::Compare => message_norm_of(&object, key),
            Reading::Parts => String::new(),
        };
        self.messages.push(Msg::new(
            index,
            role,
            Elem::new(raw, Form::Message(key)),
            &norm,
        ));
        Ok(())
    }

    /// Reads a system field: a string, an array of text blocks, or Gemini's `{parts}`.
    fn read_system(&mut self, raw: &'a RawValue, at: &str) -> Result<(), GuardError> {
        self.system_end = self.end_of(raw);
        let blocks = if raw.get().starts_with('"') {
            self.system.push(Elem::new(raw, Form::Text));
            return Ok(());
        } else if raw.get().starts_with('{') {
            let object = self.object(raw, at)?;
            match object.get("parts") {
                Some(parts) => self.array(parts, &format!("{at}.parts"))?,
                None => vec![raw],
            }
        } else {
            self.array(raw, at)?
        };
        for block in blocks {
            self.system.push(Elem::new(block, Form::Block));
        }
        Ok(())
    }

    /// Chat Completions and Responses: the leading system messages are the system field.
    pub(crate) fn split_leading_system(&mut self) {
        let lead = self
            .messages
            .iter()
            .take_while(|m| matches!(m.role.as_ref(), "system" | "developer"))
            .count();
        if lead == 0 {
            return;
        }
        let rest = self.messages.split_off(lead);
        let leading = std::mem::replace(&mut self.messages, rest);
        if let Some(last) = leading.last() {
            self.system_end = last.elem.offset(self.text) + last.elem.raw.len();
        }
        self.push_system_messages(leading);
    }

    /// Leading system messages join the system field, each compared as a message.
    fn push_system_messages(&mut self, leading: Vec<Msg<'a>>) {
        self.system.extend(leading.into_iter().map(|m| m.elem));
    }
}

/// The text of a system field's elements, a newline between two: a string's, a block's
/// `text`, a system message's content. Read only when a system change must be told from
/// hoisting, never on every request.
pub(crate) fn system_text_of<'e>(elems: impl Iterator<Item = Elem<'e>>) -> String {
    let mut out = String::new();
    for e in elems {
        let text = match e.form {
            Form::Text => serde_json::from_str::<Cow<'_, str>>(e.raw)
                .ok()
                .map(Cow::into_owned),
            Form::Block => Object::parse(e.raw)
                .ok()
                .and_then(|b| b.str("text").map(Cow::into_owned)),
            Form::Message(key) => Some(content_text(e.raw, key)),
            Form::Exact => None,
        };
        if let Some(text) = text {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&text);
        }
    }
    out
}

/// A string content or system field, compared as the one text block it stands for.
fn text_block(text: &str) -> String {
    format!(r#"{{"type":"text","text":{}}}"#, raw::quote(text))
}

/// The text block a JSON string literal stands for (`None`: not a string). A literal
/// already written as [`raw::quote`] writes its text (the usual case) is used as it is,
/// without decoding and quoting it again.
fn text_block_of_literal(literal: &str) -> Option<String> {
    if quoted_canonically(literal) {
        return Some(format!(r#"{{"type":"text","text":{literal}}}"#));
    }
    let text = serde_json::from_str::<Cow<'_, str>>(literal).ok()?;
    Some(text_block(&text))
}

/// Whether `literal` is a JSON string written exactly as [`raw::quote`] writes its text:
/// the only escapes `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f` and `\u00xx` (lower-case
/// hex) for the other control characters, and no raw control character.
fn quoted_canonically(literal: &str) -> bool {
    let b = literal.as_bytes();
    if b.len() < 2 || b[0] != b'"' || b[b.len() - 1] != b'"' {
        return false;
    }
    let inner = &b[1..b.len() - 1];
    let mut i = 0;
    while i < inner.len() {
        match inner[i] {
            b'\\' => {
                match inner.get(i + 1) {
                    Some(b'"' | b'\\' | b'n' | b'r' | b't' | b'b' | b'f') => i += 2,
                    Some(b'u') => {
                        // Only `\u00xx` for a control character without a short escape.
                        let Some(hex) = inner.get(i + 2..i + 6) else {
                            return false;
                        };
                        let lower = |c: &u8| c.is_ascii_digit() || (b'a'..=b'f').contains(c);
                        if hex[0] != b'0' || hex[1] != b'0' || !hex.iter().all(lower) {
                            return false;
                        }
                        let value =
                            u8::from_str_radix(std::str::from_utf8(&hex[2..]).unwrap_or("ff"), 16)
                                .unwrap_or(0xff);
                        if value >= 0x20 || matches!(value, 0x08 | 0x09 | 0x0a | 0x0c | 0x0d) {
                            return false;
                        }
                        i += 6;
                    }
                    _ => return false,
                }
            }
            b'"' => return false,
            c if c < 0x20 => return false,
            _ => i += 1,
        }
    }
    true
}

pub(crate) fn parse(
    bytes: &[u8],
    which: Which,
    reading: Reading,
) -> Result<Parsed<'_>, GuardError> {
    parse_memoized(bytes, which, reading, None)
}

/// [`parse`], with messages read before looked up in `memo` by their bytes instead of
/// being read again (a history is resent with every request).
pub(crate) fn parse_memoized<'b>(
    bytes: &'b [u8],
    which: Which,
    reading: Reading,
    memo: Option<&mut MessageMemo>,
) -> Result<Parsed<'b>, GuardError> {
    if bytes.len() > MAX_AUDIT_BODY_BYTES {
        return Err(GuardError::TooLarge {
            body: which,
            len: bytes.len(),
            max: MAX_AUDIT_BODY_BYTES,
        });
    }
    let text = std::str::from_utf8(bytes).map_err(|e| GuardError::NotAnObject {
        body: which,
        problem: format!("not UTF-8 ({e})"),
    })?;
    let top = Object::parse(text).map_err(|p| GuardError::NotAnObject {
        body: which,
        problem: p.to_string(),
    })?;
    parse_object(text, top, which, reading, memo)
}

/// [`parse_memoized`] of a body whose top-level object its caller has read already (`top`,
/// [`Object::parse`] of `text`): a log line that is a bare body is not scanned twice.
pub(crate) fn parse_object<'b>(
    text: &'b str,
    top: Object<'b>,
    which: Which,
    reading: Reading,
    mut memo: Option<&mut MessageMemo>,
) -> Result<Parsed<'b>, GuardError> {
    if text.len() > MAX_AUDIT_BODY_BYTES {
        return Err(GuardError::TooLarge {
            body: which,
            len: text.len(),
            max: MAX_AUDIT_BODY_BYTES,
        });
    }
    let has = |k: &str| top.has(k);
    let class = if has("contents") || has("systemInstruction") || has("system_instruction") {
        Class::Gemini
    } else if has("input") || has("instructions") {
        Class::Responses
    } else if has("messages") {
        Class::Messages
    } else {
        let keys = top
            .fields
            .iter()
            .map(|(k, _)| k.as_ref())
            .collect::<Vec<_>>()
            .join(", ");
        return Err(GuardError::UnknownShape {
            body: which,
            keys: excerpt(&keys, 200).into_owned(),
        });
    };
    let mut parsed = Parsed {
        which,
        reading,
        text,
        class,
        evidence: Evidence::default(),
        model: top.get("model"),
        cache_key: top.get("prompt_cache_key"),
        params: Vec::new(),
        tools: Vec::new(),
        tools_end: 0,
        system: Vec::new(),
        system_end: 0,
        messages: Vec::new(),
        messages_end: 0,
        tools_field: None,
        system_field: None,
        session_hints: Vec::new(),
    };
    let user_id = top
        .get("metadata")
        .and_then(|o| Object::of(o).ok())
        .and_then(|o| o.get("user_id"));
    for (name, value) in [
        ("metadata.user_id", user_id),
        ("previous_response_id", top.get("previous_response_id")),
        ("conversation", top.get("conversation")),
        ("user", top.get("user")),
    ] {
        if let Some(v) = value.filter(|v| !raw::is_null(v)) {
            parsed.session_hints.push((name, v));
        }
    }
    if has("prompt_cache_key") || has("cache_prompt") {
        parsed.evidence.chat = true;
    }
    if has("system") || has("anthropic_version") {
        parsed.evidence.anthropic = true;
    }
    // Parameters that key the provider's cache beside the prompt (each compared as sent).
    let nested = |outer: &str, inner: &str| {
        top.get(outer)
            .and_then(|o| Object::of(o).ok())
            .and_then(|o| o.get(inner))
    };
    parsed.params = match class {
        // Anthropic: a change to these invalidates the cached messages. Chat Completions:
        // OpenAI's diagnostics name the reasoning effort, verbosity, format and tier.
        Class::Messages => vec![
            ("tool_choice", top.get("tool_choice")),
            ("thinking", top.get("thinking")),
            ("reasoning_effort", top.get("reasoning_effort")),
            ("verbosity", top.get("verbosity")),
            ("response_format", top.get("response_format")),
            ("service_tier", top.get("service_tier")),
            ("prompt_cache_retention", top.get("prompt_cache_retention")),
        ],
        // OpenAI's Responses diagnostics: text format, reasoning effort, verbosity, tier.
        Class::Responses => vec![
            ("reasoning.effort", nested("reasoning", "effort")),
            ("text.format", nested("text", "format")),
            ("text.verbosity", nested("text", "verbosity")),
            ("service_tier", top.get("service_tier")),
            ("prompt_cache_retention", top.get("prompt_cache_retention")),
        ],
        Class::Gemini => vec![
            ("toolConfig", top.get("toolConfig")),
            ("cachedContent", top.get("cachedContent")),
        ],
    };
    // A null field is an absent one, as providers read it (loggers write `"tools": null`).
    let field = |key: &str| top.get(key).filter(|v| !raw::is_null(v));
    if let Some(tools) = field("tools") {
        parsed.tools_field = Some(tools);
        parsed.read_tools(tools)?;
    }
    let system_key = match class {
        Class::Gemini if has("system_instruction") => Some("system_instruction"),
        Class::Gemini => Some("systemInstruction"),
        Class::Responses => Some("instructions"),
        Class::Messages => Some("system"),
    };
    if let Some(key) = system_key
        && let Some(system) = field(key)
    {
        parsed.system_field = Some(system);
        parsed.read_system(system, key)?;
    }
    let array_key = match class {
        Class::Gemini => "contents",
        Class::Responses => "input",
        Class::Messages => "messages",
    };
    if let Some(messages) = top.get(array_key) {
        parsed.messages_end = parsed.end_of(messages);
        if messages.get().starts_with('"') {
            // Responses' `input` may be one string: one user message.
            parsed.messages.push(Msg::new(
                0,
                Cow::Borrowed("user"),
                Elem::new(messages, Form::Exact),
                messages.get(),
            ));
        } else {
            let items = parsed.array(messages, array_key)?;
            // Sized once: growing by doubling would hold up to three times the messages.
            parsed.messages.reserve_exact(items.len());
            for (i, m) in items.into_iter().enumerate() {
                if parsed.reads_whole_messages() {
                    match memo.as_deref_mut() {
                        Some(memo) => parsed.read_message_memoized(i, m, memo)?,
                        None => parsed.read_message(i, m)?,
                    }
                } else {
                    parsed.push_message_as_sent(i, m)?;
                }
            }
        }
    }
    if class == Class::Responses && reading == Reading::Compare {
        // Leading system items join `instructions` as the system field.
        let lead = parsed
            .messages
            .iter()
            .take_while(|m| matches!(m.role.as_ref(), "system" | "developer"))
            .count();
        if lead > 0 {
            let rest = parsed.messages.split_off(lead);
            let leading = std::mem::replace(&mut parsed.messages, rest);
            parsed.push_system_messages(leading);
        }
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cause;

    fn verdict(a: &str, b: &str) -> Verdict {
        compare(a.as_bytes(), b.as_bytes()).unwrap()
    }

    fn cause(a: &str, b: &str) -> Cause {
        match verdict(a, b) {
            Verdict::Breaks(b) => b.cause,
            v => panic!("{v:?}"),
        }
    }

    proptest::proptest! {
        /// A literal taken as it is must be what decoding and quoting it again gives: the
        /// fast path never changes a text block's bytes.
        #[test]
        fn a_literal_taken_as_written_is_its_text_quoted_again(
            text in "(\\PC|[\\x00-\\x1f\"\\\\/\u{e9}])*",
            escapes in proptest::collection::vec((0usize..64, 0usize..8), 0..4),
        ) {
            let quoted = raw::quote(&text);
            proptest::prop_assert!(quoted_canonically(&quoted));
            // Other spellings of the same text: `\/`, `\u00e9`, `\u000A`, `\u0041`.
            let mut other = quoted.clone();
            for (at, which) in escapes {
                let at = 1 + at % quoted.len().saturating_sub(1).max(1);
                if !other.is_char_boundary(at) || other[..at].ends_with('\\') {
                    continue;
                }
                let piece = ["\\/", "\\u00e9", "\\u000A", "\\u0041", "\\u000a", "\\u0001", "\\t", "é"][which];
                other.insert_str(at.min(other.len() - 1), piece);
            }
            if let Ok(decoded) = serde_json::from_str::<String>(&other) {
                proptest::prop_assert_eq!(
                    quoted_canonically(&other),
                    raw::quote(&decoded) == other,
                    "{}", other
                );
                proptest::prop_assert_eq!(
                    text_block_of_literal(&other),
                    Some(text_block(&decoded))
                );
            }
        }
    }

    #[test]
    fn a_body_extends_itself_and_its_continuation() {
        let a = r#"{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"}]}"#;
        let b = r#"{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}],"temperature":1}"#;
        assert!(verdict(a, a).extends());
        assert!(verdict(a, b).extends());
    }

    #[test]
    fn chat_message_edits_removals_insertions_and_tails_are_told_apart() {
        let m = |xs: &[&str]| {
            let msgs: Vec<String> = xs
                .iter()
                .map(|x| format!(r#"{{"role":"user","content":"{x}"}}"#))
                .collect();
            format!(r#"{{"messages":[{}]}}"#, msgs.join(","))
        };
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "B", "c"])),
            Cause::EditInPlace
        );
        assert_eq!(cause(&m(&["a", "b", "c"]), &m(&["a", "c"])), Cause::Removed);
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "x", "b", "c", "d"])),
            Cause::InsertAboveHistory {
                count: 1,
                hoisted: None
            }
        );
        // The earlier end sent again at the very end, after new messages: a per-request
        // tail; the cache loses the same bytes either way.
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "x", "b", "c"])),
            Cause::TailDropped
        );
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "c", "b"])),
            Cause::Reorder
        );
        // The last message replaced by one of the same role reads as an edit; by one of
        // another role, as its end not carried over.
        assert_eq!(
            cause(&m(&["a", "b", "eph"]), &m(&["a", "b", "d", "e"])),
            Cause::EditInPlace
        );
        let eph =
            r#"{"messages":[{"role":"user","content":"a"},{"role":"system","content":"eph"}]}"#;
        let next =
            r#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}"#;
        assert_eq!(cause(eph, next), Cause::TailDropped);
        assert_eq!(cause(&m(&["a", "b"]), &m(&["a"])), Cause::TailDropped);
    }

    #[test]
    fn anthropic_blocks_compare_without_cache_control_and_merge_into_the_last_message() {
        let a = r#"{"model":"m","system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}"#;
        let b = r#"{"model":"m","system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"text","text":"more","cache_control":{"type":"ephemeral"}}]}]}"#;
        assert_eq!(
            verdict(a, b),
            Verdict::Extends {
                shape: Shape::Anthropic
            }
        );
    }
}
