//! Each session's requests judged: the audit's own verdict where the store holds the
//! request (exact), else what the usage proves (inferred).
//!
//! The inference is the engine's shortfall rule ([`prompt_engine`]) with the previous request
//! of the session standing for the bytes: a request is expected to read the whole prompt of
//! the request before it (what that request sent, and so could have cached), up to its own
//! prompt, once that prefix is at least the provider's minimum. A read short of it by 5 % of
//! the prompt and 256 tokens or more is a break, and where it happened names the cause: the
//! first request after a compaction `compaction`, a model other than the previous one's
//! `model_changed`, a gap past the provider's cache lifetime `ttl_expired`; anything else
//! `unknown` (only the bytes could tell), with its moment ([`Moment`]): a resume, a new
//! prompt, or within a turn.

use std::borrow::Cow;

use prompt_core::profile::{GapFate, Profile};
use prompt_engine::CauseKind;
use prompt_measure::catalogue::WriterFinding;
use prompt_measure::lifetime::LifetimePrices;
use prompt_measure::logged::{LoggedExchange, recorded_headers};
use prompt_measure::{AuditConfig, Auditor, PriceTable, Provider, SimConfig, Tokenizer, Usage};
use serde::Serialize;

use crate::store::{Agent, StoredRequest, StoredSession};

/// Share of the prompt a read may fall short of the expectation without it being a break
/// (the engine's).
const SHORTFALL_SHARE: f64 = 0.05;
/// Tokens a read may fall short without it being a break (the engine's).
const SHORTFALL_TOKENS: u64 = 256;

/// Where in a session a request was sent, as the store shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Moment {
    /// The first request of the session.
    Start,
    /// The first request of a new process of the agent (a resume or continue).
    Resume,
    /// The first request after a compaction.
    Compaction,
    /// A request to another model than the previous one.
    ModelSwitch,
    /// After a gap past the provider's cache lifetime.
    Expiry,
    /// The first request of a new prompt in the same process.
    Prompt,
    /// A later request of a turn (after a tool call).
    Turn,
}

impl Moment {
    /// Its name (`resume`, `expiry`, …).
    pub fn name(self) -> &'static str {
        match self {
            Moment::Start => "start",
            Moment::Resume => "resume",
            Moment::Compaction => "compaction",
            Moment::ModelSwitch => "model_switch",
            Moment::Expiry => "expiry",
            Moment::Prompt => "prompt",
            Moment::Turn => "turn",
        }
    }
}

/// One request as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRow {
    /// Its number in the session, from 1.
    pub index: u64,
    /// When (ISO-8601 UTC), if the store says.
    pub time: Option<String>,
    /// The model.
    pub model: String,
    /// The whole prompt in tokens, cached included.
    pub input_tokens: u64,
    /// Read from cache.
    pub cache_read_tokens: u64,
    /// Written to cache.
    pub cache_write_tokens: u64,
    /// Output.
    pub output_tokens: u64,
    /// The engine's cause name; `null` where the request extends its predecessor.
    pub cause: Option<&'static str>,
    /// Tokens that could have been read from cache and were not.
    pub tokens_lost: u64,
    /// The audit's verdict on the request rebuilt from the store (`true`), or what its usage
    /// proves (`false`).
    pub exact: bool,
    /// Where in the session it was sent.
    pub at: Moment,
    /// The writer catalogue entry (or learned block) behind an exact verdict's change.
    pub writer: Option<String>,
    /// Its prompt's cost, in USD at the model's input price (0 where the price is unknown).
    pub cost: f64,
    /// What the lost tokens cost beyond a cache read, in USD.
    pub lost_cost: f64,
    /// The same two in units of one uncached input token (known for every model).
    pub cost_units: f64,
    /// The lost cost in those units.
    pub lost_units: f64,
    /// Seconds since the epoch (for the day and the page), not in the JSON.
    #[serde(skip)]
    pub secs: Option<f64>,
}

