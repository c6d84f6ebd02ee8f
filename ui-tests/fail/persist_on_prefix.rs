use prompt_registry::prompt_component;

/// Who the assistant is.
#[prompt_component(persist = "ephemeral", placement = "prefix")]
const ASSISTANT_INSTRUCTIONS: &str = "You are terse.";

fn main() {}
