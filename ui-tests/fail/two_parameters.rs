use prompt_registry::{SessionContext, prompt_component};

/// Two parameters.
#[prompt_component]
fn two(session: &SessionContext, name: &str) -> String {
    let _ = session;
    name.to_owned()
}

fn main() {}
