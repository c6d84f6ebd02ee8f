use prompt_registry::{SessionContext, prompt_component};

/// Generic over a type.
#[prompt_component]
fn by_type<T: Default>(_session: &SessionContext) -> String {
    String::new()
}

/// Generic over a const.
#[prompt_component]
fn by_const<'a, const N: usize>(_session: &'a SessionContext) -> String {
    String::new()
}

fn main() {}
