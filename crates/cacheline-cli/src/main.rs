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

/// jemalloc on Linux: the proxy forwards each request body through memory it reuses, where
/// glibc's `malloc` (as the proxy sets it, to keep idle sessions small) maps and unmaps it
/// (docs/proxy.md, "The allocator").
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    ExitCode::from(commands::main(std::env::args_os()))
}
