//! Cross-crate scenarios, as one test binary: the scripted session as every strategy
//! composes it, the live suite against a real llama.cpp server, and the checks that keep
//! README.md and docs/ true.

mod credentials;
mod docs;
mod layout;
mod live_fleet;
mod live_instances;
mod live_llama;
mod live_stream;
mod live_wire;
mod packaging;
mod scenario;
