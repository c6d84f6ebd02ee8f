//! What the positioned diagnostics of every TOML input share (an `agent.toml`'s `[prompt]`
//! section, a prefix lock): positions computed in one pass, bounded excerpts, the words for
//! a value of the wrong type.

use std::borrow::Cow;

use toml::de::DeValue;

use crate::policy::SourcePosition;

/// A problem at a byte offset; positions are computed once, for all of them, at the end.
pub(crate) struct Found<P> {
    /// Byte offset into the text.
    pub(crate) offset: usize,
    /// What is wrong there.
    pub(crate) problem: P,
}

/// Sorts by offset (stable: equal offsets keep their order) and turns each offset into a
/// line and a character column in one forward pass over the text: linear in the file plus
/// `d log d` for `d` diagnostics, however many there are and however long the lines.
pub(crate) fn positioned<P>(
    src: &str,
    origin: &str,
    mut found: Vec<Found<P>>,
) -> Vec<(SourcePosition, P)> {
    found.sort_by_key(|f| f.offset);
    let bytes = src.as_bytes();
    let (mut at, mut line, mut column) = (0usize, 1usize, 1usize);
    found
        .into_iter()
        .map(|f| {
            let target = floor_char_boundary(src, f.offset);
            for &b in &bytes[at..target] {
                if b == b'\n' {
                    line += 1;
                    column = 1;
                } else if b & 0xC0 != 0x80 {
                    // Not a UTF-8 continuation byte: a new character.
                    column += 1;
                }
            }
            at = target;
            let position = SourcePosition {
                origin: origin.to_owned(),
                line,
                column,
            };
            (position, f.problem)
        })
        .collect()
}

/// The largest character boundary at or before `at`, within the text.
pub(crate) fn floor_char_boundary(src: &str, mut at: usize) -> usize {
    at = at.min(src.len());
    while !src.is_char_boundary(at) {
        at -= 1;
    }
    at
}

/// At most 64 bytes of a value quoted in a message ([`crate::input::excerpt`]).
pub(crate) fn excerpt(text: &str) -> Cow<'_, str> {
    crate::input::excerpt(text, 64)
}

/// A TOML value as a message names it: ``integer `1` ``, `string "x"`, `table`.
pub(crate) fn describe_value(value: &DeValue<'_>) -> String {
    match value {
        DeValue::String(s) => format!("string {:?}", excerpt(s)),
        DeValue::Integer(i) => format!("integer `{}`", excerpt(i.as_str())),
        DeValue::Float(x) => format!("floating point `{}`", excerpt(x.as_str())),
        DeValue::Boolean(b) => format!("boolean `{b}`"),
        DeValue::Datetime(d) => format!("datetime `{d}`"),
        DeValue::Array(_) => "array".to_owned(),
        DeValue::Table(_) => "table".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters_in_one_pass() {
        let src = "ab\néé x\n\nz";
        let found = [8, 0, 4, 11, 2, 99]
            .into_iter()
            .map(|offset| Found {
                offset,
                problem: (),
            })
            .collect();
        let got: Vec<(usize, usize)> = positioned(src, "f", found)
            .iter()
            .map(|(p, ())| (p.line, p.column))
            .collect();
        // offsets 0, 2, 4 (inside `é`: floored to 3), 8, 11, 99 (clamped to the end)
        assert_eq!(got, [(1, 1), (1, 3), (2, 1), (2, 4), (4, 1), (4, 2)]);
    }
}
