//! `cacheline simulate`: the scripted session composed every way, replayed in tokens
//! through each backend's cache rules.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use prompt_measure::{Arm, O200kBase, RequestText, Rule, SimConfig, simulate_with_progress};
use prompt_reference::scenario::{self, Strategy};
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
    let composed = scenario::compose_all(registry, args.turns)?;
    let arms: Vec<Arm<'_>> = composed
        .iter()
        .map(|(strategy, requests)| Arm {
            name: strategy.as_str(),
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
        "{:<16} {:>13}  {:<10} {:>7} {:>9} {:>13} {:>14}",
        "strategy",
        "input tokens",
        "backend",
        "cached",
        "of limit",
        "cost/no cache",
        "cost/cacheline"
    )?;
    for strategy in Strategy::ALL {
        let Some(s) = report.strategies.get(strategy.as_str()) else {
            continue;
        };
        for (i, rule) in Rule::ALL.into_iter().enumerate() {
            let Some(r) = s.rules.get(&rule) else {
                continue;
            };
            let (name, tokens) = if i == 0 {
                (strategy.as_str(), thousands(s.tokens))
            } else {
                ("", String::new())
            };
            writeln!(
                out,
                "{name:<16} {tokens:>13}  {:<10} {:>7} {:>9} {:>12.2}x {:>13.2}x",
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