/// One session as reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionReport {
    /// The agent.
    pub agent: Agent,
    /// The agent's version.
    pub version: String,
    /// The session id.
    pub session: String,
    /// The project.
    pub project: String,
    /// The models used, in first-use order.
    pub models: Vec<String>,
    /// The requests.
    pub requests: Vec<RequestRow>,
    /// Whole prompts summed.
    pub input_tokens: u64,
    /// Cache reads summed.
    pub cache_read_tokens: u64,
    /// Cache writes summed.
    pub cache_write_tokens: u64,
    /// Output summed.
    pub output_tokens: u64,
    /// Prompt cost, USD.
    pub cost: f64,
    /// Lost to the cache, USD.
    pub lost_cost: f64,
    /// Prompt cost in uncached-input-token units.
    pub cost_units: f64,
    /// Lost in those units.
    pub lost_units: f64,
}

/// The prices an import applies.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pricing {
    /// Multipliers per provider (miss, read, write), as the audit's.
    pub table: PriceTable,
    /// Base input prices per model family, USD per million tokens.
    pub usd: LifetimePrices,
}

impl Pricing {
    /// `(cost, lost)` of one request in units and in USD (0 USD where the model's price is
    /// unknown).
    fn of(&self, provider: Provider, model: &str, u: Usage, lost: u64) -> (f64, f64, f64, f64) {
        let p = self.table.of_provider(provider);
        let units = p.miss * u.input_uncached as f64
            + p.read * u.cache_read as f64
            + p.write * u.cache_write as f64;
        // The lost tokens were billed as writes first (Anthropic writes what it could not
        // read), then as uncached input, instead of as reads.
        let billed = lost.min(u.input_uncached.saturating_add(u.cache_write));
        let as_write = billed.min(u.cache_write);
        let lost_units = as_write as f64 * (p.write - p.read).max(0.0)
            + (billed - as_write) as f64 * (p.miss - p.read).max(0.0);
        let usd = self.usd.input_price(model).unwrap_or(0.0) / 1e6;
        (units, lost_units, units * usd, lost_units * usd)
    }
}

/// The provider profile of `model` at `provider` (the meter's provider is the profile's:
/// one provider identity).
fn profile(provider: Provider, model: &str) -> Profile {
    Profile::for_provider(provider, model, None)
}

/// The moment of `cur` after `prev`.
fn moment(prev: Option<&StoredRequest>, cur: &StoredRequest) -> Moment {
    let Some(prev) = prev else {
        return Moment::Start;
    };
    let fate = gap_fate(prev, cur);
    if cur.after_compaction {
        Moment::Compaction
    } else if cur.model != prev.model {
        Moment::ModelSwitch
    } else if matches!(fate, Some(GapFate::Expired | GapFate::MaybeExpired)) {
        Moment::Expiry
    } else if cur.new_process {
        Moment::Resume
    } else if cur.new_prompt {
        Moment::Prompt
    } else {
        Moment::Turn
    }
}

fn gap_fate(prev: &StoredRequest, cur: &StoredRequest) -> Option<GapFate> {
    let gap = cur.time? - prev.time?;
    let gap = if gap.is_finite() { gap.max(0.0) } else { 0.0 };
    Some(
        profile(cur.provider, &cur.model)
            .lifetime()
            .after_gap(gap as u64),
    )
}

/// What usage alone proves of `cur` after `prev`: its cause and the tokens lost.
pub fn infer(prev: Option<&StoredRequest>, cur: &StoredRequest) -> (Option<CauseKind>, u64) {
    let Some(prev) = prev else {
        return (Some(CauseKind::ColdStart), 0);
    };
    let prompt = cur.usage.input();
    let min = u64::from(
        profile(prev.provider, &prev.model)
            .min_cache_tokens()
            .unwrap_or(0),
    );
    let expected = prev.usage.input().min(prompt);
    if prompt == 0 || expected < min.max(1) {
        return (None, 0);
    }
    let short = expected.saturating_sub(cur.usage.cache_read);
    if (short as f64) < SHORTFALL_SHARE * prompt as f64 || short < SHORTFALL_TOKENS {
        return (None, 0);
    }
    let cause = match moment(Some(prev), cur) {
        Moment::Compaction => CauseKind::Compaction,
        Moment::ModelSwitch => CauseKind::ModelChanged,
        Moment::Expiry => CauseKind::TtlExpired,
        _ => CauseKind::Unknown,
    };
    (Some(cause), short)
}

