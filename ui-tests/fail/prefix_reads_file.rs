use std::fs::File;

use prompt_registry::{SessionContext, prompt_component};

/// The project's AGENTS.md.
#[prompt_component(placement = "prefix")]
fn project_memory(_session: &SessionContext) -> Option<String> {
    let _exists = File::open("AGENTS.md").ok()?;
    std::fs::read_to_string("AGENTS.md").ok()
}

fn main() {
    let _ = project_memory;
}
