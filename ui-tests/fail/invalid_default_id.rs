use prompt_registry::prompt_component;

/// Not ASCII.
#[prompt_component]
const ÜBER: &str = "über";

fn main() {}
