use prompt_registry::prompt_component;

struct Config;

/// Takes something else.
#[prompt_component]
fn config(_config: &Config) -> String {
    String::new()
}

fn main() {}
