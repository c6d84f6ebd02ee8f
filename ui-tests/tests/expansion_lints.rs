//! Every accepted form of `#[prompt_component]` under strict lints: `cargo clippy
//! --all-targets` on this package proves the expansion adds no warning to user code (rustc,
//! `missing_docs`, clippy's default and pedantic groups), and the test checks it registered.
#![deny(warnings, missing_docs, unsafe_code, clippy::all, clippy::pedantic)]

use prompt_registry::__private::{Registration, inventory};
use prompt_registry::{SessionContext, TurnContext, prompt_component};

/// Who the assistant is.
#[prompt_component(placement = "prefix")]
pub const ASSISTANT_INSTRUCTIONS: &str = "You are a careful coding assistant.";

/// How to answer.
#[prompt_component]
static ANSWER_STYLE: &str = "Answer briefly.";

/// The tools.
#[prompt_component(placement = "prefix", id = "tool_schemas", what = "tool list, sorted")]
#[must_use]
pub fn tool_schemas(session: &SessionContext) -> String {
    session
        .get::<Vec<String>>()
        .map(|tools| tools.join(", "))
        .unwrap_or_default()
}

/// Notes, when there are any.
#[prompt_component(placement = "tail", persist = "ephemeral")]
fn notes(_session: &SessionContext) -> Option<String> {
    None
}

/// Reminders, when there are any.
#[prompt_component(placement = "tail", cleared = "No reminders.")]
fn reminders(turn: &TurnContext<'_>) -> Option<String> {
    turn.get::<Vec<String>>().map(|items| items.join("\n"))
}

/// The turn number.
#[prompt_component(placement = "tail")]
fn turn_number(turn: &TurnContext<'_>) -> String {
    format!("Turn {}.", turn.turn())
}

/// Private module with private components.
mod private {
    use prompt_registry::{TurnContext, prompt_component};

    /// A private turn renderer nobody calls directly.
    #[prompt_component(persist = "history")]
    fn unused_by_user(_turn: &TurnContext) -> Option<String> {
        None
    }
}

#[test]
fn every_form_registered() {
    let mut ids: Vec<&str> = inventory::iter::<Registration>
        .into_iter()
        .filter(|registration| registration.file == file!())
        .map(|registration| registration.id)
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        [
            "answer_style",
            "assistant_instructions",
            "notes",
            "reminders",
            "tool_schemas",
            "turn_number",
            "unused_by_user"
        ]
    );
}
