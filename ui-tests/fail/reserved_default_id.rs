use prompt_registry::{SessionContext, prompt_component};

/// What we know about the user.
#[prompt_component(placement = "tail")]
fn user(_session: &SessionContext) -> String {
    String::new()
}

/// Who the assistant is.
#[prompt_component(placement = "prefix")]
const SYSTEM_PROMPT: &str = "You are terse.";

fn main() {
    // The items are still emitted: using them causes no follow-on error.
    let _ = (user, SYSTEM_PROMPT);
}
