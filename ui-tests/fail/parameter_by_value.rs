use prompt_registry::{SessionContext, prompt_component};

/// By value.
#[prompt_component]
fn owned(_session: SessionContext) -> String {
    String::new()
}

fn main() {}
