//! # prompt-registry: the cacheline facade
//!
//! Declare each prompt writer with [`#[prompt_component]`](macro@prompt_component); every
//! component linked into the binary is collected into a [`Registry`]; the operator's
//! `agent.toml` `[prompt]` section decides, deny-wins, who may land in the cached prefix;
//! [`Registry::status`] says where each writer lands and why; sessions compose through
//! [`prompt_core`], whose everyday names this crate re-exports.
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
//!     .deny_warnings()?;
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
//! ## `#[prompt_component]` reference
//!
//! ### Arguments
//!
//! | argument | values | default |
//! |---|---|---|
//! | `placement` | `"prefix"` (above the history, byte-identical for the whole session) or `"tail"` (after the history) | none: the policy's `default`, which is `tail` |
//! | `id` | a bare id: lowercase `[a-z0-9_]+`, at most 128 bytes, not reserved | the item's name in snake_case |
//! | `what` | a one-line description, shown by `status` | the first line of the doc comment |
//! | `persist` | tail only: `"history"` (each changed output is appended once and stays) or `"ephemeral"` (sent at the end of this request only) | `"history"` |
//! | `cleared` | tail renderers returning `Option<String>`, `persist = "history"`: the text delivered once when the writer returns `None` after having had text | none: after `None` the writer's last text stands |
//!
//! A declaration is a request: the operator's `[prompt]` section decides, and a component
//! reaches the prefix only through a `prefix_allow` entry that no `prefix_deny` entry beats.
//! The reserved ids name the library's own producers (`assistant`, `compaction`,
//! `developer`, `foreign`, `prefix`, `system`, `system_prompt`, `tool`, `tools`, `user`); the
//! `skill:` and `mcp:` namespaces are for components registered at run time
//! ([`Registry::register_dynamic`]).
//!
//! ### Items, and what each signature means
//!
//! | item | stability | may be in the prefix |
//! |---|---|---|
//! | `const NAME: &str = "...";` or `static NAME: &str = "...";` | constant: compile-time text | yes |
//! | `fn name(session: &SessionContext) -> String` (or `Option<String>`) | session: rendered once, when the session starts, from session-frozen values | yes |
//! | `fn name(turn: &TurnContext) -> String` (or `Option<String>`) | turn: rendered every turn | no: a compile error with `placement = "prefix"` |
//!
//! `Option<String>` returns `None` when the component has nothing to say. For a tail writer
//! whose updates are kept in the history, `None` appends nothing: the last text it delivered
//! stays the last word the model read from it (`"Open todo items: buy milk"` after the list
//! emptied). Declare `cleared = "No open todo items."` and the session delivers that text
//! once when the writer returns `None` after having had text, then nothing until it has text
//! again; whether it had text is saved with the session. The item is emitted unchanged and
//! stays callable. A crate that only defines components must be
//! linked: `use my_components as _;`.
//!
//! A session renderer declared `placement = "prefix"` must render the same bytes every time
//! the session starts or is restored (a restored session whose prefix changed is refused), so
//! its body may not read a source of variation: the clock (`SystemTime::now`, `Instant::now`,
//! chrono's `Utc::now`, `Local::now`, `Local::today`, `time`'s `OffsetDateTime::now_utc`,
//! jiff's `Timestamp::now`, `Zoned::now`), random numbers (`rand::random`, `rand::rng`,
//! `thread_rng`, `OsRng`, `from_entropy`, `from_os_rng`, any `fastrand::` or `getrandom::`
//! path, `Uuid::new_v4`, `Uuid::now_v7`), the process environment (`env::var`, `var_os`,
//! `vars`, `args`, `current_dir`, `home_dir`, …) or the file system (`fs::read_to_string`,
//! `fs::read`, `fs::read_dir`, `fs::metadata`, `File::open`, `OpenOptions::new`, …). Each
//! such path is a compile error on the path, all of them at once: read the value when the
//! session starts, freeze it into the [`SessionContext`] and get it with `session.get::<T>()`.
//! `env!`, `option_env!` and `include_str!` are read when the program is built and are fine;
//! tail writers and `&TurnContext` renderers may read anything. The check reads the paths
//! written in the body (any prefix: `SystemTime::now` and `std::time::SystemTime::now` alike),
//! in closures, blocks and macro arguments, not in nested fns; it cannot see through a
//! renamed import (`use std::time::SystemTime as T; T::now()`), a function imported alone
//! (`use std::env::var; var("X")`), a method on a value (`UNIX_EPOCH.elapsed()`) or a call to
//! another fn that reads the clock. What it misses shows only when a saved session is
//! restored: [`RestoreMode::Strict`] refuses it with [`RestoreError::PrefixChanged`].
//!
//! ### Compile errors, one line each
//!
//! Each is a `ui-tests/fail/*.rs` case with its reviewed compiler output. Independent
//! mistakes are reported together; an attribute with a mistake registers nothing, so there
//! are no follow-on errors.
//!
//! - `prefix_turn_renderer`: a `&TurnContext` renderer with `placement = "prefix"`: per-turn content cannot be in the prefix.
//! - `prefix_reads_std_clock`, `prefix_reads_chrono`, `prefix_reads_rand`, `prefix_reads_env_var`, `prefix_reads_file`, `prefix_reads_in_closure`, `prefix_reads_several`: a prefix session renderer reads the clock, random numbers, the environment or files.
//! - `prefix_static_mut`, `tail_static_mut`: a `static mut` can change at run time.
//! - `prefix_non_str_type`, `tail_non_str_type`: a `const`/`static` that is not a `&'static str`.
//! - `const_not_const_expr`: a `const` whose value is computed at run time (the compiler's own error).
//! - `unknown_argument`, `duplicate_argument`, `argument_without_value`, `non_literal_argument`, `malformed_arguments`, `malformed_arguments_no_follow_on`: the argument list.
//! - `unknown_placement`, `unknown_persist`, `persist_on_prefix`: argument values.
//! - `cleared_on_prefix`, `cleared_on_ephemeral`, `cleared_on_const`, `cleared_on_string_renderer`, `empty_cleared`: `cleared` goes with a tail writer kept in the history that can return `None`, and says something.
//! - `invalid_id`, `invalid_default_id`, `reserved_id`, `reserved_default_id`, `id_too_long`: the id grammar, for `id = "..."` and for the name it defaults to.
//! - `missing_what`, `empty_what`: every component has a one-line description.
//! - `no_parameters`, `two_parameters`, `variadic_renderer`, `parameter_by_value`, `parameter_mut_ref`, `unknown_context`, `context_via_alias`: a renderer takes exactly `&SessionContext` or `&TurnContext`.
//! - `missing_return_type`, `wrong_return_type`, `return_type_shadowed`: a renderer returns `String` or `Option<String>`.
//! - `async_renderer`, `unsafe_renderer`, `extern_renderer`, `generic_renderer`, `method_renderer`: a renderer is a plain, safe, synchronous, non-generic free fn.
//! - `unsupported_items`: the attribute goes on a `const`, a `static` or a fn, nothing else.
//! - `several_mistakes`: all of a component's mistakes in one compilation.
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
//!
//! ## Features
//!
//! - `cli`: `cli::run`, the `status` and `check` commands over the application's own
//!   registry, with the application's name and version.
//! - `measure`: the usage meter, the provider-rule simulator and the request-log audit, as
//!   `prompt_registry::measure` (pulls in an offline tokenizer).
//! - `templates`: the chat-template probe, as `prompt_registry::templates` (pulls in a Jinja
//!   engine).
//!
//! ## The prefix lock
//!
//! [`lock`]: a file in the agent's repository listing every writer that can reach the
//! cached prefix; `check --lock FILE` and [`lock::assert_lock`] (from a plain `#[test]`) fail
//! on a new prefix writer, one the agent.toml newly lets in, or an edited prefix constant.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

