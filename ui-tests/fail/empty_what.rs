use prompt_registry::prompt_component;

#[prompt_component(what = "  ")]
const ASSISTANT_INSTRUCTIONS: &str = "You are terse.";

fn main() {}
