//! Compile-fail and pass tests for `#[prompt_component]`, run by `cargo test -p
//! cacheline-ui-tests` (see `tests/ui.rs`, `pass/` and `fail/`). The library itself is empty.
