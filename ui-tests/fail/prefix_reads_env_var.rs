use prompt_registry::{SessionContext, prompt_component};

/// The user's name.
#[prompt_component(placement = "prefix")]
fn user_name(_session: &SessionContext) -> Option<String> {
    // `env!` and `option_env!` are read when the program is built: fine.
    let built_by = option_env!("USER").unwrap_or(env!("CARGO_PKG_NAME"));
    let user = std::env::var("USER").ok()?;
    Some(format!("You are talking to {user} (built by {built_by})."))
}

fn main() {
    let _ = user_name;
}
