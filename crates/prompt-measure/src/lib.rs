//! # prompt-measure
//!
//! Measuring the cache the way providers bill it.
//!
//! - [`meter`]: one [`Usage`] record for the usage objects of OpenAI, Anthropic, DeepSeek,
//!   Gemini and llama.cpp, and its hit rate `cache_read / (uncached + cache_read + cache_write)`;
//! - [`sim`]: a provider-rule simulator. Given a sequence of tokenized requests it computes
//!   per request the tokens each backend would serve from cache ([`Rule`]), against the
//!   physical limit (every token already sent as a prefix of an earlier request);
//! - [`audit`]: the same rules over a JSONL log of real requests of any API (read by the
//!   wire's guard), their responses whole or streamed, read in bounded memory, naming where
//!   each request diverged from the best earlier one and why;
//! - [`lifetime`]: the cache lifetime's economics over the audit's verdicts: tokens and
//!   money lost to expiry, what the longer lifetime would have cost or saved, keep-warm;
//! - [`evidence`]: one request's verdict with its proof (the bytes around the first
//!   divergence, both requests' elements side by side), redacted: `cacheline evidence`;
//! - [`simulate()`]: whole sessions, composed several ways ([`Arm`]s), through the simulator,
//!   with costs relative to one of them (`cacheline simulate`).
//!
//! Token counts come from a [`Tokenizer`]; [`O200kBase`] (tiktoken's `o200k_base`, embedded
//! in the binary) works offline.
//!
//! ```
//! use prompt_measure::{CacheSim, Rule, SimConfig, TokenizedRequest};
//! // Two requests of token ids: the second extends the first.
//! let first = TokenizedRequest::from_token_segments(vec![vec![1; 2000], vec![2; 10]], vec![1, 2]);
//! let second = TokenizedRequest::from_token_segments(
//!     vec![vec![1; 2000], vec![2; 10], vec![3; 300]],
//!     vec![1, 3],
//! );
//! let mut sim = CacheSim::new(SimConfig::unbounded());
//! sim.observe(first);
//! let seen = sim.observe(second);
//! assert_eq!(seen.outcome(Rule::Limit).read, 2010);
//! assert_eq!(seen.outcome(Rule::LlamaCpp).read, 2010);
//! assert_eq!(seen.outcome(Rule::Vllm).read, 2000); // 16-token blocks
//! assert_eq!(seen.outcome(Rule::OpenAi).read, 1920); // 1024 + 7 × 128
//! assert_eq!(seen.outcome(Rule::DeepSeek).read, 1984); // 31 × 64
//! assert_eq!(seen.outcome(Rule::Anthropic).read, 2010); // the breakpoint written before
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::fmt;

use serde::{Deserialize, Serialize};

pub mod audit;
pub mod catalogue;
pub mod evidence;
pub mod fleet;
pub mod lifetime;
pub mod logged;
pub mod meter;
pub mod provider_verdict;
pub mod recent;
pub mod report;
pub mod sim;
pub mod simulate;
pub mod synthetic;
mod tokenizer;

pub use audit::{AuditConfig, AuditError, Auditor, RequestAudit};
pub use meter::{CacheWrites, MeterError, Provider, SessionUsage, Usage};
pub use sim::{
    AnthropicRule, CacheSim, Observation, RuleOutcome, Segment, SimConfig, TokenCache,
    TokenizedRequest,
};
pub use simulate::{
    ANTHROPIC_1H_WRITE, Arm, GapOutcome, GapReport, RequestText, RuleParams, RuleReport,
    SimulateReport, StrategyReport, gap_profiles, simulate, simulate_idle_gap,
    simulate_with_progress,
};
pub use tokenizer::{O200kBase, Tokenizer, TokenizerError};

/// A backend's cache rule, plus the physical limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// llama.cpp: exact longest common prefix in tokens, against any earlier request still
    /// cached.
    LlamaCpp,
    /// vLLM automatic prefix caching: whole 16-token blocks; the last token is always
    /// recomputed.
    Vllm,
    /// OpenAI: nothing below 1,024 tokens, then 128-token increments.
    #[serde(rename = "openai")]
    OpenAi,
    /// DeepSeek: whole cache prefix units (an earlier request's input, a prefix two
    /// requests shared), in 64-token units.
    #[serde(rename = "deepseek")]
    DeepSeek,
    /// Anthropic: explicit breakpoints (at most 4), 20-block lookback, per-model minimum;
    /// writes cost more than misses.
    Anthropic,
    /// The physical limit: every token already sent as a prefix of an earlier request.
    Limit,
}

impl Rule {
    /// Every rule, in report order.
    pub const ALL: [Rule; 6] = [
        Rule::LlamaCpp,
        Rule::Vllm,
        Rule::OpenAi,
        Rule::DeepSeek,
        Rule::Anthropic,
        Rule::Limit,
    ];

