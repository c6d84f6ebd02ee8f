//! Cache lifetime economics: what the cache's lifetime lapsing between turns cost, what the
//! longer lifetime would have cost or saved given the gaps observed, and when keeping an
//! entry warm pays.
//!
//! Everything here is read off the comparison engine's verdicts ([`Analysis`]): a request
//! whose cause is [`Cause::TtlExpired`] lost `tokens_lost` tokens (the prefix that would
//! have been read) because the gap since its predecessor reached the lifetime the
//! predecessor's entry had ([`Analysis::lifetime`]). No second comparison is made.
//!
//! **Units.** Costs are in uncached-token units, the [`PriceTable`]'s multipliers of the
//! uncached input price (read 0.1, Anthropic's 5-minute write 1.25, a miss 1), so that they
//! hold whatever the model; money is the units times the model's base input price per
//! million tokens ([`LifetimePrices::input_usd_per_mtok`]), when one is known.
//!
//! **Formulas**, per request, with `P` its tokens lost, `w` its provider's write multiplier
//! (a miss re-writes the entry; OpenAI's write is its miss, 1), `r` its read multiplier:
//!
//! - lost to expiry: `P × (w − r)` (written again instead of read);
//! - the longer lifetime `L'` (Anthropic `"ttl": "1h"`, OpenAI `prompt_cache_retention:
//!   "24h"`), written at `w'` (Anthropic 2, OpenAI the same as in memory): an expiry whose
//!   gap is shorter than `L'` becomes a read, saving `P × (w − r)`; every other token the
//!   request writes (`W − P`, `W` its cache writes) costs `w' − w` more. Net: the extra
//!   minus the saving, positive when the longer lifetime would have cost more;
//! - keep-warm: a cheap request every lifetime `T` (the shortest the provider documents)
//!   re-reads the prefix: bridging a gap `g` takes `⌊g / T⌋` of them, `⌊g / T⌋ × P × r`,
//!   against `P × (w − r)` for writing it again. It pays while `⌊g / T⌋ < (w − r) / r`,
//!   that is for gaps below the break-even `g* = T × ⌈(w − r) / r⌉` ([`break_even`]). The
//!   pings' own tokens (the new turn, the output) are left out: their cost is a lower
//!   bound.
//!
//! **Memory** is bounded: per session a few counters and a fixed histogram of gaps
//! ([`GapHistogram`]), at most [`LifetimeStats::MAX_SESSIONS`] sessions (the proxy's default
//! cap); past it the least recently seen session is folded into
//! [`LifetimeSummary::evicted`], so the totals stay the sum of what is listed and what was
//! folded.

use std::collections::BTreeMap;

use crate::recent::RecentMap;
use std::fmt::Write as _;

use prompt_core::profile::{Extension, Lifetime, Profile, Provider as Host, duration};
use serde::{Deserialize, Serialize};

use super::audit::{Analysis, Cause, RequestAudit, thousands};
use super::{PriceTable, Prices, Rule};

/// Anthropic's 1-hour cache write, in multiples of the base input price: "1-hour cache
/// write tokens are 2 times the base input tokens price"
/// (<https://platform.claude.com/docs/en/about-claude/pricing>, prompt caching
/// multipliers; the 5-minute write is 1.25, a read 0.1).
pub const ANTHROPIC_1H_WRITE: f64 = 2.0;

