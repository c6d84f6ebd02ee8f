//! Cross-crate scenarios, as one test binary: the scripted session measured by the
//! simulator, and the live suite against a real llama.cpp server.

mod live_llama;
mod scenario;
