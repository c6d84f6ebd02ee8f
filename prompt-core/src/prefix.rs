//! The frozen prefix: every prefix component's text, rendered once and serialized once.

use std::ops::Range;
use std::sync::Arc;

use crate::component::Component;
use crate::delivery::PrefixRole;
use crate::hash::{Digest128, Fingerprint};
use crate::id::ComponentId;
use crate::json;
use crate::tools::ToolSet;

/// A prefix component and its text once rendered.
#[derive(Clone)]
pub(crate) struct PrefixPart {
    pub(crate) component: Component,
    /// Outer `None`: not rendered yet (turn components render at the first turn).
    pub(crate) rendered: Option<Option<String>>,
}

/// The frozen prefix message and where each component's text lies in it.
#[derive(Debug, Clone)]
pub(crate) struct FrozenPrefix {
    /// The serialized system message; empty when no component landed in the prefix or
    /// when the prefix travels in the first user message.
    pub(crate) bytes: Arc<str>,
    /// The prefix text (components joined by a blank line).
    pub(crate) text: Arc<str>,
    /// Byte range of each component's text within `bytes`.
    pub(crate) parts: Vec<(ComponentId, Range<usize>)>,
    pub(crate) fingerprint: Fingerprint,
    /// The system prompt the application gave the session ([`SessionOptions::with_system_prompt`](crate::SessionOptions::with_system_prompt)),
    /// frozen at the head of the prefix text; `None` when there was none (or an adopted
    /// conversation carries it in a message of its own).
    pub(crate) system_prompt: Option<Arc<str>>,
}

fn json_string_body(text: &str) -> String {
    let quoted = json::quote(text);
    quoted[1..quoted.len() - 1].to_owned()
}

/// The prefix fingerprint: the tools field and the prefix, as sent. Both are frozen for the
/// session and both are above the history, so both are in the key of the cached prefix.
pub(crate) fn fingerprint(tools: &ToolSet, prefix: &[u8]) -> Fingerprint {
    Digest128::of(&[
        b"tools\0",
        tools.openai_json().as_bytes(),
        b"\0prefix\0",
        prefix,
    ])
}

/// Freezes the prefix: the application's system prompt (if any), then every prefix
/// component's text, joined by a blank line.
pub(crate) fn freeze_prefix(
    parts: &[PrefixPart],
    role: PrefixRole,
    tools: &ToolSet,
    system_prompt: Option<&str>,
) -> FrozenPrefix {
    let system_prompt = system_prompt.filter(|s| !s.is_empty());
    let texts: Vec<(Option<&ComponentId>, &str)> = system_prompt
        .map(|text| (None, text))
        .into_iter()
        .chain(parts.iter().filter_map(|p| match &p.rendered {
            Some(Some(text)) => Some((Some(p.component.id()), text.as_str())),
            _ => None,
        }))
        .collect();
    let system_prompt = system_prompt.map(Arc::from);
    if texts.is_empty() {
        return FrozenPrefix {
            bytes: Arc::from(""),
            text: Arc::from(""),
            parts: Vec::new(),
            fingerprint: fingerprint(tools, b""),
            system_prompt,
        };
    }
    let text: String = texts
        .iter()
        .map(|(_, t)| *t)
        .collect::<Vec<_>>()
        .join("\n\n");
    if role == PrefixRole::FirstUser {
        let fingerprint = fingerprint(tools, text.as_bytes());
        return FrozenPrefix {
            bytes: Arc::from(""),
            text: text.into(),
            parts: Vec::new(),
            fingerprint,
            system_prompt,
        };
    }
    // JSON string escaping is per character, so escaping each part separately gives the
    // same bytes as escaping the joined text, and tells where each component's bytes lie.
    let mut bytes = String::from(r#"{"role":"system","content":""#);
    let mut ranges = Vec::with_capacity(texts.len());
    for (i, (id, text)) in texts.iter().enumerate() {
        if i > 0 {
            bytes.push_str(r"\n\n");
        }
        let start = bytes.len();
        bytes.push_str(&json_string_body(text));
        if let Some(id) = id {
            ranges.push(((*id).clone(), start..bytes.len()));
        }
    }
    bytes.push_str("\"}");
    let fingerprint = fingerprint(tools, bytes.as_bytes());
    FrozenPrefix {
        bytes: bytes.into(),
        text: text.into(),
        parts: ranges,
        fingerprint,
        system_prompt,
    }
}
