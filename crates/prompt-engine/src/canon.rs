//! A request as the provider caches it: its cache-keying parts (model, key, parameters,
//! headers) and its blocks in the provider's order (tools, system, messages), each as a
//! hash of its compared form and of its bytes as sent, with its place in the body.

use prompt_core::ApiKind;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use prompt_core::input::{EXCERPT_BYTES, excerpt};
use prompt_core::profile::CacheTtl;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::body::element::{Elem, Form, content_blocks, element_hash, system_text_of};
use crate::body::error::{GuardError, MAX_AUDIT_BODY_BYTES};
use crate::body::memo::MessageMemo;
use crate::body::parse::{Parsed, parse_memoized, parse_object};
use crate::body::parts::without_cache_control;
use crate::body::shape::{Reading, Which};
use crate::headers::CACHE_HEADERS;
use crate::raw::{self, Object};

/// The element hash of `text` ([`element_hash`]: the same in every run).
pub(crate) fn hash_of(text: &str) -> u64 {
    element_hash(text)
}

/// One element of a request: a tool, a system block, a message or a content block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    /// A hash of the element as the provider caches it (without `cache_control`; a string
    /// content as its one text block; a text block by its text).
    pub hash: u64,
    /// A hash of its bytes as sent.
    pub raw_hash: u64,
    /// Where it starts in the body.
    pub start: u32,
    /// Its length in bytes.
    pub len: u32,
    pub(crate) form: Form,
}

/// A tool.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CanonTool {
    /// Its name as sent (at most [`EXCERPT_BYTES`]).
    pub name: Arc<str>,
    /// The tool.
    pub block: Block,
}

/// A message (a Responses input item, a Gemini content): small, since a body may hold a
/// million; its content blocks are read from the body when a change is told
/// ([`Canonical::content_of`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct CanonMessage {
    /// Its index in the body's array.
    pub index: u32,
    /// Its role (or item `type`): an index into [`Canonical::roles`].
    pub role: u16,
    /// The whole message.
    pub block: Block,
}

/// Where a cache-keying value was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// The body.
    Body,
    /// A header.
    Header,
    /// The URL (Gemini's model).
    Url,
}

/// A value that keys the provider's cache beside the prompt: a parameter or a header.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheKeyPart {
    /// Its name (`prompt_cache_key`, `tool_choice`, `reasoning.effort`, `anthropic-beta`).
    pub name: Box<str>,
    /// Where it was read.
    pub source: KeySource,
    /// A hash of its value as sent.
    pub hash: u64,
    /// Its value, bounded.
    pub value: Box<str>,
    /// Where it is in the body, for a body value.
    pub start: Option<u32>,
}

/// A request as the provider caches it. Owns what it keeps; the body is kept only while a
/// caller wants excerpts ([`Canonical::forget_body`] lets it go, leaving the hashes). Its
/// serialization is what is left without the body: what a proxy keeps across launches.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Canonical<'a> {
    /// The API.
    pub shape: ApiKind,
    /// The model (the body's, or Gemini's in the URL), bounded.
    pub model: Option<Arc<str>>,
    /// Cache-keying parameters and headers other than the model, by name.
    pub keys: Vec<CacheKeyPart>,
    /// The tools, in order (Codex's `additional_tools` input item among them).
    pub tools: Vec<CanonTool>,
    /// The system field's blocks, and the leading system messages of Chat and Responses.
    pub system: Vec<Block>,
    /// The messages after the system field.
    pub messages: Vec<CanonMessage>,
    /// The distinct roles of the messages (each at most [`EXCERPT_BYTES`]).
    pub roles: Vec<Arc<str>>,
    /// Chain positions (see [`Canonical::chain_blocks`]) after which an element carries an
    /// explicit `cache_control` marker (Anthropic's breakpoints).
    pub breakpoints: Vec<u32>,
    /// The longest cache lifetime a `cache_control` marker asks for (a marker without a
    /// `ttl` asks for the default, five minutes).
    pub marker_ttl: Option<CacheTtl>,
    /// A provider's own compaction item is among the messages (Responses `compaction`).
    pub compacted: bool,
    pub(crate) tools_end: u32,
    pub(crate) system_end: u32,
    pub(crate) messages_end: u32,
    /// The JSON path of each system block in the body ([`Canonical::system_path`]).
    #[serde(default)]
    pub(crate) system_paths: Vec<Box<str>>,
    /// The JSON path of each tool not at `tools[i]`, by its place among the tools
    /// ([`Canonical::tool_path`]): Gemini's function declarations, Codex's
    /// `additional_tools` items.
    #[serde(default)]
    pub(crate) tool_paths: Vec<(u32, Box<str>)>,
    #[serde(skip)]
    pub(crate) body: Option<Cow<'a, str>>,
    /// Fields that name a session (`metadata.user_id`, `previous_response_id`, …), bounded.
    #[serde(skip)]
    pub(crate) session_hints: Vec<(&'static str, Box<str>)>,
}

