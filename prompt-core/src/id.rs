//! Component identifiers.

use std::fmt;

use serde::{Serialize, Serializer};

use crate::id_grammar;
pub use crate::id_grammar::{
    IdError, IdProblem, MAX_ID_LEN, NAMESPACES, RESERVED_IDS, normalize_name,
};

/// A validated component id.
///
/// Bare ids are lowercase `[a-z0-9_]+` and not one of the [reserved
/// ids](RESERVED_IDS). Namespaced ids are `skill:<name>` or `mcp:<name>` where `<name>`
/// is lowercase `[a-z0-9_-]+`. At most [`MAX_ID_LEN`] bytes.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ComponentId(Box<str>);

impl ComponentId {
    /// Validates and wraps an id.
    ///
    /// ```
    /// use prompt_core::ComponentId;
    /// assert!(ComponentId::new("tool_schemas").is_ok());
    /// assert!(ComponentId::new("mcp:github-issues").is_ok());
    /// assert!(ComponentId::new("Tool Schemas").is_err());
    /// assert!(ComponentId::new("plugin:x").is_err());
    /// assert!(ComponentId::new("system_prompt").is_err()); // reserved
    /// ```
    pub fn new(id: impl AsRef<str>) -> Result<Self, IdError> {
        let id = id.as_ref();
        id_grammar::check(id)?;
        Ok(Self(id.into()))
    }

    /// The id of a run-time component from a foreign name (an MCP server's, a skill
    /// folder's), normalized into the id alphabet by [`normalize_name`]:
    /// `mcp` and `brave.search` give `mcp:brave-search`.
    ///
    /// ```
    /// use prompt_core::ComponentId;
    /// assert_eq!(ComponentId::namespaced("mcp", "GitHub").unwrap().as_str(), "mcp:github");
    /// assert_eq!(ComponentId::namespaced("mcp", "brave.search").unwrap().as_str(), "mcp:brave-search");
    /// assert!(ComponentId::namespaced("mcp", "!!!").is_err());
    /// assert!(ComponentId::namespaced("plugin", "x").is_err());
    /// ```
    pub fn namespaced(namespace: &str, name: &str) -> Result<Self, IdError> {
        match id_grammar::normalize_name(name) {
            Some(name) => Self::new(format!("{namespace}:{name}")),
            None => Err(IdError {
                id: format!("{namespace}:"),
                problem: id_grammar::IdProblem::EmptyName,
            }),
        }
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

impl<'de> serde::Deserialize<'de> for ComponentId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::new(&*text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id_grammar::IdProblem;

    #[test]
    fn accepts_bare_and_namespaced_ids() {
        for ok in [
            "date",
            "tool_schemas",
            "a1",
            "skill:pdf",
            "mcp:git-hub_2",
            "mcp:user",
        ] {
            assert!(ComponentId::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_everything_else_with_a_reason() {
        let problem = |id: &str| ComponentId::new(id).err().map(|e| e.problem);
        assert_eq!(problem(""), Some(IdProblem::Empty));
        assert_eq!(
            problem("Tool"),
            Some(IdProblem::InvalidChar { ch: 'T', at: 0 })
        );
        assert_eq!(
            problem("tool-schemas"),
            Some(IdProblem::InvalidChar { ch: '-', at: 4 })
        );
        assert!(matches!(
            problem("plugin:x"),
            Some(IdProblem::UnknownNamespace { .. })
        ));
        assert_eq!(problem("mcp:"), Some(IdProblem::EmptyName));
        assert_eq!(
            problem("mcp:a:b"),
            Some(IdProblem::InvalidChar { ch: ':', at: 5 })
        );
        assert_eq!(problem("system_prompt"), Some(IdProblem::Reserved));
        assert_eq!(problem("user"), Some(IdProblem::Reserved));
        assert_eq!(
            problem(&"a".repeat(129)),
            Some(IdProblem::TooLong { len: 129 })
        );
        assert_eq!(problem(&"a".repeat(128)), None);
    }

    #[test]
    fn foreign_names_normalize_deterministically() {
        use crate::id_grammar::normalize_name;
        assert_eq!(normalize_name("GitHub").as_deref(), Some("github"));
        assert_eq!(
            normalize_name("brave.search").as_deref(),
            Some("brave-search")
        );
        assert_eq!(
            normalize_name("  My  Server! ").as_deref(),
            Some("my-server")
        );
        assert_eq!(normalize_name("über").as_deref(), Some("ber"));
        assert_eq!(normalize_name("***"), None);
        assert_eq!(
            normalize_name(&"x".repeat(10_000)).map(|n| n.len()),
            Some(129)
        );
        assert!(ComponentId::namespaced("mcp", &"x".repeat(10_000)).is_err());
    }
}
