use prompt_registry::{SessionContext, prompt_component};

// The check reads paths, so a stand-in for chrono shows it without the dependency.
mod chrono {
    pub struct Utc;
    impl Utc {
        pub fn now() -> u64 {
            0
        }
    }
    pub mod offset {
        pub struct Local;
        impl Local {
            pub fn today() -> u64 {
                0
            }
        }
    }
}

/// Today's date.
#[prompt_component(placement = "prefix")]
fn date(_session: &SessionContext) -> String {
    format!("Today is {} ({}).", chrono::Utc::now(), chrono::offset::Local::today())
}

fn main() {
    let _ = date;
}
