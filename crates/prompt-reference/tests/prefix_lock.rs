//! The reference components' prefix lock is current: the plain `#[test]` docs/ci.md tells
//! an agent's crate to write, over `prefix.lock` and the built-in `agent.toml` beside this
//! crate's manifest. After a reviewed change: `CACHELINE_LOCK=bless cargo test -p
//! prompt-reference` (or `cargo cacheline check crates/prompt-reference/agent.toml --lock
//! crates/prompt-reference/prefix.lock --bless`).

// Links the reference components into this test binary.
use prompt_reference as _;

#[test]
fn the_prefix_lock_is_current() {
    prompt_registry::lock::assert_lock("prefix.lock", Some("agent.toml"));
}
