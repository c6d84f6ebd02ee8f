use prompt_registry::prompt_component;

/// A reminder.
#[prompt_component(placement = "tail", persist = "forever")]
const REMINDER: &str = "Run the tests.";

fn main() {}
