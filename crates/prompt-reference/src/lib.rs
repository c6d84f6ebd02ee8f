//! # prompt-reference
//!
//! What a real coding agent's prompt writers look like with cacheline, and the scripted
//! session that `cacheline demo`, `cacheline simulate` and `cacheline bench-live` measure.
//!
//! - [`components`]: eleven reference components (instructions, guidelines, tool schemas,
//!   project memory, skills, environment, date, todo list, plan mode, git state, memory
//!   recall), each with the placement and stability a careful engineer would choose, and the
//!   built-in [`DEFAULT_AGENT_TOML`](components::DEFAULT_AGENT_TOML);
//! - [`scenario`]: one scripted conversation over them, composed as the library composes it
//!   and as the old replace-at-head baseline does;
//! - [`demo`]: the byte-level report `cacheline demo` prints.
//!
//! Linking this crate adds its eleven components to the program's registry: only a demo or
//! a test should depend on it, never a library.
//!
//! ```
//! use prompt_reference::scenario::{self, Strategy};
//! use prompt_registry::Registry;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = Registry::linked()?;
//! assert_eq!(registry.len(), prompt_reference::components::IDS.len());
//! let head = scenario::compose(Strategy::ReplaceAtHead, &registry, 3)?;
//! let ours = scenario::compose(Strategy::Cacheline, &registry, 3)?;
//! // Cacheline keeps message 0; replace-at-head rewrites it every turn.
//! assert_eq!(ours[0].messages[0], ours[2].messages[0]);
//! assert_ne!(head[0].messages[0], head[1].messages[0]);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod components;
pub mod demo;
pub mod scenario;
