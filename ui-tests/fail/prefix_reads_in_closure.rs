use std::time::SystemTime;

use prompt_registry::{SessionContext, prompt_component};

/// The tool list, with when it was built.
#[prompt_component(placement = "prefix")]
fn tool_schemas(session: &SessionContext) -> String {
    let tools = session.get::<Vec<String>>().cloned().unwrap_or_default();
    let stamp = || {
        let now = { SystemTime::now() };
        format!("{now:?}")
    };
    tools
        .iter()
        .map(|tool| format!("{tool} ({})", stamp()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn main() {
    let _ = tool_schemas;
}
