//! `cacheline simulate`: the scripted session composed every way, replayed in tokens
//! through each backend's cache rules.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use prompt_measure::{Arm, O200kBase, RequestText, Rule, SimConfig, simulate_with_progress};
use prompt_reference::scenario::{self, McpArrival, Strategy};
use prompt_registry::Registry;

use crate::output::{load_prices, pct, progress, thousands};

/// Arguments of `simulate`.
#[derive(Debug, clap::Args)]
pub(crate) struct SimulateArgs {
    /// Number of turns of the scripted session.
    #[arg(long, default_value_t = 40)]
    turns: u64,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// JSON file overriding price multipliers, e.g. {"openai": {"read": 0.5}}.
    #[arg(long)]
    prices: Option<PathBuf>,
    /// Anthropic's per-model minimum cacheable prefix, in tokens.
    #[arg(long, default_value_t = 1024)]
    anthropic_min_tokens: usize,
    /// Also simulate a GitHub MCP server connecting before turn K, its tools and guidance
    /// taken in by a refresh at once (`mcp_refresh_now`) or announced in the tail and
    /// refreshed at the next compaction (`mcp_refresh_deferred`).
    #[arg(long, value_name = "K")]
    mcp_connects_at: Option<u64>,
}

pub(crate) fn run(
    args: &SimulateArgs,
    registry: &Registry,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    let Some(prices) = load_prices(args.prices.as_deref(), err) else {
        return Ok(2);
    };
    let mut config = SimConfig::unbounded();
    config.anthropic.min_tokens = args.anthropic_min_tokens;
    let tokenizer = O200kBase::shared()?;
    let mut composed: Vec<(String, Vec<scenario::ComposedRequest>)> =
        scenario::compose_all(registry, args.turns)?
            .into_iter()
            .map(|(strategy, requests)| (strategy.as_str().to_owned(), requests))
            .collect();
    if let Some(k) = args.mcp_connects_at {
        for arrival in [McpArrival::RefreshNow, McpArrival::DeferToCompaction] {
            let requests = scenario::compose_mcp_arrival(registry, args.turns, k, arrival)?;
            composed.push((arrival.as_str().to_owned(), requests));
        }
    }
    let arms: Vec<Arm<'_>> = composed
        .iter()
        .map(|(name, requests)| Arm {
            name: name.as_str(),
            requests: requests
                .iter()
                .map(|r| RequestText {
                    messages: &r.messages,
                    breakpoints: &r.breakpoints,
                })
                .collect(),
        })
        .collect();
    let total: usize = arms.iter().map(|a| a.requests.len()).sum();
    let bar = progress(
        total as u64,
        "{spinner} tokenizing and replaying {pos}/{len} requests {wide_bar}",
    );
    let report = simulate_with_progress(
        &arms,
        Strategy::Cacheline.as_str(),
        args.turns,
        tokenizer,
        &prices,
        config,
        |n| bar.set_position(n as u64),
    );
    bar.finish_and_clear();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(0);
    }
    writeln!(
        out,
        "cacheline simulate: {} turns over the reference components; tokens by {}",
        report.turns, report.tokenizer
    )?;
    writeln!(
        out,
        "cached = tokens served from cache / input tokens; of limit = cached / physical limit's cached; cost in uncached-token units (read 0.1x, Anthropic write 1.25x unless --prices)\n"
    )?;
    writeln!(
        out,
        "{:<20} {:>13}  {:<10} {:>7} {:>9} {:>13} {:>14}",
        "strategy",
        "input tokens",
        "backend",
        "cached",
        "of limit",
        "cost/no cache",
        "cost/cacheline"
    )?;
    let names = Strategy::ALL.iter().map(|s| s.as_str()).chain([
        McpArrival::RefreshNow.as_str(),
        McpArrival::DeferToCompaction.as_str(),
    ]);
    for name in names {
        let Some(s) = report.strategies.get(name) else {
            continue;
        };
        for (i, rule) in Rule::ALL.into_iter().enumerate() {
            let Some(r) = s.rules.get(&rule) else {
                continue;
            };
            let (name, tokens) = if i == 0 {
                (name, thousands(s.tokens))
            } else {
                ("", String::new())
            };
            writeln!(
                out,
                "{name:<20} {tokens:>13}  {:<10} {:>7} {:>9} {:>12.2}x {:>13.2}x",
                rule.as_str(),
                pct(r.cached_share),
                pct(r.limit_share),
                r.relative_cost,
                r.cost_vs_reference
            )?;
        }
    }
    Ok(0)
}
