//! # prompt-core
//!
//! The data model and runtime rules of cache-safe prompt composition.
//!
//! Inference engines and hosted APIs reuse work for the longest unchanged *prefix* of a
//! request. This crate makes two cache-destroying mistakes impossible:
//!
//! - **rewriting sent bytes**: [`History`] is append-only; a changed system prompt is
//!   appended as a new node ([`History::set_system_prompt`], or [`set_system_prompt`] over an
//!   existing `Vec<serde_json::Value>`), and nodes are removed by id or producer, never by role;
//! - **per-turn content above the history**: every [`Component`] resolves to the prefix or
//!   the tail through the operator's [`PromptPolicy`] (deny wins), and a [`Session`] refuses
//!   to produce a request whose prefix bytes changed.
//!
//! ```
//! use prompt_core::{Component, ComponentId, Extensions, Placement, PrefixCheck, PromptPolicy,
//!                   Session, SessionContext, SessionOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! struct Date(&'static str);
//! let components = vec![
//!     Component::constant(ComponentId::new("assistant_instructions")?, "You are a careful coding assistant.")
//!         .placement(Placement::Prefix),
//!     // Declares nothing: lands in the tail.
//!     Component::turn(ComponentId::new("date")?, |turn| turn.get::<Date>().map(|d| format!("Today is {}.", d.0))),
//! ];
//! let toml = r#"
//! [prompt]
//! prefix_allow = ["assistant_instructions"]
//! "#;
//! let policy = PromptPolicy::from_agent_toml(toml, "agent.toml", &components)?.deny_warnings()?;
//! let mut session = Session::start(components, &policy, SessionContext::default(), SessionOptions::default())?;
//!
//! let turn1 = session.turn(Extensions::new().with(Date("2026-11-30")), "What changed?")?.to_bytes();
//! session.record_assistant(&serde_json::json!({"role": "assistant", "content": "Nothing yet."}))?;
//! // The date rolls over: an update is appended after the history, byte 0 does not move.
//! let turn2 = session.turn(Extensions::new().with(Date("2026-12-01")), "And now?")?;
//! assert_eq!(turn2.extends(&turn1), PrefixCheck::Prefix);
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod adopt;
pub mod branch;
pub mod calendar;
mod calls;
pub mod component;
pub mod config;
pub mod context;
pub mod delivery;
pub mod divergence;
pub mod hash;
pub mod history;
pub mod id;
mod id_grammar;
pub mod input;
mod json;
pub mod lock;
pub mod messages;
pub mod node;
pub mod placement;

pub mod policy;
mod prefix;
pub mod profile;
pub mod raw_json;
pub mod refresh;
pub mod report;
pub mod request;
pub mod session;
pub mod snapshot;
pub mod tools;

// The names nearly every user needs; everything else is in the modules above.
pub use component::Component;
pub use context::{Extensions, SessionContext, TurnContext};
pub use delivery::{ApiKind, DeliveryStyle};
pub use divergence::PrefixCheck;
pub use history::History;
pub use id::ComponentId;
pub use messages::set_system_prompt;
pub use placement::{Persist, Placement};
pub use policy::PromptPolicy;
pub use report::Report;
pub use request::Request;
pub use session::{ComposeError, Session, SessionOptions};
pub use snapshot::{RestoreMode, Restored, SessionSnapshot};
