//! One stored message (a history node, or an ephemeral message) in an API's shape.
//!
//! Conversion is a pure function of the message's bytes (and, for a Gemini tool result, of
//! the call it answers), so a node converted once is converted to the same bytes in every
//! later request. Given JSON (content blocks of a reply, a tool's arguments) is carried raw.

use std::borrow::Cow;
use std::collections::HashSet;

use prompt_core::ApiKind;
use prompt_core::input::{EXCERPT_BYTES, excerpt};
use serde_json::value::RawValue;

use crate::raw::{self, Object, push_quoted, quote};

/// The role of the message a converted node's parts go into (APIs with strict alternation
/// group consecutive nodes of one role into one message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// `user`.
    User,
    /// `assistant` (Gemini: `model`).
    Assistant,
    /// `system` inside Anthropic's `messages` (Claude Opus 4.8): the per-request tail after
    /// the user message of a native-system profile.
    System,
}

/// One array element (OpenAI) or content block / part (Anthropic, Gemini), as sent.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub(crate) text: Box<str>,
    /// Whether Anthropic accepts a `cache_control` on it (not on thinking blocks nor on
    /// empty text).
    pub(crate) cacheable: bool,
}

impl Part {
    fn new(text: impl Into<Box<str>>) -> Self {
        Self {
            text: text.into(),
            cacheable: true,
        }
    }
}

/// A tool call an assistant message opens.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) id: String,
    pub(crate) name: String,
    /// Whether the provider gave the id itself (Gemini's `functionCall.id`): only then is it
    /// sent back in the `functionResponse`.
    pub(crate) native: bool,
}

/// What the provider's profile asks of a `role: "system"` (or `developer`) message that is
/// not the first one of the body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Style {
    /// Chat Completions and Responses: send it as a user message wrapped in
    /// `<system-reminder>` (a provider that moves system messages to the front, or one
    /// nobody knows).
    pub(crate) system_as_user: bool,
    /// Anthropic: send it as a `role: "system"` message inside `messages` (Claude Opus 4.8).
    pub(crate) native_system: bool,
}

/// A message in an API's shape.
#[derive(Debug)]
pub(crate) struct Converted {
    pub(crate) role: Role,
    pub(crate) parts: Vec<Part>,
    /// For a `system` (or `developer`) message: its text, which the APIs with one system
    /// field put there when the message leads the history.
    pub(crate) system_text: Option<String>,
    /// The tool calls an assistant message opens, sorted by id.
    pub(crate) calls: Vec<Call>,
    /// Anthropic with native system messages: the parts are the blocks of a
    /// `role: "system"` message (laid out by the wire after the user message of its turn).
    pub(crate) native_system: bool,
    /// Gemini: function calls built from an OpenAI-shaped message, so without the
    /// `thoughtSignature` a replayed reply carries.
    pub(crate) unsigned_calls: bool,
}

impl Converted {
    fn new(role: Role, parts: Vec<Part>) -> Self {
        Self {
            role,
            parts,
            system_text: None,
            calls: Vec::new(),
            native_system: false,
            unsigned_calls: false,
        }
    }
}

/// The content of a message.
enum Content<'a> {
    Absent,
    Text(Cow<'a, str>),
    Parts(Vec<&'a RawValue>),
}

fn content_of<'a>(
    message: &Object<'a>,
    key: &str,
) -> Result<(Content<'a>, Option<&'a RawValue>), String> {
    let Some(raw) = message.get(key) else {
        return Ok((Content::Absent, None));
    };
    if raw::is_null(raw) {
        return Ok((Content::Absent, None));
    }
    if let Some(text) = raw::string_of(raw) {
        return Ok((Content::Text(text), Some(raw)));
    }
    if let Some(parts) = raw::array_of(raw) {
        return Ok((Content::Parts(parts), Some(raw)));
    }
    Err(format!(
        "\"{key}\" is {}, not a string, an array or null",
        raw::kind_of(raw)
    ))
}

