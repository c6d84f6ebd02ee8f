//! Audit throughput (to be written).
fn main() {}
