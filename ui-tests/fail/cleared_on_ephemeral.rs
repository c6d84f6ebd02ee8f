use prompt_registry::{TurnContext, prompt_component};

/// Plan mode, when it is on.
#[prompt_component(placement = "tail", persist = "ephemeral", cleared = "Plan mode is off.")]
fn plan_mode(turn: &TurnContext) -> Option<String> {
    turn.get::<bool>().filter(|on| **on).map(|_| "Plan mode is ON.".to_owned())
}

fn main() {}
