//! The JSON the library reads and writes itself.
//!
//! Messages it writes put their keys in the conventional order (`role` first), whatever the
//! host program's serde_json features. Messages it is given are inspected without converting
//! them to a `serde_json::Value`: values stay raw text, so a number outside f64's range
//! (`1e400`) or any vendor field survives byte-for-byte, and a duplicated key is caught.

pub(crate) use crate::raw_json::{
    Object as RawObject, Problem as ObjectProblem, array_of, canonical, kind_of, quote, string_of,
};

/// `{"role":ROLE,"content":CONTENT}`.
pub(crate) fn text_message(role: &str, content: &str) -> String {
    format!(r#"{{"role":{},"content":{}}}"#, quote(role), quote(content))
}

#[cfg(test)]
mod tests {
    use serde_json::value::RawValue;

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
