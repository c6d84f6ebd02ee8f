//! `cacheline bench-fleet`: the scripted session played by several users at once through
//! the routers `scripts/fleet.sh start N` runs in front of N llama-server replicas, once per
//! router; per routing policy, the share of prompt tokens served from the replicas' caches,
//! re-processed tokens against the limit, and requests per replica. Then the fleet simulator
//! on the same sessions, for comparison.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use prompt_llama::LlamaClient;
use prompt_llama::fleet::{self, FleetSession, PolicyReport, Router};
use prompt_measure::fleet::{FleetConfig, Policy, SessionShape, simulate_fleet_in_order};
use prompt_reference::scenario;
use prompt_registry::Registry;
use prompt_registry::cli;
use prompt_registry::wire::DEFAULT_ROUTING_HEADER;
use serde::{Deserialize, Serialize};

use super::DEFAULT_CONFIG;
use super::bench_live::SIZE;

/// Arguments of `bench-fleet`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchFleetArgs {
    /// Concurrent sessions (users of one agent). llama.cpp keeps one conversation per
    /// replica here (docs/fleet.md), so more sessions than replicas evict each other.
    #[arg(long, default_value_t = 2)]
    sessions: usize,
    /// Turns of the scripted session each plays.
    #[arg(long, default_value_t = 6)]
    turns: u64,
    /// Routers to play through, by policy; each sends the library's routing key only to
    /// `manual` (sglang-router's policy that pins by it).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "manual,round_robin,cache_aware"
    )]
    policies: Vec<String>,
    /// Where `scripts/fleet.sh` keeps the routers' and replicas' URLs (default: `fleet/`
    /// in the cache directory).
    #[arg(long)]
    fleet_dir: Option<PathBuf>,
    /// The header the routing key goes in.
    #[arg(long, default_value = DEFAULT_ROUTING_HEADER)]
    routing_header: String,
    /// Seed of the order the sessions' requests are interleaved in (the same for every
    /// router).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// agent.toml to use (default: the built-in one for the reference components).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Read a run this command printed with --json instead of playing one, and report it
    /// (tables and the simulator's figures) again.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
}

/// The most `--replay` reads: a report of a few thousand requests is well under it.
const REPORT_LIMIT: u64 = 64 << 20;

/// What `--json` prints, and `--replay` reads back.
#[derive(Debug, Serialize, Deserialize)]
struct Recorded {
    replicas: usize,
    sessions: usize,
    turns: u64,
    seed: u64,
    policies: Vec<PolicyReport>,
    #[serde(default)]
    simulated: Vec<Simulated>,
}

/// The simulator's figures for the same sessions: each plays the live run's requests in the
/// live run's order (prompt tokens as the replicas counted them, and what each shares with
/// the one before),
/// on as many replicas, each with the cache a llama-server slot has: one conversation (the
/// largest prompt), in 16-token blocks.
#[derive(Debug, Serialize, Deserialize)]
struct Simulated {
    policy: String,
    cached_share: f64,
    imbalance: f64,
}

fn simulate(report: &PolicyReport, replicas: usize, sessions: usize) -> Vec<Simulated> {
    let first: Vec<u64> = report
        .requests
        .iter()
        .filter(|r| r.session == 0)
        .map(|r| r.prompt_tokens)
        .collect();
    // The shared prefix: what the first request of a later session found cached at best.
    let prefix = report
        .requests
        .iter()
        .filter(|r| r.label == "1" && r.session != 0)
        .map(|r| r.cached)
        .max()
        .unwrap_or(0);
    let shared: Vec<u64> = report
        .requests
        .iter()
        .filter(|r| r.session == 0)
        .map(|r| r.prompt_tokens.saturating_sub(r.new_tokens))
        .collect();
    let largest = first.iter().copied().max().unwrap_or(0);
    // The live run's order: each request as (session, its index in the session).
    let mut sent = vec![0usize; sessions];
    let order: Vec<(usize, usize)> = report
        .requests
        .iter()
        .filter(|r| r.session < sessions)
        .map(|r| {
            let k = sent[r.session];
            sent[r.session] += 1;
            (r.session, k)
        })
        .collect();
    let shape = SessionShape {
        prefix_tokens: prefix,
        epochs: vec![0; first.len()],
        requests: first.clone(),
        shared,
    };
    let config = FleetConfig::default()
        .with_replicas(replicas)
        .with_sessions(sessions)
        .with_capacity_tokens(largest.div_ceil(16) * 16)
        .with_one_conversation_per_replica(true)
        .with_block_tokens(16)
        .with_min_requests(first.len())
        .with_max_requests(first.len())
        .with_arrival_spread(1)
        .with_think_time(1_000_000);
    [Policy::LibraryKey, Policy::RoundRobin, Policy::Oracle]
        .into_iter()
        .map(|policy| {
            let r = simulate_fleet_in_order(&shape, &config, policy, &order);
            Simulated {
                policy: r.policy,
                cached_share: r.cached_share,
                imbalance: r.imbalance,
            }
        })
        .collect()
}

