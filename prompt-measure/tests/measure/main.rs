//! prompt-measure's integration tests, as one test binary: the usage meter, the
//! provider-rule simulator and the request-log audit.

mod audit;
mod meter;
mod sim;
