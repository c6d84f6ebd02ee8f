use prompt_registry::prompt_component;

// `what` comes after the malformed part, so it may well be there: no "needs a description".
#[prompt_component(placement = "tail" what = "the assistant's instructions")]
const ASSISTANT_INSTRUCTIONS: &str = "You are terse.";

fn main() {}
