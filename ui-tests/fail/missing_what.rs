use prompt_registry::prompt_component;

#[prompt_component(placement = "prefix")]
const ASSISTANT_INSTRUCTIONS: &str = "You are terse.";

fn main() {}
