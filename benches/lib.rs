//! Benchmarks only: see `benches/` and docs/benchmarks.md.