/// Base input prices in USD per million tokens, per model family (the longest family a
/// model name starts with, followed by its end or `-`), with the page each comes from.
/// Dated: override them with `--prices` (`{"lifetime": {"input_usd_per_mtok": {…}}}`).
pub const INPUT_USD_PER_MTOK: &[(&str, f64, &str)] = &[
    ("claude-opus-4-8", 5.0, ANTHROPIC_PRICING),
    ("claude-opus-4-7", 5.0, ANTHROPIC_PRICING),
    ("claude-opus-4-6", 5.0, ANTHROPIC_PRICING),
    ("claude-opus-4-5", 5.0, ANTHROPIC_PRICING),
    ("claude-opus-4-1", 15.0, ANTHROPIC_PRICING),
    ("claude-opus-4", 15.0, ANTHROPIC_PRICING),
    ("claude-sonnet-4-6", 3.0, ANTHROPIC_PRICING),
    ("claude-sonnet-4-5", 3.0, ANTHROPIC_PRICING),
    ("claude-sonnet-4", 3.0, ANTHROPIC_PRICING),
    ("claude-haiku-4-5", 1.0, ANTHROPIC_PRICING),
    ("claude-3-5-haiku", 0.8, ANTHROPIC_PRICING),
    ("claude-3-haiku", 0.25, ANTHROPIC_PRICING),
    ("gpt-5", 1.25, OPENAI_PRICING),
    ("gpt-5.1", 1.25, OPENAI_PRICING),
    ("gpt-5.4", 2.5, OPENAI_PRICING),
    ("gpt-5.5", 5.0, OPENAI_PRICING),
    ("gemini-2.5-pro", 1.25, GEMINI_PRICING),
    ("deepseek-chat", 0.27, DEEPSEEK_PRICING),
    ("deepseek-reasoner", 0.55, DEEPSEEK_PRICING),
];

/// Anthropic's pricing page ("Base input tokens" per model).
pub const ANTHROPIC_PRICING: &str = "https://platform.claude.com/docs/en/about-claude/pricing";
/// OpenAI's pricing page ("Input" per model), as quoted on 2026-11-05 by
/// api-evangelist's "OpenAI API Pricing" post.
pub const OPENAI_PRICING: &str = "https://developers.openai.com/api/docs/pricing";
/// Gemini's pricing page (2.5 Pro, prompts up to 200k tokens).
pub const GEMINI_PRICING: &str = "https://ai.google.dev/gemini-api/docs/pricing";
/// DeepSeek's pricing page (input, cache miss).
pub const DEEPSEEK_PRICING: &str = "https://api-docs.deepseek.com/quick_start/pricing-details-usd";

/// The largest multiplier or price used; a larger one (a hostile price file) is clamped,
/// so no sum overflows to infinity.
const MAX_PRICE: f64 = 1e6;

fn clamp_price(p: f64) -> f64 {
    if p.is_finite() {
        p.clamp(0.0, MAX_PRICE)
    } else {
        0.0
    }
}

/// What the longer lifetimes cost, and the models' input prices: the `"lifetime"` key of
/// the `--prices` file, every field optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LifetimePrices {
    /// Anthropic's 1-hour write, in multiples of the uncached input price
    /// ([`ANTHROPIC_1H_WRITE`]).
    pub anthropic_1h_write: f64,
    /// OpenAI's write with `prompt_cache_retention: "24h"`; `None`: the same as in memory
    /// ("Prompt cache pricing is the same for both retention policies",
    /// <https://learn.microsoft.com/azure/foundry/openai/how-to/prompt-caching>).
    pub openai_24h_write: Option<f64>,
    /// Base input prices per model family, in USD per million tokens, over
    /// [`INPUT_USD_PER_MTOK`] (same family: this one).
    pub input_usd_per_mtok: BTreeMap<String, f64>,
}

impl Default for LifetimePrices {
    fn default() -> Self {
        Self {
            anthropic_1h_write: ANTHROPIC_1H_WRITE,
            openai_24h_write: None,
            input_usd_per_mtok: BTreeMap::new(),
        }
    }
}