/// Distinct roles a [`Canonical`] names; a message of another role is told by the hash
/// of its bytes alone.
pub const MAX_ROLES: usize = 1024;
/// The role index of a message past [`MAX_ROLES`].
const OTHER_ROLE: u16 = u16::MAX;

/// The largest body a [`Canonical`] is read from (the guard's limit).
pub const MAX_BODY_BYTES: usize = MAX_AUDIT_BODY_BYTES;

fn pos(body: &str, part: &str) -> u32 {
    u32::try_from(raw::offset_in(body, part).unwrap_or(0)).unwrap_or(u32::MAX)
}

/// [`block_of`], its hash as compared remembered in `memo` by its bytes: tools and system
/// blocks are resent with every request.
fn remembered_block(
    body: &str,
    elem: &Elem<'_>,
    raw_hash: Option<u64>,
    memo: &mut Option<&mut MessageMemo>,
) -> Block {
    let Some(memo) = memo.as_deref_mut() else {
        return block_of(body, elem);
    };
    let raw_hash = raw_hash.unwrap_or_else(|| hash_of(elem.raw));
    Block {
        hash: memo.element(raw_hash, elem.form, || hash_of(&elem.norm())),
        raw_hash,
        start: pos(body, elem.raw),
        len: u32::try_from(elem.raw.len()).unwrap_or(u32::MAX),
        form: elem.form,
    }
}

fn block_of(body: &str, elem: &Elem<'_>) -> Block {
    let norm = elem.norm();
    Block {
        hash: hash_of(&norm),
        raw_hash: if norm.as_ref() == elem.raw {
            // The common case: no second pass over the bytes.
            hash_of(&norm)
        } else {
            hash_of(elem.raw)
        },
        start: pos(body, elem.raw),
        len: u32::try_from(elem.raw.len()).unwrap_or(u32::MAX),
        form: elem.form,
    }
}

/// What a request says besides its body: the URL path and the headers that key a cache.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    /// The URL path (and query), if known: `/v1/messages`,
    /// `/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse`.
    pub path: Option<&'a str>,
    /// Headers, lower-case names (only those that key a cache are read).
    pub headers: &'a [(String, String)],
}

/// The model a Gemini URL names (`/v1beta/models/{model}:generateContent`).
pub fn model_in_path(path: &str) -> Option<&str> {
    let rest = &path[path.find("/models/")? + "/models/".len()..];
    let end = rest.find([':', '?', '/']).unwrap_or(rest.len());
    Some(&rest[..end]).filter(|m| !m.is_empty())
}

/// The shape a URL path says a body has, when it says it.
pub fn shape_of_path(path: &str) -> Option<ApiKind> {
    let path = path.split('?').next().unwrap_or(path);
    if path.ends_with("/messages") {
        Some(ApiKind::Anthropic)
    } else if path.ends_with("/chat/completions") {
        Some(ApiKind::OpenAi)
    } else if path.ends_with("/responses") {
        Some(ApiKind::OpenAiResponses)
    } else if path.contains(":generateContent") || path.contains(":streamGenerateContent") {
        Some(ApiKind::Gemini)
    } else {
        None
    }
}

