use prompt_registry::{SessionContext, prompt_component};

/// Fetched.
#[prompt_component]
async fn fetched(_session: &SessionContext) -> String {
    String::new()
}

fn main() {}
