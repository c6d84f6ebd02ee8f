//! The `#[prompt_component]` attribute. Use it through the facade crate, which re-exports it:
//! `use prompt_registry::prompt_component;`.
//!
//! The attribute registers a piece of prompt text with the cacheline registry and checks, at
//! compile time, that it can be cache-safe: per-turn content never goes in the prefix, prefix
//! text is a `&'static str` constant or rendered once per session, and ids are valid.
//!
//! ```ignore
//! // Runs as a doctest of `prompt_registry`; a proc-macro crate cannot use its own
//! // attribute in doctests, and the expansion names `::prompt_registry`, so this is `ignore`.
//! // Every form below is compiled and checked by the `cacheline-ui-tests` trybuild suite.
//! use prompt_registry::{prompt_component, SessionContext, TurnContext};
//!
//! /// Who the assistant is.
//! #[prompt_component(placement = "prefix")]
//! const ASSISTANT_INSTRUCTIONS: &str = "You are a careful coding assistant.";
//!
//! #[prompt_component(placement = "prefix", id = "tool_schemas", what = "tool list, sorted")]
//! fn tool_schemas(session: &SessionContext) -> String {
//!     String::from("[]")
//! }
//!
//! /// The open todo items.
//! #[prompt_component(placement = "tail", persist = "ephemeral")]
//! fn todo_addendum(turn: &TurnContext) -> Option<String> {
//!     turn.get::<Vec<String>>().map(|todo| todo.join("\n"))
//! }
//! ```
//!
//! # Arguments
//!
//! - `placement = "prefix" | "tail"`: where the text lands. Omitted: the policy decides, and
//!   the default is the tail.
//! - `id = "..."`: defaults to the item's name in lowercase snake_case.
//! - `what = "..."`: a one-line description; defaults to the first line of the doc comment.
//! - `persist = "history" | "ephemeral"`: tail components only; defaults to `history`.
//!
//! # Items
//!
//! - `const NAME: &str = "...";` or an immutable `static NAME: &str = "...";`: fixed text.
//! - `fn name(session: &SessionContext) -> String` (or `Option<String>`): rendered once per
//!   session; may be in the prefix.
//! - `fn name(turn: &TurnContext) -> String` (or `Option<String>`): rendered each turn; never
//!   in the prefix.
//!
//! The item is emitted unchanged. Mistakes are compile errors on the offending token; when
//! there is one, nothing is registered.

mod args;
mod component;
// The id grammar is shared with `prompt-core` as a source file, so that this crate depends on
// syn, quote and proc-macro2 only. Its run-time helpers (`normalize_name`) are not used here;
// its formatting belongs to prompt-core, so `cargo fmt -p prompt-macros` leaves it alone.
#[allow(dead_code)]
#[rustfmt::skip]
#[path = "../../prompt-core/src/id_grammar.rs"]
mod id_grammar;
mod text;

use proc_macro::TokenStream;

/// Declares a prompt component and registers it with the cacheline registry.
///
/// See the [crate documentation](crate) for the arguments and the accepted items.
#[proc_macro_attribute]
pub fn prompt_component(args: TokenStream, item: TokenStream) -> TokenStream {
    component::expand(args.into(), item.into()).into()
}
