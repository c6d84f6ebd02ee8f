use prompt_registry::prompt_component;

/// No context.
#[prompt_component]
fn nothing() -> String {
    String::new()
}

fn main() {}
