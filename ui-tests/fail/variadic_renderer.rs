use prompt_registry::{SessionContext, prompt_component};

/// Variadic.
#[prompt_component]
fn varargs(_session: &SessionContext, _: ...) -> String {
    String::new()
}

fn main() {}
