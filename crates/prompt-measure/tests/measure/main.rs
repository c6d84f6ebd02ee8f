//! prompt-measure's integration tests, as one test binary: the usage meter, the
//! provider-rule simulator and the request-log audit (streamed replies included).

mod audit;
mod audit_stream;
mod catalogue;
mod engine;
mod evidence;
mod lifetime;
mod meter;
mod provider_verdict;
mod sim;
