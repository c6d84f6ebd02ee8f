//! prompt-core's integration tests, as one test binary: the `[prompt]` policy, the
//! append-only history, the composer and its property test, the prefix lock.

mod branch;
mod cleared;
mod compose;
mod defects;
mod document_props;
mod hardening;
mod history;
mod lifecycle;
mod lock;
mod pairing_props;
mod policy;
mod props;
mod restore;
mod support;