impl<'a> Canonical<'a> {
    /// Reads one request body (any shape the guard knows), with what its URL and headers
    /// say. Linear in the body's size; a body over [`MAX_BODY_BYTES`] is refused unread.
    pub fn read(body: &'a [u8], context: Context<'_>) -> Result<Canonical<'a>, GuardError> {
        Self::read_memoized(body, context, None)
    }

    /// [`Canonical::read`], messages read before looked up in `memo`.
    pub(crate) fn read_memoized(
        body: &'a [u8],
        context: Context<'_>,
        memo: Option<&mut MessageMemo>,
    ) -> Result<Canonical<'a>, GuardError> {
        let mut memo = memo;
        let parsed = parse_memoized(body, Which::Request, Reading::Compare, memo.as_deref_mut())?;
        Ok(Self::from_read(parsed, context, memo))
    }

    /// [`Canonical::read_memoized`] of a body whose top-level object is read already.
    pub(crate) fn read_object(
        body: &'a str,
        top: Object<'a>,
        context: Context<'_>,
        mut memo: Option<&mut MessageMemo>,
    ) -> Result<Canonical<'a>, GuardError> {
        let parsed = parse_object(
            body,
            top,
            Which::Request,
            Reading::Compare,
            memo.as_deref_mut(),
        )?;
        Ok(Self::from_read(parsed, context, memo))
    }

    /// The view of a parsed body: its shape (the path's, where it tells Anthropic from Chat
    /// Completions), then its elements.
    fn from_read(
        parsed: Parsed<'a>,
        context: Context<'_>,
        memo: Option<&mut MessageMemo>,
    ) -> Canonical<'a> {
        let mut shape = parsed.shape(parsed.evidence);
        if let Some(hint) = context.path.and_then(shape_of_path)
            && (hint == ApiKind::Anthropic || hint == ApiKind::OpenAi)
            && matches!(shape, ApiKind::Anthropic | ApiKind::OpenAi)
        {
            shape = hint;
        }
        Self::from_parsed(parsed, shape, context, memo)
    }

    pub(crate) fn from_parsed(
        mut p: Parsed<'a>,
        shape: ApiKind,
        context: Context<'_>,
        mut memo: Option<&mut MessageMemo>,
    ) -> Canonical<'a> {
        if shape == ApiKind::OpenAi {
            p.split_leading_system();
        }
        let body = p.text;
        let bounded = |s: &str| excerpt(s, EXCERPT_BYTES).into_owned().into_boxed_str();
        // Names many requests share, one copy each while the engine's memo holds them.
        let shared = |memo: &mut Option<&mut MessageMemo>, s: &str| -> Arc<str> {
            let s = excerpt(s, EXCERPT_BYTES);
            match memo.as_deref_mut() {
                Some(memo) => memo.names.intern(&s),
                None => Arc::from(s.as_ref()),
            }
        };
        let model = p
            .model
            .map(|m| raw::string_of(m).map_or_else(|| m.get().to_owned(), Cow::into_owned))
            .or_else(|| context.path.and_then(model_in_path).map(str::to_owned))
            .map(|m| shared(&mut memo, &m));
        let mut keys = Vec::new();
        let mut key = |name: &str, raw: &RawValue| {
            keys.push(CacheKeyPart {
                name: name.into(),
                source: KeySource::Body,
                hash: hash_of(raw.get()),
                value: bounded(raw.get()),
                start: Some(pos(body, raw.get())),
            });
        };
        if let Some(k) = p.cache_key {
            key("prompt_cache_key", k);
        }
        for (name, value) in &p.params {
            if let Some(v) = value {
                key(name, v);
            }
        }
        for (name, value) in context.headers {
            if CACHE_HEADERS.contains(&name.as_str()) {
                keys.push(CacheKeyPart {
                    name: format!("header:{name}").into(),
                    source: KeySource::Header,
                    hash: hash_of(value),
                    value: bounded(value),
                    start: None,
                });
            }
        }
        keys.sort_by(|a, b| a.name.cmp(&b.name));

        let mut tools: Vec<CanonTool> = Vec::with_capacity(p.tools.len());
        for t in &p.tools {
            tools.push(CanonTool {
                name: shared(&mut memo, &t.name),
                block: remembered_block(body, &t.elem, t.raw_hash, &mut memo),
            });
        }
        let index = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        let mut tool_paths: Vec<(u32, Box<str>)> = p
            .tool_paths
            .iter()
            .map(|(i, path)| (index(*i), bounded(path)))
            .collect();
        let system: Vec<Block> = p
            .system
            .iter()
            .map(|e| remembered_block(body, e, None, &mut memo))
            .collect();
        let mut messages = Vec::with_capacity(p.messages.len());
        let mut roles: Vec<Arc<str>> = Vec::new();
        let mut role_index: HashMap<&str, u16> = HashMap::new();
        let mut compacted = false;
        for m in &p.messages {
            if shape == ApiKind::OpenAiResponses && m.role == "additional_tools" {
                // Codex sends its tools as an input item (`{"type": "additional_tools",
                // "role": "developer", "tools": [...]}`, namespaced tools such as `clock`
                // among them): they are tools, not a message, each at `input[i].tools[j]`.
                if let Ok(o) = Object::parse(m.elem.raw)
                    && let Some(list) = o.get("tools").and_then(raw::elements_of)
                {
                    for (j, t) in list.into_iter().enumerate() {
                        let name = Object::parse(t)
                            .ok()
                            .and_then(|t| t.str("name").or_else(|| t.str("type")))
                            .unwrap_or_default();
                        tool_paths.push((
                            index(tools.len()),
                            format!("input[{}].tools[{j}]", m.index).into_boxed_str(),
                        ));
                        tools.push(CanonTool {
                            name: shared(&mut memo, &name),
                            block: block_of(body, &Elem::new(t, Form::Block)),
                        });
                    }
                }
                continue;
            }
            if matches!(m.role.as_ref(), "compaction" | "compaction_summary") {
                compacted = true;
            }
            // Distinct roles by a map (a hostile body may hold a million of them); past
            // `MAX_ROLES` they share one entry that names none.
            let role = match role_index.get(m.role.as_ref()) {
                Some(&i) => i,
                None if roles.len() < MAX_ROLES => {
                    let i = u16::try_from(roles.len()).unwrap_or(OTHER_ROLE);
                    roles.push(shared(&mut memo, &m.role));
                    role_index.insert(m.role.as_ref(), i);
                    i
                }
                None => OTHER_ROLE,
            };
            messages.push(CanonMessage {
                index: u32::try_from(m.index).unwrap_or(u32::MAX),
                role,
                block: Block {
                    hash: m.hash,
                    raw_hash: m.raw_hash.unwrap_or_else(|| hash_of(m.elem.raw)),
                    start: pos(body, m.elem.raw),
                    len: u32::try_from(m.elem.raw.len()).unwrap_or(u32::MAX),
                    form: m.elem.form,
                },
            });
        }
        let mut canonical = Canonical {
            shape,
            model,
            keys,
            tools,
            system,
            messages,
            roles,
            breakpoints: Vec::new(),
            marker_ttl: None,
            compacted,
            tools_end: u32::try_from(p.tools_end).unwrap_or(u32::MAX),
            system_end: u32::try_from(p.system_end).unwrap_or(u32::MAX),
            messages_end: u32::try_from(p.messages_end).unwrap_or(u32::MAX),
            system_paths: p.system_paths.iter().map(|s| bounded(s)).collect(),
            tool_paths,
            body: Some(Cow::Borrowed(body)),
            session_hints: p
                .session_hints
                .iter()
                .map(|(name, v)| {
                    let text =
                        raw::string_of(v).map_or_else(|| v.get().to_owned(), Cow::into_owned);
                    (*name, excerpt(&text, 256).into_owned().into_boxed_str())
                })
                .collect(),
        };
        canonical.read_markers();
        canonical
    }

    /// Finds the explicit `cache_control` markers and the lifetime they ask for.
    fn read_markers(&mut self) {
        let Some(body) = self.body.as_deref() else {
            return;
        };
        // memchr's SIMD search: every block of every request is searched.
        let marker = memchr::memmem::Finder::new(b"\"cache_control\"");
        if marker.find(body.as_bytes()).is_none() {
            return;
        }
        let mut ttl: Option<CacheTtl> = None;
        let mut marks = Vec::new();
        for (i, block) in self.chain_blocks().enumerate() {
            let bytes = block.bytes(body).as_bytes();
            if let Some(at) = marker.find(bytes) {
                marks.push(u32::try_from(i + 1).unwrap_or(u32::MAX));
                let rest = &bytes[at..bytes.len().min(at + 96)];
                let asked = if rest.windows(4).any(|w| w == b"\"1h\"") {
                    CacheTtl::OneHour
                } else {
                    CacheTtl::FiveMinutes
                };
                if ttl != Some(CacheTtl::OneHour) {
                    ttl = Some(asked);
                }
            }
        }
        self.breakpoints = marks;
        self.marker_ttl = ttl;
    }

    /// The elements in the provider's cache order: each tool, each system block, each
    /// message. A request extends another when its chain starts with the other's.
    pub fn chain_blocks(&self) -> impl Iterator<Item = &Block> + '_ {
        self.tools
            .iter()
            .map(|t| &t.block)
            .chain(self.system.iter())
            .chain(self.messages.iter().map(|m| &m.block))
    }

    /// The length of [`Canonical::chain_blocks`].
    pub fn chain_len(&self) -> usize {
        self.tools.len() + self.system.len() + self.messages.len()
    }

    /// The same, owning its body: what is held past the bytes it was read from.
    pub fn into_owned(self) -> Canonical<'static> {
        self.into_owned_in(None)
    }

    /// [`Canonical::into_owned`], a borrowed body copied into `spare` (a body let go, its
    /// memory already mapped) rather than a new allocation.
    pub(crate) fn into_owned_in(self, spare: Option<String>) -> Canonical<'static> {
        let owned = |b: Cow<'_, str>| match (b, spare) {
            (Cow::Borrowed(text), Some(mut buffer)) => {
                buffer.clear();
                buffer.push_str(text);
                buffer
            }
            (b, _) => b.into_owned(),
        };
        Canonical {
            body: self.body.map(|b| Cow::Owned(owned(b))),
            shape: self.shape,
            model: self.model,
            keys: self.keys,
            tools: self.tools,
            system: self.system,
            messages: self.messages,
            roles: self.roles,
            breakpoints: self.breakpoints,
            marker_ttl: self.marker_ttl,
            compacted: self.compacted,
            tools_end: self.tools_end,
            system_end: self.system_end,
            messages_end: self.messages_end,
            system_paths: self.system_paths,
            tool_paths: self.tool_paths,
            session_hints: self.session_hints,
        }
    }

    /// A message's role (`…` for one past the first [`MAX_ROLES`] distinct roles).
    pub fn role(&self, m: &CanonMessage) -> &str {
        self.roles
            .get(usize::from(m.role))
            .map_or("…", |r| r.as_ref())
    }

    /// A message's content blocks (a string content as one text block), read from the body;
    /// empty once the body is let go.
    pub fn content_of(&self, m: &CanonMessage) -> Vec<Block> {
        let Some(body) = self.body.as_deref() else {
            return Vec::new();
        };
        let raw = m.block.bytes(body);
        let Form::Message(key) = m.block.form else {
            return vec![block_of(
                body,
                &Elem {
                    raw,
                    form: Form::Text,
                },
            )];
        };
        match Object::parse(raw) {
            Ok(o) => content_blocks(&o, key)
                .iter()
                .map(|b| block_of(body, b))
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// A hash of a message without its content (its role, name, ids), from the body; `None`
    /// once the body is let go.
    pub fn rest_of(&self, m: &CanonMessage) -> Option<u64> {
        let body = self.body.as_deref()?;
        let elem = Elem {
            raw: m.block.bytes(body),
            form: m.block.form,
        };
        Some(hash_of(&elem.rest()))
    }

    /// The text of the system field (its blocks' text, a newline between two), while the
    /// body is kept: what tells text hoisted into it from a rewrite.
    pub fn system_text(&self) -> Option<String> {
        let body = self.body.as_deref()?;
        Some(system_text_of(self.system.iter().map(|b| Elem {
            raw: b.bytes(body),
            form: b.form,
        })))
    }

    /// The body, while it is kept.
    pub fn body(&self) -> Option<&str> {
        self.body.as_deref()
    }

    /// Keeps `body` again: the very bytes this request was read from (the caller checked),
    /// for excerpts and writer lookups.
    pub(crate) fn keep_body(&mut self, body: String) {
        self.body = Some(Cow::Owned(body));
    }

    /// The JSON path of tool `i` in the body: `tools[i]`, or where it was read
    /// (`tools[0].functionDeclarations[3]`, `input[0].tools[2]`).
    pub fn tool_path(&self, i: usize) -> String {
        let at = u32::try_from(i).unwrap_or(u32::MAX);
        self.tool_paths
            .iter()
            .find(|(j, _)| *j == at)
            .map_or_else(|| format!("tools[{i}]"), |(_, p)| p.to_string())
    }

    /// The JSON path of system block `i` in the body: Anthropic's `system[i]` (`system` for
    /// a string), Gemini's `systemInstruction.parts[i]`, Responses' `instructions` or a
    /// leading `input[i]` item, Chat's leading `messages[i]`.
    pub fn system_path(&self, i: usize) -> String {
        if let Some(p) = self.system_paths.get(i) {
            return p.to_string();
        }
        // A record kept by an earlier version, without its paths.
        match self.shape {
            ApiKind::Anthropic => format!("system[{i}]"),
            ApiKind::Gemini => format!("systemInstruction.parts[{i}]"),
            ApiKind::OpenAiResponses => "instructions".to_owned(),
            ApiKind::OpenAi | ApiKind::LlamaCpp => format!("messages[{i}]"),
        }
    }

    /// The array the messages are in: `messages`, Responses' `input`, Gemini's `contents`.
    pub fn messages_key(&self) -> &'static str {
        match self.shape {
            ApiKind::Gemini => "contents",
            ApiKind::OpenAiResponses => "input",
            ApiKind::Anthropic | ApiKind::OpenAi | ApiKind::LlamaCpp => "messages",
        }
    }

    /// A copy without the body (what [`Canonical::forget_body`] leaves), never copying the
    /// body first: a record of a request is written for every exchange.
    pub fn without_body(&self) -> Canonical<'static> {
        let Canonical {
            body: _,
            shape,
            model,
            keys,
            tools,
            system,
            messages,
            roles,
            breakpoints,
            marker_ttl,
            compacted,
            tools_end,
            system_end,
            messages_end,
            system_paths,
            tool_paths,
            session_hints,
        } = self;
        Canonical {
            body: None,
            shape: *shape,
            model: model.clone(),
            keys: keys.clone(),
            tools: tools.clone(),
            system: system.clone(),
            messages: messages.clone(),
            roles: roles.clone(),
            breakpoints: breakpoints.clone(),
            marker_ttl: *marker_ttl,
            compacted: *compacted,
            tools_end: *tools_end,
            system_end: *system_end,
            messages_end: *messages_end,
            system_paths: system_paths.clone(),
            tool_paths: tool_paths.clone(),
            session_hints: session_hints.clone(),
        }
    }

    /// Lets the body go: what is left is hashes, names
    /// and places, enough to find and name a change but not to quote it.
    pub fn forget_body(&mut self) {
        self.body = None;
    }

    /// [`Canonical::forget_body`], handing back the body's memory when it was owned.
    pub(crate) fn take_body(&mut self) -> Option<String> {
        match self.body.take() {
            Some(Cow::Owned(body)) => Some(body),
            _ => None,
        }
    }

    /// The element's bytes as sent without its `cache_control` markers (breakpoints are not
    /// part of the prompt), while the body is kept: what a tokenizer counts. Elements of
    /// one [`Block::hash`] are one prompt whatever their spelling, so a counter keyed by
    /// the hash counts the first spelling it sees for all of them.
    pub fn sent_text<'s>(&'s self, block: &Block) -> Cow<'s, str> {
        match &self.body {
            Some(body) => without_cache_control(block.bytes(body)),
            None => Cow::Borrowed(""),
        }
    }

    /// The element's text as compared, while the body is kept: the bytes as sent, or
    /// without `cache_control`, keys sorted, a string content as its text block.
    pub fn compared_text<'s>(&'s self, block: &Block) -> Cow<'s, str> {
        match &self.body {
            Some(body) => {
                let raw = block.bytes(body);
                Elem {
                    raw,
                    form: block.form,
                }
                .norm()
            }
            None => Cow::Borrowed(""),
        }
    }
}

