use prompt_registry::prompt_component;

/// Who the assistant is.
#[prompt_component(placement = prefix, what = concat!("who ", "we are"))]
const ASSISTANT_INSTRUCTIONS: &str = "You are terse.";

fn main() {}
