//! Where a component lands under a policy, and why: deny wins, a run-time component asks
//! for the tail unless `[prompt.placement]` names it, and a per-turn writer never lands in
//! the prefix.

use std::fmt;

use serde::Serialize;

use super::PromptPolicy;
use crate::component::Component;
use crate::placement::{Placement, Stability};

impl PromptPolicy {
    /// Resolves where a component lands, and why.
    ///
    /// A run-time (`skill:`/`mcp:`) component requests the prefix only through its exact
    /// `[prompt.placement]` entry: neither `default` nor a declaration applies to it. A
    /// turn-stability component is never resolved to the prefix, whatever the policy (the
    /// loader refuses a policy that tries; this holds for hand-built ones too).
    pub fn resolve(&self, component: &Component) -> Resolution {
        let id = component.id();
        let runtime = id.namespace().is_some();
        let (requested, source) = match (self.placement.get(id), component.declared()) {
            (Some(&p), _) => (p, RequestSource::Config),
            (None, _) if runtime => (Placement::Tail, RequestSource::Runtime),
            (None, Some(p)) => (p, RequestSource::Declaration),
            (None, None) => (self.default, RequestSource::Default),
        };
        let reason = if requested == Placement::Tail {
            Reason::TailRequested { source }
        } else if let Some(deny) = self.prefix_deny.iter().find(|p| p.matches(id)) {
            Reason::Denied {
                source,
                pattern: deny.text.clone(),
            }
        } else if let Some(allow) = self.prefix_allow.iter().find(|p| p.matches(id)) {
            if component.stability() == Stability::Turn {
                Reason::PerTurn {
                    source,
                    pattern: allow.text.clone(),
                }
            } else {
                Reason::Allowed {
                    source,
                    pattern: allow.text.clone(),
                }
            }
        } else {
            Reason::NotAllowed { source }
        };
        Resolution {
            placement: match reason {
                Reason::Allowed { .. } => Placement::Prefix,
                _ => Placement::Tail,
            },
            requested,
            reason,
        }
    }
}

/// Which rule supplied the requested placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestSource {
    /// `[prompt.placement]` in agent.toml.
    Config,
    /// The component's own declaration.
    Declaration,
    /// `[prompt] default`.
    Default,
    /// The component is a run-time one (`skill:`/`mcp:`) that `[prompt.placement]` does not
    /// name: it requests the tail, whatever `default` or a declaration says.
    Runtime,
}

impl fmt::Display for RequestSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequestSource::Config => "[prompt.placement]",
            RequestSource::Declaration => "its declaration",
            RequestSource::Default => "[prompt] default",
            RequestSource::Runtime => {
                "its namespace: run-time components request the tail unless [prompt.placement] names them"
            }
        })
    }
}

/// Why a component landed where it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Reason {
    /// It asked for the tail.
    TailRequested {
        /// Who asked.
        source: RequestSource,
    },
    /// It asked for the prefix and an allow pattern matched (and no deny pattern).
    Allowed {
        /// Who asked.
        source: RequestSource,
        /// The matching `prefix_allow` entry.
        pattern: String,
    },
    /// It asked for the prefix but a deny pattern matched: demoted to tail.
    Denied {
        /// Who asked.
        source: RequestSource,
        /// The matching `prefix_deny` entry.
        pattern: String,
    },
    /// It asked for the prefix but no allow pattern matched: demoted to tail.
    NotAllowed {
        /// Who asked.
        source: RequestSource,
    },
    /// It asked for the prefix and an allow pattern matched, but it renders every turn:
    /// kept in the tail. (The loader refuses an exact allow entry for it, so in a loaded
    /// policy the pattern is a glob.)
    PerTurn {
        /// Who asked.
        source: RequestSource,
        /// The matching `prefix_allow` entry.
        pattern: String,
    },
}

impl Reason {
    /// Which rule supplied the requested placement.
    pub fn source(&self) -> RequestSource {
        match self {
            Reason::TailRequested { source }
            | Reason::Allowed { source, .. }
            | Reason::Denied { source, .. }
            | Reason::NotAllowed { source }
            | Reason::PerTurn { source, .. } => *source,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::TailRequested { source } => write!(f, "tail requested by {source}"),
            Reason::Allowed { source, pattern } => write!(
                f,
                "prefix requested by {source}; allowed by prefix_allow `{pattern}`"
            ),
            Reason::Denied { source, pattern } => write!(
                f,
                "prefix requested by {source}; demoted to tail: denied by prefix_deny `{pattern}` (deny wins)"
            ),
            Reason::NotAllowed { source } => write!(
                f,
                "prefix requested by {source}; demoted to tail: no prefix_allow entry matches"
            ),
            Reason::PerTurn { source, pattern } if pattern.contains(['*', '?']) => write!(
                f,
                "prefix requested by {source}; kept in the tail: it renders every turn, and a glob (`{pattern}`) never promotes a per-turn writer"
            ),
            Reason::PerTurn { source, pattern } => write!(
                f,
                "prefix requested by {source}; kept in the tail: it renders every turn, and a per-turn writer never lands in the prefix, even with prefix_allow `{pattern}`"
            ),
        }
    }
}

/// The outcome of resolving one component against a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolution {
    /// Where it lands.
    pub placement: Placement,
    /// Where it asked to land.
    pub requested: Placement,
    /// Which rule decided.
    pub reason: Reason,
}

impl Resolution {
    /// Whether it asked for the prefix but was put in the tail.
    pub fn demoted(&self) -> bool {
        self.requested == Placement::Prefix && self.placement == Placement::Tail
    }
}