/// Whether `model` is of `family`: it is, or goes on with `-` (a date, a tag).
fn of_family(model: &str, family: &str) -> bool {
    model
        .strip_prefix(family)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

impl LifetimePrices {
    /// The base input price of `model`, in USD per million tokens: the overrides' longest
    /// family, else the built-in table's; `None`: price unknown.
    pub fn input_price(&self, model: &str) -> Option<f64> {
        let model = model.to_ascii_lowercase();
        let own = self
            .input_usd_per_mtok
            .iter()
            .filter(|(f, _)| of_family(&model, &f.to_ascii_lowercase()))
            .max_by_key(|(f, _)| f.len())
            .map(|(_, &p)| p);
        own.or_else(|| {
            INPUT_USD_PER_MTOK
                .iter()
                .filter(|(f, _, _)| of_family(&model, f))
                .max_by_key(|(f, _, _)| f.len())
                .map(|&(_, p, _)| p)
        })
        .map(clamp_price)
    }
}

/// The longer lifetime a provider offers, and its write price.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Longer {
    /// `ttl 1h` or `retention 24h`.
    pub name: &'static str,
    /// How long it keeps an entry.
    pub lifetime: Lifetime,
    /// Its write multiplier.
    pub write: f64,
}

/// The longer lifetime `provider` lets a request ask for, priced.
fn longer_of(host: Host, model: &str, prices: &Prices, lp: &LifetimePrices) -> Option<Longer> {
    match Profile::for_provider(host, model, None).facts().extension {
        Extension::Ttl => Some(Longer {
            name: "ttl 1h",
            lifetime: Lifetime::Idle { seconds: 3600 },
            write: clamp_price(lp.anthropic_1h_write),
        }),
        Extension::Retention => Some(Longer {
            name: "retention 24h",
            lifetime: Lifetime::UpTo { seconds: 86_400 },
            write: clamp_price(lp.openai_24h_write.unwrap_or(prices.write)),
        }),
        Extension::None => None,
    }
}

/// How often a keep-warm request must come, in seconds: the shortest lifetime the provider
/// documents; `None` when it documents none, or entries do not expire by time.
pub fn keep_warm_interval(lifetime: Lifetime) -> Option<u64> {
    match lifetime {
        Lifetime::Idle { seconds } | Lifetime::UpTo { seconds } => Some(seconds),
        Lifetime::IdleBetween { min_seconds, .. } => Some(min_seconds),
        Lifetime::UntilEvicted | Lifetime::Undocumented => None,
    }
    .filter(|&s| s > 0)
}

/// The keep-warm break-even of one provider and lifetime.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakEven {
    /// The provider.
    pub provider: &'static str,
    /// The lifetime (`5 min after the last use`).
    pub lifetime: String,
    /// A keep-warm request every this many seconds.
    pub interval_secs: u64,
    /// Keep-warm requests that cost as much as one re-write: `(w − r) / r`.
    pub pings: f64,
    /// The gap from which keeping warm costs at least as much as writing again:
    /// `T × ⌈(w − r) / r⌉`; `None` when reads are free (keeping warm always pays).
    pub gap_secs: Option<u64>,
}

/// The break-even of keeping an entry of `lifetime` warm at `write` and `read` multipliers
/// ([module docs](self)); `None` when the lifetime has no interval or a write costs no
/// more than a read (nothing to save).
pub fn break_even(lifetime: Lifetime, write: f64, read: f64) -> Option<(u64, f64, Option<u64>)> {
    let t = keep_warm_interval(lifetime)?;
    let (w, r) = (clamp_price(write), clamp_price(read));
    if w <= r {
        return None;
    }
    if r <= 0.0 {
        return Some((t, f64::INFINITY, None));
    }
    let pings = (w - r) / r;
    let n = pings.ceil();
    let gap = if n >= u64::MAX as f64 {
        u64::MAX
    } else {
        t.saturating_mul(n as u64)
    };
    Some((t, pings, Some(gap)))
}

/// Bounds of the gap histogram, in seconds: `< 5 min`, `5–10 min`, `10–60 min`, `1–24 h`,
/// `≥ 24 h`.
const GAP_BOUNDS: [u64; 4] = [300, 600, 3600, 86_400];

/// Labels of [`GapHistogram`]'s buckets.
pub const GAP_LABELS: [&str; 5] = ["<5m", "5-10m", "10-60m", "1-24h", ">=24h"];

