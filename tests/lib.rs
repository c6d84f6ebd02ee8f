//! Cross-crate scenarios of the cacheline workspace live in `tests.rs` (one test binary);
//! the documentation's Rust blocks are compiled in `doc-examples/`, against the facade alone.
#![forbid(unsafe_code)]
