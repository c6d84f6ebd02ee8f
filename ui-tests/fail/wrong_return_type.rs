use prompt_registry::{SessionContext, prompt_component};

/// Returns a str.
#[prompt_component]
fn borrowed(_session: &SessionContext) -> &'static str {
    ""
}

/// Returns a Result.
#[prompt_component]
fn fallible(_session: &SessionContext) -> Result<String, std::fmt::Error> {
    Ok(String::new())
}

fn main() {}
