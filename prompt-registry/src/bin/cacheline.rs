//! `cacheline`: status, check and demo over the reference components.

use std::process::ExitCode;

use prompt_registry::Registry;
use prompt_registry::cli::{DefaultConfig, run_with};
use prompt_registry::reference::DEFAULT_AGENT_TOML;

fn main() -> ExitCode {
    let registry = match Registry::linked() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let default = DefaultConfig {
        name: "<built-in agent.toml>",
        text: DEFAULT_AGENT_TOML,
    };
    ExitCode::from(run_with(
        std::env::args_os(),
        &registry,
        Some(default),
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    ))
}
