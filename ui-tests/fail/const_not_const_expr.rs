use prompt_registry::prompt_component;

/// Who the assistant is.
#[prompt_component(placement = "prefix")]
const ASSISTANT_INSTRUCTIONS: &str = String::from("You are terse.").leak();

fn main() {}
