//! The guard for integrators who build bodies themselves: does the later body extend the
//! earlier one, and if not, where and why not.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};

use prompt_core::divergence::{Divergence, Excerpt, common_prefix_len};
use prompt_core::input::{EXCERPT_BYTES, excerpt};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::raw::{self, Object, offset_in};

/// The largest body the guard reads; a longer one is refused before parsing.
pub const MAX_AUDIT_BODY_BYTES: usize = 32 << 20;

/// Bytes of hoisted text shown in [`Cause::Hoisting`].
const HOISTED_EXCERPT: usize = 120;

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

/// Where a later body stops extending the earlier one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "place", rename_all = "snake_case")]
pub enum Place {
    /// The `model`.
    Model,
    /// The `prompt_cache_key`.
    CacheKey,
    /// A parameter that keys the provider's cache (Anthropic's `tool_choice`, `thinking`).
    Parameter {
        /// Its name.
        name: String,
    },
    /// The tools field, at this tool (in the later body's order).
    Tools {
        /// The tool's index.
        index: usize,
    },
    /// The system field (Anthropic `system`, Gemini `systemInstruction`, Responses
    /// `instructions`, or Chat's leading system messages), at this block.
    System {
        /// The block's index.
        block: usize,
    },
    /// A message (Responses: an input item).
    Message {
        /// Its index in the body's messages array.
        index: usize,
        /// The content block, for APIs of content blocks.
        block: Option<usize>,
    },
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Model => f.write_str("model"),
            Place::CacheKey => f.write_str("prompt_cache_key"),
            Place::Parameter { name } => write!(f, "parameter {name}"),
            Place::Tools { index } => write!(f, "tools[{index}]"),
            Place::System { block } => write!(f, "system block {block}"),
            Place::Message {
                index,
                block: Some(block),
            } => write!(f, "message {index}, block {block}"),
            Place::Message { index, block: None } => write!(f, "message {index}"),
        }
    }
}

/// Why the later body does not extend the earlier one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum Cause {
    /// Another model: no cache is shared across models.
    ModelChanged,
    /// Another `prompt_cache_key`: the request is routed to another cache.
    CacheKeyChanged,
    /// A parameter that keys the cache changed.
    ParameterChanged,
    /// A tool appears that the earlier body did not have.
    ToolAdded {
        /// Its name.
        name: String,
    },
    /// A tool of the earlier body is gone.
    ToolRemoved {
        /// Its name.
        name: String,
    },
    /// A tool's definition changed.
    ToolEdited {
        /// Its name.
        name: String,
    },
    /// The same tools in another order.
    ToolsReordered {
        /// The tool found where another was.
        name: String,
    },
    /// The system field was rewritten.
    SystemRewritten,
    /// The later system field is the earlier one plus text that, in an append-only client,
    /// would have been a later message: an update moved to the head.
    Hoisting {
        /// The start of the text added to the system field.
        hoisted: String,
    },
    /// A message the earlier body had was edited in place.
    MessageEdited,
    /// Messages were inserted before this one.
    MessageInserted {
        /// How many.
        count: usize,
    },
    /// This message of the earlier body is gone; the ones after it moved up.
    MessageRemoved,
    /// The earlier body's messages appear in another order.
    MessagesReordered,
    /// The earlier body's content from here on is not in the later body (which is shorter,
    /// or goes on with other content), or comes again only at the later body's very end:
    /// only the earlier body's end is lost, as with a per-request (ephemeral) tail.
    TailDropped,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::ModelChanged => f.write_str("the model changed"),
            Cause::CacheKeyChanged => f.write_str("the prompt_cache_key changed"),
            Cause::ParameterChanged => f.write_str("a cache-keying parameter changed"),
            Cause::ToolAdded { name } => write!(f, "tool `{name}` was added"),
            Cause::ToolRemoved { name } => write!(f, "tool `{name}` was removed"),
            Cause::ToolEdited { name } => write!(f, "tool `{name}` was edited"),
            Cause::ToolsReordered { name } => {
                write!(f, "the tools were reordered (`{name}` moved)")
            }
            Cause::SystemRewritten => f.write_str("the system field was rewritten"),
            Cause::Hoisting { hoisted } => write!(
                f,
                "hoisting: text was added to the system field instead of appended as a message ({hoisted:?})"
            ),
            Cause::MessageEdited => f.write_str("a message was edited"),
            Cause::MessageInserted { count } => {
                write!(f, "{count} message(s) were inserted before it")
            }
            Cause::MessageRemoved => f.write_str("a message was removed"),
            Cause::MessagesReordered => f.write_str("the messages were reordered"),
            Cause::TailDropped => f.write_str("the earlier body's end is not carried over"),
        }
    }
}

