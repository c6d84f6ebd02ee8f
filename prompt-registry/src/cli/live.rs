//! `cacheline bench-live`: the scripted session ([`crate::scenario`], compact size) on a
//! live llama.cpp server, library vs replace-at-head, and optionally the system-update
//! compliance probe.

use std::io::Write;
use std::path::PathBuf;

use crate::Registry;
use crate::live::{LlamaClient, ServerLocation, bench, locate_server, probe};
use crate::reference::DEFAULT_AGENT_TOML;

/// Arguments of `bench-live`.
#[derive(Debug, clap::Args)]
pub struct BenchLiveArgs {
    /// Number of turns.
    #[arg(long, default_value_t = 8)]
    pub turns: u64,
    /// Server base URL (default: $CACHELINE_LLAMA_URL, else the file written by
    /// `scripts/llama-server.sh start`).
    #[arg(long)]
    pub url: Option<String>,
    /// agent.toml to use (default: the built-in one for the reference components).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Tokens generated per request.
    #[arg(long, default_value_t = 4)]
    pub max_tokens: u32,
    /// Uncached warm-up requests before measuring.
    #[arg(long, default_value_t = 1)]
    pub warmup: u32,
    /// Also run the system-update compliance probe and print its table.
    #[arg(long)]
    pub probe: bool,
    /// With --probe: print every probe reply.
    #[arg(long)]
    pub replies: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn bench_live(
    args: BenchLiveArgs,
    registry: &Registry,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn std::error::Error>> {
    let url = match args.url {
        Some(url) => url,
        None => match locate_server()? {
            ServerLocation::Found { url, .. } => url,
            ServerLocation::Absent { reason } => {
                writeln!(err, "no llama.cpp server: {reason}; or pass --url")?;
                return Ok(2);
            }
        },
    };
    let (name, text) = match &args.config {
        Some(path) => (path.display().to_string(), std::fs::read_to_string(path)?),
        None => (
            "<built-in agent.toml>".to_owned(),
            DEFAULT_AGENT_TOML.to_owned(),
        ),
    };
    let policy = match registry.load_policy(&text, &name) {
        Ok(loaded) => loaded.policy,
        Err(errors) => {
            writeln!(err, "{errors}")?;
            return Ok(2);
        }
    };
    let client = LlamaClient::new(url);
    client.health()?;
    let report = bench::run(
        &client,
        registry,
        &policy,
        bench::BenchOptions {
            turns: args.turns,
            max_tokens: args.max_tokens,
            warmup: args.warmup,
        },
    )?;
    let table = if args.probe {
        Some(probe::run(&client, probe::MAX_TOKENS)?)
    } else {
        None
    };
    if args.json {
        let value = serde_json::json!({"bench": report, "probe": table});
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
        return Ok(0);
    }
    report.write_table(out)?;
    writeln!(
        out,
        "re-processed = timings.prompt_n; reused = timings.cache_n; new = tokens not in the previous request of the same arm; prompt ms = timings.prompt_ms; TTFT = client wall time to the first streamed chunk."
    )?;
    if let Some(table) = table {
        writeln!(out)?;
        writeln!(
            out,
            "system-update compliance (\"{}\" asked after {:?} exchanges; followed = reply names Zorblax):",
            probe::UPDATE_SENTENCE,
            probe::HISTORIES
        )?;
        table.write_table(out, args.replies)?;
    }
    Ok(0)
}
