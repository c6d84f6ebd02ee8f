//! Where a component lands, how stable its content is, and whether tail updates persist.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a component's text lands in a request.
///
/// The *prefix* is rendered once per session and is byte-identical in every request, so
/// inference engines and hosted APIs can reuse their cache for it. The *tail* is everything
/// after the history: per-turn content goes there so it never moves byte 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Above the history, frozen for the session.
    Prefix,
    /// After the history. The default for anything that declares nothing.
    #[default]
    Tail,
}

impl Placement {
    /// `"prefix"` or `"tail"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Placement::Prefix => "prefix",
            Placement::Tail => "tail",
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How often a component's content can change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stability {
    /// Compile-time text.
    Static,
    /// Rendered once from session-frozen inputs ([`crate::SessionContext`]).
    Session,
    /// Rendered every turn from per-turn inputs ([`crate::TurnContext`]).
    Turn,
}

impl Stability {
    /// `"constant"`, `"session"` or `"turn"`: the word used in status reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Stability::Static => "constant",
            Stability::Session => "session",
            Stability::Turn => "turn",
        }
    }
}

impl fmt::Display for Stability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What happens to a tail component's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Persist {
    /// Appended to history as an update node whenever it changes (the default). Later
    /// requests keep it, so it becomes part of the cached prefix.
    #[default]
    History,
    /// Placed at the very end of this request only, never stored.
    Ephemeral,
}

impl Persist {
    /// `"history"` or `"ephemeral"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Persist::History => "history",
            Persist::Ephemeral => "ephemeral",
        }
    }
}

impl fmt::Display for Persist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_is_lowercase_in_serde_and_defaults_to_tail() {
        assert_eq!(Placement::default(), Placement::Tail);
        assert_eq!(
            serde_json::to_string(&Placement::Prefix).ok().as_deref(),
            Some("\"prefix\"")
        );
        let back: Placement = serde_json::from_str("\"tail\"").unwrap_or(Placement::Prefix);
        assert_eq!(back, Placement::Tail);
        assert!(serde_json::from_str::<Placement>("\"Prefix\"").is_err());
    }
}
