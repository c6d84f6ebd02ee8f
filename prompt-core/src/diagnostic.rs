//! What the positioned diagnostics of every TOML input share (an `agent.toml`'s `[prompt]`
//! section, a prefix lock): positions computed in one pass, bounded excerpts, the words for
//! a value of the wrong type.

use std::borrow::Cow;
use std::ops::Range;

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

/// The diagnostics of one load, each at a byte offset: errors (nothing is returned) and
/// warnings (returned beside the result).
pub(crate) struct Findings<P> {
    pub(crate) errors: Vec<Found<P>>,
    pub(crate) warnings: Vec<Found<P>>,
}

impl<P> Default for Findings<P> {
    fn default() -> Self {
        Self {
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

impl<P> Findings<P> {
    pub(crate) fn error(&mut self, span: Range<usize>, problem: P) {
        self.errors.push(Found {
            offset: span.start,
            problem,
        });
    }

    pub(crate) fn warning(&mut self, span: Range<usize>, problem: P) {
        self.warnings.push(Found {
            offset: span.start,
            problem,
        });
    }
}

/// Why a TOML input was not read at all.
pub(crate) enum Unreadable {
    /// Longer than its limit.
    TooLarge { len: usize, limit: u64 },
    /// Not TOML: the parser's first error.
    Syntax(toml::de::Error),
}

/// Parses a TOML input of at most `limit` bytes into spanned values; else where it fails
/// and why (a span-less "recursion limit" placed at the key that crosses it).
pub(crate) fn parse_toml(
    src: &str,
    limit: u64,
) -> Result<toml::Spanned<toml::de::DeTable<'_>>, (Range<usize>, Unreadable)> {
    if src.len() as u64 > limit {
        let at = usize::try_from(limit).unwrap_or(usize::MAX);
        return Err((
            floor_char_boundary(src, at)..src.len(),
            Unreadable::TooLarge {
                len: src.len(),
                limit,
            },
        ));
    }
    toml::de::DeTable::parse(src).map_err(|e| {
        let span = e.span().or_else(|| key_past_the_limit(src)).unwrap_or(0..0);
        (span, Unreadable::Syntax(e))
    })
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

/// The most parts a dotted key (`a.b.c`, in a key/value line, a table header or an inline
/// table) may have: toml 1.x refuses a key with 80 parts or more before its last one (its
/// `LIMIT`) as a "recursion limit".
const TOML_KEY_PARTS: usize = 80;

/// Where the first key of too many dotted parts crosses toml's limit: the span of its part
/// after the [`TOML_KEY_PARTS`]th. toml reports that error without a span; the file is
/// lexed again with toml's own parser (linear), so quoted parts and spacing count as toml
/// counts them.
pub(crate) fn key_past_the_limit(src: &str) -> Option<Range<usize>> {
    use toml_parser::parser::{Event, EventKind};
    let source = toml_parser::Source::new(src);
    let tokens = source.lex().into_vec();
    let (mut parts, mut continued, mut found) = (0usize, false, None);
    let mut receiver = |event: Event| match event.kind() {
        EventKind::SimpleKey => {
            parts = if continued { parts + 1 } else { 1 };
            continued = false;
            if parts == TOML_KEY_PARTS + 1 && found.is_none() {
                found = Some(event.span().start()..event.span().end());
            }
        }
        EventKind::KeySep => continued = true,
        EventKind::Whitespace => {}
        _ => (parts, continued) = (0, false),
    };
    toml_parser::parser::parse_document(&tokens, &mut receiver, &mut ());
    found
}

/// The edit distance between `a` and `b` if it is at most 2, in `O(len)`: only the band of
/// the dynamic-programming table within 2 of the diagonal is computed.
pub(crate) fn distance_within(a: &str, b: &str) -> Option<usize> {
    const K: usize = 2;
    const FAR: usize = usize::MAX / 2;
    // Byte lengths bound character counts from above; a long input is rejected unread.
    if a.len().abs_diff(b.len()) > K * 4 || a.len().min(b.len()) > 4 * 1024 {
        return None;
    }
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > K {
        return None;
    }
    let n = b.len();
    let mut prev = vec![FAR; n + 1];
    let mut cur = vec![FAR; n + 1];
    for (j, slot) in prev.iter_mut().enumerate().take(K.min(n) + 1) {
        *slot = j;
    }
    for i in 1..=a.len() {
        let lo = i.saturating_sub(K).max(1);
        let hi = (i + K).min(n);
        cur[lo - 1] = if lo == 1 { i } else { FAR };
        for j in lo..=hi {
            let substitute = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            cur[j] = substitute.min(prev[j] + 1).min(cur[j - 1] + 1);
        }
        if hi < n {
            cur[hi + 1] = FAR;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    (prev[n] <= K).then_some(prev[n])
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
