//! The bodies of the cargo-fuzz targets: each takes arbitrary bytes, drives one input path of
//! the workspace with them, and panics only when an invariant breaks (a bug). The nightly
//! `fuzz/` project wraps each in `fuzz_target!`; on stable, `tests/corpus.rs` replays the
//! checked-in corpus (`fuzz/corpus/<target>/`) and every minimized crash
//! (`fuzz/artifacts/<target>/`) through the same function, so a regression fails
//! `cargo test` without nightly.
#![forbid(unsafe_code)]

mod template_probe;

pub use template_probe::template_probe;

/// A fuzz target: its name (the `fuzz/fuzz_targets/<name>.rs` file and corpus folder) and
/// its body.
pub struct Target {
    /// The name.
    pub name: &'static str,
    /// The body.
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[Target] = &[Target {
    name: "template_probe",
    run: template_probe,
}];
