//! The JSON the library reads and writes itself.
//!
//! Messages it writes put their keys in the conventional order (`role` first), whatever the
//! host program's serde_json features. Messages it is given are inspected without converting
//! them to a `serde_json::Value`: values stay raw text, so a number outside f64's range
//! (`1e400`) or any vendor field survives byte-for-byte, and a duplicated key is caught.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// `text` as a JSON string literal, quotes included.
pub(crate) fn quote(text: &str) -> String {
    // `Display` of a `Value` cannot fail, unlike `serde_json::to_string`.
    Value::String(text.to_owned()).to_string()
}

/// `{"role":ROLE,"content":CONTENT}`.
pub(crate) fn text_message(role: &str, content: &str) -> String {
    format!(r#"{{"role":{},"content":{}}}"#, quote(role), quote(content))
}

/// A JSON object read as its keys, in order, and its values as raw text.
#[derive(Debug)]
pub(crate) struct RawObject<'a> {
    pub(crate) fields: Vec<(Cow<'a, str>, &'a RawValue)>,
}

/// Why a text is not a JSON object with unique keys.
#[derive(Debug)]
pub(crate) enum ObjectProblem {
    /// Not JSON at all.
    Syntax(serde_json::Error),
    /// JSON, but not an object: what it is.
    NotAnObject(&'static str),
    /// A key given twice.
    DuplicateKey(String),
}

impl<'a> RawObject<'a> {
    /// Reads `text` as one JSON object. Values are not converted, only checked to be JSON.
    pub(crate) fn parse(text: &'a str) -> Result<Self, ObjectProblem> {
        let mut de = serde_json::Deserializer::from_str(text);
        let parsed = match ObjectSeed.deserialize(&mut de) {
            Ok(parsed) => parsed,
            Err(e) => return Err(ObjectProblem::Syntax(e)),
        };
        de.end().map_err(ObjectProblem::Syntax)?;
        match parsed {
            Parsed::Object(fields) => {
                let mut seen: Vec<&str> = Vec::with_capacity(fields.len());
                for (key, _) in &fields {
                    if seen.contains(&key.as_ref()) {
                        return Err(ObjectProblem::DuplicateKey(key.to_string()));
                    }
                    seen.push(key);
                }
                Ok(Self { fields })
            }
            Parsed::Other(kind) => Err(ObjectProblem::NotAnObject(kind)),
        }
    }

    /// The raw value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, value)| *value)
    }

    /// The string value of `key`; `None` when absent or not a string.
    pub(crate) fn str(&self, key: &str) -> Option<Cow<'a, str>> {
        let raw = self.get(key)?;
        string_of(raw)
    }

    /// The object again, compactly, with `key`'s value replaced (or added at the end).
    pub(crate) fn with(&self, key: &str, value: &str) -> String {
        let mut out = String::from("{");
        let mut replaced = false;
        for (i, (k, v)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&quote(k));
            out.push(':');
            if k == key {
                out.push_str(value);
                replaced = true;
            } else {
                out.push_str(v.get());
            }
        }
        if !replaced {
            if !self.fields.is_empty() {
                out.push(',');
            }
            out.push_str(&quote(key));
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        out
    }
}

/// The text of a JSON string value; `None` when `raw` is not a string.
pub(crate) fn string_of(raw: &RawValue) -> Option<Cow<'_, str>> {
    if !raw.get().starts_with('"') {
        return None;
    }
    Cow::<str>::deserialize(raw).ok()
}

/// What kind of JSON value `raw` is, in words.
pub(crate) fn kind_of(raw: &RawValue) -> &'static str {
    match raw.get().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// The elements of a JSON array, raw; `None` when `raw` is not an array.
pub(crate) fn array_of(raw: &RawValue) -> Option<Vec<&RawValue>> {
    if !raw.get().starts_with('[') {
        return None;
    }
    <Vec<&RawValue>>::deserialize(raw).ok()
}

enum Parsed<'a> {
    Object(Vec<(Cow<'a, str>, &'a RawValue)>),
    Other(&'static str),
}

struct ObjectSeed;

impl<'de> de::DeserializeSeed<'de> for ObjectSeed {
    type Value = Parsed<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Parsed<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Vec::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let value: &'de RawValue = map.next_value()?;
            fields.push((key, value));
        }
        Ok(Parsed::Object(fields))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(Parsed::Other("an array"))
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Parsed::Other("a string"))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Parsed::Other("a boolean"))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Parsed::Other("a number"))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Parsed::Other("a number"))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Parsed::Other("a number"))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Parsed::Other("null"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_messages_put_role_first_and_escape_text() {
        assert_eq!(
            text_message("user", "say \"hi\"\n"),
            r#"{"role":"user","content":"say \"hi\"\n"}"#
        );
    }

    #[test]
    fn objects_are_read_without_converting_their_values() {
        let text = r#"{"role":"assistant","x":1e400,"content":"hi"}"#;
        let object = RawObject::parse(text).unwrap();
        assert_eq!(object.str("role").as_deref(), Some("assistant"));
        assert_eq!(object.get("x").map(RawValue::get), Some("1e400"));
        assert_eq!(
            object.with("content", r#""bye""#),
            r#"{"role":"assistant","x":1e400,"content":"bye"}"#
        );
        assert!(matches!(
            RawObject::parse(r#"{"role":"user","role":"system"}"#),
            Err(ObjectProblem::DuplicateKey(k)) if k == "role"
        ));
        assert!(matches!(
            RawObject::parse("[1]"),
            Err(ObjectProblem::NotAnObject("an array"))
        ));
        assert!(matches!(
            RawObject::parse("{} x"),
            Err(ObjectProblem::Syntax(_))
        ));
    }
}
