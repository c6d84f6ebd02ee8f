use prompt_registry::prompt_component;

/// Who the assistant is.
#[prompt_component(placment = "prefix")]
const ASSISTANT_INSTRUCTIONS: &str = "You are terse.";

fn main() {
    let _ = ASSISTANT_INSTRUCTIONS;
}
