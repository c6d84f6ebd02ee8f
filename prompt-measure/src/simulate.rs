//! Whole sessions through the simulator: several arms (ways of composing the same
//! conversation), each tokenized and replayed through a fresh [`CacheSim`], with costs
//! relative to a reference arm. `cacheline simulate` feeds it the scripted session of
//! `prompt-reference` composed three ways.

use std::collections::BTreeMap;

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
