//! The `[prompt]` section of `agent.toml` and placement resolution.
//!
//! Resolution is deny-wins, like `[tools]` permissions: a component lands in the prefix only
//! if it requested the prefix, matches `prefix_allow`, matches no `prefix_deny`, and does
//! not render every turn. A run-time (`skill:`/`mcp:`) component requests the prefix only
//! through its exact `[prompt.placement]` entry.
//!
//! - [`pattern`](IdPattern): exact ids and globs;
//! - loading ([`PromptPolicy::from_agent_toml`], [`PromptPolicy::load_agent_toml`]): strict,
//!   fail-closed, every problem with `file:line:col`, in source order;
//! - resolving ([`PromptPolicy::resolve`]): one [`Resolution`] with its [`Reason`].

use std::collections::BTreeMap;

use crate::id::ComponentId;
use crate::placement::Placement;

mod load;
mod pattern;
mod resolve;

pub use crate::config::SourcePosition;
pub use load::{
    LoadError, LoadedPolicy, Normalized, PerTurnPromotion, PolicyDiagnostic, PolicyErrors,
    PolicyProblem,
};
pub use pattern::{IdPattern, MAX_GLOB_LEN, PatternError};
pub use resolve::{Reason, RequestSource, Resolution};

/// The resolved `[prompt]` policy.
///
/// ```
/// use prompt_core::{Component, ComponentId, Placement, PromptPolicy};
/// let instructions = Component::constant(ComponentId::new("assistant_instructions").unwrap(), "Be brief.")
///     .placement(Placement::Prefix);
/// let toml = r#"
/// [tools]
/// allow = ["read_file"]        # other tables are ignored
///
/// [prompt]
/// prefix_allow = ["assistant_instructions"]
/// "#;
/// let policy = PromptPolicy::from_agent_toml(toml, "agent.toml", [&instructions]).unwrap().deny_warnings().unwrap();
/// assert_eq!(policy.resolve(&instructions).placement, Placement::Prefix);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptPolicy {
    /// Placement for components that declare none and have no per-component entry.
    pub default: Placement,
    /// Who may land in the prefix.
    pub prefix_allow: Vec<IdPattern>,
    /// Who may never land in the prefix; wins over everything.
    pub prefix_deny: Vec<IdPattern>,
    /// Per-component placement requests, from `[prompt.placement]`. Entries for run-time
    /// components not registered yet are kept: they apply when the component registers.
    pub placement: BTreeMap<ComponentId, Placement>,
}
