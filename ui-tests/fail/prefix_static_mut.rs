use prompt_registry::prompt_component;

/// Who the assistant is.
#[prompt_component(placement = "prefix")]
static mut ASSISTANT_INSTRUCTIONS: &str = "You are a careful coding assistant.";

fn main() {}
