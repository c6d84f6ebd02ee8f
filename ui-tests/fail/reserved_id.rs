use prompt_registry::{SessionContext, prompt_component};

/// What we know about the user.
#[prompt_component(placement = "tail", id = "user")]
fn user_profile(_session: &SessionContext) -> String {
    String::new()
}

/// The name is reserved too, so there is no id to suggest.
#[prompt_component(placement = "prefix", id = "system_prompt")]
const SYSTEM_PROMPT: &str = "You are terse.";

/// A malformed id whose fix would be reserved: the fix is not suggested.
#[prompt_component(id = "Tool")]
const TOOL_HINTS: &str = "Prefer grep.";

fn main() {
    let _ = (user_profile, SYSTEM_PROMPT, TOOL_HINTS);
}
