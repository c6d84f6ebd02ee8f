//! `cacheline`: where every prompt writer lands, and what the cache keeps.
//!
//! One module per command in [`commands`]; output helpers in [`output`]. The binary links
//! `prompt-reference`, so its registry holds the eleven reference components and `status`,
//! `check` and `demo` work on built-in defaults.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod commands;
mod output;

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(commands::main(std::env::args_os()))
}
