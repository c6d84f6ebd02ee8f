//! Component identifiers.

use std::fmt;

use serde::{Serialize, Serializer};

/// Namespaces reserved for components registered at run time.
///
/// A namespaced id is `<namespace>:<name>`, for example `skill:code_review` or
/// `mcp:github`. Built-in components use bare ids.
pub const NAMESPACES: [&str; 2] = ["skill", "mcp"];

/// A validated component id.
///
/// Bare ids are lowercase `[a-z0-9_]+`. Namespaced ids are `skill:<name>` or `mcp:<name>`
/// where `<name>` is lowercase `[a-z0-9_-]+` (hyphens are allowed there because skill folders
/// and MCP server names commonly use them).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComponentId(Box<str>);

/// Why a string is not a valid [`ComponentId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The id is empty.
    #[error("component id is empty")]
    Empty,
    /// A character outside the allowed set.
    #[error(
        "component id `{id}` has `{ch}` at byte {at}; ids are lowercase `[a-z0-9_]+`, optionally namespaced as `skill:<name>` or `mcp:<name>`"
    )]
    InvalidChar {
        /// The id as given.
        id: String,
        /// The offending character.
        ch: char,
        /// Its byte offset.
        at: usize,
    },
    /// A namespace other than `skill` or `mcp`.
    #[error(
        "component id `{id}` uses unknown namespace `{namespace}`; the namespaces are `skill:` and `mcp:`"
    )]
    UnknownNamespace {
        /// The id as given.
        id: String,
        /// The namespace found before the colon.
        namespace: String,
    },
    /// Nothing after the namespace colon.
    #[error("component id `{id}` has an empty name after its namespace")]
    EmptyName {
        /// The id as given.
        id: String,
    },
}

impl ComponentId {
    /// Validates and wraps an id.
    ///
    /// ```
    /// use prompt_core::ComponentId;
    /// assert!(ComponentId::new("tool_schemas").is_ok());
    /// assert!(ComponentId::new("mcp:github-issues").is_ok());
    /// assert!(ComponentId::new("Tool Schemas").is_err());
    /// assert!(ComponentId::new("plugin:x").is_err());
    /// ```
    pub fn new(id: impl AsRef<str>) -> Result<Self, IdError> {
        let id = id.as_ref();
        validate(id)?;
        Ok(Self(id.into()))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The namespace (`skill` or `mcp`) of a namespaced id, `None` for a bare id.
    pub fn namespace(&self) -> Option<&str> {
        self.0.split_once(':').map(|(ns, _)| ns)
    }
}

fn validate(id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty);
    }
    let (name, name_start, allow_hyphen) = match id.split_once(':') {
        Some((ns, name)) => {
            if !NAMESPACES.contains(&ns) {
                return Err(IdError::UnknownNamespace {
                    id: id.to_owned(),
                    namespace: ns.to_owned(),
                });
            }
            if name.is_empty() {
                return Err(IdError::EmptyName { id: id.to_owned() });
            }
            (name, ns.len() + 1, true)
        }
        None => (id, 0, false),
    };
    for (at, ch) in name.char_indices() {
        let ok = ch.is_ascii_lowercase()
            || ch.is_ascii_digit()
            || ch == '_'
            || (allow_hyphen && ch == '-');
        if !ok {
            return Err(IdError::InvalidChar {
                id: id.to_owned(),
                ch,
                at: name_start + at,
            });
        }
    }
    Ok(())
}

impl fmt::Display for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for ComponentId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for ComponentId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl Serialize for ComponentId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_bare_and_namespaced_ids() {
        for ok in ["date", "tool_schemas", "a1", "skill:pdf", "mcp:git-hub_2"] {
            assert!(ComponentId::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_everything_else_with_a_reason() {
        assert_eq!(ComponentId::new(""), Err(IdError::Empty));
        assert!(matches!(
            ComponentId::new("Tool"),
            Err(IdError::InvalidChar { ch: 'T', at: 0, .. })
        ));
        assert!(matches!(
            ComponentId::new("tool-schemas"),
            Err(IdError::InvalidChar { ch: '-', at: 4, .. })
        ));
        assert!(matches!(
            ComponentId::new("plugin:x"),
            Err(IdError::UnknownNamespace { .. })
        ));
        assert!(matches!(
            ComponentId::new("mcp:"),
            Err(IdError::EmptyName { .. })
        ));
        assert!(matches!(
            ComponentId::new("mcp:a:b"),
            Err(IdError::InvalidChar { ch: ':', at: 5, .. })
        ));
    }
}
