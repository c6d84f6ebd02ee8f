use prompt_registry::{SessionContext, prompt_component};

struct String;

/// Returns a type named `String` that is not `std::string::String`.
#[prompt_component]
fn shadowed(_session: &SessionContext) -> String {
    String
}

fn main() {}
