//! `cacheline bench-live` (stub: to be written).

use std::io::Write;

use crate::Registry;

/// Arguments of `bench-live`.
#[derive(Debug, clap::Args)]
pub struct BenchLiveArgs {
    /// Number of turns.
    #[arg(long, default_value_t = 8)]
    pub turns: u64,
}

pub(crate) fn bench_live(
    _args: BenchLiveArgs,
    _registry: &Registry,
    _out: &mut dyn Write,
    _err: &mut dyn Write,
) -> Result<u8, Box<dyn std::error::Error>> {
    Err("bench-live is not written yet".into())
}