#[cfg(feature = "cli")]
pub mod cli;
pub mod lock;
mod registry;
mod status;

// Declaring prompt writers, and the registry that collects them.
pub use prompt_core::{
    Component, ComponentId, Extensions, Persist, Placement, SessionContext, TurnContext,
};
pub use prompt_macros::prompt_component;
pub use registry::{Namespace, Registry, RegistryError};

// An error as `main` shows it: `fn main() -> Result<(), Report>`.
pub use prompt_core::Report;

// The operator's `[prompt]` section, and what `status` makes of it.
pub use prompt_core::policy::{LoadedPolicy, PolicyDiagnostic, PolicyErrors, PromptPolicy};
pub use status::{
    ComponentStatus, PromptStatus, ProviderStatus, STATUS_SCHEMA_VERSION, StatusReport, ToolsStatus,
};

// The provider behind the API: its profile (what it does with an appended update, its cache
// lifetime and signals) and the operator's `[provider]` section over it.
pub use prompt_core::profile::{
    CacheTtl, LaterSystem, LoadedProvider, Profile, ProviderDiagnostic, ProviderErrors,
    ProviderSection, Retention,
};

// A session: composing requests, recording replies and tool results.
pub use prompt_core::session::{
    Checkpoint, ComposeError, Session, SessionOptions, ToolResult, UserInput,
};
pub use prompt_core::tools::{ToolDefinition, ToolSet, ToolSetError, ToolSource};
pub use prompt_core::{ApiKind, DeliveryStyle, PrefixCheck, Request};

// The history, and the drop-in helpers for an agent that keeps a `Vec<serde_json::Value>`.
pub use prompt_core::History;
pub use prompt_core::history::{Compaction, HistoryError, SystemPromptChange};
pub use prompt_core::messages::{current_system_prompt, set_system_prompt};
pub use prompt_core::node::{Node, NodeKind, Producer};

// A conversation over its lifetime: one value with its wire, saved and restored as one
// document; adopting an existing one; branches (regenerate, edit, rewind, fork).
pub use prompt_core::adopt::{AdoptError, AdoptOptions, AdoptReport};
pub use prompt_core::branch::{BranchError, MessageHandle, ShownMessage};
pub use prompt_core::snapshot::{
    PrefixChanges, RestoreError, RestoreMode, Restored, SessionSnapshot,
};
pub use prompt_wire::{
    Conversation, ConversationError, ConversationSnapshot, RestoredConversation,
};

// Everything else of prompt-core, by module.
pub use prompt_core::{
    adopt, branch, component, config, context, delivery, divergence, hash, history, id, input,
    messages, node, placement, policy, profile, raw_json, refresh, request, session, snapshot,
    tools,
};

/// Provider request bodies, replies read back, and the guard over two bodies: [`prompt_wire`].
pub use prompt_wire as wire;

/// The usage meter, the provider-rule simulator and the request-log audit (feature
/// `measure`): [`prompt_measure`].
#[cfg(feature = "measure")]
pub use prompt_measure as measure;

/// The chat-template probe (feature `templates`): [`prompt_template_probe`].
#[cfg(feature = "templates")]
pub use prompt_template_probe as templates;
