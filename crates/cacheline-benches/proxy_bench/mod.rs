//! The proxy benchmark of issue 24 (`proxy-bench`): the workspace's scripted upstream
//! ([`cacheline_upstream::provider`]), an [open-loop load driver](driver) and the
//! [results and their table](report). The `proxy-bench`
//! binary and `scripts/bench-proxy.sh` run them against the upstream directly and through each
//! proxy; docs/benchmarks.md has the table.

pub mod driver;
pub mod report;
