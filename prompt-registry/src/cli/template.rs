//! `cacheline probe-template` (stub: to be written).

use std::io::Write;
use std::path::PathBuf;

/// Arguments of `probe-template`.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// The chat template file (Jinja).
    pub file: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn probe(
    _args: ProbeArgs,
    _out: &mut dyn Write,
    _err: &mut dyn Write,
) -> Result<u8, Box<dyn std::error::Error>> {
    Err("probe-template is not written yet".into())
}
