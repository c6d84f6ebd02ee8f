//! Every Rust block of README.md and of `docs/*.md`, compiled and run as doctests in a
//! crate whose only dependencies are the facade (`prompt-registry`, every feature),
//! serde_json, and the async client with its runtime (`prompt-client`, tokio: crates a user
//! adds beside the facade, which never depends on them): an example that names an inner crate (`prompt_core`, `prompt_wire`,
//! `prompt_measure`, `prompt_template_probe`) does not compile, so the docs show what a user
//! who depends on `prompt-registry` can write. `cacheline-tests`' `docs` module checks that
//! every document is listed below.
#![forbid(unsafe_code)]

/// README.md's Rust blocks.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub mod readme {}

/// Every `docs/*.md`, by file name.
#[cfg(doctest)]
pub mod docs {
    #[doc = include_str!("../../../docs/agent-toml.md")]
    pub mod agent_toml {}
    #[doc = include_str!("../../../docs/agents.md")]
    pub mod agents {}
    #[doc = include_str!("../../../docs/architecture.md")]
    pub mod architecture {}
    #[doc = include_str!("../../../docs/benchmarks.md")]
    pub mod benchmarks {}
    #[doc = include_str!("../../../docs/catalogue.md")]
    pub mod catalogue {}
    #[doc = include_str!("../../../docs/ci.md")]
    pub mod ci {}
    #[doc = include_str!("../../../docs/evidence.md")]
    pub mod evidence {}
    #[doc = include_str!("../../../docs/fleet.md")]
    pub mod fleet {}
    #[doc = include_str!("../../../docs/history.md")]
    pub mod history {}
    #[doc = include_str!("../../../docs/import.md")]
    pub mod import {}
    #[doc = include_str!("../../../docs/lifecycle.md")]
    pub mod lifecycle {}
    #[doc = include_str!("../../../docs/live-llama.md")]
    pub mod live_llama {}
    #[doc = include_str!("../../../docs/measurements.md")]
    pub mod measurements {}
    #[doc = include_str!("../../../docs/proxy.md")]
    pub mod proxy {}
    #[doc = include_str!("../../../docs/robustness.md")]
    pub mod robustness {}
    #[doc = include_str!("../../../docs/status-json.md")]
    pub mod status_json {}
    #[doc = include_str!("../../../docs/templates.md")]
    pub mod templates {}
    #[doc = include_str!("../../../docs/wire.md")]
    pub mod wire {}
}