/// The audit exact verdicts come from: one for a whole import (the engine keeps sessions
/// apart by their session header, and the token cache serves every session's shared
/// system prompt and tools), built on the first request that needs it.
pub struct Judge<'t> {
    tokenizer: &'t dyn Tokenizer,
    table: PriceTable,
    auditor: Option<Auditor<'t>>,
    line: u64,
}

impl std::fmt::Debug for Judge<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Judge").field("line", &self.line).finish()
    }
}

impl<'t> Judge<'t> {
    /// A judge counting tokens with `tokenizer`, pricing with `table`.
    pub fn new(tokenizer: &'t dyn Tokenizer, table: PriceTable) -> Self {
        Self {
            tokenizer,
            table,
            auditor: None,
            line: 0,
        }
    }
}

/// Judges one session: each request rebuilt from the store through the audit (the proxy's
/// engine and writer catalogue), the others by [`infer`].
pub fn analyse(session: StoredSession, judge: &mut Judge<'_>, pricing: &Pricing) -> SessionReport {
    let mut rows = Vec::with_capacity(session.requests.len());
    let mut models: Vec<String> = Vec::new();
    let mut prev: Option<&StoredRequest> = None;
    for (i, req) in session.requests.iter().enumerate() {
        if !models.contains(&req.model) && models.len() < 64 {
            models.push(req.model.clone());
        }
        let mut exact = None;
        if let Some(body) = &req.body {
            let (tokenizer, table) = (judge.tokenizer, judge.table);
            let auditor = judge.auditor.get_or_insert_with(|| {
                // The verdict is the engine's; the audit's simulator (what each backend's
                // rule would have read) is not reported here, so it keeps the least.
                let sim = SimConfig::default()
                    .with_window(2)
                    .with_window_tokens(1 << 20)
                    .with_block_capacity(1 << 16);
                Auditor::new(
                    tokenizer,
                    AuditConfig::default().with_prices(table).with_sim(sim),
                )
            });
            judge.line += 1;
            let mut exchange = LoggedExchange::of(Cow::Borrowed(body.as_str()));
            exchange.path = Some(path_of(session.agent).to_owned());
            exchange.headers = recorded_headers(
                req.headers
                    .iter()
                    .map(|(k, v)| (k.as_str(), Cow::Borrowed(v.as_str()))),
            );
            exchange.ts = req.time;
            exchange.session = Some(session.session.clone());
            exchange.usage = Some((req.provider, req.usage));
            if let Ok(audit) = auditor.push_exchange(judge.line, exchange) {
                let writer = audit.writer.as_ref().map(|w| match w {
                    WriterFinding::Catalogue(m) => m.name.clone(),
                    WriterFinding::Learned(_) => "a learned volatile block".to_owned(),
                });
                exact = Some((
                    audit.verdict.cause.as_ref().map(|c| c.kind()),
                    audit.verdict.tokens_lost,
                    writer,
                ));
            }
        }
        let is_exact = exact.is_some();
        let (cause, tokens_lost, writer) = match exact {
            Some(e) => e,
            None => {
                let (c, t) = infer(prev, req);
                (c, t, None)
            }
        };
        let (cost_units, lost_units, cost, lost_cost) =
            pricing.of(req.provider, &req.model, req.usage, tokens_lost);
        rows.push(RequestRow {
            index: i as u64 + 1,
            time: req.time.map(crate::time::iso),
            model: req.model.clone(),
            input_tokens: req.usage.input(),
            cache_read_tokens: req.usage.cache_read,
            cache_write_tokens: req.usage.cache_write,
            output_tokens: req.usage.output,
            cause: cause.map(CauseKind::as_str),
            tokens_lost,
            exact: is_exact,
            at: moment(prev, req),
            writer,
            cost,
            lost_cost,
            cost_units,
            lost_units,
            secs: req.time,
        });
        prev = Some(req);
    }
    let sum = |f: fn(&RequestRow) -> u64| rows.iter().map(f).fold(0u64, u64::saturating_add);
    let sumf = |f: fn(&RequestRow) -> f64| rows.iter().map(f).sum::<f64>();
    SessionReport {
        agent: session.agent,
        version: session.version,
        session: session.session,
        project: session.project,
        models,
        input_tokens: sum(|r| r.input_tokens),
        cache_read_tokens: sum(|r| r.cache_read_tokens),
        cache_write_tokens: sum(|r| r.cache_write_tokens),
        output_tokens: sum(|r| r.output_tokens),
        cost: sumf(|r| r.cost),
        lost_cost: sumf(|r| r.lost_cost),
        cost_units: sumf(|r| r.cost_units),
        lost_units: sumf(|r| r.lost_units),
        requests: rows,
    }
}