impl Block {
    /// Its bytes in `body` (empty when out of range).
    pub fn bytes<'b>(&self, body: &'b str) -> &'b str {
        let start = self.start as usize;
        body.get(start..start.saturating_add(self.len as usize))
            .unwrap_or("")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a reading of a body says of its tools and shape.
    fn tools_and_shape(c: &Canonical<'_>) -> (ApiKind, Vec<(String, Block)>, usize) {
        let tools = c
            .tools
            .iter()
            .map(|t| (t.name.to_string(), t.block))
            .collect();
        (c.shape, tools, c.messages.len())
    }

    #[test]
    fn tools_remembered_read_as_tools_read_anew() {
        // Tools whose bytes are the only evidence of their API, in each class of body.
        let bodies = [
            r#"{"model":"m","tools":[{"type":"function","function":{"name":"read","parameters":{}}},{"type":"function","function":{"name":"bash"}}],"messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"m","tools":[{"name":"read","input_schema":{"type":"object"}},{"name":"bash","input_schema":{}}],"messages":[{"role":"user","content":"hi"}]}"#,
            r#"{"model":"m","tools":[{"type":"function","name":"read","parameters":{}},{"type":"web_search"}],"input":[{"role":"user","content":"hi"}]}"#,
            r#"{"tools":[{"functionDeclarations":[{"name":"read"},{"name":"bash"}]}],"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
        ];
        // A name past what is kept of it: remembered as bounded as it is read.
        let long_name = format!(
            r#"{{"model":"m","tools":[{{"name":"{}é","input_schema":{{}}}}],"messages":[{{"role":"user","content":"hi"}}]}}"#,
            "n".repeat(3 * EXCERPT_BYTES)
        );
        let context = Context::default();
        let mut memo = MessageMemo::new(64);
        for body in bodies.iter().copied().chain([long_name.as_str()]) {
            let fresh = Canonical::read_memoized(body.as_bytes(), context, None).unwrap();
            let first =
                Canonical::read_memoized(body.as_bytes(), context, Some(&mut memo)).unwrap();
            let again =
                Canonical::read_memoized(body.as_bytes(), context, Some(&mut memo)).unwrap();
            assert_eq!(tools_and_shape(&first), tools_and_shape(&fresh), "{body}");
            assert_eq!(tools_and_shape(&again), tools_and_shape(&fresh), "{body}");
            assert!(!fresh.tools.is_empty());
        }
        // The same tools in a body of another class: remembered apart, read as that class's.
        let chat_tools = bodies[0].replace("\"messages\"", "\"input\"");
        let fresh = Canonical::read_memoized(chat_tools.as_bytes(), context, None).unwrap();
        let remembered =
            Canonical::read_memoized(chat_tools.as_bytes(), context, Some(&mut memo)).unwrap();
        assert_eq!(tools_and_shape(&remembered), tools_and_shape(&fresh));
    }
}
