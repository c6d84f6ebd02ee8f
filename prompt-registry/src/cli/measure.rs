//! `cacheline simulate` and `cacheline audit` (stubs: to be written).

use std::io::Write;
use std::path::PathBuf;

use crate::Registry;

/// Arguments of `simulate`.
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Number of turns of the scripted session.
    #[arg(long, default_value_t = 40)]
    pub turns: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// JSONL file: one chat request body (or {"request", "response"}) per line.
    pub file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn simulate(
    _args: SimulateArgs,
    _registry: &Registry,
    _out: &mut dyn Write,
    _err: &mut dyn Write,
) -> Result<u8, Box<dyn std::error::Error>> {
    Err("simulate is not written yet".into())
}

pub(crate) fn audit(
    _args: AuditArgs,
    _out: &mut dyn Write,
    _err: &mut dyn Write,
) -> Result<u8, Box<dyn std::error::Error>> {
    Err("audit is not written yet".into())
}
