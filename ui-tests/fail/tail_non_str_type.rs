use prompt_registry::prompt_component;

/// Owned text.
#[prompt_component(placement = "tail")]
const OWNED: String = String::new();

/// A number.
#[prompt_component]
static COUNT: u32 = 3;

fn main() {
    let _ = (OWNED, COUNT);
}
