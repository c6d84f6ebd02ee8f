//! The `#[prompt_component]` attribute. Use it through the facade crate, which re-exports it:
//! `use prompt_registry::prompt_component;`.
//!
//! The attribute registers a piece of prompt text with the cacheline registry and checks, at
//! compile time, that it can be cache-safe: per-turn content never goes in the prefix, prefix
//! text is a `&'static str` constant or rendered once per session, and ids are valid.
//!
//! ```
//! use prompt_registry::{prompt_component, Registry, SessionContext, TurnContext};
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
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Every attribute above registered its item with the binary's registry.
//! let registry = Registry::linked()?;
//! let policy = registry.load_policy("[prompt]\n", "agent.toml")?.deny_warnings()?;
//! let status = registry.status(&policy);
//! for id in ["assistant_instructions", "tool_schemas", "todo_addendum"] {
//!     assert!(status.component(id).is_some(), "{id} is registered");
//! }
//! # Ok(()) }
//! ```
//!
//! # Arguments
//!
//! - `placement = "prefix" | "tail"`: where the text lands. Omitted: the policy decides, and
//!   the default is the tail.
//! - `id = "..."`: defaults to the item's name in lowercase snake_case. Either way it is bare
//!   (`[a-z0-9_]+`; the `skill:` and `mcp:` namespaces are for components registered at run
//!   time), at most 128 bytes, and not one of the ids reserved for the library's own
//!   producers (`user`, `system_prompt`, `tool`, ...).
//! - `what = "..."`: a one-line description; defaults to the first line of the doc comment.
//! - `persist = "history" | "ephemeral"`: tail components only; defaults to `history`.
//! - `cleared = "..."`: a tail renderer returning `Option<String>` whose updates are kept in
//!   the history: the text delivered once when it returns `None` after having had text.
//!   Without it, its last text stands.
//!
//! # Items
//!
//! - `const NAME: &str = "...";` or an immutable `static NAME: &str = "...";`: fixed text.
//! - `fn name(session: &SessionContext) -> String` (or `Option<String>`): rendered once per
//!   session; may be in the prefix.
//! - `fn name(turn: &TurnContext) -> String` (or `Option<String>`): rendered each turn; never
//!   in the prefix.
//!
//! A prefix session renderer's body may not read the clock, random numbers, the process
//! environment or the file system (`SystemTime::now()`, `rand::random()`, `std::env::var`,
//! `fs::read_to_string`, …): its text must be the same whenever the session starts or is
//! restored, so such a value is frozen into the `SessionContext` at session start. The check
//! matches the paths written in the body, closures and macro arguments (not nested fns); a
//! renamed import (`use std::time::SystemTime as T; T::now()`) hides a read from it.
//!
//! The item is emitted unchanged. Mistakes are compile errors on the offending token, all of
//! them at once; when there is one, nothing is registered, so there are no follow-on errors.

#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

// The phases, as in serde_derive and thiserror-impl: `attr` parses the arguments and `parse`
// classifies the item, `validate` checks the rules, all reporting to one `Ctxt`; then
// `expand` emits the registration, or `fallback` the item and the errors only.
mod attr;
mod ctxt;
mod expand;
mod fallback;
// The id grammar is shared with `prompt-core` as a source file (`src/id_grammar.rs` is a symlink
// to prompt-core's, so the packaged crate carries a copy), so that this crate depends on
// syn, quote and proc-macro2 only. Its run-time helpers (`normalize_name`) are not used here;
// its formatting belongs to prompt-core, so `cargo fmt -p prompt-macros` leaves it alone.
#[allow(dead_code)]
#[rustfmt::skip]
mod id_grammar;
mod parse;
mod symbol;
mod text;
mod validate;
mod varying;

use proc_macro::TokenStream;
use proc_macro2::Span;
use syn::Item;

use crate::attr::Args;
use crate::ctxt::Ctxt;
use crate::parse::Component;

/// Declares a prompt component and registers it with the cacheline registry.
///
/// `#[prompt_component(placement = "prefix" | "tail", id = "...", what = "...", persist =
/// "history" | "ephemeral", cleared = "...")]` on a `const`/`static` `&'static str`, or on a fn taking
/// `&SessionContext` (rendered once per session) or `&TurnContext` (rendered each turn) and
/// returning `String` or `Option<String>`. The whole reference (every argument, what each
/// signature means, every compile error) is on the front page of `prompt_registry`.
#[proc_macro_attribute]
pub fn prompt_component(args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    let expanded = match try_expand(args.into(), &item) {
        Ok(expanded) => expanded,
        Err(errors) => fallback::expand(item, errors),
    };
    expanded.into()
}

