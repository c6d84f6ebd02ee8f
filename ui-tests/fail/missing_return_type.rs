use prompt_registry::{SessionContext, prompt_component};

/// Returns nothing.
#[prompt_component]
fn silent(_session: &SessionContext) {}

fn main() {}