    /// The JSON key: `llama_cpp`, `vllm`, `openai`, `deepseek`, `anthropic`, `limit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::LlamaCpp => "llama_cpp",
            Rule::Vllm => "vllm",
            Rule::OpenAi => "openai",
            Rule::DeepSeek => "deepseek",
            Rule::Anthropic => "anthropic",
            Rule::Limit => "limit",
        }
    }

    /// Parses a JSON key back.
    pub fn from_key(key: &str) -> Option<Rule> {
        Rule::ALL.into_iter().find(|r| r.as_str() == key)
    }

    /// The provider whose cache the rule simulates (whose profile gives its lifetime);
    /// `None` for the physical limit.
    pub fn provider(self) -> Option<prompt_core::profile::Provider> {
        use prompt_core::profile::Provider;
        match self {
            Rule::LlamaCpp => Some(Provider::LlamaCpp),
            Rule::Vllm => Some(Provider::Vllm),
            Rule::OpenAi => Some(Provider::OpenAi),
            Rule::DeepSeek => Some(Provider::DeepSeek),
            Rule::Anthropic => Some(Provider::Anthropic),
            Rule::Limit => None,
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Price multipliers of one backend, relative to an uncached input token.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Prices {
    /// An input token not served from cache.
    pub miss: f64,
    /// A token read from cache.
    pub read: f64,
    /// A token written to cache (only Anthropic's rule writes).
    pub write: f64,
}

impl Default for Prices {
    fn default() -> Self {
        Self {
            miss: 1.0,
            read: 0.1,
            write: 1.25,
        }
    }
}

impl Prices {
    /// The cost of an outcome, in uncached-token units.
    pub fn cost(&self, outcome: &RuleOutcome) -> f64 {
        self.miss * outcome.miss as f64
            + self.read * outcome.read as f64
            + self.write * outcome.write as f64
    }
}

/// Price multipliers per rule and provider. Defaults: miss 1 and read 0.1 everywhere but
/// Gemini (OpenAI's GPT-5, Anthropic's and DeepSeek's cached-input discount is 0.1; Gemini
/// 2.5's implicit cache bills 0.25; for self-hosted llama.cpp and vLLM the 0.1 is a
/// convention); write 1.25 for Anthropic (its 5-minute cache write), 1 (no surcharge) for
/// the others. Override any of them from a JSON object such as `{"openai": {"read": 0.5}}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PriceTable {
    /// llama.cpp.
    pub llama_cpp: Prices,
    /// vLLM.
    pub vllm: Prices,
    /// OpenAI.
    pub openai: Prices,
    /// DeepSeek.
    pub deepseek: Prices,
    /// Anthropic.
    pub anthropic: Prices,
    /// Google Gemini (no simulated rule; its reported usage is priced with these).
    pub gemini: Prices,
    /// The physical limit.
    pub limit: Prices,
}

impl Default for PriceTable {
    fn default() -> Self {
        let no_surcharge = Prices {
            write: 1.0,
            ..Prices::default()
        };
        Self {
            llama_cpp: no_surcharge,
            vllm: no_surcharge,
            openai: no_surcharge,
            deepseek: no_surcharge,
            anthropic: Prices::default(),
            gemini: Prices {
                read: 0.25,
                ..no_surcharge
            },
            limit: no_surcharge,
        }
    }
}

impl PriceTable {
    /// The multipliers of the provider a request went to (its reported usage's shape).
    pub fn of_provider(&self, provider: meter::Provider) -> &Prices {
        match provider {
            meter::Provider::OpenAi | meter::Provider::AzureOpenAi => &self.openai,
            meter::Provider::Anthropic => &self.anthropic,
            meter::Provider::DeepSeek => &self.deepseek,
            meter::Provider::Gemini => &self.gemini,
            meter::Provider::Vllm => &self.vllm,
            meter::Provider::LlamaCpp | meter::Provider::Sglang | meter::Provider::Ollama => {
                &self.llama_cpp
            }
        }
    }

    /// The multipliers of `rule`.
    pub fn get(&self, rule: Rule) -> &Prices {
        match rule {
            Rule::LlamaCpp => &self.llama_cpp,
            Rule::Vllm => &self.vllm,
            Rule::OpenAi => &self.openai,
            Rule::DeepSeek => &self.deepseek,
            Rule::Anthropic => &self.anthropic,
            Rule::Limit => &self.limit,
        }
    }
}

/// `part / whole`, 0 when `whole` is 0.
pub(crate) fn share(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// `text` cut to at most `max` bytes (on a character boundary), `…` marking the cut: what a
/// diagnostic quotes from the input stays short ([`prompt_core::input::excerpt`]).
pub(crate) fn shorten(text: &str, max: usize) -> String {
    prompt_core::input::excerpt(text, max).into_owned()
}
