use prompt_registry::prompt_component;

/// Who the assistant is.
#[prompt_component(placement = "prefix" id = "assistant")]
const ASSISTANT_INSTRUCTIONS: &str = "You are terse.";

fn main() {}
