//! The `cacheline` command line, callable by any application over its own registry.
//!
//! ```no_run
//! // In an agent's own binary: `my-agent status --config agent.toml` for its writers.
//! fn main() -> std::process::ExitCode {
//!     prompt_registry::cli::run(std::env::args_os())
//! }
//! ```

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use prompt_core::{PolicyErrors, PromptPolicy};

use crate::Registry;

#[cfg(feature = "live")]
mod live;
#[cfg(feature = "measure")]
mod measure;
#[cfg(feature = "templates")]
mod template;

/// The command line.
#[derive(Debug, Parser)]
#[command(
    name = "cacheline",
    version,
    about = "Where every prompt writer lands, and why."
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show every registered prompt component, where it lands and why.
    Status {
        /// agent.toml to read the `[prompt]` section from (default: the built-in one, if any,
        /// else an empty policy: everything in the tail).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Validate an agent.toml's `[prompt]` section. Exit 0 clean, 1 warnings with --strict,
    /// 2 errors.
    Check {
        /// The agent.toml to check.
        #[arg(long)]
        config: PathBuf,
        /// Treat warnings (a glob that matches nothing) as failures.
        #[arg(long)]
        strict: bool,
    },
    /// Run a scripted session over the reference components and show what each turn reuses.
    #[cfg(feature = "reference")]
    Demo {
        /// agent.toml to use (default: the built-in one).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Number of turns.
        #[arg(long, default_value_t = 12)]
        turns: u64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Simulate what each backend's cache rules serve, per strategy, on a scripted session.
    #[cfg(feature = "measure")]
    Simulate(measure::SimulateArgs),
    /// Audit a JSONL log of chat requests: per-request cache reuse and what broke it.
    #[cfg(feature = "measure")]
    Audit(measure::AuditArgs),
    /// Classify how a chat template treats appended system messages and choose a delivery.
    #[cfg(feature = "templates")]
    ProbeTemplate(template::ProbeArgs),
    /// Measure cache reuse and TTFT on a live llama.cpp server, library vs replace-at-head.
    #[cfg(feature = "live")]
    BenchLive(live::BenchLiveArgs),
}

/// A built-in agent.toml, used when `--config` is absent.
#[derive(Debug, Clone, Copy)]
pub struct DefaultConfig {
    /// The name shown in messages, e.g. `<built-in agent.toml>`.
    pub name: &'static str,
    /// The TOML text.
    pub text: &'static str,
}

/// Parses `args` (program name first) and runs over every component linked into this
/// binary, with no built-in agent.toml.
pub fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let registry = match Registry::linked() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let code = run_with(
        args,
        &registry,
        None,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    );
    ExitCode::from(code)
}

/// Parses `args` and runs over `registry`, writing to `out` and `err`; returns the exit code.
pub fn run_with<I, T>(
    args: I,
    registry: &Registry,
    default_config: Option<DefaultConfig>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let text = e.render().to_string();
            let _ = if e.use_stderr() {
                err.write_all(text.as_bytes())
            } else {
                out.write_all(text.as_bytes())
            };
            return code;
        }
    };
    match execute(cli.command, registry, default_config, out, err) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "error: {e}");
            2
        }
    }
}

/// Reads the config (or the default) and loads the policy; errors are printed one per line.
fn policy_for(
    config: Option<&PathBuf>,
    registry: &Registry,
    default_config: Option<DefaultConfig>,
    err: &mut dyn Write,
) -> Result<Option<PromptPolicy>, std::io::Error> {
    let (name, text) = match (config, default_config) {
        (Some(path), _) => match std::fs::read_to_string(path) {
            Ok(text) => (path.display().to_string(), text),
            Err(e) => {
                writeln!(err, "{}: cannot read: {e}", path.display())?;
                return Ok(None);
            }
        },
        (None, Some(d)) => (d.name.to_owned(), d.text.to_owned()),
        (None, None) => return Ok(Some(PromptPolicy::default())),
    };
    match registry.load_policy(&text, &name) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                writeln!(err, "{}: warning: {}", w.position, w.problem)?;
            }
            Ok(Some(loaded.policy))
        }
        Err(PolicyErrors(errors)) => {
            for e in &errors {
                writeln!(err, "{e}")?;
            }
            Ok(None)
        }
    }
}