fn unknown_role(role: &str) -> String {
    format!("unknown role \"{}\"", excerpt(role, EXCERPT_BYTES))
}

/// The text of the text parts of `parts`, joined by a newline.
fn text_of_parts(parts: &[&RawValue]) -> String {
    let mut out = String::new();
    for part in parts {
        let Ok(object) = Object::of(part) else {
            continue;
        };
        if let Some(text) = object.str("text") {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&text);
        }
    }
    out
}

/// One tool call of an assistant message in the OpenAI shape.
struct ToolCall<'a> {
    id: Cow<'a, str>,
    name: Cow<'a, str>,
    /// The `arguments` value, raw (a JSON string holding the arguments object, normally).
    arguments: Option<&'a RawValue>,
}

impl ToolCall<'_> {
    /// The arguments as a JSON object's text, kept raw; `{}` when they are not one.
    fn arguments_object(&self) -> Cow<'_, str> {
        let Some(arguments) = self.arguments else {
            return Cow::Borrowed("{}");
        };
        let text = raw::string_of(arguments).unwrap_or(Cow::Borrowed(arguments.get()));
        match Object::parse(&text) {
            Ok(_) => text,
            Err(_) => Cow::Borrowed("{}"),
        }
    }

    /// The arguments as a JSON string literal (as OpenAI sends them).
    fn arguments_string(&self) -> Cow<'_, str> {
        match self.arguments {
            None => Cow::Borrowed(r#""{}""#),
            Some(arguments) if raw::string_of(arguments).is_some() => {
                Cow::Borrowed(arguments.get())
            }
            Some(arguments) => Cow::Owned(quote(arguments.get())),
        }
    }
}

fn tool_calls<'a>(message: &Object<'a>) -> Result<Vec<ToolCall<'a>>, String> {
    let Some(raw) = message.get("tool_calls").filter(|r| !raw::is_null(r)) else {
        return Ok(Vec::new());
    };
    let calls = raw::array_of(raw).ok_or("\"tool_calls\" is not an array")?;
    let mut out = Vec::with_capacity(calls.len());
    for (i, call) in calls.into_iter().enumerate() {
        let call = Object::of(call).map_err(|p| format!("tool_calls[{i}] is {p}"))?;
        let id = call
            .str("id")
            .ok_or_else(|| format!("tool_calls[{i}] has no string \"id\""))?;
        let function = call
            .get("function")
            .map(Object::of)
            .transpose()
            .map_err(|p| format!("tool_calls[{i}].function is {p}"))?
            .ok_or_else(|| format!("tool_calls[{i}] has no \"function\""))?;
        let name = function
            .str("name")
            .ok_or_else(|| format!("tool_calls[{i}].function has no string \"name\""))?;
        let arguments = function.get("arguments");
        out.push(ToolCall {
            id,
            name,
            arguments,
        });
    }
    Ok(out)
}

fn calls_of(calls: &[ToolCall<'_>], native: &HashSet<String>) -> Vec<Call> {
    let mut out: Vec<Call> = calls
        .iter()
        .map(|c| Call {
            id: c.id.to_string(),
            name: c.name.to_string(),
            native: native.contains(c.id.as_ref()),
        })
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// A data URL's media type and base64 data.
fn data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (media, data) = rest.split_once(";base64,")?;
    Some((media, data))
}

/// The URL of an OpenAI `image_url` part (`{"url":…}` or a bare string) and its detail.
fn image_url<'a>(part: &Object<'a>) -> Option<(Cow<'a, str>, Option<Cow<'a, str>>)> {
    let raw = part.get("image_url")?;
    if let Some(url) = raw::string_of(raw) {
        return Some((url, None));
    }
    let object = Object::of(raw).ok()?;
    Some((object.str("url")?, object.str("detail")))
}

