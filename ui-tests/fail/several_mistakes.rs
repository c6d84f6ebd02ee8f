use prompt_registry::prompt_component;

/// Who the assistant is.
#[prompt_component(placment = "prefix", persist = "forever", placement = "top")]
const ASSISTANT_INSTRUCTIONS: &str = "You are terse.";

fn main() {
    // The item is still emitted: using it causes no follow-on error.
    assert!(!ASSISTANT_INSTRUCTIONS.is_empty());
}
