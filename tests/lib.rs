//! Cross-crate scenarios of the cacheline workspace live in `tests.rs` (one test binary).
//!
//! This library holds the documentation checked as doctests: every Rust block of README.md
//! and of `docs/*.md` compiles and runs here, where every crate of the workspace is a
//! dependency. `tests.rs`'s `docs` module checks that every document is listed below, and
//! loads every TOML example against the registry it describes.
#![forbid(unsafe_code)]

/// README.md's Rust blocks.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub mod readme {}

/// Every `docs/*.md`, by file name.
#[cfg(doctest)]
pub mod docs {
    #[doc = include_str!("../docs/agent-toml.md")]
    pub mod agent_toml {}
    #[doc = include_str!("../docs/benchmarks.md")]
    pub mod benchmarks {}
    #[doc = include_str!("../docs/ci.md")]
    pub mod ci {}
    #[doc = include_str!("../docs/fleet.md")]
    pub mod fleet {}
    #[doc = include_str!("../docs/history.md")]
    pub mod history {}
    #[doc = include_str!("../docs/lifecycle.md")]
    pub mod lifecycle {}
    #[doc = include_str!("../docs/live-llama.md")]
    pub mod live_llama {}
    #[doc = include_str!("../docs/measurements.md")]
    pub mod measurements {}
    #[doc = include_str!("../docs/robustness.md")]
    pub mod robustness {}
    #[doc = include_str!("../docs/status-json.md")]
    pub mod status_json {}
    #[doc = include_str!("../docs/templates.md")]
    pub mod templates {}
    #[doc = include_str!("../docs/wire.md")]
    pub mod wire {}
}
