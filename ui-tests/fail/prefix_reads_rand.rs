use prompt_registry::{SessionContext, prompt_component};

// The check reads paths, so a stand-in for rand shows it without the dependency.
mod rand {
    pub fn random<T: Default>() -> T {
        T::default()
    }
    pub fn thread_rng() -> u32 {
        4
    }
    pub mod rngs {
        pub struct OsRng;
    }
}

/// A greeting, picked at random.
#[prompt_component(placement = "prefix")]
fn greeting(_session: &SessionContext) -> String {
    let pick = rand::random::<usize>() + rand::thread_rng() as usize;
    let _os = rand::rngs::OsRng;
    ["Hello.", "Hi."][pick % 2].to_owned()
}

fn main() {
    let _ = greeting;
}