/// Converts one stored message to `api`'s shape. `answered` finds the call a tool result
/// answers (Gemini needs its name); `style` is what the profile asks of a later system
/// message.
pub(crate) fn convert(
    api: ApiKind,
    message: &str,
    answered: &dyn Fn(&str) -> Option<Call>,
    style: Style,
) -> Result<Converted, String> {
    let object = Object::parse(message).map_err(|p| format!("the message is {p}"))?;
    let role = object
        .str("role")
        .ok_or("the message has no string \"role\"")?;
    if style.system_as_user
        && matches!(
            api,
            ApiKind::OpenAi | ApiKind::LlamaCpp | ApiKind::OpenAiResponses
        )
        && matches!(role.as_ref(), "system" | "developer")
    {
        return Ok(Converted::new(Role::User, vec![system_reminder(&object)?]));
    }
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => Ok(chat(&object, &role, message)),
        ApiKind::OpenAiResponses => responses(&object, &role, message),
        ApiKind::Anthropic => {
            let mut converted = anthropic(&object, &role)?;
            if style.native_system && converted.system_text.is_some() {
                converted.native_system = true;
                // A breakpoint on a trailing system message is never read back
                // (anthropics/claude-code #96101): none goes on a system message's block.
                for part in &mut converted.parts {
                    part.cacheable = false;
                }
            }
            Ok(converted)
        }
        ApiKind::Gemini => gemini(&object, &role, answered),
    }
}

/// A later system message as the user message a provider that moves system messages to
/// the front gets instead: `{"role":"user","content":"<system-reminder>\n…\n</system-reminder>"}`,
/// the text of its content (parts joined by a newline).
fn system_reminder(object: &Object<'_>) -> Result<Part, String> {
    let text = match content_of(object, "content")?.0 {
        Content::Absent => String::new(),
        Content::Text(text) => text.into_owned(),
        Content::Parts(items) => text_of_parts(&items),
    };
    let tag = prompt_core::DeliveryStyle::REMINDER_TAG;
    let wrapped = format!("<{tag}>\n{text}\n</{tag}>");
    Ok(Part::new(text_message("user", &wrapped)))
}

// ---------------------------------------------------------------------------------------
// OpenAI Chat Completions and llama.cpp: the stored message, minus what they reject.

fn chat(object: &Object<'_>, role: &str, message: &str) -> Converted {
    // `is_error` is Anthropic's; Chat Completions has no such field.
    let text = match role {
        "tool" => object.without("is_error"),
        _ => None,
    };
    let text = text.unwrap_or_else(|| message.to_owned());
    Converted::new(Role::User, vec![Part::new(text)])
}

// ---------------------------------------------------------------------------------------
// OpenAI Responses: input items.

