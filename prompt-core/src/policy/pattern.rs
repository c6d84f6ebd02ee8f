//! `prefix_allow` / `prefix_deny` entries: exact ids and globs.

use std::fmt;

use serde::Serialize;

use crate::id::ComponentId;
use crate::id_grammar::{IdError, MAX_ID_LEN};

/// The longest glob that can match an id: each non-wildcard character matches one of the
/// id's at most [`MAX_ID_LEN`] characters, and `*` cannot repeat.
pub const MAX_GLOB_LEN: usize = 2 * MAX_ID_LEN + 1;

/// A `prefix_allow` / `prefix_deny` entry: an exact id or a glob.
///
/// Globs use `*` (any run of characters, including none) and `?` (one character) over the id
/// alphabet (`a-z 0-9 _ - :`). Anything else (brackets, braces, uppercase, spaces, an empty
/// pattern, `**`) is malformed and rejected, never silently dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdPattern {
    pub(super) text: String,
    is_glob: bool,
}

/// Why a pattern is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Empty string.
    #[error("empty pattern")]
    Empty,
    /// A character outside the pattern alphabet.
    #[error("`{ch}` is not allowed in a pattern; use ids (`a-z 0-9 _ - :`) with `*` and `?`")]
    BadChar {
        /// The character.
        ch: char,
    },
    /// A glob longer than [`MAX_GLOB_LEN`]: it can match no id.
    #[error("a {len}-byte glob can match no id; globs are at most {MAX_GLOB_LEN} bytes")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// `**` has no meaning here.
    #[error("`**` is not a pattern; a single `*` already matches any run of characters")]
    DoubleStar,
    /// A pattern without wildcards that is not a valid id.
    #[error("{0}")]
    BadId(IdError),
}

impl IdPattern {
    /// Parses a pattern.
    ///
    /// ```
    /// use prompt_core::{ComponentId, policy::IdPattern};
    /// let skills = IdPattern::parse("skill:*").unwrap();
    /// assert!(skills.matches(&ComponentId::new("skill:pdf").unwrap()));
    /// assert!(!skills.matches(&ComponentId::new("mcp:pdf").unwrap()));
    /// assert!(IdPattern::parse("skill:[a-z]").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        let is_glob = text.contains(['*', '?']);
        if !is_glob {
            ComponentId::new(text).map_err(PatternError::BadId)?;
        } else {
            if text.len() > MAX_GLOB_LEN {
                return Err(PatternError::TooLong { len: text.len() });
            }
            if text.contains("**") {
                return Err(PatternError::DoubleStar);
            }
            if let Some(ch) = text
                .chars()
                .find(|&c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "_-:*?".contains(c)))
            {
                return Err(PatternError::BadChar { ch });
            }
        }
        Ok(Self {
            text: text.to_owned(),
            is_glob,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it contains a wildcard.
    pub fn is_glob(&self) -> bool {
        self.is_glob
    }

    /// Whether the id matches.
    pub fn matches(&self, id: &ComponentId) -> bool {
        if self.is_glob {
            glob_match(self.text.as_bytes(), id.as_str().as_bytes())
        } else {
            self.text == id.as_str()
        }
    }
}

/// Iterative wildcard match with single-star backtracking: linear in practice, no recursion.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

impl fmt::Display for IdPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for IdPattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matching() {
        let m = |p: &str, t: &str| glob_match(p.as_bytes(), t.as_bytes());
        assert!(m("skill:*", "skill:pdf"));
        assert!(m("*", "anything"));
        assert!(m("*_addendum", "todo_addendum"));
        assert!(m("t?do", "todo"));
        assert!(!m("skill:*", "mcp:x"));
        assert!(!m("a*b", "acbd"));
        assert!(m("a*b*c", "aXbYbZc"));
    }
}