/// Gaps between a request and its predecessor, counted in five fixed buckets
/// ([`GAP_LABELS`]): bounded whatever the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct GapHistogram(pub [u64; 5]);

impl GapHistogram {
    fn record(&mut self, secs: u64) {
        let i = GAP_BOUNDS.iter().position(|&b| secs < b).unwrap_or(4);
        self.0[i] = self.0[i].saturating_add(1);
    }

    fn add(&mut self, o: &GapHistogram) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a = a.saturating_add(b);
        }
    }
}

/// The counters of a session, or of all.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LifetimeCounts {
    /// Requests seen.
    pub requests: u64,
    /// Gaps to a predecessor, by length.
    pub gaps: GapHistogram,
    /// Requests whose verdict is `ttl_expired`.
    pub expired: u64,
    /// Tokens they lost (the engine's `tokens_lost`, the audit tokenizer's tokens).
    pub tokens_lost: u64,
    /// What that cost, in uncached-token units: `P × (w − r)`.
    pub lost_units: f64,
    /// In USD, over the expiries whose model's price is known.
    pub lost_usd: f64,
    /// Expiries whose model has no known price (units only).
    pub unpriced_expired: u64,
    /// The longer lifetime instead.
    pub longer: Counterfactual,
    /// Keeping warm instead.
    pub keep_warm: KeepWarm,
}

/// What the longer lifetime would have done to the same requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Counterfactual {
    /// Requests of a provider that offers one, not already using it.
    pub requests: u64,
    /// Requests already using the longer lifetime (left out).
    pub already_longer: u64,
    /// Expiries it would have kept (gap shorter than it).
    pub kept: u64,
    /// Expiries past it too.
    pub still_expired: u64,
    /// Tokens read instead of written again.
    pub kept_tokens: u64,
    /// Saved on them, in units: `P × (w − r)`.
    pub saved_units: f64,
    /// Cache writes it would have charged at its price (`W − P`).
    pub write_tokens: u64,
    /// What they would have cost more, in units: `(W − P) × (w' − w)`.
    pub extra_units: f64,
    /// `extra_units − saved_units`: positive, the longer lifetime costs more.
    pub net_units: f64,
    /// The net in USD, over the requests whose model's price is known.
    pub net_usd: f64,
    /// Requests whose model has no known price.
    pub unpriced: u64,
}

/// Keep-warm requests against the expiries they would have prevented.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KeepWarm {
    /// Expiries with a documented interval.
    pub expiries: u64,
    /// Keep-warm requests needed: `Σ ⌊g / T⌋`.
    pub pings: u64,
    /// Their cost in units: `Σ ⌊g / T⌋ × P × r`.
    pub cost_units: f64,
    /// The re-writes they would have avoided, in units: `Σ P × (w − r)`.
    pub rewrite_units: f64,
}

impl KeepWarm {
    /// Whether keeping warm would have cost less than the expiries did; `None` without
    /// an expiry.
    pub fn pays_off(&self) -> Option<bool> {
        (self.expiries > 0).then_some(self.cost_units < self.rewrite_units)
    }
}

impl LifetimeCounts {
    fn add(&mut self, o: &LifetimeCounts) {
        self.requests = self.requests.saturating_add(o.requests);
        self.gaps.add(&o.gaps);
        self.expired = self.expired.saturating_add(o.expired);
        self.tokens_lost = self.tokens_lost.saturating_add(o.tokens_lost);
        self.lost_units += o.lost_units;
        self.lost_usd += o.lost_usd;
        self.unpriced_expired = self.unpriced_expired.saturating_add(o.unpriced_expired);
        let (c, d) = (&mut self.longer, &o.longer);
        c.requests = c.requests.saturating_add(d.requests);
        c.already_longer = c.already_longer.saturating_add(d.already_longer);
        c.kept = c.kept.saturating_add(d.kept);
        c.still_expired = c.still_expired.saturating_add(d.still_expired);
        c.kept_tokens = c.kept_tokens.saturating_add(d.kept_tokens);
        c.saved_units += d.saved_units;
        c.write_tokens = c.write_tokens.saturating_add(d.write_tokens);
        c.extra_units += d.extra_units;
        c.net_units += d.net_units;
        c.net_usd += d.net_usd;
        c.unpriced = c.unpriced.saturating_add(d.unpriced);
        let (k, l) = (&mut self.keep_warm, &o.keep_warm);
        k.expiries = k.expiries.saturating_add(l.expiries);
        k.pings = k.pings.saturating_add(l.pings);
        k.cost_units += l.cost_units;
        k.rewrite_units += l.rewrite_units;
    }
}

