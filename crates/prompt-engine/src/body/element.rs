//! One element of a body (a tool, a system block, a message, a content block) as sent, and
//! as compared: whitespace between tokens, `cache_control` and a text block's spelling are
//! not what a provider's cache keys on.

use std::borrow::Cow;
use std::hash::Hasher;

use rustc_hash::FxHasher;

use crate::raw::{self, Object, offset_in};

/// How an element of a body is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(crate) enum ContentKey {
    Content,
    Parts,
}

impl ContentKey {
    pub(crate) fn as_str(self) -> &'static str {
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
    /// An element of `raw`'s text (valid JSON).
    pub(crate) fn new(raw: &'a str, form: Form) -> Self {
        Self { raw, form }
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
    pub(crate) fn offset(&self, body: &str) -> usize {
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
pub(crate) fn message_norm_of(object: &Object<'_>, key: ContentKey) -> String {
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
        Some(content) if content.get().starts_with('"') => {
            vec![Elem::new(content.get(), Form::Text)]
        }
        Some(content) => raw::elements_of(content)
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
    for block in raw::elements_of(content).unwrap_or_default() {
        if let Some(t) = Object::parse(block).ok().and_then(|b| b.str("text")) {
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
    /// [`element_hash`] of its bytes, when reading it took it already.
    pub(crate) raw_hash: Option<u64>,
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
    pub(crate) fn new(index: usize, role: Cow<'a, str>, elem: Elem<'a>, norm: &str) -> Self {
        Self {
            index,
            role,
            elem,
            hash: element_hash(norm),
            raw_hash: None,
        }
    }
}

/// The hash of an element's text, as sent or as compared: the one hash the engine keeps
/// and compares elements by (64 bits; not a defence against crafted collisions, which no
/// hash with a public key is).
pub(crate) fn element_hash(text: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(text.as_bytes());
    h.write_usize(text.len());
    h.finish()
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
