use std::time::{Instant, SystemTime, UNIX_EPOCH};

use prompt_registry::{SessionContext, prompt_component};

/// When the session started.
#[prompt_component(placement = "prefix")]
fn started(_session: &SessionContext) -> String {
    let since = SystemTime::now().duration_since(UNIX_EPOCH);
    format!("Started at {since:?}.")
}

/// How long the session took to start.
#[prompt_component(placement = "prefix")]
fn warm_up(_session: &SessionContext) -> Option<String> {
    let start = std::time::Instant::now();
    Some(format!("{:?}", Instant::elapsed(&start)))
}

fn main() {
    // The items are still emitted: using them causes no follow-on error.
    let _ = (started, warm_up);
}