/// One session's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionLifetime {
    /// The session's key (bounded by the engine).
    pub session: String,
    /// Where the key came from.
    pub source: prompt_wire::engine::SessionSource,
    /// Its counters.
    #[serde(flatten)]
    pub counts: LifetimeCounts,
}

/// The lifetime section of the audit's summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LifetimeSummary {
    /// Over every request.
    pub total: LifetimeCounts,
    /// Sessions with an expiry, the costliest first, at most
    /// [`LifetimeSummary::LISTED`].
    pub sessions: Vec<SessionLifetime>,
    /// Sessions with an expiry, listed or not (among those tracked).
    pub sessions_with_expiry: u64,
    /// Sessions seen (tracked now, or folded into `evicted`).
    pub sessions_seen: u64,
    /// Sessions dropped to stay within the bound, their counters folded here.
    pub evicted: LifetimeCounts,
    /// Sessions folded into `evicted`.
    pub evicted_sessions: u64,
    /// The keep-warm break-even per provider and lifetime, at the audit's prices.
    pub break_even: Vec<BreakEven>,
}

impl LifetimeSummary {
    /// Sessions listed in the summary.
    pub const LISTED: usize = 100;
}

/// Lifetime figures over a stream of audited requests, in bounded memory.
#[derive(Debug, Clone)]
pub struct LifetimeStats {
    prices: LifetimePrices,
    /// By session id: its source and its counters; the least recently seen dropped first.
    sessions: RecentMap<String, (prompt_wire::engine::SessionSource, LifetimeCounts)>,
    total: LifetimeCounts,
    evicted: LifetimeCounts,
    evicted_sessions: u64,
    sessions_seen: u64,
}

impl LifetimeStats {
    /// Sessions tracked apart: the proxy's default `max_sessions`.
    pub const MAX_SESSIONS: usize = 10_000;

    /// Nothing counted yet, prices as given.
    pub fn new(prices: LifetimePrices) -> Self {
        Self::with_max_sessions(prices, Self::MAX_SESSIONS)
    }

    /// The same, tracking at most `max_sessions` sessions apart (at least 1).
    pub fn with_max_sessions(prices: LifetimePrices, max_sessions: usize) -> Self {
        Self {
            prices,
            sessions: RecentMap::new(max_sessions),
            total: LifetimeCounts::default(),
            evicted: LifetimeCounts::default(),
            evicted_sessions: 0,
            sessions_seen: 0,
        }
    }

    /// The counters over every request so far (cheap: no sessions sorted).
    pub fn total(&self) -> &LifetimeCounts {
        &self.total
    }

    /// The prices it uses.
    pub fn prices(&self) -> &LifetimePrices {
        &self.prices
    }

    /// Counts one audited request, priced with `table`.
    pub fn record(&mut self, r: &RequestAudit, table: &PriceTable) {
        let one = self.figures(r, table);
        self.total.add(&one);
        let v = &r.verdict;
        if let Some((_, counts)) = self.sessions.get_mut(&v.session.id) {
            counts.add(&one);
            return;
        }
        self.sessions_seen = self.sessions_seen.saturating_add(1);
        if let Some((_, (_, counts))) = self
            .sessions
            .insert(v.session.id.clone(), (v.session.source, one))
        {
            self.evicted.add(&counts);
            self.evicted_sessions = self.evicted_sessions.saturating_add(1);
        }
    }