/// Plays the sessions through every router of the fleet; `None` after an error message
/// for the user (exit status 2).
fn play_fleet(
    args: &BenchFleetArgs,
    registry: &Registry,
    err: &mut dyn Write,
) -> Result<Option<Recorded>, Box<dyn Error>> {
    let Some(dir) = args.fleet_dir.clone().or_else(fleet::default_fleet_dir) else {
        writeln!(
            err,
            "error: no cache directory (HOME unset): pass --fleet-dir"
        )?;
        return Ok(None);
    };
    let Some(policy) =
        cli::load_policy(args.config.as_deref(), registry, Some(DEFAULT_CONFIG), err)?
    else {
        return Ok(None);
    };
    let url = |name: &str| {
        fleet::fleet_url(&dir, name).map_err(|e| {
            format!(
                "{} (start the fleet: scripts/fleet.sh start 2)",
                prompt_core::input::report(&e)
            )
        })
    };
    let tokenizer = LlamaClient::new(url("replica-1")?);
    tokenizer.health()?;
    let replicas = (1..)
        .take_while(|i| dir.join(format!("replica-{i}.url")).is_file())
        .count();
    let mut reports = Vec::new();
    for name in &args.policies {
        let router = Router {
            policy: name.clone(),
            client: LlamaClient::new(url(&format!("router-{name}"))?),
            routing_header: (name == "manual").then(|| args.routing_header.clone()),
        };
        router.client.health()?;
        // Each run its own users (sessions), so no run finds another's history cached.
        let bodies = scenario::fleet_sessions(
            SIZE,
            registry,
            &policy,
            &format!("bench-fleet-{name}-{}", args.seed),
            args.sessions,
            args.turns,
            4,
        )?;
        let sessions: Vec<FleetSession> = bodies
            .into_iter()
            .map(|s| FleetSession::new(s.routing_key, s.requests))
            .collect();
        let new = fleet::new_tokens(&tokenizer, &sessions)?;
        let total: usize = sessions.iter().map(|s| s.requests.len()).sum();
        let bar = crate::output::progress(
            total as u64,
            &format!("{{spinner}} {name}: {{pos}}/{{len}} requests {{wide_bar}} {{elapsed}}"),
        );
        let report = fleet::play(&router, &sessions, &new, args.seed, &mut |_| bar.inc(1))?;
        bar.finish_and_clear();
        reports.push(report);
    }
    Ok(Some(Recorded {
        replicas,
        sessions: args.sessions,
        turns: args.turns,
        seed: args.seed,
        policies: reports,
        simulated: Vec::new(),
    }))
}

pub(crate) fn run(
    args: &BenchFleetArgs,
    registry: &Registry,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    let mut recorded = match &args.replay {
        Some(path) => {
            let text = prompt_core::input::read_text(path, REPORT_LIMIT)?;
            serde_json::from_str::<Recorded>(&text)
                .map_err(|e| format!("{}: not a bench-fleet --json report: {e}", path.display()))?
        }
        None => match play_fleet(args, registry, err)? {
            Some(recorded) => recorded,
            None => return Ok(2),
        },
    };
    recorded.simulated = recorded
        .policies
        .first()
        .map(|r| simulate(r, recorded.replicas, recorded.sessions))
        .unwrap_or_default();
    let Recorded {
        replicas,
        sessions,
        turns,
        seed,
        policies: reports,
        simulated,
    } = &recorded;
    let (replicas, sessions, turns, seed) = (*replicas, *sessions, *turns, *seed);
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&recorded)?)?;
        return Ok(0);
    }
    writeln!(
        out,
        "cacheline bench-fleet: {} sessions x {} turns of the scripted session, interleaved (seed {}), through sglang-router to {replicas} llama-server replicas",
        sessions, turns, seed
    )?;
    writeln!(
        out,
        "cached = timings.cache_n / prompt tokens; re-processed/limit = timings.prompt_n against the new tokens, from each session's second request on; sessions = answered by one replica throughout\n"
    )?;
    fleet::write_table(reports, out)?;
    if !simulated.is_empty() {
        writeln!(
            out,
            "\nthe fleet simulator on these sessions ({replicas} replicas, each caching one conversation):"
        )?;
        for s in simulated {
            writeln!(
                out,
                "  {:<14} cached {:>5.1}%  imbalance {:.2}",
                s.policy,
                s.cached_share * 100.0,
                s.imbalance
            )?;
        }
    }
    Ok(0)
}
