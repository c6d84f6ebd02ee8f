//! Benchmarks only: see `crates/cacheline-benches/` and docs/benchmarks.md. The library holds the proxy
//! benchmark's parts ([`proxy_bench`]), which the `proxy-bench` binary runs, and the sessions
//! the divan benchmarks start from ([`sessions`]).

#[path = "accuracy/mod.rs"]
pub mod accuracy;
#[path = "import_history/mod.rs"]
pub mod import_history;
#[path = "proxy_bench/mod.rs"]
pub mod proxy_bench;
pub mod sessions;
