//! The JSON the stream readers write: objects rewritten with some fields replaced, and
//! arguments streamed as text made compact.

use std::borrow::Cow;

use crate::raw::{Object, push_quoted};

/// The object `o` again, compactly, with each `(key, value)` of `fields` replacing the
/// value of its key, or added at the end in the order given. The other values are kept as
/// they were written.
pub(crate) fn with_fields(o: &Object<'_>, fields: &[(&str, &str)]) -> String {
    let mut out = String::from("{");
    let push = |out: &mut String, key: &str, value: &str| {
        if out.len() > 1 {
            out.push(',');
        }
        push_quoted(out, key);
        out.push(':');
        out.push_str(value);
    };
    for (key, value) in &o.fields {
        let value = fields
            .iter()
            .find(|(k, _)| k == key)
            .map_or(value.get(), |(_, v)| v);
        push(&mut out, key, value);
    }
    for (key, value) in fields {
        if !o.has(key) {
            push(&mut out, key, value);
        }
    }
    out.push('}');
    out
}

/// `text` as compact JSON: no whitespace between tokens, every string written as
/// serde_json (and nlohmann's `dump`) writes it, numbers and key order as given; `None`
/// when `text` is not one JSON value.
pub(crate) fn compact(text: &str) -> Option<String> {
    serde_json::from_str::<serde::de::IgnoredAny>(text).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(|c: char| c == '"' || c.is_ascii_whitespace()) {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        if rest.starts_with('"') {
            let end = string_end(rest)?;
            let literal: Cow<'_, str> = serde_json::from_str(&rest[..end]).ok()?;
            push_quoted(&mut out, &literal);
            rest = &rest[end..];
        } else {
            rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
        }
    }
    out.push_str(rest);
    Some(out)
}

/// The length of the string literal `text` starts with, quotes included.
fn string_end(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut at = 1;
    while at < bytes.len() {
        match bytes[at] {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_json_drops_whitespace_and_respells_strings_only() {
        assert_eq!(
            compact(" {\"city\": \"Par\\u00eds\\/x\" ,\n \"n\": [1.50, 1e2, {} ]}\t").as_deref(),
            Some(r#"{"city":"París/x","n":[1.50,1e2,{}]}"#)
        );
        assert_eq!(
            compact(r#"{"a":"\" b"}"#).as_deref(),
            Some(r#"{"a":"\" b"}"#)
        );
        assert_eq!(compact(r#"{"city":"Rome"#), None);
        assert_eq!(compact(""), None);
    }

    #[test]
    fn with_fields_replaces_in_place_and_appends_the_rest() {
        let o = Object::parse(r#"{"type": "thinking", "thinking": ""}"#).unwrap();
        assert_eq!(
            with_fields(&o, &[("thinking", "\"x\""), ("signature", "\"s\"")]),
            r#"{"type":"thinking","thinking":"x","signature":"s"}"#
        );
    }
}
