use prompt_registry::{SessionContext, prompt_component};

/// With an ABI.
#[prompt_component]
extern "C" fn exported(_session: &SessionContext) -> Option<String> {
    None
}

fn main() {}