    /// One request's figures.
    fn figures(&self, r: &RequestAudit, table: &PriceTable) -> LifetimeCounts {
        let v: &Analysis = &r.verdict;
        let prices = table.of_provider(r.priced_as);
        let read = clamp_price(prices.read);
        let mut c = LifetimeCounts {
            requests: 1,
            ..LifetimeCounts::default()
        };
        // Seconds, rounded down and saturating (the engine's gaps are finite and not
        // negative; `as` maps anything else to 0 or `u64::MAX`).
        let gap = v
            .predecessor
            .as_ref()
            .and_then(|p| p.gap_secs)
            .map(|g| g as u64);
        if let Some(g) = gap {
            c.gaps.record(g);
        }
        let usd = v
            .model
            .as_deref()
            .and_then(|m| self.prices.input_price(m))
            .map(|p| p / 1e6);
        let host = v.provider;
        let longer =
            host.and_then(|h| longer_of(h, v.model.as_deref().unwrap_or(""), prices, &self.prices));
        // The request's own entries (what it writes) already live the longer lifetime.
        let already_longer = matches!(
            (longer, v.asks_lifetime),
            (Some(l), Some(asked)) if asked == l.lifetime
        );
        // The write the request's entry was priced at: the longer lifetime's when it had it.
        // (A provider without a write surcharge has its miss price as its write.)
        let write = match longer {
            Some(l) if already_longer => l.write,
            _ => clamp_price(prices.write),
        };
        let expired = v.cause == Some(Cause::TtlExpired);
        let lost = if expired { v.tokens_lost } else { 0 };
        let lost_units = lost as f64 * (write - read).max(0.0);
        if expired {
            c.expired = 1;
            c.tokens_lost = lost;
            c.lost_units = lost_units;
            match usd {
                Some(p) => c.lost_usd = lost_units * p,
                None => c.unpriced_expired = 1,
            }
            if let (Some(t), Some(g)) = (v.lifetime.and_then(keep_warm_interval), gap) {
                let pings = g / t;
                c.keep_warm = KeepWarm {
                    expiries: 1,
                    pings,
                    cost_units: pings as f64 * lost as f64 * read,
                    rewrite_units: lost_units,
                };
            }
        }
        match longer {
            Some(_) if already_longer => c.longer.already_longer = 1,
            Some(l) => {
                let cf = &mut c.longer;
                cf.requests = 1;
                let kept = expired
                    && gap.is_some_and(|g| {
                        l.lifetime.after_gap(g) == prompt_core::profile::GapFate::Kept
                    });
                if kept {
                    cf.kept = 1;
                    cf.kept_tokens = lost;
                    cf.saved_units = lost_units;
                } else if expired {
                    cf.still_expired = 1;
                }
                // The request's cache writes: the reported ones, else the simulated rule's
                // (Anthropic's writes; elsewhere every token not read is written).
                let writes = match (&r.reported, host) {
                    (Some(rep), Some(Host::Anthropic)) => rep.usage.cache_write,
                    (Some(rep), _) => rep
                        .usage
                        .input_uncached
                        .saturating_add(rep.usage.cache_write),
                    (None, Some(Host::Anthropic)) => r.anthropic_write,
                    (None, _) => r
                        .tokens
                        .saturating_sub(r.cached.get(&Rule::OpenAi).copied().unwrap_or(0)),
                };
                let charged = if kept {
                    writes.saturating_sub(lost)
                } else {
                    writes
                };
                cf.write_tokens = charged;
                cf.extra_units = charged as f64 * (l.write - write);
                cf.net_units = cf.extra_units - cf.saved_units;
                match usd {
                    Some(p) => cf.net_usd = cf.net_units * p,
                    None => cf.unpriced = 1,
                }
            }
            None => {}
        }
        c
    }

