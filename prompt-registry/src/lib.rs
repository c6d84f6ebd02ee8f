//! # prompt-registry: the cacheline facade
//!
//! Declare each prompt writer with `#[prompt_component]`; every component linked into the
//! binary is collected into a [`Registry`]; the operator's `agent.toml` `[prompt]` section
//! decides, deny-wins, who may land in the cached prefix; [`Registry::status`] says where
//! each writer lands and why; sessions compose through [`prompt_core`].
//!
//! ```
//! use prompt_registry::{prompt_component, Extensions, Registry, SessionContext, SessionOptions, TurnContext};
//!
//! /// Who the assistant is.
//! #[prompt_component(placement = "prefix")]
//! const HOUSE_ASSISTANT: &str = "You are a careful coding assistant.";
//!
//! struct Todo(Vec<String>);
//!
//! /// The open todo items.
//! #[prompt_component(placement = "tail")]
//! fn open_tasks(turn: &TurnContext) -> Option<String> {
//!     turn.get::<Todo>().map(|t| t.0.join("\n"))
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = Registry::linked()?;
//! let policy = registry
//!     .load_policy("[prompt]\nprefix_allow = [\"house_assistant\"]", "agent.toml")?
//!     .policy;
//! let status = registry.status(&policy);
//! assert_eq!(status.component("house_assistant").unwrap().placement.as_str(), "prefix");
//! assert_eq!(status.component("open_tasks").unwrap().placement.as_str(), "tail");
//!
//! let mut session = registry.start_session(&policy, SessionContext::default(), SessionOptions::default())?;
//! let request = session.turn(Extensions::new().with(Todo(vec!["write docs".into()])), "hi")?;
//! assert!(request.len() > 0);
//! # Ok(()) }
//! ```
//!
//! ## The linking rule
//!
//! `inventory` collects registrations from every crate *linked* into the binary. A crate that
//! only defines components and is never referenced is not linked, and its components are
//! silently absent. Reference it from the binary: `use my_components as _;`, and assert the
//! expected count in a test (`Registry::linked()?.len()`).
//!
//! This crate defines no component of its own, whatever its features: the reference
//! components of a coding agent live in the `prompt-reference` crate, which only the
//! `cacheline` demo binary links.
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

#[cfg(feature = "cli")]
pub mod cli;
mod registry;
mod status;

pub use prompt_macros::prompt_component;
pub use registry::{Namespace, Registry, RegistryError};
pub use status::{ComponentStatus, PromptStatus, STATUS_SCHEMA_VERSION, StatusReport};

// The names nearly every user needs, by name; the rest of prompt-core through its modules.
pub use prompt_core::{
    ApiKind, Component, ComponentId, ComposeError, DeliveryStyle, Extensions, History, Persist,
    Placement, PrefixCheck, PromptPolicy, Request, Session, SessionContext, SessionOptions,
    TurnContext, set_system_prompt,
};
pub use prompt_core::{
    component, context, delivery, divergence, hash, history, id, messages, node, placement, policy,
    request, session,
};
