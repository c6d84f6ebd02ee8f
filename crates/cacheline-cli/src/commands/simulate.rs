//! `cacheline simulate`: the scripted session composed every way, replayed in tokens
//! through each backend's cache rules.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use prompt_core::profile::{CacheTtl, GapFate, Retention, duration};
use prompt_measure::{
    Arm, GapReport, O200kBase, RequestText, Rule, SimConfig, gap_profiles, simulate_idle_gap,
    simulate_with_progress,
};
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
    /// Also say what an idle gap of this long (`10m`, `600s`, `1h`) before a turn costs
    /// each provider, by its cache lifetime (`cacheline` strategy).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    idle_gap: Option<u64>,
    /// The turn the idle gap comes before (default: the middle turn).
    #[arg(long, value_name = "K", requires = "idle_gap")]
    gap_before_turn: Option<u64>,
    /// Anthropic's cache TTL on the prefix breakpoints for the idle gap: 5m or 1h.
    #[arg(long, value_parser = parse_ttl, requires = "idle_gap")]
    anthropic_ttl: Option<CacheTtl>,
    /// OpenAI's prompt_cache_retention for the idle gap: in_memory or 24h.
    #[arg(long, value_parser = parse_retention, requires = "idle_gap")]
    openai_retention: Option<Retention>,
}

/// `10m`, `600s`, `1h`, `90` (seconds) → seconds.
fn parse_duration(s: &str) -> Result<u64, String> {
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => s.split_at(at),
        None => (s, "s"),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{s}`: expected a duration such as 10m, 600s or 1h"))?;
    let factor = match unit {
        "s" => 1,
        "m" | "min" => 60,
        "h" => 3600,
        _ => return Err(format!("`{s}`: the unit is s, m or h")),
    };
    n.checked_mul(factor)
        .ok_or_else(|| format!("`{s}`: too long"))
}

fn parse_ttl(s: &str) -> Result<CacheTtl, String> {
    match s {
        "5m" => Ok(CacheTtl::FiveMinutes),
        "1h" => Ok(CacheTtl::OneHour),
        other => Err(format!("unknown ttl `{other}`: expected 5m or 1h")),
    }
}

fn parse_retention(s: &str) -> Result<Retention, String> {
    match s {
        "in_memory" => Ok(Retention::InMemory),
        "24h" => Ok(Retention::TwentyFourHours),
        other => Err(format!(
            "unknown retention `{other}`: expected in_memory or 24h"
        )),
    }
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
    let gap = match args.idle_gap {
        None => None,
        Some(seconds) => {
            let turn = args.gap_before_turn.unwrap_or(args.turns / 2 + 1);
            let Some((arm, at)) = composed
                .iter()
                .zip(&arms)
                .find_map(|((name, requests), arm)| {
                    (name == Strategy::Cacheline.as_str())
                        .then(|| {
                            requests
                                .iter()
                                .position(|r| r.turn == turn && !r.continuation)
                        })
                        .flatten()
                        .map(|at| (arm, at))
                })
            else {
                writeln!(
                    err,
                    "error: --gap-before-turn {turn}: the session has no turn {turn} (--turns {})",
                    args.turns
                )?;
                return Ok(2);
            };
            let profiles = gap_profiles(args.anthropic_ttl, args.openai_retention);
            simulate_idle_gap(arm, at, seconds, tokenizer, &prices, config, &profiles)
                .map(|gap| (turn, gap))
        }
    };
    if args.json {
        let mut json = serde_json::to_value(&report)?;
        if let (Some(object), Some((_, gap))) = (json.as_object_mut(), &gap) {
            object.insert("idle_gap".to_owned(), serde_json::to_value(gap)?);
        }
        writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
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
    if let Some((turn, gap)) = &gap {
        print_gap(*turn, gap, out)?;
    }
    Ok(0)
}

/// The idle gap's table: per provider, its lifetime, what the gap did, and the cost of the
/// request after it.
fn print_gap(turn: u64, gap: &GapReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "\nidle gap of {} before turn {turn} (request {} of the cacheline strategy, {} tokens, {} in the prefix); cost in uncached-token units",
        duration(gap.gap_seconds),
        gap.request + 1,
        thousands(gap.tokens as u64),
        thousands(gap.prefix_tokens as u64)
    )?;
    writeln!(
        out,
        "{:<10} {:<62} {:<14} {:>10} {:>10} {:>10}",
        "backend", "cache lifetime", "after the gap", "warm", "after gap", "extra"
    )?;
    for p in &gap.providers {
        let lifetime = if p.prefix_lifetime == p.lifetime {
            p.lifetime.to_string()
        } else {
            format!("{}; prefix {}", p.lifetime, p.prefix_lifetime)
        };
        let fate = match p.fate {
            GapFate::Kept => "kept",
            GapFate::Expired => "expired",
            GapFate::MaybeExpired => "may expire",
            GapFate::Unknown => "not documented",
        };
        let cost = |c: Option<f64>| c.map_or_else(|| "-".to_owned(), |c| format!("{c:.0}"));
        writeln!(
            out,
            "{:<10} {:<62} {:<14} {:>10.0} {:>10} {:>10}",
            p.rule.as_str(),
            lifetime,
            fate,
            p.warm_cost,
            cost(p.after_gap_cost),
            cost(p.extra_cost)
        )?;
        if p.lifetime_premium > 0.0 {
            writeln!(
                out,
                "{:<10} (the 1-hour TTL writes the prefix at 2x once: {:.0} more per session)",
                "", p.lifetime_premium
            )?;
        }
    }
    Ok(())
}
