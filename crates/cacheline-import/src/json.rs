//! JSON helpers that keep a store's bytes as they are: an object's members in their order,
//! a member added at its end, and the canonical form Claude Code hashes (keys sorted, no
//! whitespace, non-ASCII unescaped).

use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

/// An object's members in the order written, each value as its raw text.
pub(crate) struct Members<'a>(pub(crate) Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Members<'a>, M::Error> {
                let mut out = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    let value: &'de RawValue = map.next_value()?;
                    out.push((key, value));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// Writes `members` as a compact object, with `key` set to `value` (replaced where it is,
/// else added at the end).
pub(crate) fn with_member(members: &[(String, &RawValue)], key: &str, value: &str) -> String {
    let mut out = String::from("{");
    let mut set = false;
    for (i, (k, v)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_key(&mut out, k);
        if k == key {
            out.push_str(value);
            set = true;
        } else {
            out.push_str(v.get());
        }
    }
    if !set {
        if !members.is_empty() {
            out.push(',');
        }
        push_key(&mut out, key);
        out.push_str(value);
    }
    out.push('}');
    out
}

fn push_key(out: &mut String, key: &str) {
    out.push_str(&serde_json::to_string(key).unwrap_or_else(|_| "\"\"".to_owned()));
    out.push(':');
}

/// The canonical text of `value`: object keys sorted (by code point), no whitespace,
/// non-ASCII left as it is.
pub(crate) fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_key(out, k);
                if let Some(v) = map.get(k) {
                    canonical(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&serde_json::to_string(other).unwrap_or_default()),
    }
}

/// SHA-256, lower-case hex, of `value`'s canonical text.
pub(crate) fn hash(value: &Value) -> String {
    let mut text = String::new();
    canonical(value, &mut text);
    let digest = Sha256::digest(text.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_is_added_at_the_end_and_order_kept() {
        let m: Members = serde_json::from_str(r#"{"z":1,"a":[1, 2]}"#).unwrap();
        assert_eq!(
            with_member(&m.0, "cache_control", r#"{"type":"ephemeral"}"#),
            r#"{"z":1,"a":[1, 2],"cache_control":{"type":"ephemeral"}}"#
        );
        assert_eq!(with_member(&m.0, "z", "2"), r#"{"z":2,"a":[1, 2]}"#);
    }

    #[test]
    fn canonical_sorts_keys_and_keeps_non_ascii() {
        let v: Value = serde_json::from_str(r#"{"b":"é\n","a":{"d":1,"c":[true,null]}}"#).unwrap();
        let mut s = String::new();
        canonical(&v, &mut s);
        assert_eq!(s, "{\"a\":{\"c\":[true,null],\"d\":1},\"b\":\"é\\n\"}");
    }
}
