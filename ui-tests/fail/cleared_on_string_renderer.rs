use prompt_registry::{TurnContext, prompt_component};

/// The open todo items.
#[prompt_component(placement = "tail", cleared = "No open todo items.")]
fn todo_addendum(turn: &TurnContext) -> String {
    turn.get::<String>().cloned().unwrap_or_default()
}

fn main() {}
