use prompt_registry::{SessionContext, prompt_component};

/// Variadic.
#[prompt_component]
fn varargs(_session: &SessionContext, ...) -> String {
    String::new()
}

fn main() {}
