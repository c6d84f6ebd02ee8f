//! Whole sessions through the simulator: several arms (ways of composing the same
//! conversation), each tokenized and replayed through a fresh [`CacheSim`], with costs
//! relative to a reference arm. `cacheline simulate` feeds it the scripted session of
//! `prompt-reference` composed three ways.

use std::collections::BTreeMap;

use prompt_core::profile::{CacheTtl, GapFate, Lifetime, Profile, Retention};
use serde::Serialize;

use super::sim::{AnthropicRule, CacheSim, RuleOutcome, SimConfig, TokenCache};
use super::tokenizer::Tokenizer;
use super::{PriceTable, Rule};

/// One rule's figures for one strategy.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RuleReport {
    /// Tokens served from cache over all input tokens (0..1).
    pub cached_share: f64,
    /// `cached_share` over the physical limit's cached share (0..1).
    pub limit_share: f64,
    /// Tokens served from cache.
    pub cached_tokens: u64,
    /// Tokens written to cache.
    pub write_tokens: u64,
    /// Cost in uncached-input-token units.
    pub cost: f64,
    /// Cost over the cost without any cache.
    pub relative_cost: f64,
    /// Cost over the reference arm's cost under the same rule (in `cacheline simulate` the
    /// reference arm is the `cacheline` strategy, hence the key).
    #[serde(rename = "cost_vs_cacheline")]
    pub cost_vs_reference: f64,
}

/// One strategy's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyReport {
    /// Requests composed.
    pub requests: usize,
    /// Input tokens over all requests.
    pub tokens: u64,
    /// Tokens of the largest request.
    pub max_request_tokens: u64,
    /// Per rule, keyed `llama_cpp` … `limit`.
    #[serde(flatten)]
    pub rules: BTreeMap<Rule, RuleReport>,
}

/// The parameters of the rules, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RuleParams {
    /// vLLM block size.
    pub vllm_block_size: usize,
    /// OpenAI: shortest cached prefix.
    pub openai_minimum: usize,
    /// OpenAI: increment.
    pub openai_increment: usize,
    /// DeepSeek: unit.
    pub deepseek_unit: usize,
    /// Anthropic.
    pub anthropic: AnthropicRule,
}

impl From<&SimConfig> for RuleParams {
    fn from(c: &SimConfig) -> Self {
        Self {
            vllm_block_size: c.block_size,
            openai_minimum: c.openai_minimum,
            openai_increment: c.openai_increment,
            deepseek_unit: c.deepseek_unit,
            anthropic: c.anthropic,
        }
    }
}

/// One request of an arm, as sent: its messages, each serialized, and its Anthropic
/// breakpoints (as message counts).
#[derive(Debug, Clone, Copy)]
pub struct RequestText<'a> {
    /// The messages, each as sent.
    pub messages: &'a [String],
    /// Breakpoints, as message counts.
    pub breakpoints: &'a [usize],
}

/// One way of composing the conversation, and its requests in order.
#[derive(Debug, Clone)]
pub struct Arm<'a> {
    /// The arm's name, the key of its report.
    pub name: &'a str,
    /// Its requests.
    pub requests: Vec<RequestText<'a>>,
}

/// What a simulation reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimulateReport {
    /// Turns simulated.
    pub turns: u64,
    /// The tokenizer.
    pub tokenizer: String,
    /// The prices used.
    pub prices: PriceTable,
    /// The rules' parameters.
    pub rules: RuleParams,
    /// Per arm, by name.
    pub strategies: BTreeMap<String, StrategyReport>,
}

