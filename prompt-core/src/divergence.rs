//! Where two serialized requests stop sharing a prefix.

use std::ops::Range;

use serde::Serialize;

/// A message's position in a serialized request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageSpan {
    /// Index in the messages array.
    pub index: usize,
    /// Who wrote it (for the prefix, the component whose text holds the byte, when known).
    pub producer: String,
    /// Byte range of the message in the serialized request.
    pub range: Range<usize>,
}

/// Where a later request (or its rendering) stops matching an earlier one: the one type for
/// this concept. The audit's cache-break report and the template probe's instability report
/// embed it and add what they know.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// First byte offset where they differ (or where the earlier one goes on past the later).
    pub byte_offset: usize,
    /// Index of the message in the later request that holds that byte, when the request is
    /// a JSON array of messages.
    pub message_index: Option<usize>,
    /// Who wrote that message, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub producer: Option<String>,
    /// The bytes around the offset on each side.
    pub excerpt: Excerpt,
}

/// A few bytes of each side around a divergence: up to [`Excerpt::BEFORE`] bytes before the
/// offset and [`Excerpt::AFTER`] from it, cut at character boundaries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Excerpt {
    /// The earlier text.
    pub earlier: String,
    /// The later text.
    pub later: String,
}

impl Excerpt {
    /// Bytes shown before the offset.
    pub const BEFORE: usize = 24;
    /// Bytes shown from the offset on.
    pub const AFTER: usize = 48;

    /// Both sides around `offset`.
    ///
    /// ```
    /// use prompt_core::divergence::Excerpt;
    /// let e = Excerpt::around(b"You are terse.", b"You are verbose.", 8);
    /// assert_eq!((e.earlier.as_str(), e.later.as_str()), ("You are terse.", "You are verbose."));
    /// ```
    pub fn around(earlier: &[u8], later: &[u8], offset: usize) -> Self {
        Self {
            earlier: Self::of(earlier, offset),
            later: Self::of(later, offset),
        }
    }

    /// One side around `offset`, as text (invalid UTF-8 shown as U+FFFD).
    pub fn of(text: &[u8], offset: usize) -> String {
        // Back off to the start of a UTF-8 sequence, so a character is never cut.
        let boundary = |mut i: usize| {
            i = i.min(text.len());
            while i > 0 && i < text.len() && text[i] & 0xC0 == 0x80 {
                i -= 1;
            }
            i
        };
        let start = boundary(offset.saturating_sub(Self::BEFORE));
        let end = boundary(offset.saturating_add(Self::AFTER));
        String::from_utf8_lossy(&text[start..end.max(start)]).into_owned()
    }
}

/// The outcome of a prefix check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum PrefixCheck {
    /// The earlier request is a byte prefix of the later one.
    Prefix,
    /// It is not.
    Diverged(Divergence),
}

impl PrefixCheck {
    /// Whether the earlier request is a prefix of the later one.
    pub fn is_prefix(&self) -> bool {
        matches!(self, PrefixCheck::Prefix)
    }
}

/// Checks whether `earlier` is a byte prefix of `later`.
///
/// A serialized request ends with the closing `]` of its messages array, which the next
/// request necessarily replaces with `,`: that one trailing byte (after trailing whitespace)
/// of `earlier` is ignored.
///
/// ```
/// use prompt_core::{divergence::check_prefix, PrefixCheck};
/// let t1 = br#"[{"role":"system","content":"A"},{"role":"user","content":"hi"}]"#;
/// let t2 = br#"[{"role":"system","content":"A"},{"role":"user","content":"hi"},{"role":"user","content":"more"}]"#;
/// assert!(check_prefix(t1, t2).is_prefix());
/// let rewritten = br#"[{"role":"system","content":"B"},{"role":"user","content":"hi"}]"#;
/// match check_prefix(t1, rewritten) {
///     PrefixCheck::Diverged(d) => { assert_eq!(d.byte_offset, 29); assert_eq!(d.message_index, Some(0)); }
///     PrefixCheck::Prefix => unreachable!(),
/// }
/// ```
pub fn check_prefix(earlier: &[u8], later: &[u8]) -> PrefixCheck {
    check_prefix_with(earlier, later, |offset| {
        message_index_at(later, offset).map(|index| MessageSpan {
            index,
            producer: String::new(),
            range: offset..offset,
        })
    })
}

/// Length of the longest common prefix of two sequences (bytes of requests, token ids): the
/// one place this is computed.
///
/// Compares 128-element blocks first (a `memcmp` each for bytes and integers), then
/// elements, so checking a long request costs a fraction of an element-by-element loop.
///
/// ```
/// use prompt_core::divergence::common_prefix_len;
/// assert_eq!(common_prefix_len(b"[1,2,3]", b"[1,2,4]"), 5);
/// assert_eq!(common_prefix_len(b"abc", b"abcdef"), 3);
/// ```
pub fn common_prefix_len<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    const BLOCK: usize = 128;
    let (a, b) = (&a[..a.len().min(b.len())], &b[..a.len().min(b.len())]);
    let mut at = 0;
    for (x, y) in a.chunks_exact(BLOCK).zip(b.chunks_exact(BLOCK)) {
        if x != y {
            break;
        }
        at += BLOCK;
    }
    at + a[at..]
        .iter()
        .zip(&b[at..])
        .take_while(|(x, y)| x == y)
        .count()
}

pub(crate) fn check_prefix_with(
    earlier: &[u8],
    later: &[u8],
    locate: impl Fn(usize) -> Option<MessageSpan>,
) -> PrefixCheck {
    let earlier = strip_closing_bracket(earlier);
    let common = common_prefix_len(earlier, later);
    if common == earlier.len() {
        return PrefixCheck::Prefix;
    }
    let span = locate(common);
    PrefixCheck::Diverged(Divergence {
        byte_offset: common,
        message_index: span.as_ref().map(|s| s.index),
        producer: span.map(|s| s.producer).filter(|p| !p.is_empty()),
        excerpt: Excerpt::around(earlier, later, common),
    })
}

fn strip_closing_bracket(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |i| i + 1);
    match bytes[..end].last() {
        Some(b']') => &bytes[..end - 1],
        _ => bytes,
    }
}

/// Index of the top-level array element that holds byte `offset` of a JSON array, by a
/// single scan that tracks strings and nesting. `None` if `bytes` is not an array or the
/// offset is on the array's own brackets.
pub fn message_index_at(bytes: &[u8], offset: usize) -> Option<usize> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    if bytes[start] != b'[' || offset <= start {
        return None;
    }
    let (mut depth, mut index) = (1usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for (i, &b) in bytes.iter().enumerate().skip(start + 1) {
        if i >= offset {
            return Some(index);
        }
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return None;
                }
            }
            b',' if depth == 1 => index += 1,
            _ => {}
        }
    }
    (offset >= bytes.len()).then_some(index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_index_skips_commas_inside_strings_and_objects() {
        let bytes = br#"[{"a":"x,y","b":[1,2]},{"c":"]"},{"d":1}]"#;
        let third = bytes.len() - 8;
        assert_eq!(message_index_at(bytes, 1), Some(0));
        assert_eq!(message_index_at(bytes, 25), Some(1));
        assert_eq!(message_index_at(bytes, third), Some(2));
        assert_eq!(message_index_at(b"{}", 1), None);
    }

    #[test]
    fn an_earlier_request_that_is_longer_is_not_a_prefix() {
        let check = check_prefix(b"[1,2,3]", b"[1,2]");
        assert!(matches!(
            check,
            PrefixCheck::Diverged(Divergence { byte_offset: 4, .. })
        ));
    }
}
