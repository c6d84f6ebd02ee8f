//! The JSON the library writes itself: messages with their keys in the conventional order
//! (`role` first), whatever the host program's serde_json features.

use serde_json::Value;

/// `text` as a JSON string literal, quotes included.
pub(crate) fn quote(text: &str) -> String {
    // `Display` of a `Value` cannot fail, unlike `serde_json::to_string`.
    Value::String(text.to_owned()).to_string()
}

/// `{"role":ROLE,"content":CONTENT}`.
pub(crate) fn text_message(role: &str, content: &str) -> String {
    format!(r#"{{"role":{},"content":{}}}"#, quote(role), quote(content))
}

/// `{"role":"tool","tool_call_id":ID,"content":CONTENT}`.
pub(crate) fn tool_message(call_id: &str, content: &str) -> String {
    format!(
        r#"{{"role":"tool","tool_call_id":{},"content":{}}}"#,
        quote(call_id),
        quote(content)
    )
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
        assert_eq!(
            tool_message("c1", "ok"),
            r#"{"role":"tool","tool_call_id":"c1","content":"ok"}"#
        );
    }
}
