use prompt_registry::{SessionContext, prompt_component};

/// Unsafe.
#[prompt_component]
unsafe fn raw(_session: &SessionContext) -> String {
    String::new()
}

fn main() {}