/// Tokenizes each arm's requests with `tokenizer` and replays them through a fresh
/// [`CacheSim`] per arm (pass [`SimConfig::unbounded`] for the exact physical limit). Costs
/// are also given relative to the arm named `reference`.
pub fn simulate(
    arms: &[Arm<'_>],
    reference: &str,
    turns: u64,
    tokenizer: &dyn Tokenizer,
    prices: &PriceTable,
    config: SimConfig,
) -> SimulateReport {
    simulate_with_progress(arms, reference, turns, tokenizer, prices, config, |_| {})
}

/// [`simulate`], calling `progress` with the number of requests replayed so far.
pub fn simulate_with_progress(
    arms: &[Arm<'_>],
    reference: &str,
    turns: u64,
    tokenizer: &dyn Tokenizer,
    prices: &PriceTable,
    config: SimConfig,
    mut progress: impl FnMut(usize),
) -> SimulateReport {
    let mut replayed = 0usize;
    struct Totals {
        requests: usize,
        tokens: u64,
        max: u64,
        sums: BTreeMap<Rule, RuleOutcome>,
    }
    let mut cache = TokenCache::new(tokenizer, usize::MAX);
    let mut totals = BTreeMap::new();
    for arm in arms {
        let mut sim = CacheSim::new(config);
        let requests = &arm.requests;
        let mut t = Totals {
            requests: requests.len(),
            tokens: 0,
            max: 0,
            sums: BTreeMap::new(),
        };
        for r in requests {
            let texts: Vec<&str> = r.messages.iter().map(String::as_str).collect();
            let seen = sim.observe(cache.request(&texts, r.breakpoints.to_vec()));
            replayed += 1;
            progress(replayed);
            t.tokens = t.tokens.saturating_add(seen.tokens as u64);
            t.max = t.max.max(seen.tokens as u64);
            for (rule, outcome) in seen.outcomes() {
                *t.sums.entry(rule).or_default() += outcome;
            }
        }
        totals.insert(arm.name.to_owned(), t);
    }
    let cost = |t: &Totals, rule: Rule| {
        let o = t.sums.get(&rule).copied().unwrap_or_default();
        prices.get(rule).cost(&o)
    };
    let ratio = |a: f64, b: f64| if b == 0.0 { 0.0 } else { a / b };
    let mut strategies = BTreeMap::new();
    for (strategy, t) in &totals {
        let limit = t.sums.get(&Rule::Limit).copied().unwrap_or_default();
        let rules = Rule::ALL
            .into_iter()
            .map(|rule| {
                let o = t.sums.get(&rule).copied().unwrap_or_default();
                let c = cost(t, rule);
                let reference = totals.get(reference).map_or(0.0, |b| cost(b, rule));
                let report = RuleReport {
                    cached_share: o.cached_share(),
                    limit_share: ratio(o.cached_share(), limit.cached_share()),
                    cached_tokens: o.read,
                    write_tokens: o.write,
                    cost: c,
                    relative_cost: ratio(c, prices.get(rule).miss * t.tokens as f64),
                    cost_vs_reference: ratio(c, reference),
                };
                (rule, report)
            })
            .collect();
        strategies.insert(
            strategy.clone(),
            StrategyReport {
                requests: t.requests,
                tokens: t.tokens,
                max_request_tokens: t.max,
                rules,
            },
        );
    }
    SimulateReport {
        turns,
        tokenizer: tokenizer.name().to_owned(),
        prices: *prices,
        rules: RuleParams::from(&config),
        strategies,
    }
}

/// Anthropic's price of a 1-hour cache write, relative to an uncached input token (a
/// 5-minute write is [`crate::Prices::write`], 1.25 by default): the prompt-caching guide's
/// pricing, 2x base input.
pub const ANTHROPIC_1H_WRITE: f64 = 2.0;

/// What an idle gap did to one rule's cache, for the request after it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GapOutcome {
    /// The rule.
    pub rule: Rule,
    /// The provider's name (`openai`, `anthropic`, …).
    pub provider: &'static str,
    /// How long the history's entries live (the whole prompt's, but Anthropic's).
    pub lifetime: Lifetime,
    /// How long the prefix's entries live (Anthropic's tools and system breakpoints, with
    /// the TTL asked for).
    pub prefix_lifetime: Lifetime,
    /// What the gap did to the history's entries.
    pub fate: GapFate,
    /// The request without the gap.
    pub warm: RuleOutcome,
    /// The request after the gap (the worst case when the entries only *may* be gone);
    /// `None` when the provider documents no lifetime.
    pub after_gap: Option<RuleOutcome>,
    /// The request's cost without the gap, in uncached-token units.
    pub warm_cost: f64,
    /// Its cost after the gap.
    pub after_gap_cost: Option<f64>,
    /// What the gap adds.
    pub extra_cost: Option<f64>,
    /// Paid once per session for a longer lifetime (Anthropic's 1-hour TTL: the prefix is
    /// written at [`ANTHROPIC_1H_WRITE`] instead of the 5-minute write price), in
    /// uncached-token units; 0 otherwise.
    pub lifetime_premium: f64,
}

/// What an idle gap before one request of an arm costs, per provider.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GapReport {
    /// The arm.
    pub arm: String,
    /// The gap, in seconds.
    pub gap_seconds: u64,
    /// The request after the gap (its index in the arm, from 0).
    pub request: usize,
    /// Its tokens.
    pub tokens: usize,
    /// Its prefix's tokens (up to Anthropic's first breakpoint, when it has two).
    pub prefix_tokens: usize,
    /// Per rule with a provider.
    pub providers: Vec<GapOutcome>,
}

