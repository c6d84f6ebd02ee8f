//! `cacheline simulate-fleet`: the scripted session's request lengths, played by many
//! sessions through R replicas under each routing policy.

use std::error::Error;
use std::io::Write;
use std::time::Instant;

use prompt_measure::fleet::{FleetConfig, FleetReport, Policy, SessionShape, simulate_fleet};
use prompt_measure::{O200kBase, TokenCache};
use prompt_reference::scenario::{self, ScenarioSize};
use prompt_registry::Registry;
use serde::Serialize;

use crate::output::{pct, progress, thousands};

/// Arguments of `simulate-fleet`.
#[derive(Debug, clap::Args)]
pub(crate) struct SimulateFleetArgs {
    /// Replica counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "2,8,64,512")]
    replicas: Vec<usize>,
    /// Concurrent session counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10,1000,100000")]
    sessions: Vec<usize>,
    /// Agents (distinct frozen prefixes) the sessions belong to.
    #[arg(long, default_value_t = 4)]
    agents: usize,
    /// KV-cache capacity per replica, in tokens.
    #[arg(long, default_value_t = 1_000_000)]
    capacity: u64,
    /// Tokens per cache block.
    #[arg(long, default_value_t = 512)]
    block: u64,
    /// Turns of the scripted session a session may play (its requests: turns and
    /// continuations).
    #[arg(long, default_value_t = 24)]
    turns: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One cell of the grid.
#[derive(Debug, Serialize)]
struct Cell {
    #[serde(flatten)]
    report: FleetReport,
    seconds: f64,
}

/// The scripted session's library requests as the simulator needs them: prompt tokens per
/// request (o200k_base), the prefix's tokens, the epoch of each request and the tokens it
/// shares with the request before.
fn shape(registry: &Registry, turns: u64) -> Result<SessionShape, Box<dyn Error>> {
    let tokenizer = O200kBase::shared()?;
    let mut cache = TokenCache::new(tokenizer, 1 << 22);
    let requests = scenario::compose(scenario::Strategy::Cacheline, registry, turns)?;
    let policy = scenario::default_policy(registry)?;
    let mut epochs = Vec::new();
    ScenarioSize::Full.run_cacheline(registry, &policy, turns, |_, request| {
        epochs.push(u32::try_from(request.epoch()).unwrap_or(u32::MAX));
        Ok(())
    })?;
    let mut prefix_tokens = 0;
    let mut lengths = Vec::with_capacity(requests.len());
    let mut shared = Vec::with_capacity(requests.len());
    let mut previous = None;
    for r in &requests {
        let texts: Vec<&str> = r.messages.iter().map(String::as_str).collect();
        let tokenized = cache.request(&texts, Vec::new());
        if prefix_tokens == 0 {
            prefix_tokens = tokenized.messages().first().map_or(0, |m| m.len() as u64);
        }
        lengths.push(tokenized.len() as u64);
        // What it shares with the request before: up to the previous tail.
        shared.push(
            previous
                .as_ref()
                .map_or(0, |p| tokenized.common_prefix(p).tokens as u64),
        );
        previous = Some(tokenized);
    }
    Ok(SessionShape {
        prefix_tokens,
        requests: lengths,
        epochs,
        shared,
    })
}

pub(crate) fn run(
    args: &SimulateFleetArgs,
    registry: &Registry,
    out: &mut dyn Write,
    _err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    let shape = shape(registry, args.turns)?;
    let policies = [
        Policy::RoundRobin,
        Policy::LeastLoaded,
        Policy::SessionHash,
        Policy::PrefixHash,
        Policy::LibraryKey,
        Policy::Oracle,
    ];
    let total = (args.replicas.len() * args.sessions.len() * policies.len()) as u64;
    let bar = progress(
        total,
        "{spinner} {pos}/{len} fleet simulations {wide_bar} {elapsed}",
    );
    let mut cells = Vec::new();
    for &sessions in &args.sessions {
        for &replicas in &args.replicas {
            for policy in policies {
                // Sessions arrive over an hour-like window; a request every ~20 s.
                let config = FleetConfig::default()
                    .with_replicas(replicas)
                    .with_sessions(sessions)
                    .with_agents(args.agents)
                    .with_capacity_tokens(args.capacity)
                    .with_block_tokens(args.block)
                    .with_arrival_spread(3_600_000)
                    .with_think_time(20_000);
                let started = Instant::now();
                let report = simulate_fleet(&shape, &config, policy);
                cells.push(Cell {
                    report,
                    seconds: started.elapsed().as_secs_f64(),
                });
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    if args.json {
        let value = serde_json::json!({
            "shape": {"prefix_tokens": shape.prefix_tokens, "requests": shape.requests.len(),
                      "largest_request": shape.requests.iter().max()},
            "agents": args.agents, "capacity": args.capacity, "block": args.block,
            "cells": cells,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
        return Ok(0);
    }
    writeln!(
        out,
        "cacheline simulate-fleet: sessions of the scripted session ({} requests, prefix {} tokens), {} agents, {} tokens of KV cache per replica, {}-token blocks",
        shape.requests.len(),
        thousands(shape.prefix_tokens),
        args.agents,
        thousands(args.capacity),
        args.block
    )?;
    writeln!(
        out,
        "cached = prompt tokens served from a replica's cache; imbalance = most requests on one replica / mean\n"
    )?;
    writeln!(
        out,
        "{:>8} {:>8}  {:<14} {:>7} {:>16} {:>9} {:>8}",
        "sessions", "replicas", "policy", "cached", "re-processed", "imbalance", "seconds"
    )?;
    for cell in &cells {
        let r = &cell.report;
        writeln!(
            out,
            "{:>8} {:>8}  {:<14} {:>7} {:>16} {:>9.2} {:>8.2}",
            thousands(r.sessions as u64),
            r.replicas,
            r.policy,
            pct(r.cached_share),
            thousands(r.reprocessed),
            r.imbalance,
            cell.seconds
        )?;
    }
    Ok(0)
}
