//! Pure string helpers: default ids and default descriptions.

/// The default id of an item: its name in lowercase snake_case.
///
/// `ASSISTANT_INSTRUCTIONS` → `assistant_instructions`, `tool_schemas` → `tool_schemas`,
/// `ToolSchemas` → `tool_schemas`, `r#type` → `type`.
pub(crate) fn snake_case(ident: &str) -> String {
    let ident = ident.strip_prefix("r#").unwrap_or(ident);
    let chars: Vec<char> = ident.chars().collect();
    let mut out = String::with_capacity(ident.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        if c.is_uppercase() {
            let prev = i.checked_sub(1).map(|j| chars[j]);
            let next = chars.get(i + 1).copied();
            let boundary = match prev {
                Some(p) if p.is_lowercase() || p.is_ascii_digit() => true,
                // The last capital of an acronym starts a word: `HTTPServer` → `http_server`.
                Some(p) if p.is_uppercase() => next.is_some_and(char::is_lowercase),
                _ => false,
            };
            if boundary && !out.ends_with('_') {
                out.push('_');
            }
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The first non-empty line of a doc comment, trimmed. `docs` are the values of the item's
/// `#[doc = "..."]` attributes in order (one per `///` line).
pub(crate) fn first_doc_line<'a>(docs: impl IntoIterator<Item = &'a str>) -> Option<String> {
    docs.into_iter()
        .flat_map(str::lines)
        .map(str::trim)
        .find(|line| !line.is_empty())
        .map(str::to_owned)
}

/// A valid bare id close to `text`, if there is one: lowercase, with runs of anything else
/// than `[a-z0-9]` turned into one `_`. `Tool Schemas` → `tool_schemas`.
pub(crate) fn suggest_id(text: &str) -> Option<String> {
    let mut id = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            id.push(c.to_ascii_lowercase());
        } else if c.is_alphanumeric() {
            return None; // Dropping letters would suggest a different word.
        } else if !id.is_empty() && !id.ends_with('_') {
            id.push('_');
        }
    }
    let id = id.trim_end_matches('_');
    (!id.is_empty()).then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snake_case_of_item_names() {
        for (name, id) in [
            ("ASSISTANT_INSTRUCTIONS", "assistant_instructions"),
            ("tool_schemas", "tool_schemas"),
            ("ToolSchemas", "tool_schemas"),
            ("HTTPServer", "http_server"),
            ("DATE2", "date2"),
            ("v2Notes", "v2_notes"),
            ("r#type", "type"),
            ("_private", "_private"),
        ] {
            assert_eq!(snake_case(name), id, "{name}");
        }
    }

    #[test]
    fn suggested_ids_are_bare_and_lowercase() {
        assert_eq!(suggest_id("Tool Schemas").as_deref(), Some("tool_schemas"));
        assert_eq!(suggest_id("skill:review").as_deref(), Some("skill_review"));
        assert_eq!(suggest_id("--a--b--").as_deref(), Some("a_b"));
        assert_eq!(suggest_id(""), None);
        assert_eq!(suggest_id("über"), None);
    }

    #[test]
    fn first_doc_line_skips_blank_lines_and_trims() {
        assert_eq!(
            first_doc_line([" Who the assistant is.", " More."]),
            Some("Who the assistant is.".to_owned())
        );
        assert_eq!(
            first_doc_line(["", "   ", " \n  Second line. \n third"]),
            Some("Second line.".to_owned())
        );
        assert_eq!(first_doc_line(["", " "]), None);
        assert_eq!(first_doc_line([]), None);
    }
}
