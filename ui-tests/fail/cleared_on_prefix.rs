use prompt_registry::{SessionContext, prompt_component};

/// The project's notes, when it has any.
#[prompt_component(placement = "prefix", cleared = "No notes.")]
fn project_notes(session: &SessionContext) -> Option<String> {
    session.get::<String>().cloned()
}

fn main() {}
