use prompt_registry::prompt_component;

/// A reminder.
#[prompt_component]
static mut REMINDER: &str = "Run the tests.";

fn main() {}
