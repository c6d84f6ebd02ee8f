//! One body's parts as sent, for a consumer that measures a body part by part, and a part
//! without its `cache_control` markers.

use prompt_core::ApiKind;
use std::borrow::Cow;

use serde_json::value::RawValue;

use super::error::GuardError;
use super::parse::parse;
use super::shape::{Reading, Which};
use crate::raw::{self, Object};

/// One request body's parts as the guard reads them, each as sent: what a consumer that
/// measures a body part by part (`cacheline audit`) reads instead of parsing each API again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyParts<'a> {
    /// The body's shape, from its keys (a `messages` body with nothing only Anthropic sends
    /// reads as Chat Completions).
    pub shape: ApiKind,
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

/// Reads one request body of any shape [`compare`](crate::compare) knows into its parts, with the checks
/// `compare` makes of each body (one JSON object of unique keys, at most
/// [`MAX_AUDIT_BODY_BYTES`](crate::MAX_AUDIT_BODY_BYTES), whose strings decode; tools and messages objects); an error
/// names the body [`Which::Request`]. Messages are read whole only while they may tell the
/// shape. Linear in the body's size; nothing is copied.
///
/// ```
/// use prompt_core::ApiKind;
/// use prompt_engine::body_parts;
/// let body = br#"{"model":"m","instructions":"Be brief.","input":[{"role":"user","content":"hi"}]}"#;
/// let parts = body_parts(body).unwrap();
/// assert_eq!(parts.shape, ApiKind::OpenAiResponses);
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
/// use prompt_engine::without_cache_control;
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
            .and_then(raw::elements_of)
        else {
            return Cow::Borrowed(part);
        };
        let mut out = String::with_capacity(part.len());
        out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&strip_cache_control(item, depth - 1));
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
