//! The subcommands. `status` and `check` are the facade's own (`prompt_registry::cli`), so
//! that an agent embedding them behaves as this binary does.

use std::error::Error;
use std::ffi::OsString;
use std::io::Write;

use clap::{Parser, Subcommand};
use prompt_reference::components::DEFAULT_AGENT_TOML;
use prompt_reference::scenario::ScenarioSize;
use prompt_registry::Registry;
use prompt_registry::cli::{self, App, DefaultConfig, RegistryCommand};

mod audit;
mod audit_bodies;
mod bench_fleet;
mod bench_live;
mod bench_stream;
mod demo;
mod evidence;
mod import;
mod probe_template;
mod proxy;
mod simulate;
mod simulate_fleet;

/// The built-in agent.toml, for the reference components.
pub(crate) const DEFAULT_CONFIG: DefaultConfig = DefaultConfig {
    name: "<built-in agent.toml>",
    text: DEFAULT_AGENT_TOML,
};

const APP: App = App::new("cacheline", env!("CARGO_PKG_VERSION"))
    .about("Where every prompt writer lands, and what the prompt cache keeps.")
    .with_default_config(DEFAULT_CONFIG);

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// `status` and `check`.
    #[command(flatten)]
    Registry(RegistryCommand),
    /// Play a scripted agent session over the reference components and show, per request,
    /// the bytes the prompt cache keeps, against the old replace-at-head composition.
    Demo(demo::DemoArgs),
    /// Simulate what each backend's cache rules serve, per composition strategy, on the
    /// scripted session (in tokens).
    Simulate(simulate::SimulateArgs),
    /// Simulate many sessions through a fleet of engine replicas behind a router: the share
    /// of prompt tokens each routing policy serves from the replicas' prefix caches.
    SimulateFleet(simulate_fleet::SimulateFleetArgs),
    /// Audit a log of chat requests (JSONL, or `-` for standard input): per-request cache
    /// reuse and what broke it; or, for a directory of request bodies of any API (or
    /// --guard), whether each body extends the one before.
    Audit(audit::AuditArgs),
    /// One request's verdict with its proof (first divergent byte, JSON-path diff, element
    /// hashes, gap, usage, agent), redacted: a Markdown report and its JSON for an upstream
    /// issue.
    Evidence(evidence::EvidenceArgs),
    /// Classify how a chat template treats appended system messages and choose a delivery.
    ProbeTemplate(probe_template::ProbeArgs),
    /// Measure cache reuse and time to first token on a live llama.cpp server, library vs
    /// replace-at-head.
    BenchLive(bench_live::BenchLiveArgs),
    /// Play several scripted sessions at once through the routers `scripts/fleet.sh` runs
    /// in front of llama-server replicas: per routing policy, what the replicas' caches serve.
    BenchFleet(bench_fleet::BenchFleetArgs),
    /// Run a byte-exact local proxy for the Anthropic, OpenAI and Gemini APIs that prints
    /// per request what broke the prompt cache (`-- CMD ARGS…`: run an agent through it).
    Proxy(proxy::ProxyArgs),
    /// Read the coding agents' own session stores (Claude Code, Codex, Gemini CLI, Qwen
    /// Code, opencode), read-only: per request, session, project and day, what the prompt
    /// cache read, wrote and cost, and where and why it broke.
    Import(import::ImportArgs),
}

/// Runs the command line `args` (program name first); returns the exit status. Output goes
/// through the facade's buffered standard streams, as an agent's own `status` does.
pub(crate) fn main(args: impl IntoIterator<Item = OsString>) -> u8 {
    cli::with_standard_output(|out, err| {
        let cli: Cli = match cli::parse(&APP, args, out, err) {
            Ok(cli) => cli,
            Err(code) => return code,
        };
        let result = run(cli.command, out, err);
        cli::finish(result, err)
    })
}

fn run(command: Command, out: &mut dyn Write, err: &mut dyn Write) -> Result<u8, Box<dyn Error>> {
    let registry = Registry::linked()?;
    match command {
        Command::Registry(command) => {
            let tools = ScenarioSize::Full.tools()?;
            command.run_with_tools(&registry, Some(DEFAULT_CONFIG), Some(&tools), out, err)
        }
        Command::Demo(args) => demo::run(&args, &registry, out, err),
        Command::Simulate(args) => simulate::run(&args, &registry, out, err),
        Command::SimulateFleet(args) => simulate_fleet::run(&args, &registry, out, err),
        Command::Audit(args) => audit::run(&args, out, err),
        Command::Evidence(args) => evidence::run(&args, out, err),
        Command::ProbeTemplate(args) => probe_template::run(&args, out, err),
        Command::BenchLive(args) => bench_live::run(&args, &registry, out, err),
        Command::BenchFleet(args) => bench_fleet::run(&args, &registry, out, err),
        Command::Proxy(args) => proxy::run(&args, out, err),
        Command::Import(args) => import::run(&args, out, err),
    }
}
