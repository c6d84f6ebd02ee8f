use prompt_registry::TurnContext as SessionContext;
use prompt_registry::prompt_component;

/// Looks like a session renderer, but takes the per-turn context.
#[prompt_component(placement = "prefix")]
fn date(turn: &SessionContext) -> String {
    format!("Turn {}.", turn.turn())
}

fn main() {}
