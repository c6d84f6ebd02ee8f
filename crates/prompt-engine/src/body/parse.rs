//! Reads one body of any API: its tools, system blocks and messages as slices of the body,
//! the parameters that key a cache, and the fields that name a session.

use prompt_core::ApiKind;
use std::borrow::Cow;

use prompt_core::input::{EXCERPT_BYTES, excerpt};
use serde_json::value::RawValue;

use super::element::{ContentKey, Elem, Form, Msg, Tool, element_hash, message_norm_of};
use super::error::{GuardError, MAX_AUDIT_BODY_BYTES};
use super::memo::{COMMON_ROLES, Memoized, MessageMemo, memo_key, tool_memo_key};
use super::shape::{Class, Evidence, Reading, Which};
use crate::raw::{self, Object, offset_in};

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
    /// The JSON path of each of `system`'s blocks in the body (`system`, `system[1]`,
    /// `instructions`, `input[0]`, `systemInstruction.parts[0]`).
    pub(crate) system_paths: Vec<String>,
    /// The JSON path of each tool not at `tools[i]` (`i` its place in `tools`): Gemini's
    /// `tools[0].functionDeclarations[3]`.
    pub(crate) tool_paths: Vec<(usize, String)>,
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
    pub(crate) fn shape(&self, evidence: Evidence) -> ApiKind {
        match self.class {
            Class::Gemini => ApiKind::Gemini,
            Class::Responses => ApiKind::OpenAiResponses,
            Class::Messages if evidence.anthropic && !evidence.chat => ApiKind::Anthropic,
            Class::Messages => ApiKind::OpenAi,
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

const ANTHROPIC_BLOCKS: [&str; 6] = [
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "image",
    "document",
];

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

    /// The elements of an array, as slices of the body (valid JSON each).
    fn array(&self, raw: &'a RawValue, at: &str) -> Result<Vec<&'a str>, GuardError> {
        raw::elements_of(raw)
            .ok_or_else(|| self.malformed(at, format!("{}, not an array", raw::kind_of(raw))))
    }

    fn object(&self, raw: &'a str, at: &str) -> Result<Object<'a>, GuardError> {
        Object::parse(raw).map_err(|p| self.malformed(at, p.to_string()))
    }

    /// Reads `tools`: each tool's name and bytes (Gemini: each function declaration). A
    /// tool read before (its bytes, in a body of this class) is looked up in `memo`: an
    /// agent resends its tools with every request, a schema of kilobytes each.
    fn read_tools(
        &mut self,
        raw: &'a RawValue,
        mut memo: Option<&mut MessageMemo>,
    ) -> Result<(), GuardError> {
        self.tools_end = self.end_of(raw);
        for (i, tool) in self.array(raw, "tools")?.into_iter().enumerate() {
            let remembered = match memo.as_deref_mut() {
                Some(memo) if self.class != Class::Gemini => {
                    let raw_hash = element_hash(tool);
                    let key = tool_memo_key(raw_hash, self.class);
                    Some((memo, raw_hash, key))
                }
                _ => None,
            };
            if let Some((memo, raw_hash, key)) = remembered {
                if let Some(hit) = memo.get(key) {
                    self.evidence.add(hit.evidence);
                    self.tools.push(Tool {
                        name: hit.role.to_string(),
                        elem: Elem::new(tool, Form::Block),
                        raw_hash: Some(raw_hash),
                    });
                    continue;
                }
                let (read, own) = self.with_own_evidence(|p| p.read_tool(i, tool));
                read?;
                if let Some(t) = self.tools.last_mut() {
                    t.raw_hash = Some(raw_hash);
                    memo.insert(
                        key,
                        Memoized {
                            norm: 0,
                            // As bounded as the canonical form keeps it: a memo entry never
                            // holds a hostile tool's megabyte name.
                            role: excerpt(&t.name, EXCERPT_BYTES).into(),
                            evidence: own,
                        },
                    );
                }
                continue;
            }
            self.read_tool(i, tool)?;
        }
        Ok(())
    }

    /// Runs `read`, and says what evidence of the API it found on its own, apart from the
    /// body's so far (what a memo keeps of an element); the body's evidence gains it too.
    fn with_own_evidence<R>(&mut self, read: impl FnOnce(&mut Self) -> R) -> (R, Evidence) {
        let before = std::mem::take(&mut self.evidence);
        let out = read(self);
        let own = self.evidence;
        self.evidence = before;
        self.evidence.add(own);
        (out, own)
    }

    /// Reads tool `i` of `tools` (Gemini: its function declarations).
    fn read_tool(&mut self, i: usize, tool: &'a str) -> Result<(), GuardError> {
        let at = format!("tools[{i}]");
        let object = self.object(tool, &at)?;
        if self.class == Class::Gemini {
            if let Some(decls) = object.get("functionDeclarations") {
                let decls = self.array(decls, &format!("{at}.functionDeclarations"))?;
                for (j, decl) in decls.into_iter().enumerate() {
                    let name = Object::parse(decl)
                        .ok()
                        .and_then(|d| d.str("name").map(Cow::into_owned))
                        .unwrap_or_default();
                    self.tool_paths
                        .push((self.tools.len(), format!("{at}.functionDeclarations[{j}]")));
                    self.tools.push(Tool {
                        name,
                        elem: Elem::new(decl, Form::Block),
                        raw_hash: None,
                    });
                }
            } else {
                let name = object.fields.first().map(|(k, _)| k.to_string());
                if self.tools.len() != i {
                    self.tool_paths.push((self.tools.len(), at.clone()));
                }
                self.tools.push(Tool {
                    name: name.unwrap_or_default(),
                    elem: Elem::new(tool, Form::Block),
                    raw_hash: None,
                });
            }
            return Ok(());
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
            raw_hash: None,
        });
        Ok(())
    }

    /// Whether the next message must be read whole: always for a comparison; for its parts
    /// alone only while it may still tell the shape (a `messages` body not yet known to be
    /// Chat Completions', since evidence of Chat decides it).
    fn reads_whole_messages(&self) -> bool {
        self.reading == Reading::Compare || (self.class == Class::Messages && !self.evidence.chat)
    }

    /// A message kept as sent, checked to be an object: what [`body_parts`] needs of it.
    fn push_message_as_sent(&mut self, index: usize, raw: &'a str) -> Result<(), GuardError> {
        if !raw.starts_with('{') {
            return Err(self.malformed(
                format!("messages[{index}]"),
                format!("{}, not an object", raw::kind_of_text(raw)),
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
        raw: &'a str,
        memo: &mut MessageMemo,
    ) -> Result<(), GuardError> {
        let raw_hash = element_hash(raw);
        let key = memo_key(raw_hash, self.class);
        if let Some(hit) = memo.get(key) {
            self.evidence.add(hit.evidence);
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
        let (read, own) = self.with_own_evidence(|p| p.read_message(index, raw));
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
    fn read_message(&mut self, index: usize, raw: &'a str) -> Result<(), GuardError> {
        let at = format!("messages[{index}]");
        let object = self.object(raw, &at)?;
        // Codex's tools item (`{"type": "additional_tools", "role": "developer", "tools":
        // [...]}`) is tools whatever its role: it is named by its type.
        let role = object
            .str("type")
            .filter(|t| t == "additional_tools")
            .or_else(|| object.str("role"))
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
                if let Ok(b) = Object::parse(block)
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
        let (blocks, under) = if raw.get().starts_with('"') {
            self.system.push(Elem::new(raw.get(), Form::Text));
            self.system_paths.push(at.to_owned());
            return Ok(());
        } else if raw.get().starts_with('{') {
            let object = self.object(raw.get(), at)?;
            match object.get("parts") {
                Some(parts) => (
                    self.array(parts, &format!("{at}.parts"))?,
                    format!("{at}.parts"),
                ),
                None => {
                    self.system.push(Elem::new(raw.get(), Form::Block));
                    self.system_paths.push(at.to_owned());
                    return Ok(());
                }
            }
        } else {
            (self.array(raw, at)?, at.to_owned())
        };
        for (j, block) in blocks.into_iter().enumerate() {
            self.system.push(Elem::new(block, Form::Block));
            self.system_paths.push(format!("{under}[{j}]"));
        }
        Ok(())
    }

    /// Chat Completions and Responses: the leading system messages are the system field.
    pub(crate) fn split_leading_system(&mut self) {
        if let Some(last) = self.take_leading_system() {
            self.system_end = last;
        }
    }

    /// The leading system and developer messages (Codex's `additional_tools` items among
    /// them stay, to be read as tools) join the system field, each compared as a message;
    /// where the last of them ends, when there was one.
    fn take_leading_system(&mut self) -> Option<usize> {
        let lead = self
            .messages
            .iter()
            .take_while(|m| matches!(m.role.as_ref(), "system" | "developer" | "additional_tools"))
            .count();
        if !self.messages[..lead]
            .iter()
            .any(|m| m.role != "additional_tools")
        {
            return None;
        }
        let rest = self.messages.split_off(lead);
        let leading = std::mem::replace(&mut self.messages, rest);
        let key = if self.class == Class::Responses {
            "input"
        } else {
            "messages"
        };
        let mut end = None;
        let mut tools_items = Vec::new();
        for m in leading {
            if m.role == "additional_tools" {
                tools_items.push(m);
                continue;
            }
            end = Some(m.elem.offset(self.text) + m.elem.raw.len());
            self.system_paths.push(format!("{key}[{}]", m.index));
            self.system.push(m.elem);
        }
        // The tools items keep their place before the rest of the messages.
        tools_items.append(&mut self.messages);
        self.messages = tools_items;
        end
    }
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
        system_paths: Vec::new(),
        tool_paths: Vec::new(),
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
        parsed.read_tools(tools, memo.as_deref_mut())?;
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
                Elem::new(messages.get(), Form::Exact),
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
        parsed.take_leading_system();
    }
    Ok(parsed)
}