/// The profile whose lifetimes each rule's cache has: the provider's row, with Anthropic's
/// `ttl` and OpenAI's `prompt_cache_retention` when given.
pub fn gap_profiles(ttl: Option<CacheTtl>, retention: Option<Retention>) -> Vec<(Rule, Profile)> {
    Rule::ALL
        .into_iter()
        .filter_map(|rule| {
            let mut profile = Profile::for_provider(rule.provider()?, "", None);
            if let Some(ttl) = ttl {
                profile = profile.with_ttl(ttl);
            }
            if let Some(retention) = retention {
                profile = profile.with_retention(retention);
            }
            Some((rule, profile))
        })
        .collect()
}

/// Replays `arm` through a fresh [`CacheSim`] up to its request `at`, and says, per rule
/// of `profiles`, what that request costs when `gap_seconds` passed before it without a
/// request: nothing for a cache that lives longer (or until evicted), the cold request for
/// one that expired — but for Anthropic's prefix when its 1-hour TTL outlives the gap, read
/// while the rest is written again. `None` when the arm has no request `at`.
#[allow(clippy::too_many_arguments)]
pub fn simulate_idle_gap(
    arm: &Arm<'_>,
    at: usize,
    gap_seconds: u64,
    tokenizer: &dyn Tokenizer,
    prices: &PriceTable,
    config: SimConfig,
    profiles: &[(Rule, Profile)],
) -> Option<GapReport> {
    let mut cache = TokenCache::new(tokenizer, usize::MAX);
    let mut sim = CacheSim::new(config);
    let mut seen = None;
    for (i, r) in arm.requests.iter().enumerate().take(at.saturating_add(1)) {
        let texts: Vec<&str> = r.messages.iter().map(String::as_str).collect();
        let request = cache.request(&texts, r.breakpoints.to_vec());
        let ends = request.segment_ends().to_vec();
        let breakpoints = request.breakpoints().to_vec();
        let observed = sim.observe(request);
        if i == at {
            seen = Some((observed, ends, breakpoints));
        }
    }
    let (observed, ends, breakpoints) = seen?;
    // The prefix ends at the first of two breakpoints (the prefix, then the history).
    let prefix_tokens = match breakpoints.as_slice() {
        [first, _, ..] => first
            .checked_sub(1)
            .and_then(|k| ends.get(k))
            .copied()
            .unwrap_or(0),
        _ => 0,
    };
    let n = observed.tokens;
    let providers = profiles
        .iter()
        .map(|(rule, profile)| {
            let rule = *rule;
            let warm = observed.outcome(rule);
            let price = prices.get(rule);
            let fate = profile.lifetime().after_gap(gap_seconds);
            let prefix_fate = profile.prefix_lifetime().after_gap(gap_seconds);
            let after_gap = match fate {
                GapFate::Kept => Some(warm),
                GapFate::Unknown => None,
                GapFate::Expired | GapFate::MaybeExpired if rule == Rule::Anthropic => {
                    let reached =
                        usize::try_from(warm.read.saturating_add(warm.write)).unwrap_or(usize::MAX);
                    let survives = if prefix_fate == GapFate::Kept {
                        prefix_tokens.min(reached)
                    } else {
                        0
                    };
                    Some(RuleOutcome::new(n, survives, reached - survives))
                }
                GapFate::Expired | GapFate::MaybeExpired => Some(RuleOutcome::new(n, 0, 0)),
            };
            let warm_cost = price.cost(&warm);
            let after_gap_cost = after_gap.map(|o| price.cost(&o));
            let lifetime_premium =
                if rule == Rule::Anthropic && profile.ttl() == Some(CacheTtl::OneHour) {
                    prefix_tokens as f64 * (ANTHROPIC_1H_WRITE - price.write)
                } else {
                    0.0
                };
            GapOutcome {
                rule,
                provider: profile.provider_name(),
                lifetime: profile.lifetime(),
                prefix_lifetime: profile.prefix_lifetime(),
                fate,
                warm,
                after_gap,
                warm_cost,
                after_gap_cost,
                extra_cost: after_gap_cost.map(|c| c - warm_cost),
                lifetime_premium,
            }
        })
        .collect();
    Some(GapReport {
        arm: arm.name.to_owned(),
        gap_seconds,
        request: at,
        tokens: n,
        prefix_tokens,
        providers,
    })
}