    /// The section of the summary: totals, the costliest sessions with an expiry, the
    /// break-evens at `table`'s prices.
    pub fn summary(&self, table: &PriceTable) -> LifetimeSummary {
        let mut sessions: Vec<SessionLifetime> = self
            .sessions
            .iter()
            .filter(|(_, (_, c))| c.expired > 0)
            .map(|(id, (source, counts))| SessionLifetime {
                session: id.clone(),
                source: *source,
                counts: counts.clone(),
            })
            .collect();
        let with_expiry = sessions.len() as u64;
        sessions.sort_by(|a, b| {
            b.counts
                .lost_units
                .total_cmp(&a.counts.lost_units)
                .then_with(|| a.session.cmp(&b.session))
        });
        sessions.truncate(LifetimeSummary::LISTED);
        LifetimeSummary {
            total: self.total.clone(),
            sessions,
            sessions_with_expiry: with_expiry,
            sessions_seen: self.sessions_seen,
            evicted: self.evicted.clone(),
            evicted_sessions: self.evicted_sessions,
            break_even: break_evens(table, &self.prices),
        }
    }

    /// Every tracked session's counters (for tests of the bound and the totals).
    pub fn sessions(&self) -> impl Iterator<Item = (&str, &LifetimeCounts)> {
        self.sessions.iter().map(|(k, (_, c))| (k.as_str(), c))
    }
}

/// The break-evens of the lifetimes of Anthropic and OpenAI, at these prices.
pub fn break_evens(table: &PriceTable, lp: &LifetimePrices) -> Vec<BreakEven> {
    let a = &table.anthropic;
    let o = &table.openai;
    let rows = [
        (
            "anthropic",
            Lifetime::Idle { seconds: 300 },
            a.write,
            a.read,
        ),
        (
            "anthropic",
            Lifetime::Idle { seconds: 3600 },
            lp.anthropic_1h_write,
            a.read,
        ),
        (
            "openai",
            prompt_core::profile::Retention::InMemory.lifetime(),
            o.write,
            o.read,
        ),
        (
            "openai",
            Lifetime::UpTo { seconds: 86_400 },
            lp.openai_24h_write.unwrap_or(o.write),
            o.read,
        ),
    ];
    rows.into_iter()
        .filter_map(|(provider, lifetime, w, r)| {
            let (interval_secs, pings, gap_secs) = break_even(lifetime, w, r)?;
            Some(BreakEven {
                provider,
                lifetime: lifetime.to_string(),
                interval_secs,
                pings,
                gap_secs,
            })
        })
        .collect()
}

fn units(u: f64) -> String {
    let n = if u.is_finite() { u.abs().round() } else { 0.0 };
    let s = thousands(if n >= u64::MAX as f64 {
        u64::MAX
    } else {
        n as u64
    });
    if u < 0.0 && n > 0.0 {
        format!("-{s}")
    } else {
        s
    }
}

fn money(usd: f64, unpriced: u64) -> String {
    let usd = if usd.is_finite() { usd } else { 0.0 };
    // Cents, or four decimals below a dollar (a session's loss is often cents).
    let mut s = if usd.abs() >= 1.0 {
        format!("${usd:.2}")
    } else {
        format!("${usd:.4}")
    };
    if unpriced > 0 {
        s.push_str(&format!(", price unknown for {unpriced}"));
    }
    s
}

fn net(units_: f64, usd: f64, unpriced: u64) -> String {
    if units(units_.abs()) == "0" {
        return "0 units".to_owned();
    }
    let verb = if units_ > 0.0 { "costs" } else { "saves" };
    format!(
        "{verb} {} units ({})",
        units(units_.abs()),
        money(usd.abs(), unpriced)
    )
}