/// The API path an agent's requests go to (the audit reads the shape by it).
fn path_of(agent: Agent) -> &'static str {
    match agent {
        Agent::ClaudeCode | Agent::Opencode => "/v1/messages",
        Agent::Codex => "/v1/responses",
        Agent::GeminiCli => "/v1beta/models/gemini:streamGenerateContent",
        Agent::QwenCode => "/v1/chat/completions",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Origin;
    use proptest::prelude::*;
    use std::path::Path;

    fn req(prompt: u64, read: u64, time: f64) -> StoredRequest {
        StoredRequest {
            time: Some(time),
            model: "claude-sonnet-4-5".into(),
            provider: Provider::Anthropic,
            usage: Usage {
                input_uncached: prompt - read,
                cache_read: read,
                cache_write: 0,
                output: 1,
            },
            new_process: false,
            after_compaction: false,
            new_prompt: false,
            origin: Origin::new(Path::new("f"), 1),
            body: None,
            headers: Vec::new(),
            reply: None,
        }
    }

    #[test]
    fn a_read_of_the_previous_prompt_extends_it_and_a_gap_past_five_minutes_expires() {
        let a = req(30_000, 0, 0.0);
        assert_eq!(infer(None, &a), (Some(CauseKind::ColdStart), 0));
        let b = req(31_000, 30_000, 10.0);
        assert_eq!(infer(Some(&a), &b), (None, 0));
        let c = req(32_000, 0, 10.0 + 3600.0);
        assert_eq!(infer(Some(&b), &c), (Some(CauseKind::TtlExpired), 31_000));
        let mut d = req(32_000, 0, 11.0);
        d.new_process = true;
        assert_eq!(infer(Some(&b), &d), (Some(CauseKind::Unknown), 31_000));
        assert_eq!(moment(Some(&b), &d), Moment::Resume);
        let mut e = req(5_000, 0, 11.0);
        e.after_compaction = true;
        assert_eq!(infer(Some(&b), &e), (Some(CauseKind::Compaction), 5_000));
        let mut f = req(32_000, 0, 11.0);
        f.model = "claude-opus-4-5".into();
        assert_eq!(infer(Some(&b), &f), (Some(CauseKind::ModelChanged), 31_000));
    }

    proptest! {
        /// No tokens are lost beyond the previous prompt, nor beyond the request's own; a
        /// read of the whole expectation is never a break.
        #[test]
        fn inference_is_bounded(p in 0u64..1_000_000, q in 1u64..1_000_000, r in 0u64..1_000_000, gap in 0.0f64..100_000.0) {
            let prev = req(p, 0, 0.0);
            let r = r.min(q);
            let cur = req(q, r, gap);
            let (cause, lost) = infer(Some(&prev), &cur);
            prop_assert!(lost <= p.min(q));
            if r >= p.min(q) {
                prop_assert_eq!(cause, None);
            }
            if cause.is_none() {
                prop_assert_eq!(lost, 0);
            }
        }

        /// Cost and loss are finite and the loss never exceeds what the prompt cost beyond
        /// reads.
        #[test]
        fn lost_cost_is_bounded(u in 0u64..1_000_000, r in 0u64..1_000_000, w in 0u64..1_000_000, lost in 0u64..10_000_000) {
            let usage = Usage { input_uncached: u, cache_read: r, cache_write: w, output: 0 };
            let (units, lost_units, usd, lost_usd) = Pricing::default().of(Provider::Anthropic, "claude-sonnet-4-5", usage, lost);
            prop_assert!(units.is_finite() && lost_units.is_finite() && usd.is_finite() && lost_usd.is_finite());
            prop_assert!(lost_units <= units + 1e-6);
        }
    }
}
