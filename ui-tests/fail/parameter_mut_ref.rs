use prompt_registry::{TurnContext, prompt_component};

/// Mutable.
#[prompt_component]
fn mutable(_turn: &mut TurnContext) -> String {
    String::new()
}

fn main() {}