/// The first place where the later body stops extending the earlier one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Break {
    /// The bodies' shape.
    pub shape: Shape,
    /// Where (flattened into the break's JSON: `"place"` and its fields).
    #[serde(flatten)]
    pub place: Place,
    /// Why (flattened into the break's JSON: `"cause"` and its fields).
    #[serde(flatten)]
    pub cause: Cause,
    /// The position in the later body, with both sides' bytes around it (for Anthropic,
    /// without `cache_control`). `message_index` is set for a message.
    pub divergence: Divergence,
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} at {} (byte {} of the later body)",
            self.shape, self.cause, self.place, self.divergence.byte_offset
        )
    }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ContentKey {
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
struct Elem<'a> {
    raw: &'a str,
    form: Form,
}

impl<'a> Elem<'a> {
    fn new(raw: &'a RawValue, form: Form) -> Self {
        Self {
            raw: raw.get(),
            form,
        }
    }

    /// The element as compared.
    fn norm(&self) -> Cow<'a, str> {
        match self.form {
            Form::Exact => Cow::Borrowed(self.raw),
            Form::Text => match serde_json::from_str::<Cow<'_, str>>(self.raw) {
                Ok(text) => Cow::Owned(text_block(&text)),
                Err(_) => Cow::Borrowed(self.raw),
            },
            Form::Block => block_norm(self.raw),
            Form::Message(key) => message_norm(self.raw, key),
        }
    }

    /// Whether the two are the same as compared (the same bytes always are).
    fn same(&self, other: &Elem<'_>) -> bool {
        self.raw == other.raw || self.norm() == other.norm()
    }

    /// A message without its content: its other fields (empty for other elements).
    fn rest(&self) -> Cow<'a, str> {
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
        && let Some(text) = object.str("text")
    {
        let canonical = text_block(&text);
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
        .map(|_| {
            let mut out = String::from("[");
            for (i, block) in content_blocks(object, key).iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&block.norm());
            }
            out.push(']');
            out
        });
    let mut out = String::from("{");
    for (k, v) in object.fields.iter().filter(|(k, _)| k != "cache_control") {
        if out.len() > 1 {
            out.push(',');
        }
        raw::push_quoted(&mut out, k);
        out.push(':');
        match &content {
            Some(content) if k == key.as_str() => out.push_str(content),
            _ => out.push_str(v.get()),
        }
    }
    out.push('}');
    out
}

/// A message's content blocks: a string as one text block, an array's elements as blocks.
fn content_blocks<'a>(object: &Object<'a>, key: ContentKey) -> Vec<Elem<'a>> {
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
struct Tool<'a> {
    name: String,
    elem: Elem<'a>,
}

#[derive(Debug)]
struct Msg<'a> {
    index: usize,
    role: Cow<'a, str>,
    /// The whole message, compared as a [`Form::Message`] (a Responses `input` string: as
    /// sent). Its blocks are read again when needed, at a break.
    elem: Elem<'a>,
    /// A hash of the message as compared.
    hash: u64,
}

impl<'a> Msg<'a> {
    /// `norm` is the message as compared, for its hash.
    fn new(index: usize, role: Cow<'a, str>, elem: Elem<'a>, norm: &str) -> Self {
        let mut h = DefaultHasher::new();
        norm.hash(&mut h);
        Self {
            index,
            role,
            elem,
            hash: h.finish(),
        }
    }

