//! prompt-measure's integration tests, as one test binary: the usage meter, the
//! provider-rule simulator and the request-log audit (streamed replies included).

mod audit;
mod audit_stream;
mod catalogue;
mod engine;
mod evidence;
/// The engine tests' reader of a change's `json_path`, shared rather than copied.
#[path = "../../../prompt-engine/tests/engine/json_path.rs"]
mod json_path;
mod lifetime;
mod meter;
mod provider_verdict;
mod sim;