fn responses(object: &Object<'_>, role: &str, message: &str) -> Result<Converted, String> {
    let mut parts = Vec::new();
    match role {
        "system" | "developer" | "user" => match content_of(object, "content")?.0 {
            Content::Absent => {}
            Content::Text(text) => {
                if object.fields.len() == 2 {
                    parts.push(Part::new(message));
                } else {
                    parts.push(Part::new(text_message(role, &text)));
                }
            }
            Content::Parts(items) => {
                let mut out = format!(r#"{{"role":{},"content":["#, quote(role));
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&responses_part(item, i)?);
                }
                out.push_str("]}");
                parts.push(Part::new(out));
            }
        },
        "assistant" => {
            if let Some(output) = object.get("output") {
                let items = raw::array_of(output).ok_or("\"output\" is not an array")?;
                parts.extend(items.into_iter().map(|item| Part::new(item.get())));
                return Ok(Converted::new(Role::Assistant, parts));
            }
            let text = match content_of(object, "content")?.0 {
                Content::Absent => String::new(),
                Content::Text(text) => text.into_owned(),
                Content::Parts(items) => text_of_parts(&items),
            };
            if !text.is_empty() {
                // `"type":"message"` is optional in OpenAI's input message, but llama.cpp's
                // server cannot tell an assistant item's type without it.
                let mut out = String::from(r#"{"type":"message","role":"assistant","content":"#);
                push_quoted(&mut out, &text);
                out.push('}');
                parts.push(Part::new(out));
            }
            let calls = tool_calls(object)?;
            for call in &calls {
                let mut out = String::from(r#"{"type":"function_call","call_id":"#);
                push_quoted(&mut out, &call.id);
                out.push_str(r#","name":"#);
                push_quoted(&mut out, &call.name);
                out.push_str(r#","arguments":"#);
                out.push_str(&call.arguments_string());
                out.push('}');
                parts.push(Part::new(out));
            }
            let mut converted = Converted::new(Role::Assistant, parts);
            converted.calls = calls_of(&calls, &HashSet::new());
            return Ok(converted);
        }
        "tool" => {
            let call_id = object
                .str("tool_call_id")
                .ok_or("a tool result without a string \"tool_call_id\"")?;
            let mut out = String::from(r#"{"type":"function_call_output","call_id":"#);
            push_quoted(&mut out, &call_id);
            out.push_str(r#","output":"#);
            match content_of(object, "content")? {
                (Content::Absent, _) => out.push_str(r#""""#),
                (Content::Text(_), Some(raw)) => out.push_str(raw.get()),
                (Content::Text(text), None) => push_quoted(&mut out, &text),
                (Content::Parts(items), _) => {
                    out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(&responses_part(item, i)?);
                    }
                    out.push(']');
                }
            }
            out.push('}');
            parts.push(Part::new(out));
        }
        other => return Err(unknown_role(other)),
    }
    Ok(Converted::new(Role::User, parts))
}

fn text_message(role: &str, text: &str) -> String {
    let mut out = String::from(r#"{"role":"#);
    push_quoted(&mut out, role);
    out.push_str(r#","content":"#);
    push_quoted(&mut out, text);
    out.push('}');
    out
}

/// A Chat content part as a Responses input content item.
fn responses_part(part: &RawValue, index: usize) -> Result<String, String> {
    let object = Object::of(part).map_err(|p| format!("content part {index} is {p}"))?;
    let kind = object.str("type");
    Ok(match kind.as_deref() {
        Some("text") => {
            let text = object
                .str("text")
                .ok_or_else(|| format!("text part {index} has no string \"text\""))?;
            let mut out = String::from(r#"{"type":"input_text","text":"#);
            push_quoted(&mut out, &text);
            out.push('}');
            out
        }
        Some("image_url") => {
            let (url, detail) =
                image_url(&object).ok_or_else(|| format!("image part {index} has no URL"))?;
            let mut out = String::from(r#"{"type":"input_image","image_url":"#);
            push_quoted(&mut out, &url);
            if let Some(detail) = detail {
                out.push_str(r#","detail":"#);
                push_quoted(&mut out, &detail);
            }
            out.push('}');
            out
        }
        Some("file") => {
            let file = object
                .get("file")
                .map(Object::of)
                .transpose()
                .map_err(|p| format!("file part {index}'s \"file\" is {p}"))?
                .ok_or_else(|| format!("file part {index} has no \"file\""))?;
            let mut out = String::from(r#"{"type":"input_file""#);
            for key in ["file_id", "file_data", "filename"] {
                if let Some(value) = file.get(key) {
                    out.push(',');
                    push_quoted(&mut out, key);
                    out.push(':');
                    out.push_str(value.get());
                }
            }
            out.push('}');
            out
        }
        _ => part.get().to_owned(),
    })
}

// ---------------------------------------------------------------------------------------
// Anthropic Messages and Gemini generateContent: user-side content as blocks (parts).

/// How an API of content blocks (Anthropic) or parts (Gemini) writes user-side content: a
/// system or user message, a tool result's content.
struct Blocks {
    /// A text block.
    text: fn(&str) -> Part,
    /// The opening of an inline image, up to its media type (then `,"data":`, the data and
    /// `}}`).
    inline_image: &'static str,
    /// The opening of an image by URL, up to the URL (then `}}`).
    image_url: &'static str,
    /// Any other part, `i`th of its message.
    other: fn(&RawValue, usize) -> Result<Part, String>,
}

impl Blocks {
    /// User-side content parts (OpenAI's `text` and `image_url`, any other carried) as blocks.
    fn user_parts(&self, items: &[&RawValue]) -> Result<Vec<Part>, String> {
        let mut out = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let object = Object::of(item).map_err(|p| format!("content part {i} is {p}"))?;
            match object.str("type").as_deref() {
                Some("text") => {
                    let text = object
                        .str("text")
                        .ok_or_else(|| format!("text part {i} has no string \"text\""))?;
                    if !text.is_empty() {
                        out.push((self.text)(&text));
                    }
                }
                Some("image_url") => {
                    let (url, _) =
                        image_url(&object).ok_or_else(|| format!("image part {i} has no URL"))?;
                    let mut block = String::new();
                    match data_url(&url) {
                        Some((media, data)) => {
                            block.push_str(self.inline_image);
                            push_quoted(&mut block, media);
                            block.push_str(r#","data":"#);
                            push_quoted(&mut block, data);
                        }
                        None => {
                            block.push_str(self.image_url);
                            push_quoted(&mut block, &url);
                        }
                    }
                    block.push_str("}}");
                    out.push(Part::new(block));
                }
                _ => out.push((self.other)(item, i)?),
            }
        }
        Ok(out)
    }

    /// A user-side message's content as blocks (none for no text).
    fn content(&self, content: Content<'_>) -> Result<Vec<Part>, String> {
        match content {
            Content::Absent => Ok(Vec::new()),
            Content::Text(text) if text.is_empty() => Ok(Vec::new()),
            Content::Text(text) => Ok(vec![(self.text)(&text)]),
            Content::Parts(items) => self.user_parts(&items),
        }
    }

    /// A message of `role` `system` (or `developer`) or `user`; any other role is unknown.
    fn user_side(&self, object: &Object<'_>, role: &str) -> Result<Converted, String> {
        match role {
            "system" | "developer" => {
                let content = content_of(object, "content")?.0;
                let text = match &content {
                    Content::Absent => String::new(),
                    Content::Text(text) => text.to_string(),
                    Content::Parts(items) => text_of_parts(items),
                };
                let mut converted = Converted::new(Role::User, self.content(content)?);
                converted.system_text = Some(text);
                Ok(converted)
            }
            "user" => Ok(Converted::new(
                Role::User,
                self.content(content_of(object, "content")?.0)?,
            )),
            other => Err(unknown_role(other)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Anthropic Messages: content blocks.

const THINKING: [&str; 2] = ["thinking", "redacted_thinking"];

fn anthropic_text(text: &str) -> Part {
    let mut out = String::from(r#"{"type":"text","text":"#);
    push_quoted(&mut out, text);
    out.push('}');
    Part::new(out)
}

/// A given block, verbatim but for a `cache_control` (the library places breakpoints).
fn anthropic_verbatim(block: &RawValue, index: usize) -> Result<Part, String> {
    let object = Object::of(block).map_err(|p| format!("content block {index} is {p}"))?;
    if object.fields.is_empty() {
        return Err(format!("content block {index} is an empty object"));
    }
    let kind = object.str("type");
    let empty_text =
        kind.as_deref() == Some("text") && object.str("text").is_some_and(|t| t.is_empty());
    let cacheable = !kind.as_deref().is_some_and(|k| THINKING.contains(&k)) && !empty_text;
    let text = object
        .without("cache_control")
        .unwrap_or_else(|| block.get().to_owned());
    Ok(Part {
        text: text.into(),
        cacheable,
    })
}

/// Anthropic's user-side blocks.
const ANTHROPIC: Blocks = Blocks {
    text: anthropic_text,
    inline_image: r#"{"type":"image","source":{"type":"base64","media_type":"#,
    image_url: r#"{"type":"image","source":{"type":"url","url":"#,
    other: anthropic_verbatim,
};

fn anthropic(object: &Object<'_>, role: &str) -> Result<Converted, String> {
    match role {
        "assistant" => {
            let mut blocks = Vec::new();
            let mut present: HashSet<String> = HashSet::new();
            match content_of(object, "content")?.0 {
                Content::Absent => {}
                Content::Text(text) => {
                    if !text.is_empty() {
                        blocks.push(anthropic_text(&text));
                    }
                }
                Content::Parts(items) => {
                    for (i, item) in items.iter().enumerate() {
                        let block = anthropic_verbatim(item, i)?;
                        if let Ok(o) = Object::of(item)
                            && o.str("type").as_deref() == Some("tool_use")
                            && let Some(id) = o.str("id")
                        {
                            present.insert(id.into_owned());
                        }
                        blocks.push(block);
                    }
                }
            }
            let calls = tool_calls(object)?;
            for call in calls.iter().filter(|c| !present.contains(c.id.as_ref())) {
                let mut out = String::from(r#"{"type":"tool_use","id":"#);
                push_quoted(&mut out, &call.id);
                out.push_str(r#","name":"#);
                push_quoted(&mut out, &call.name);
                out.push_str(r#","input":"#);
                out.push_str(&call.arguments_object());
                out.push('}');
                blocks.push(Part::new(out));
            }
            let mut converted = Converted::new(Role::Assistant, blocks);
            converted.calls = calls_of(&calls, &HashSet::new());
            Ok(converted)
        }
        "tool" => {
            let call_id = object
                .str("tool_call_id")
                .ok_or("a tool result without a string \"tool_call_id\"")?;
            let mut out = String::from(r#"{"type":"tool_result","tool_use_id":"#);
            push_quoted(&mut out, &call_id);
            match content_of(object, "content")? {
                (Content::Absent, _) => {}
                (Content::Text(_), Some(raw)) => {
                    out.push_str(r#","content":"#);
                    out.push_str(raw.get());
                }
                (Content::Text(text), None) => {
                    out.push_str(r#","content":"#);
                    push_quoted(&mut out, &text);
                }
                (Content::Parts(items), _) => {
                    out.push_str(r#","content":["#);
                    for (i, block) in ANTHROPIC.user_parts(&items)?.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(&block.text);
                    }
                    out.push(']');
                }
            }
            if object.get("is_error").is_some_and(|v| v.get() == "true") {
                out.push_str(r#","is_error":true"#);
            }
            out.push('}');
            Ok(Converted::new(Role::User, vec![Part::new(out)]))
        }
        other => ANTHROPIC.user_side(object, other),
    }
}

// ---------------------------------------------------------------------------------------
// Gemini generateContent: parts.

fn gemini_text(text: &str) -> Part {
    let mut out = String::from(r#"{"text":"#);
    push_quoted(&mut out, text);
    out.push('}');
    Part::new(out)
}

/// Gemini's user-side parts.
const GEMINI: Blocks = Blocks {
    text: gemini_text,
    inline_image: r#"{"inlineData":{"mimeType":"#,
    image_url: r#"{"fileData":{"fileUri":"#,
    other: |item, _| Ok(Part::new(item.get())),
};

fn gemini(
    object: &Object<'_>,
    role: &str,
    answered: &dyn Fn(&str) -> Option<Call>,
) -> Result<Converted, String> {
    match role {
        "assistant" => {
            let calls = tool_calls(object)?;
            if let Some(given) = object.get("parts") {
                let items = raw::array_of(given).ok_or("\"parts\" is not an array")?;
                let native: HashSet<String> = items
                    .iter()
                    .filter_map(|p| Object::of(p).ok())
                    .filter_map(|p| p.get("functionCall").and_then(|f| Object::of(f).ok()))
                    .filter_map(|f| f.str("id").map(Cow::into_owned))
                    .collect();
                let mut converted = Converted::new(
                    Role::Assistant,
                    items.into_iter().map(|p| Part::new(p.get())).collect(),
                );
                converted.calls = calls_of(&calls, &native);
                return Ok(converted);
            }
            let mut parts = match content_of(object, "content")?.0 {
                Content::Absent => Vec::new(),
                Content::Text(text) if text.is_empty() => Vec::new(),
                Content::Text(text) => vec![gemini_text(&text)],
                Content::Parts(items) => {
                    let text = text_of_parts(&items);
                    if text.is_empty() {
                        Vec::new()
                    } else {
                        vec![gemini_text(&text)]
                    }
                }
            };
            for call in &calls {
                let mut out = String::from(r#"{"functionCall":{"name":"#);
                push_quoted(&mut out, &call.name);
                out.push_str(r#","args":"#);
                out.push_str(&call.arguments_object());
                out.push_str("}}");
                parts.push(Part::new(out));
            }
            let mut converted = Converted::new(Role::Assistant, parts);
            converted.calls = calls_of(&calls, &HashSet::new());
            converted.unsigned_calls = !calls.is_empty();
            Ok(converted)
        }
        "tool" => {
            let call_id = object
                .str("tool_call_id")
                .ok_or("a tool result without a string \"tool_call_id\"")?;
            let call = answered(&call_id);
            let name = object
                .str("name")
                .map(Cow::into_owned)
                .or_else(|| call.as_ref().map(|c| c.name.clone()))
                .unwrap_or_else(|| call_id.to_string());
            let mut out = String::from(r#"{"functionResponse":{"#);
            if call.as_ref().is_some_and(|c| c.native) {
                out.push_str(r#""id":"#);
                push_quoted(&mut out, &call_id);
                out.push(',');
            }
            out.push_str(r#""name":"#);
            push_quoted(&mut out, &name);
            out.push_str(r#","response":{"#);
            let content = object.get("content").filter(|c| !raw::is_null(c));
            if let Some(content) = content {
                let key = if object.get("is_error").is_some_and(|v| v.get() == "true") {
                    r#""error":"#
                } else {
                    r#""output":"#
                };
                out.push_str(key);
                out.push_str(content.get());
            }
            out.push_str("}}}");
            Ok(Converted::new(Role::User, vec![Part::new(out)]))
        }
        other => GEMINI.user_side(object, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none(_: &str) -> Option<Call> {
        None
    }

    fn texts(c: &Converted) -> Vec<&str> {
        c.parts.iter().map(|p| &*p.text).collect()
    }

    #[test]
    fn chat_drops_is_error_and_keeps_everything_else_byte_for_byte() {
        let m = r#"{"role":"tool","tool_call_id":"c1","content":"x","is_error":true}"#;
        let c = convert(ApiKind::OpenAi, m, &none, Style::default()).unwrap();
        assert_eq!(
            texts(&c),
            [r#"{"role":"tool","tool_call_id":"c1","content":"x"}"#]
        );
        let m = r#"{"role":"assistant", "content":null,"x":1e400}"#;
        assert_eq!(
            texts(&convert(ApiKind::LlamaCpp, m, &none, Style::default()).unwrap()),
            [m]
        );
    }

    #[test]
    fn anthropic_tool_calls_become_tool_use_blocks_with_raw_arguments() {
        let m = r#"{"role":"assistant","content":"Reading.","tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{\"path\": \"a.rs\"}"}}]}"#;
        let c = convert(ApiKind::Anthropic, m, &none, Style::default()).unwrap();
        assert_eq!(
            texts(&c),
            [
                r#"{"type":"text","text":"Reading."}"#,
                r#"{"type":"tool_use","id":"c1","name":"read","input":{"path": "a.rs"}}"#
            ]
        );
        assert_eq!(c.role, Role::Assistant);
    }

    #[test]
    fn gemini_tool_results_take_the_name_of_the_call_they_answer() {
        let answered = |id: &str| {
            (id == "c1").then(|| Call {
                id: "c1".into(),
                name: "read".into(),
                native: false,
            })
        };
        let m = r#"{"role":"tool","tool_call_id":"c1","content":"text"}"#;
        let c = convert(ApiKind::Gemini, m, &answered, Style::default()).unwrap();
        assert_eq!(
            texts(&c),
            [r#"{"functionResponse":{"name":"read","response":{"output":"text"}}}"#]
        );
    }
}