    /// The content blocks (parts); a string content as one text block.
    fn blocks(&self) -> Vec<Elem<'a>> {
        match self.elem.form {
            Form::Message(key) => Object::parse(self.elem.raw)
                .map(|o| content_blocks(&o, key))
                .unwrap_or_default(),
            _ => vec![Elem {
                raw: self.elem.raw,
                form: Form::Text,
            }],
        }
    }

    /// The same message, as compared (blocks without `cache_control`, text blocks by text).
    fn same(&self, other: &Msg<'_>) -> bool {
        self.hash == other.hash && self.elem.same(&other.elem)
    }

    /// The same message but for its content: the same role and other fields.
    fn same_but_content(&self, other: &Msg<'_>) -> bool {
        self.role == other.role && self.elem.rest() == other.elem.rest()
    }
}

/// Evidence of the API a `messages` body is for.
#[derive(Debug, Default, Clone, Copy)]
struct Evidence {
    anthropic: bool,
    chat: bool,
}

/// What a body is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// A comparison: every message is also read as compared, for its hash.
    Compare,
    /// Its parts alone ([`body_parts`]): as sent, in order.
    Parts,
}

#[derive(Debug)]
struct Parsed<'a> {
    which: Which,
    reading: Reading,
    text: &'a str,
    class: Class,
    evidence: Evidence,
    model: Option<&'a RawValue>,
    cache_key: Option<&'a RawValue>,
    params: Vec<(&'static str, Option<&'a RawValue>)>,
    tools: Vec<Tool<'a>>,
    tools_end: usize,
    /// The system field's blocks, and for Chat/Responses the leading system messages.
    system: Vec<Elem<'a>>,
    system_text: String,
    system_end: usize,
    messages: Vec<Msg<'a>>,
    messages_end: usize,
    /// The tools field and the system field, as sent.
    tools_field: Option<&'a RawValue>,
    system_field: Option<&'a RawValue>,
}