fn execute(
    command: Command,
    registry: &Registry,
    default_config: Option<DefaultConfig>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn std::error::Error>> {
    match command {
        Command::Status { config, json } => {
            let Some(policy) = policy_for(config.as_ref(), registry, default_config, err)? else {
                return Ok(2);
            };
            let report = registry.status(&policy);
            if json {
                writeln!(out, "{}", report.to_json())?;
            } else {
                writeln!(out, "{report}")?;
            }
            Ok(0)
        }
        Command::Check { config, strict } => {
            let text = match std::fs::read_to_string(&config) {
                Ok(t) => t,
                Err(e) => {
                    writeln!(err, "{}: cannot read: {e}", config.display())?;
                    return Ok(2);
                }
            };
            let name = config.display().to_string();
            match registry.load_policy(&text, &name) {
                Err(PolicyErrors(errors)) => {
                    for e in &errors {
                        writeln!(err, "{e}")?;
                    }
                    writeln!(
                        err,
                        "{name}: {} error(s); nothing is promoted",
                        errors.len()
                    )?;
                    Ok(2)
                }
                Ok(loaded) => {
                    for w in &loaded.warnings {
                        writeln!(err, "{}: warning: {}", w.position, w.problem)?;
                    }
                    let report = registry.status(&loaded.policy);
                    let prefix = report
                        .prompt
                        .components
                        .iter()
                        .filter(|c| c.placement == prompt_core::Placement::Prefix)
                        .count();
                    writeln!(
                        out,
                        "{name}: ok, {} warning(s); {} components, {prefix} in the prefix",
                        loaded.warnings.len(),
                        report.prompt.components.len()
                    )?;
                    Ok(if strict && !loaded.warnings.is_empty() {
                        1
                    } else {
                        0
                    })
                }
            }
        }
        #[cfg(feature = "reference")]
        Command::Demo {
            config,
            turns,
            json,
        } => {
            let Some(policy) = policy_for(config.as_ref(), registry, default_config, err)? else {
                return Ok(2);
            };
            let report = crate::demo::run(registry, &policy, turns)?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
            } else {
                print_demo(&report, out)?;
            }
            Ok(0)
        }
        #[cfg(feature = "measure")]
        Command::Simulate(args) => measure::simulate(args, registry, out, err),
        #[cfg(feature = "measure")]
        Command::Audit(args) => measure::audit(args, out, err),
        #[cfg(feature = "templates")]
        Command::ProbeTemplate(args) => template::probe(args, out, err),
        #[cfg(feature = "live")]
        Command::BenchLive(args) => live::bench_live(args, registry, out, err),
    }
}

#[cfg(feature = "reference")]
fn print_demo(turns: &[crate::demo::DemoTurn], out: &mut dyn Write) -> std::io::Result<()> {
    let pct = |part: usize, whole: usize| {
        if whole == 0 {
            0.0
        } else {
            100.0 * part as f64 / whole as f64
        }
    };
    writeln!(
        out,
        "turn  request B  reused B  reused %  | replace-at-head: request B  reused B  reused %"
    )?;
    let (mut sent, mut reused, mut head_sent, mut head_reused) = (0, 0, 0, 0);
    for t in turns {
        writeln!(
            out,
            "{:>4}  {:>9}  {:>8}  {:>7.1}%  | {:>27}  {:>8}  {:>7.1}%",
            t.turn,
            t.request_bytes,
            t.reused_bytes,
            pct(t.reused_bytes, t.request_bytes),
            t.head_rewrite_bytes,
            t.head_rewrite_reused,
            pct(t.head_rewrite_reused, t.head_rewrite_bytes)
        )?;
        if !t.events.is_empty() {
            writeln!(out, "      events: {}", t.events.join("; "))?;
        }
        for a in &t.appended {
            writeln!(
                out,
                "      + {} ({:?}, {} B): {}",
                a.producer, a.kind, a.bytes, a.why
            )?;
        }
        if !t.ephemeral.is_empty() {
            writeln!(
                out,
                "      ephemeral (this request only): {}",
                t.ephemeral.join(", ")
            )?;
        }
        sent += t.request_bytes;
        reused += t.reused_bytes;
        head_sent += t.head_rewrite_bytes;
        head_reused += t.head_rewrite_reused;
    }
    writeln!(
        out,
        "total: cacheline reused {reused} of {sent} B ({:.1}%); replace-at-head reused {head_reused} of {head_sent} B ({:.1}%)",
        pct(reused, sent),
        pct(head_reused, head_sent)
    )?;
    if let Some(first) = turns.first() {
        writeln!(
            out,
            "prefix fingerprint (prompt_cache_key): {}",
            first.fingerprint
        )?;
    }
    Ok(())
}