/// The gaps as `<5m 1, 5-10m 0, …`.
fn gaps(h: &GapHistogram) -> String {
    GAP_LABELS
        .iter()
        .zip(h.0)
        .map(|(l, n)| format!("{l} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn keep_warm_text(k: &KeepWarm) -> String {
    match k.pays_off() {
        None => "keep-warm: no expiry with a documented lifetime".to_owned(),
        Some(pays) => format!(
            "keep-warm: {}, {} units against {} re-written: {}",
            plural(k.pings, "ping"),
            units(k.cost_units),
            units(k.rewrite_units),
            if pays {
                "would have paid off"
            } else {
                "would not have paid off"
            }
        ),
    }
}

/// The "Cache lifetime" section as `cacheline audit` and `cacheline proxy` print it: the
/// totals, the longer lifetime's net, the break-evens, and at most `top` sessions with an
/// expiry. One formatter for both.
pub fn summary_text(s: &LifetimeSummary, top: usize) -> String {
    let t = &s.total;
    let mut out = String::from("Cache lifetime:");
    if t.expired == 0 {
        let _ = write!(
            out,
            "\n  no request lost its cache to expiry ({}; gaps: {})",
            plural(s.sessions_seen, "session"),
            gaps(&t.gaps)
        );
    } else {
        let _ = write!(
            out,
            "\n  {} expired in {} of {} sessions: {} tokens lost, {} units ({}); gaps: {}",
            plural(t.expired, "request"),
            s.sessions_with_expiry,
            s.sessions_seen,
            thousands(t.tokens_lost),
            units(t.lost_units),
            money(t.lost_usd, t.unpriced_expired),
            gaps(&t.gaps)
        );
    }
    let c = &t.longer;
    if c.requests > 0 {
        let _ = write!(
            out,
            "\n  the longer lifetime instead (anthropic ttl 1h, openai retention 24h): keeps {} of {} expiries ({} tokens read, {} units saved); its writes +{} units on {} tokens; net {}",
            c.kept,
            c.kept.saturating_add(c.still_expired),
            thousands(c.kept_tokens),
            units(c.saved_units),
            units(c.extra_units),
            thousands(c.write_tokens),
            net(c.net_units, c.net_usd, c.unpriced)
        );
    }
    if c.already_longer > 0 {
        let _ = write!(
            out,
            "\n  {} already on the longer lifetime",
            plural(c.already_longer, "request")
        );
    }
    if t.expired > 0 {
        let _ = write!(out, "\n  {}", keep_warm_text(&t.keep_warm));
    }
    let be: Vec<String> = s
        .break_even
        .iter()
        .map(|b| match b.gap_secs {
            Some(g) => format!(
                "{} {} below {}",
                b.provider,
                duration(b.interval_secs),
                duration(g)
            ),
            None => format!("{} {} always", b.provider, duration(b.interval_secs)),
        })
        .collect();
    if !be.is_empty() {
        let _ = write!(
            out,
            "\n  keep-warm pays for gaps (a request every lifetime): {}",
            be.join(", ")
        );
    }
    for (i, x) in s.sessions.iter().take(top).enumerate() {
        let k = &x.counts;
        let _ = write!(
            out,
            "\n  {}. session {} ({}): {} expired, {} tokens lost, {} units ({}); gaps: {}",
            i + 1,
            prompt_core::input::excerpt(&x.session, 48),
            serde_json::to_value(x.source)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            k.expired,
            thousands(k.tokens_lost),
            units(k.lost_units),
            money(k.lost_usd, k.unpriced_expired),
            gaps(&k.gaps)
        );
        if k.longer.requests > 0 {
            let _ = write!(
                out,
                "; longer lifetime: {} kept, net {}",
                k.longer.kept,
                net(k.longer.net_units, k.longer.net_usd, k.longer.unpriced)
            );
        }
        let _ = write!(out, "; {}", keep_warm_text(&k.keep_warm));
    }
    let more = s
        .sessions_with_expiry
        .saturating_sub(top.min(s.sessions.len()) as u64);
    if more > 0 {
        let _ = write!(
            out,
            "\n  … and {} more with an expiry",
            plural(more, "session")
        );
    }
    if s.evicted_sessions > 0 {
        let _ = write!(
            out,
            "\n  {} folded into the totals (the least recently seen, past the sessions tracked apart)",
            plural(s.evicted_sessions, "session")
        );
    }
    out
}

fn plural(n: u64, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}
