use prompt_registry::{TurnContext, prompt_component};

/// Today's date.
#[prompt_component(placement = "prefix")]
fn date(turn: &TurnContext) -> String {
    format!("Turn {}.", turn.turn())
}

fn main() {
    // The item is still emitted: using it causes no follow-on error.
    let _ = date;
}
