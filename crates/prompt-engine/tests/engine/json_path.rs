//! Resolving a change's `json_path` in the body it describes. Shared with prompt-measure's
//! tests (included there by path), so both check verdicts' paths with the same reader.

/// The value at `path` (`input[0].tools[1]`, `messages[1].content[3]`, `system`,
/// `reasoning.effort`) in `value`, if there is one.
pub fn resolve<'v>(value: &'v serde_json::Value, path: &str) -> Option<&'v serde_json::Value> {
    let mut at = value;
    for segment in path.split('.') {
        let (name, mut rest) = segment.split_once('[').unwrap_or((segment, ""));
        if !name.is_empty() {
            at = at.get(name)?;
        }
        while !rest.is_empty() {
            let (index, tail) = rest.split_once(']')?;
            at = at.get(index.parse::<usize>().ok()?)?;
            rest = tail.strip_prefix('[').unwrap_or(tail);
        }
    }
    Some(at)
}
