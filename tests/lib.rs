//! Cross-crate scenarios of the cacheline workspace live in `tests.rs` (one test binary).
//!
//! This library holds the documentation checked as doctests: every Rust block of README.md
//! and of `docs/*.md` compiles and runs here, where every crate of the workspace is a
//! dependency.
#![forbid(unsafe_code)]
