//! `cacheline bench-live`: the scripted session (`prompt_reference::scenario`, compact
//! size) on a live llama.cpp server, library vs replace-at-head, and optionally the
//! system-update compliance probe.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use prompt_llama::bench::{self, ComposedTurn};
use prompt_llama::{LlamaClient, ServerLocation, locate_server, probe};
use prompt_reference::scenario::ScenarioSize;
use prompt_registry::Registry;
use prompt_registry::cli;

use super::DEFAULT_CONFIG;

/// Arguments of `bench-live`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchLiveArgs {
    /// Number of turns.
    #[arg(long, default_value_t = 8)]
    turns: u64,
    /// Server base URL (default: $CACHELINE_LLAMA_URL, else the file written by
    /// `scripts/llama-server.sh start`).
    #[arg(long)]
    url: Option<String>,
    /// agent.toml to use (default: the built-in one for the reference components).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Tokens generated per request.
    #[arg(long, default_value_t = 4)]
    max_tokens: u32,
    /// Uncached warm-up requests before measuring.
    #[arg(long, default_value_t = 1)]
    warmup: u32,
    /// Also run the system-update compliance probe and print its table.
    #[arg(long)]
    probe: bool,
    /// With --probe: print every probe reply.
    #[arg(long, requires = "probe")]
    replies: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Instead of the library-against-replace-at-head table: the session through the wire's
    /// bodies with `"stream": true`, every reply streamed through the async client and
    /// recorded, one table per endpoint.
    #[arg(long, conflicts_with = "probe")]
    stream: bool,
    /// With --stream: the endpoints (default: all three).
    #[arg(long, value_enum, value_delimiter = ',', requires = "stream")]
    api: Vec<super::bench_stream::StreamApi>,
}

/// The size of the scripted session on a live server: small enough for SmolLM2-135M's
/// context and CPU speed (8 turns stay under 3k tokens).
pub(crate) const SIZE: ScenarioSize = ScenarioSize::Compact;

pub(crate) fn run(
    args: &BenchLiveArgs,
    registry: &Registry,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    let url = match &args.url {
        Some(url) => url.clone(),
        None => match locate_server()? {
            ServerLocation::Found { url, .. } => url,
            ServerLocation::Absent { reason } => {
                writeln!(err, "error: no llama.cpp server: {reason}; or pass --url")?;
                return Ok(2);
            }
        },
    };
    let Some(policy) =
        cli::load_policy(args.config.as_deref(), registry, Some(DEFAULT_CONFIG), err)?
    else {
        return Ok(2);
    };
    let client = LlamaClient::new(url);
    client.health()?;
    if args.stream {
        use super::bench_stream::{self, StreamApi};
        let apis = if args.api.is_empty() {
            vec![StreamApi::Chat, StreamApi::Responses, StreamApi::Messages]
        } else {
            args.api.clone()
        };
        let sessions = bench_stream::run(
            &client,
            registry,
            &policy,
            &apis,
            args.turns,
            args.max_tokens,
        )?;
        if args.json {
            writeln!(out, "{}", serde_json::to_string_pretty(&sessions)?)?;
        } else {
            writeln!(out, "llama-server: {}", client.base_url())?;
            bench_stream::write_tables(&sessions, out)?;
        }
        return Ok(0);
    }
    let script: Vec<ComposedTurn> = SIZE
        .paired(registry, &policy, args.turns)?
        .into_iter()
        .map(|t| ComposedTurn {
            turn: t.turn,
            label: t.label,
            events: t.events,
            library: t.library,
            head: t.head,
        })
        .collect();
    let bar = crate::output::progress(
        (script.len() * 2) as u64,
        "{spinner} {pos}/{len} requests on the server {wide_bar}",
    );
    let report = bench::run_with_progress(
        &client,
        script,
        bench::BenchOptions::default()
            .with_max_tokens(args.max_tokens)
            .with_warmup(args.warmup),
        |n| bar.set_position(n as u64),
    )?;
    bar.finish_and_clear();
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
