use std::time::SystemTime;

use prompt_registry::{SessionContext, prompt_component};

/// Where and when the session runs.
#[prompt_component(placement = "prefix")]
fn environment(_session: &SessionContext) -> String {
    // Another fn: not this writer's body, so not searched.
    fn uptime() -> std::time::Duration {
        std::time::Instant::now().elapsed()
    }
    let when = SystemTime::now();
    let dir = std::env::current_dir();
    let home = std::env::var_os("HOME");
    let motd = std::fs::read("/etc/motd");
    format!("{when:?} {dir:?} {home:?} {motd:?} {:?}", uptime())
}

fn main() {
    let _ = environment;
}