/// The item and its registration, or every mistake found.
fn try_expand(
    args: proc_macro2::TokenStream,
    item: &proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let cx = Ctxt::new();
    let args = Args::from_tokens(&cx, args);
    let registration = match syn::parse2::<Item>(item.clone()) {
        Ok(parsed) => Component::from_item(&cx, &parsed)
            .and_then(|component| validate::registration(&cx, &args, &component)),
        Err(error) => {
            cx.syn_error(error);
            None
        }
    };
    cx.check()?;
    match registration {
        Some(registration) => Ok(expand::expand(item.clone(), &registration)),
        // Every path to `None` reports why; this is a bug in the macro if it is reached.
        None => Err(syn::Error::new(
            Span::call_site(),
            "internal error in #[prompt_component]: no registration and no reason; please \
             report this",
        )),
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn errors(args: proc_macro2::TokenStream, item: proc_macro2::TokenStream) -> Vec<String> {
        match try_expand(args, &item) {
            Ok(expanded) => panic!("expanded: {expanded}"),
            Err(errors) => errors.into_iter().map(|error| error.to_string()).collect(),
        }
    }

    #[test]
    fn a_valid_component_expands_to_the_item_and_its_registration() {
        let item = quote! {
            /// Who the assistant is.
            const ASSISTANT_INSTRUCTIONS: &str = "You are terse.";
        };
        let expanded = try_expand(quote!(placement = "prefix"), &item)
            .map(|expanded| expanded.to_string())
            .unwrap_or_else(|error| panic!("{error}"));
        assert!(expanded.starts_with(&item.to_string()), "{expanded}");
        for part in [
            ":: prompt_registry :: __private :: inventory :: submit !",
            "id : \"assistant_instructions\"",
            "what : \"Who the assistant is.\"",
            ":: prompt_registry :: __private :: Render :: Static (ASSISTANT_INSTRUCTIONS)",
        ] {
            assert!(expanded.contains(part), "no {part} in {expanded}");
        }
    }

    #[test]
    fn independent_mistakes_are_reported_together() {
        let errors = errors(
            quote!(placment = "prefix", id = "Bad Id", placement = "prefix"),
            quote!(
                async fn date(turn: &TurnContext) -> u32 {
                    0
                }
            ),
        );
        let starts = [
            "unknown argument `placment`",
            "component id `Bad Id` has `B` at byte 0",
            "a renderer cannot be `async`",
            "a renderer returns `String` or `Option<String>`",
            "per-turn content cannot be in the prefix",
            "prompt component `date` needs a one-line description",
        ];
        assert_eq!(errors.len(), starts.len(), "{errors:?}");
        for (error, start) in errors.iter().zip(starts) {
            assert!(error.starts_with(start), "{error:?} is not {start:?}");
        }
    }

    #[test]
    fn an_invalid_argument_has_no_default_and_no_follow_on_error() {
        // `what` is invalid: no "needs a description"; `id` is invalid: no derived id error.
        let errors = errors(
            quote!(id = "", what = 3),
            quote!(
                const USER: &str = "";
            ),
        );
        assert_eq!(errors.len(), 2, "{errors:?}");
    }

    #[test]
    fn only_a_prefix_writer_is_refused_the_clock() {
        let session = quote!(
            /// The time.
            fn time(_session: &SessionContext) -> String {
                format!("{:?}", std::time::SystemTime::now())
            }
        );
        let refused = errors(quote!(placement = "prefix"), session.clone());
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].starts_with(
                "a prefix writer cannot use `std::time::SystemTime::now`, which reads the clock"
            ),
            "{refused:?}"
        );
        assert!(refused[0].contains("freeze it into the `SessionContext`"));
        for args in [quote!(placement = "tail"), quote!()] {
            if let Err(error) = try_expand(args.clone(), &session) {
                panic!("{args} refused: {error}");
            }
        }
        // A turn writer in the prefix is told to move to the tail, where it may read the clock.
        let refused = errors(
            quote!(placement = "prefix"),
            quote!(
                /// The time.
                fn time(_turn: &TurnContext) -> String {
                    format!("{:?}", std::time::SystemTime::now())
                }
            ),
        );
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(refused[0].starts_with("per-turn content cannot be in the prefix"));
    }

    #[test]
    fn the_fallback_is_the_item_and_the_errors_only() {
        let item = quote!(
            struct Instructions;
        );
        let Err(error) = try_expand(proc_macro2::TokenStream::new(), &item) else {
            panic!("a struct was accepted");
        };
        let expanded = fallback::expand(item.clone(), error).to_string();
        assert!(expanded.starts_with(&item.to_string()), "{expanded}");
        assert!(expanded.contains("compile_error !"), "{expanded}");
        assert!(!expanded.contains("prompt_registry"), "{expanded}");
    }
}