impl Parsed<'_> {
    /// The shape `evidence` (this body's, or both bodies' of a comparison) says it has.
    fn shape(&self, evidence: Evidence) -> Shape {
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
enum Class {
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
/// [`Cause::TailDropped`]) or without its per-request tail
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
/// assert!(matches!(b.cause, Cause::Hoisting { .. }));
/// ```
pub fn compare(earlier: &[u8], later: &[u8]) -> Result<Verdict, GuardError> {
    let mut e = parse(earlier, Which::Earlier, Reading::Compare)?;
    let mut l = parse(later, Which::Later, Reading::Compare)?;
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
    if shape == Shape::ChatCompletions {
        // Chat's system field is its leading system messages.
        e.split_leading_system();
        l.split_leading_system();
    }
    let found = check(&e, &l, shape);
    Ok(match found {
        None => Verdict::Extends { shape },
        Some((place, cause, divergence)) => Verdict::Breaks(Break {
            shape,
            place,
            cause,
            divergence,
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

type Found = Option<(Place, Cause, Divergence)>;

fn divergence(
    earlier: Option<&Elem<'_>>,
    later: Option<(&Elem<'_>, &str)>,
    fallback: usize,
    message_index: Option<usize>,
    producer: Option<String>,
) -> Divergence {
    let e = earlier.map_or(Cow::Borrowed(""), Elem::norm);
    let l = later.map_or(Cow::Borrowed(""), |(l, _)| l.norm());
    let common = common_prefix_len(e.as_bytes(), l.as_bytes());
    let byte_offset = later.map_or(fallback, |(elem, body)| {
        if l == elem.raw {
            elem.offset(body) + common
        } else {
            // Compared in another form (a string content as a text block, a block without
            // its `cache_control`): the offset from the bytes as sent.
            let sent = earlier.map_or("", |e| e.raw);
            elem.offset(body) + common_prefix_len(sent.as_bytes(), elem.raw.as_bytes())
        }
    });
    Divergence {
        byte_offset,
        message_index,
        producer,
        excerpt: Excerpt::around(e.as_bytes(), l.as_bytes(), common),
    }
}

fn raw_elem(raw: Option<&RawValue>) -> Option<Elem<'_>> {
    raw.map(|r| Elem::new(r, Form::Exact))
}

fn check(e: &Parsed<'_>, l: &Parsed<'_>, shape: Shape) -> Found {
    let differs =
        |a: Option<&RawValue>, b: Option<&RawValue>| a.map(RawValue::get) != b.map(RawValue::get);
    if e.model.is_some() && l.model.is_some() && differs(e.model, l.model) {
        let (a, b) = (raw_elem(e.model), raw_elem(l.model));
        return Some((
            Place::Model,
            Cause::ModelChanged,
            divergence(
                a.as_ref(),
                b.as_ref().map(|b| (b, l.text)),
                0,
                None,
                Some("model".into()),
            ),
        ));
    }
    if differs(e.cache_key, l.cache_key) {
        let (a, b) = (raw_elem(e.cache_key), raw_elem(l.cache_key));
        return Some((
            Place::CacheKey,
            Cause::CacheKeyChanged,
            divergence(
                a.as_ref(),
                b.as_ref().map(|b| (b, l.text)),
                0,
                None,
                Some("prompt_cache_key".into()),
            ),
        ));
    }
    if let Some(found) = check_tools(e, l) {
        return Some(found);
    }
    if let Some(found) = check_system(e, l, shape) {
        return Some(found);
    }
    for ((name, a), (_, b)) in e.params.iter().zip(&l.params) {
        if differs(*a, *b) {
            let (x, y) = (raw_elem(*a), raw_elem(*b));
            return Some((
                Place::Parameter {
                    name: (*name).to_owned(),
                },
                Cause::ParameterChanged,
                divergence(
                    x.as_ref(),
                    y.as_ref().map(|y| (y, l.text)),
                    l.messages_end,
                    None,
                    Some((*name).into()),
                ),
            ));
        }
    }
    check_messages(e, l)
}

fn check_tools(e: &Parsed<'_>, l: &Parsed<'_>) -> Found {
    let at = (0..e.tools.len().max(l.tools.len())).find(|&i| {
        match (e.tools.get(i), l.tools.get(i)) {
            (Some(a), Some(b)) => !a.elem.same(&b.elem),
            _ => true,
        }
    })?;
    let earlier_names: HashSet<&str> = e.tools.iter().map(|t| t.name.as_str()).collect();
    let later_names: HashSet<&str> = l.tools.iter().map(|t| t.name.as_str()).collect();
    let (a, b) = (e.tools.get(at), l.tools.get(at));
    // Names are the bodies' text: quoted as excerpts.
    let name = |t: &Tool<'_>| excerpt(&t.name, EXCERPT_BYTES).into_owned();
    let cause = match (a, b) {
        (Some(a), Some(b)) if a.name == b.name => Cause::ToolEdited { name: name(b) },
        (_, Some(b)) if !earlier_names.contains(b.name.as_str()) => {
            Cause::ToolAdded { name: name(b) }
        }
        (Some(a), _) if !later_names.contains(a.name.as_str()) => {
            Cause::ToolRemoved { name: name(a) }
        }
        (_, Some(b)) => Cause::ToolsReordered { name: name(b) },
        (Some(a), None) => Cause::ToolRemoved { name: name(a) },
        (None, None) => return None,
    };
    let producer = b.or(a).map(|t| format!("tool `{}`", name(t)));
    Some((
        Place::Tools { index: at },
        cause,
        divergence(
            a.map(|t| &t.elem),
            b.map(|t| (&t.elem, l.text)),
            l.tools_end,
            None,
            producer,
        ),
    ))
}

fn check_system(e: &Parsed<'_>, l: &Parsed<'_>, shape: Shape) -> Found {
    let at = (0..e.system.len().max(l.system.len())).find(|&i| {
        match (e.system.get(i), l.system.get(i)) {
            (Some(a), Some(b)) => !a.same(b),
            _ => true,
        }
    })?;
    let flat = matches!(shape, Shape::ChatCompletions | Shape::Responses);
    // System messages appended to a body that has nothing else are appended in place.
    if flat && at == e.system.len() && e.messages.is_empty() {
        return None;
    }
    let (a, b) = (e.system.get(at), l.system.get(at));
    // Hoisting grows the system field and keeps the messages; a compaction (a summary put
    // in the system field) also drops the earlier messages: a rewrite.
    let messages_kept = e
        .messages
        .first()
        .is_none_or(|m| l.messages.first().is_some_and(|x| x.same(m)));
    let grown = messages_kept
        && l.system_text.len() > e.system_text.len()
        && l.system_text.starts_with(e.system_text.as_str());
    let cause = if grown {
        let added = &l.system_text[e.system_text.len()..];
        Cause::Hoisting {
            hoisted: excerpt(added, HOISTED_EXCERPT).into_owned(),
        }
    } else {
        Cause::SystemRewritten
    };
    Some((
        Place::System { block: at },
        cause,
        divergence(
            a,
            b.map(|b| (b, l.text)),
            l.system_end,
            None,
            Some("system".into()),
        ),
    ))
}

fn check_messages(e: &Parsed<'_>, l: &Parsed<'_>) -> Found {
    let last = e.messages.len().checked_sub(1)?;
    for (i, a) in e.messages.iter().enumerate() {
        let Some(b) = l.messages.get(i) else {
            return Some(message_break(e, l, i, None, Cause::TailDropped));
        };
        if a.same(b) {
            continue;
        }
        let same_message = a.same_but_content(b);
        let (a_blocks, b_blocks) = (a.blocks(), b.blocks());
        // The first block where they differ (or the earlier one's end).
        let j = (0..a_blocks.len())
            .find(|&j| b_blocks.get(j).is_none_or(|x| !x.same(&a_blocks[j])))
            .unwrap_or(a_blocks.len());
        if same_message && j == a_blocks.len() && i == last {
            // The last message goes on with more blocks (a merged user message).
            continue;
        }
        let cause = classify(e, l, i);
        if resent_at_end(e, l, i) {
            return Some(message_break(e, l, i, None, cause));
        }
        if same_message && matches!(cause, Cause::MessageEdited | Cause::TailDropped) {
            // Told at the block: the blocks before it are kept.
            let later_blocks: HashSet<Cow<'_, str>> = b_blocks.iter().map(Elem::norm).collect();
            let tail_gone = a_blocks[j..]
                .iter()
                .all(|x| !later_blocks.contains(&x.norm()));
            // Blocks of the last message kept, the rest gone: its per-request tail. Its
            // first block changed: an edit.
            let cause = if i == last && tail_gone && 0 < j && j < a_blocks.len() {
                Cause::TailDropped
            } else {
                Cause::MessageEdited
            };
            return Some(message_break(e, l, i, Some(j), cause));
        }
        return Some(message_break(e, l, i, None, cause));
    }
    None
}

/// Whether the earlier body's messages from `i` on are the later body's last messages,
/// after new ones: a per-request tail sent again at the end.
fn resent_at_end(e: &Parsed<'_>, l: &Parsed<'_>, i: usize) -> bool {
    let rest = e.messages.len().saturating_sub(i);
    let Some(k) = l.messages.len().checked_sub(rest) else {
        return false;
    };
    k > i
        && e.messages[i..]
            .iter()
            .zip(&l.messages[k..])
            .all(|(a, b)| a.same(b))
}

/// Why message `i` of the earlier body differs from message `i` of the later one.
fn classify(e: &Parsed<'_>, l: &Parsed<'_>, i: usize) -> Cause {
    if resent_at_end(e, l, i) {
        return Cause::TailDropped;
    }
    let (em, lm) = (&e.messages, &l.messages);
    let mut later_at: HashMap<u64, usize> = HashMap::new();
    for (k, m) in lm.iter().enumerate().skip(i) {
        later_at.entry(m.hash).or_insert(k);
    }
    let find = |m: &Msg<'_>| later_at.get(&m.hash).copied().filter(|&k| lm[k].same(m));
    if let Some(k) = find(&em[i]) {
        let rest = em.len() - i;
        let moved_whole =
            lm.len() >= k + rest && em[i..].iter().zip(&lm[k..]).all(|(a, b)| a.same(b));
        return if moved_whole {
            Cause::MessageInserted { count: k - i }
        } else {
            Cause::MessagesReordered
        };
    }
    if em
        .get(i + 1)
        .is_some_and(|n| lm.get(i + 1).is_some_and(|m| m.same(n)))
    {
        return Cause::MessageEdited;
    }
    if em.get(i + 1).is_some_and(|n| lm[i].same(n)) {
        return Cause::MessageRemoved;
    }
    if em[i..].iter().all(|m| find(m).is_none()) {
        return Cause::TailDropped;
    }
    Cause::MessageEdited
}

fn message_break<'a>(
    e: &Parsed<'a>,
    l: &Parsed<'a>,
    i: usize,
    block: Option<usize>,
    cause: Cause,
) -> (Place, Cause, Divergence) {
    let a = e.messages.get(i);
    let b = l.messages.get(i);
    let block_of = |m: &Msg<'a>, j: usize| m.blocks().get(j).copied();
    let (x, y) = match block {
        Some(j) => (
            a.and_then(|m| block_of(m, j)),
            b.and_then(|m| block_of(m, j)),
        ),
        None => (a.map(|m| m.elem), b.map(|m| m.elem)),
    };
    let fallback = b.map_or(l.messages_end, |m| m.elem.offset(l.text) + m.elem.raw.len());
    let index = a.map_or(i, |m| m.index);
    let index = b.map_or(index, |m| m.index);
    let producer = a
        .or(b)
        .map(|m| excerpt(&m.role, EXCERPT_BYTES).into_owned());
    (
        Place::Message { index, block },
        cause,
        divergence(
            x.as_ref(),
            y.as_ref().map(|y| (y, l.text)),
            fallback,
            Some(index),
            producer,
        ),
    )
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
        let blocks = if let Some(s) = raw::string_of(raw) {
            self.push_system_text(&s);
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
            if let Some(t) = Object::of(block).ok().and_then(|b| b.str("text")) {
                self.push_system_text(&t);
            }
            self.system.push(Elem::new(block, Form::Block));
        }
        Ok(())
    }

    fn push_system_text(&mut self, text: &str) {
        if !self.system_text.is_empty() {
            self.system_text.push('\n');
        }
        self.system_text.push_str(text);
    }

    /// Chat Completions and Responses: the leading system messages are the system field.
    fn split_leading_system(&mut self) {
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
        for m in leading {
            // Every message but a Responses `input` string (a user message) is a `Message`.
            let text = match m.elem.form {
                Form::Message(key) => content_text(m.elem.raw, key),
                _ => String::new(),
            };
            self.push_system_text(&text);
            self.system.push(m.elem);
        }
    }
}

/// A string content or system field, compared as the one text block it stands for.
fn text_block(text: &str) -> String {
    format!(r#"{{"type":"text","text":{}}}"#, raw::quote(text))
}

fn parse(bytes: &[u8], which: Which, reading: Reading) -> Result<Parsed<'_>, GuardError> {
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
        system_text: String::new(),
        system_end: 0,
        messages: Vec::new(),
        messages_end: 0,
        tools_field: None,
        system_field: None,
    };
    if has("prompt_cache_key") || has("cache_prompt") {
        parsed.evidence.chat = true;
    }
    if has("system") || has("anthropic_version") {
        parsed.evidence.anthropic = true;
    }
    if class == Class::Messages {
        // Anthropic: a change to these invalidates the cached messages.
        parsed.params = vec![
            ("tool_choice", top.get("tool_choice")),
            ("thinking", top.get("thinking")),
        ];
    }
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
                    parsed.read_message(i, m)?;
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

    fn verdict(a: &str, b: &str) -> Verdict {
        compare(a.as_bytes(), b.as_bytes()).unwrap()
    }

    fn cause(a: &str, b: &str) -> Cause {
        match verdict(a, b) {
            Verdict::Breaks(b) => b.cause,
            v => panic!("{v:?}"),
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
            Cause::MessageEdited
        );
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "c"])),
            Cause::MessageRemoved
        );
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "x", "b", "c", "d"])),
            Cause::MessageInserted { count: 1 }
        );
        // The earlier end sent again at the very end, after new messages: a per-request
        // tail; the cache loses the same bytes either way.
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "x", "b", "c"])),
            Cause::TailDropped
        );
        assert_eq!(
            cause(&m(&["a", "b", "c"]), &m(&["a", "c", "b"])),
            Cause::MessagesReordered
        );
        // The last message replaced by one of the same role reads as an edit; by one of
        // another role, as its end not carried over.
        assert_eq!(
            cause(&m(&["a", "b", "eph"]), &m(&["a", "b", "d", "e"])),
            Cause::MessageEdited
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
