use prompt_registry::prompt_component;

/// Spaces and capitals.
#[prompt_component(id = "Tool Schemas")]
const A: &str = "a";

/// Empty.
#[prompt_component(id = "")]
const B: &str = "b";

/// Unknown namespace.
#[prompt_component(id = "plugin:x")]
const C: &str = "c";

/// Reserved namespace.
#[prompt_component(id = "skill:review")]
const D: &str = "d";

fn main() {
    let _ = (A, B, C, D);
}
