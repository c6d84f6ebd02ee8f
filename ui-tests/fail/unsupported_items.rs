use prompt_registry::prompt_component;

/// A struct.
#[prompt_component]
struct Instructions;

/// An enum.
#[prompt_component]
enum Mode {
    Terse,
}

/// An impl.
#[prompt_component]
impl Instructions {}

/// A trait.
#[prompt_component]
trait Render {}

fn main() {
    let _ = (Instructions, Mode::Terse);
}
