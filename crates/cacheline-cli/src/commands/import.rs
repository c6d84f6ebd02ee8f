//! `cacheline import`: the agents' own session stores, read-only, judged request by request
//! (`cacheline_import`).

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use cacheline_import::{Agent, Options, Pricing, discover, import, time};

use crate::output::{load_audit_prices, progress};

/// Arguments of `import`.
#[derive(Debug, clap::Args)]
pub(crate) struct ImportArgs {
    /// Session files or folders to read (default: the stores under the home).
    paths: Vec<PathBuf>,
    /// Read the stores under this home instead of the current user's (a backup, a copy).
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Only this agent's stores (claude-code, codex, gemini-cli, qwen-code, opencode);
    /// repeat for several.
    #[arg(long = "agent", value_name = "NAME", value_parser = parse_agent)]
    agents: Vec<Agent>,
    /// Only requests on or after this day (YYYY-MM-DD, UTC) or time (ISO-8601).
    #[arg(long, value_name = "DATE", value_parser = parse_since)]
    since: Option<f64>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also write the report as one self-contained HTML page.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Sessions listed in the text report.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// JSON file of prices, as `cacheline audit --prices` reads it.
    #[arg(long)]
    prices: Option<PathBuf>,
}

fn parse_agent(s: &str) -> Result<Agent, String> {
    Agent::from_name(s).ok_or_else(|| {
        format!("unknown agent {s:?}: claude-code, codex, gemini-cli, qwen-code or opencode")
    })
}

fn parse_since(s: &str) -> Result<f64, String> {
    time::parse_iso(s).ok_or_else(|| format!("not a date: {s:?} (YYYY-MM-DD)"))
}

/// Runs `import`.
pub(crate) fn run(
    args: &ImportArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    let Some((table, usd)) = load_audit_prices(args.prices.as_deref(), err) else {
        return Ok(2);
    };
    let mut sources = Vec::new();
    for path in &args.paths {
        match discover::at_path(path, &args.agents) {
            Ok(found) => sources.extend(found),
            Err(e) => {
                writeln!(err, "error: {}", cacheline_import::error::chain(&e))?;
                return Ok(2);
            }
        }
    }
    if args.paths.is_empty() || args.home.is_some() {
        let home = match (&args.home, std::env::var_os("HOME")) {
            (Some(home), _) => home.clone(),
            (None, Some(home)) => PathBuf::from(home),
            (None, None) => {
                writeln!(err, "error: no HOME; name one with --home DIR")?;
                return Ok(2);
            }
        };
        if !home.is_dir() {
            writeln!(err, "error: {}: not a folder", home.display())?;
            return Ok(2);
        }
        sources.extend(discover::in_home(&home, &args.agents));
    }
    let options = Options {
        since: args.since,
        pricing: Pricing { table, usd },
        ..Options::default()
    };
    let total = sources.iter().map(|s| s.bytes).sum();
    let bar = progress(
        total,
        "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} {msg}",
    );
    let report = import(&sources, &options, &mut |p| bar.set_position(p.bytes));
    bar.finish_and_clear();
    if let Some(path) = &args.html {
        std::fs::write(path, cacheline_import::html::page(&report))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    if args.json {
        serde_json::to_writer_pretty(&mut *out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", report.text(args.top))?;
    }
    Ok(0)
}
