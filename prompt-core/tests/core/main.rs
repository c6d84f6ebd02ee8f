//! prompt-core's integration tests, as one test binary: the `[prompt]` policy, the
//! append-only history, the composer and its property test.

mod compose;
mod defects;
mod hardening;
mod history;
mod lifecycle;
mod policy;
mod props;
mod support;
