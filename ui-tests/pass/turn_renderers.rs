//! Turn renderers: `&TurnContext`, `&TurnContext<'_>`, `&'a path::TurnContext<'a>`, tail or no
//! placement, both persist values, a `cleared` text.
#![deny(warnings, missing_docs)]

#[path = "../support/registered.rs"]
mod registered;

use prompt_registry::__private::{Persist, Placement, Render};
use prompt_registry::{Extensions, SessionContext, TurnContext, prompt_component};

/// Open todo items.
pub struct Todo(pub Vec<&'static str>);

/// The open todo items, when there are any.
#[prompt_component(placement = "tail")]
fn todo_addendum(turn: &TurnContext) -> Option<String> {
    turn.get::<Todo>()
        .map(|todo| format!("Open: {}", todo.0.join(", ")))
}

/// The errands, when there are any; once they are done, says so once.
#[prompt_component(placement = "tail", cleared = "No errands left.")]
fn errands(turn: &TurnContext) -> Option<String> {
    turn.get::<Todo>()
        .filter(|todo| !todo.0.is_empty())
        .map(|todo| format!("Errands: {}", todo.0.join(", ")))
}

/// The turn number.
#[prompt_component(persist = "ephemeral")]
pub fn turn_number(turn: &TurnContext<'_>) -> String {
    format!("Turn {}.", turn.turn())
}

#[prompt_component(
    placement = "tail",
    persist = "history",
    id = "scratch",
    what = "scratch notes"
)]
fn scratch_notes<'a>(_turn: &'a prompt_registry::TurnContext<'a>) -> Option<String> {
    None
}

fn main() {
    let source = include_str!("turn_renderers.rs");
    let session = SessionContext::default();
    let values = Extensions::new().with(Todo(vec!["write tests"]));
    let turn = TurnContext::new(&session, &values, 3);
    let ids: Vec<&str> = registered::from(file!())
        .iter()
        .map(|component| component.id)
        .collect();
    assert_eq!(ids, ["errands", "scratch", "todo_addendum", "turn_number"]);

    let errands = registered::get(file!(), "errands");
    assert_eq!(errands.cleared, Some("No errands left."));
    assert_eq!(errands.persist, Persist::History);
    let Render::Turn(render) = errands.render else {
        panic!("not a turn renderer")
    };
    assert_eq!(render(&turn).as_deref(), Some("Errands: write tests"));

    let todo = registered::get(file!(), "todo_addendum");
    assert_eq!(todo.placement, Some(Placement::Tail));
    assert_eq!(todo.persist, Persist::History);
    assert_eq!(todo.cleared, None);
    assert_eq!(todo.what, "The open todo items, when there are any.");
    assert_eq!(todo.line, registered::line_of(source, "fn todo_addendum("));
    let Render::Turn(render) = todo.render else {
        panic!("not a turn renderer")
    };
    assert_eq!(render(&turn).as_deref(), Some("Open: write tests"));

    let number = registered::get(file!(), "turn_number");
    assert_eq!(number.placement, None);
    assert_eq!(number.persist, Persist::Ephemeral);
    assert_eq!(
        number.line,
        registered::line_of(source, "pub fn turn_number(")
    );
    let Render::Turn(render) = number.render else {
        panic!("not a turn renderer")
    };
    assert_eq!(render(&turn).as_deref(), Some("Turn 3."));

    let scratch = registered::get(file!(), "scratch");
    assert_eq!(scratch.what, "scratch notes");
    let Render::Turn(render) = scratch.render else {
        panic!("not a turn renderer")
    };
    assert_eq!(render(&turn), None);
    assert_eq!(scratch_notes(&turn), None);
    assert_eq!(todo_addendum(&turn).as_deref(), Some("Open: write tests"));
}
