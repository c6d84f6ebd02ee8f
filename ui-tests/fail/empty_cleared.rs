use prompt_registry::{TurnContext, prompt_component};

/// The open todo items, when there are any.
#[prompt_component(placement = "tail", cleared = "  ")]
fn todo_addendum(turn: &TurnContext) -> Option<String> {
    turn.get::<String>().cloned()
}

fn main() {}
