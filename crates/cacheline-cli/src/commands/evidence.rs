//! `cacheline evidence LOG --request N`: one request's verdict with its proof, as a Markdown
//! report and its JSON, redacted, to attach to an upstream issue. The analysis is
//! [`prompt_measure::evidence`], the two printers [`prompt_measure::report`]'s; this is the
//! command line around them.

use std::error::Error;
use std::io::{BufReader, Write};
use std::path::PathBuf;

use prompt_core::input;
use prompt_measure::audit::DEFAULT_MAX_LINE_BYTES;
use prompt_measure::evidence::{EvidenceRequest, Producer, collect};
use prompt_measure::report::{evidence_json, evidence_markdown};
use prompt_measure::{AuditConfig, Auditor, O200kBase};

/// Arguments of `evidence`.
#[derive(Debug, clap::Args)]
pub(crate) struct EvidenceArgs {
    /// JSONL log as `cacheline audit` reads it (a file, not `-`: it is read twice).
    file: PathBuf,
    /// The request: its line in the log, from 1, as `cacheline audit` numbers lines (blank
    /// and skipped lines count).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    request: u64,
    /// Directory the report is written to, as evidence-line-N.md and evidence-line-N.json
    /// (default: the current directory).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Print the JSON on standard output instead of writing the files.
    #[arg(long, conflicts_with_all = ["out", "stdout"])]
    json: bool,
    /// Print the Markdown on standard output instead of writing the files.
    #[arg(long, conflicts_with = "out")]
    stdout: bool,
    /// Replace the letters and digits of the excerpts with x and 0 (JSON punctuation kept):
    /// the structure shows, the content does not.
    #[arg(long)]
    redact_text: bool,
    /// JSON file overriding price multipliers, as `audit --prices`.
    #[arg(long)]
    prices: Option<PathBuf>,
    /// Earlier requests compared exactly with each new one, as `audit --window`.
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// Anthropic's per-model minimum cacheable prefix, in tokens, as `audit`.
    #[arg(long, default_value_t = 1024)]
    anthropic_min_tokens: usize,
    /// Longest line read, in bytes (default 32 MiB), as `audit --max-line-bytes`.
    #[arg(long, default_value_t = DEFAULT_MAX_LINE_BYTES, value_name = "N")]
    max_line_bytes: usize,
}

/// Why the command wrote nothing, besides the analysis' own errors.
#[derive(Debug, thiserror::Error)]
enum CommandError {
    /// Standard input was named: the log is read twice.
    #[error("{0}: evidence reads the log twice: give a file, not standard input")]
    Stdin(PathBuf),
    /// A report file could not be written.
    #[error("{path}: cannot write: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The command line that produces this report (the options that change it).
fn command_of(a: &EvidenceArgs) -> String {
    let command = format!(
        "cacheline evidence {} --request {}",
        a.file.display(),
        a.request
    );
    [
        a.redact_text.then(|| " --redact-text".to_owned()),
        a.prices
            .as_ref()
            .map(|p| format!(" --prices {}", p.display())),
        (a.window != 32).then(|| format!(" --window {}", a.window)),
        (a.anthropic_min_tokens != 1024)
            .then(|| format!(" --anthropic-min-tokens {}", a.anthropic_min_tokens)),
        (a.max_line_bytes != DEFAULT_MAX_LINE_BYTES)
            .then(|| format!(" --max-line-bytes {}", a.max_line_bytes)),
    ]
    .into_iter()
    .flatten()
    .fold(command, |command, option| command + &option)
}

pub(crate) fn run(
    args: &EvidenceArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    if args.file.as_os_str() == "-" {
        return Err(CommandError::Stdin(args.file.clone()).into());
    }
    let Some(prices) = crate::output::load_prices(args.prices.as_deref(), err) else {
        return Ok(2);
    };
    let mut config = AuditConfig::default()
        .with_prices(prices)
        .with_max_line_bytes(args.max_line_bytes);
    config.sim.window = args.window.max(1);
    config.sim.anthropic.min_tokens = args.anthropic_min_tokens;
    let mut auditor = Auditor::new(O200kBase::shared()?, config);
    let request = EvidenceRequest {
        log: args.file.clone(),
        line: args.request,
        redact_text: args.redact_text,
        produced_by: Producer {
            cacheline: format!("cacheline {}", env!("CARGO_PKG_VERSION")),
            command: command_of(args),
        },
    };
    let evidence = collect(&request, &mut auditor, || {
        input::open(&args.file).map(|log| BufReader::with_capacity(1 << 20, log))
    })?;
    let json = evidence_json(&evidence)?;
    if args.json {
        out.write_all(json.as_bytes())?;
        return Ok(0);
    }
    let markdown = evidence_markdown(&evidence);
    if args.stdout {
        out.write_all(markdown.as_bytes())?;
        return Ok(0);
    }
    let dir = args.out.clone().unwrap_or_else(|| PathBuf::from("."));
    for (ext, text) in [("md", &markdown), ("json", &json)] {
        let path = dir.join(format!("evidence-line-{}.{ext}", evidence.line));
        std::fs::write(&path, text).map_err(|source| CommandError::Write {
            path: path.clone(),
            source,
        })?;
        writeln!(out, "{}", path.display())?;
    }
    Ok(0)
}
