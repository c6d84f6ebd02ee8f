//! `cacheline audit`: the provider rules over a real request log, and what broke the cache.
//!
//! A log is JSON Lines: one request body per line, of any API the wire's guard knows
//! ([`prompt_wire::body_parts`]: OpenAI Chat Completions and Responses, Anthropic Messages,
//! Gemini, llama.cpp), or `{"request": body, "response": …}`; a response (beside the body's
//! keys, or in the wrapper) is the whole reply or the streamed reply's server-sent events,
//! and its usage is read with [`Usage::detect`] (a stream's through the wire's stream reader:
//! the same usage as its whole reply's). Each request becomes segments — the tools field,
//! the system field of the APIs that keep it beside the messages, then each message's JSON
//! exactly as logged, but for Anthropic's `cache_control` markers
//! ([`prompt_wire::without_cache_control`]: breakpoints move, and no cache keys on them) —
//! tokenized and replayed through a bounded [`CacheSim`]. For every
//! request after the first the audit names where it diverged from the best earlier request
//! (the one in the window sharing the most tokens): message index, role, byte offset in the
//! messages array as `[m0,m1,…]` (or in the tools or system field), an excerpt of both sides,
//! and a [`Classification`].
//!
//! Anthropic breakpoints are the request's own `cache_control` markers when it has any, else
//! where the library would place them: after the leading system messages (or the system
//! field) and after the last message.
//!
//! **Memory** is bounded by the configuration, not by the log: the simulator's window and
//! stores ([`SimConfig`]), the token cache ([`AuditConfig::token_cache`]), at most
//! [`AuditConfig::max_breakers`] breaker groups, and the current line, itself at most
//! [`AuditConfig::max_line_bytes`]: a longer line is read through in bounded chunks
//! ([`LineReader`]) and skipped as [`LineProblem::TooLong`]. A streamed response is read in
//! pieces, its events dropped as they come. Per-request results are handed
//! to the caller as they are produced. Roles and tool names quoted in diagnostics are
//! shortened, so what a breaker group keeps is small whatever the log holds.
//!
//! **Counters** (tokens, requests, tokens lost) saturate at `u64::MAX` instead of wrapping;
//! reported usage is summed by [`SessionUsage`], which sets aside a response it cannot add.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};

use prompt_core::PrefixCheck;
use prompt_core::divergence::{Divergence, Excerpt, check_prefix, message_index_at};
use prompt_core::raw_json::canonical;
use prompt_wire::{BodyParts, GuardError, Shape, body_parts, without_cache_control};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::meter::{Provider, SessionUsage, Usage};
use super::sim::{
    CacheSim, Common, Retained, RuleOutcome, SimConfig, TokenCache, TokenizedRequest,
};
use super::tokenizer::Tokenizer;
use super::{PriceTable, Rule, share, shorten};

/// What changed at the divergence point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Classification {
    /// The first message, or a leading system message, was rewritten in place.
    HeadRewrite,
    /// A message was edited, removed or inserted after the first one (a per-turn injected
    /// message dropped the next turn is a removal, wherever it sat).
    HistoryEdit,
    /// The `tools` array changed (added, removed, edited or reordered tools).
    ToolSchemaChange,
    /// The same messages in another order, or the same message serialized differently.
    Reorder,
    /// The earlier request is a prefix of this one.
    AppendOnly,
}

impl Classification {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Classification::HeadRewrite => "head_rewrite",
            Classification::HistoryEdit => "history_edit",
            Classification::ToolSchemaChange => "tool_schema_change",
            Classification::Reorder => "reorder",
            Classification::AppendOnly => "append_only",
        }
    }
}

/// Which part of the request diverged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The messages array (Responses `input`, Gemini `contents`).
    Messages,
    /// The `tools` array.
    Tools,
    /// The system field of the APIs that keep it beside the messages (Anthropic `system`,
    /// Responses `instructions`, Gemini `systemInstruction`).
    System,
}

/// Where a request diverged from the best earlier one, what changed there, and what it cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheBreak {
    /// Where (byte offset in the array, message or tool index, excerpts).
    #[serde(flatten)]
    pub at: Divergence,
    /// Log line of the earlier request.
    pub earlier_line: u64,
    /// What changed.
    pub classification: Classification,
    /// Which array.
    #[serde(rename = "in")]
    pub part: Part,
    /// Role of that message in this request.
    pub role: Option<String>,
    /// Role of the message at that index in the earlier request.
    pub earlier_role: Option<String>,
    /// A sentence on what happened.
    pub detail: String,
    /// Tokens shared with the earlier request.
    pub common_tokens: u64,
    /// Tokens of the earlier request past the divergence: reusable had this request only
    /// appended to it. 0 for a new conversation.
    pub tokens_lost: u64,
    /// This request has no assistant message yet: it starts a conversation, so it continues
    /// no earlier request and loses nothing (it still shares what it can, such as the
    /// system prompt).
    pub new_conversation: bool,
}

/// Usage a response reported.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Reported {
    /// The shape recognized.
    pub provider: Provider,
    /// The counts.
    pub usage: Usage,
    /// Its hit rate.
    pub hit_rate: f64,
}

/// The audit of one request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestAudit {
    /// Line in the log, from 1.
    pub line: u64,
    /// The request body's shape, as the wire's guard reads it.
    pub shape: Shape,
    /// Input tokens by the audit's tokenizer.
    pub tokens: u64,
    /// Messages.
    pub messages: usize,
    /// Tokens a cache could serve, per rule.
    pub cached: BTreeMap<Rule, u64>,
    /// Tokens Anthropic's rule would write.
    pub anthropic_write: u64,
    /// Usage reported by the logged response, if any.
    pub reported: Option<Reported>,
    /// Why a logged response's usage could not be read.
    pub reported_error: Option<String>,
    /// `None` for the first request.
    pub divergence: Option<CacheBreak>,
}

/// Why a line was skipped.
#[derive(Debug, thiserror::Error)]
pub enum LineProblem {
    /// Not UTF-8.
    #[error("not UTF-8 (byte {0})")]
    NotUtf8(usize),
    /// Not JSON, or not an object.
    #[error("not a JSON object: {0}")]
    Json(serde_json::Error),
    /// A `request` that is neither a body nor a body's JSON as a string.
    #[error("\"request\" is {0}: expected the request body (an object, or its JSON as a string)")]
    NotABody(&'static str),
    /// A request body the wire's guard cannot read: no known shape (no `messages`,
    /// `input`/`instructions`, `contents`), a field of the wrong type, over its size limit.
    #[error("{0}")]
    Request(GuardError),
    /// Longer than [`AuditConfig::max_line_bytes`]: read through and discarded, not parsed.
    #[error("line {line} is longer than the {limit}-byte limit ({bytes} bytes)")]
    TooLong {
        /// The line, from 1.
        line: u64,
        /// Its length in bytes, its `\n` excluded.
        bytes: u64,
        /// The limit.
        limit: usize,
    },
}

/// A skipped line.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: skipped: {problem}")]
pub struct LineError {
    /// The log.
    pub path: PathBuf,
    /// Line, from 1.
    pub line: u64,
    /// Why.
    pub problem: LineProblem,
}

/// Why an audit stopped.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The log could not be opened.
    #[error("{path}: cannot open")]
    Open {
        /// The log.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Reading failed.
    #[error("{path}:{line}: read error")]
    Read {
        /// The log.
        path: PathBuf,
        /// The line being read.
        line: u64,
        /// The OS error.
        source: std::io::Error,
    },
    /// The caller's sink failed (writing the report).
    #[error("writing the report: {0}")]
    Output(std::io::Error),
}

/// Audit parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AuditConfig {
    /// Rules and memory bounds of the simulator.
    pub sim: SimConfig,
    /// Tokens per generation of the token cache.
    pub token_cache: usize,
    /// The rule whose figures stand for the hit rate and the overspend when no response
    /// reported usage.
    pub backend: Rule,
    /// Prices.
    pub prices: PriceTable,
    /// Cache-breakers listed in the summary.
    pub top: usize,
    /// Breaker groups tracked (the smallest is dropped when full).
    pub max_breakers: usize,
    /// The longest line audited, in bytes (its `\n` excluded); a longer line is skipped as
    /// [`LineProblem::TooLong`] without ever being held whole. Default
    /// [`DEFAULT_MAX_LINE_BYTES`].
    pub max_line_bytes: usize,
}

/// The default [`AuditConfig::max_line_bytes`]: 32 MiB. A request of a million tokens of
/// text is 4–8 MB of JSON; 32 MB is also the largest request Anthropic's Messages API
/// accepts. Auditing a line holds it about 3.5 times over (the line, its messages, their
/// tokens), so the cap keeps a hostile line to ≈ 115 MB on top of the audit's other bounds.
pub const DEFAULT_MAX_LINE_BYTES: usize = 32 << 20;

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            sim: SimConfig::default(),
            token_cache: 2 << 20,
            backend: Rule::OpenAi,
            prices: PriceTable::default(),
            top: 5,
            max_breakers: 4096,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }
}

/// A group of divergences with the same classification, place and role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Breaker {
    /// What changed.
    pub classification: Classification,
    /// Which array.
    #[serde(rename = "in")]
    pub part: Part,
    /// Message (or tool) index, for head rewrites and tool changes; for the other kinds the
    /// first request's.
    pub message_index: Option<usize>,
    /// Role of the earlier request's message there.
    pub role: Option<String>,
    /// Tokens lost, summed.
    pub tokens_lost: u64,
    /// Requests in the group.
    pub requests: u64,
    /// The first request's line.
    pub first_line: u64,
    /// The first request's detail.
    pub detail: String,
}

/// Why an audit of no input tokens has no overspend.
const NO_INPUT_TOKENS: &str = "no input tokens: nothing was spent to compare with the ideal";

/// One rule over the whole log.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RuleSummary {
    /// Tokens served over input tokens.
    pub cached_share: f64,
    /// Over the physical limit's share.
    pub limit_share: f64,
    /// Tokens served.
    pub cached_tokens: u64,
    /// Tokens written.
    pub write_tokens: u64,
}

/// The audit's summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditSummary {
    /// Requests audited.
    pub requests: u64,
    /// Lines skipped.
    pub malformed: u64,
    /// Input tokens.
    pub tokens: u64,
    /// Hit rate: reported usage when responses carried it, else the configured rule's.
    pub hit_rate: f64,
    /// Where `hit_rate` comes from.
    pub hit_rate_source: String,
    /// Share of input tokens already sent earlier (the physical limit).
    pub limit_share: f64,
    /// Cost above the ideal (every physical-limit token read from cache), in % of the ideal;
    /// `None` when it is undefined, and [`AuditSummary::overspend_undefined`] says why.
    pub overspend_pct: Option<f64>,
    /// Why `overspend_pct` is undefined: no input tokens (nothing was spent, so nothing was
    /// overspent: an empty log is not 100% cheaper than the ideal), or an ideal cost of zero.
    pub overspend_undefined: Option<&'static str>,
    /// The tokenizer.
    pub tokenizer: String,
    /// Per rule.
    pub backends: BTreeMap<Rule, RuleSummary>,
    /// Reported usage, summed.
    pub reported: Option<SessionUsage>,
    /// Requests per classification (new conversations excepted).
    pub classifications: BTreeMap<Classification, u64>,
    /// Requests that start a conversation (no assistant message yet).
    pub new_conversations: u64,
    /// The cache-breakers that lost the most tokens.
    pub top_breakers: Vec<Breaker>,
    /// What the audit held at the end (its memory bound in action).
    pub retained: Retained,
    /// Tokens held by the token cache at the end.
    pub retained_cache_tokens: usize,
}

/// What a sink receives.
#[derive(Debug)]
pub enum Event<'a> {
    /// A request was audited.
    Request(&'a RequestAudit),
    /// A line was skipped.
    Skipped(&'a LineError),
}

/// Breakers are grouped by classification, array and role; head rewrites and tool changes
/// also by index (message 0 and message 1 are different breakers), history edits not (the
/// index of an injected message grows with the history).
type BreakerKey = (Classification, Part, Option<String>, Option<usize>);

/// Audits requests one line at a time.
pub struct Auditor<'t> {
    config: AuditConfig,
    cache: TokenCache<'t>,
    sim: CacheSim,
    requests: u64,
    malformed: u64,
    tokens: u64,
    sums: BTreeMap<Rule, RuleOutcome>,
    reported: SessionUsage,
    reported_limit: u64,
    reported_tokens: u64,
    classifications: BTreeMap<Classification, u64>,
    new_conversations: u64,
    breakers: HashMap<BreakerKey, Breaker>,
}

impl std::fmt::Debug for Auditor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auditor")
            .field("requests", &self.requests)
            .finish()
    }
}

/// A message's role, or its `type` (Responses items: `function_call`, `reasoning`, …).
#[derive(Deserialize)]
struct RoleOnly {
    #[serde(default)]
    role: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

/// The longest role kept (real ones are `system`, `user`, `assistant`, `tool`, …): what a
/// breaker group and a diagnostic hold stays small.
const ROLE_BYTES: usize = 64;

/// The longest tool name quoted, and how many are listed, in a diagnostic.
const NAME_BYTES: usize = 64;
const NAMES_LISTED: usize = 12;

fn role_of(message: &str) -> Option<String> {
    let only = serde_json::from_str::<RoleOnly>(message).ok()?;
    let role = only.role.or(only.kind)?;
    Some(if role.len() > ROLE_BYTES {
        shorten(&role, ROLE_BYTES)
    } else {
        role
    })
}

fn is_system(role: Option<&str>) -> bool {
    matches!(role, Some("system" | "developer"))
}

/// What the model wrote: an assistant message (Gemini's role `model`), a Responses
/// reasoning item or call (`function_call`, `web_search_call`, …).
fn is_assistant(role: Option<&str>) -> bool {
    role.is_some_and(|r| matches!(r, "assistant" | "model" | "reasoning") || r.ends_with("_call"))
}

/// The segments a request's tokens are counted over: the tools field, the system field
/// (of the APIs that keep it beside the messages), each empty (no tokens) when absent, then
/// the messages. Chat Completions' system messages are among its messages.
fn segments<'b>(parts: &BodyParts<'b>) -> Vec<&'b str> {
    let mut texts = Vec::with_capacity(LEAD + parts.messages.len());
    texts.push(parts.tools.unwrap_or(""));
    texts.push(parts.system.unwrap_or(""));
    texts.extend(parts.messages.iter().copied());
    texts
}

/// The segments before the messages ([`segments`]): the tools field, then the system field.
const LEAD: usize = 2;
/// Where the system field is in the lead.
const SYSTEM_SEGMENT: usize = 1;

impl<'t> Auditor<'t> {
    /// An auditor counting tokens with `tokenizer`.
    pub fn new(tokenizer: &'t dyn Tokenizer, config: AuditConfig) -> Self {
        Self {
            cache: TokenCache::new(tokenizer, config.token_cache),
            sim: CacheSim::new(config.sim),
            config,
            requests: 0,
            malformed: 0,
            tokens: 0,
            sums: BTreeMap::new(),
            reported: SessionUsage::new(),
            reported_limit: 0,
            reported_tokens: 0,
            classifications: BTreeMap::new(),
            new_conversations: 0,
            breakers: HashMap::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AuditConfig {
        &self.config
    }

    /// Counts a line skipped by the caller (not UTF-8, too long, unreadable).
    pub fn skip(&mut self) {
        self.malformed = self.malformed.saturating_add(1);
    }

    /// Audits one line. Blank lines give `Ok(None)`; a malformed line, or one longer than
    /// [`AuditConfig::max_line_bytes`], is counted and its problem returned.
    pub fn push_line(
        &mut self,
        line: u64,
        text: &str,
    ) -> Result<Option<RequestAudit>, LineProblem> {
        if text.len() > self.config.max_line_bytes {
            self.skip();
            return Err(LineProblem::TooLong {
                line,
                bytes: text.len() as u64,
                limit: self.config.max_line_bytes,
            });
        }
        if text.trim().is_empty() {
            return Ok(None);
        }
        let result = self.audit(line, text);
        if result.is_err() {
            self.skip();
        }
        result.map(Some)
    }

    fn audit(&mut self, line: u64, text: &str) -> Result<RequestAudit, LineProblem> {
        let logged = super::logged::read_line(text)?;
        let parts = body_parts(logged.request.as_bytes()).map_err(LineProblem::Request)?;
        let sent = segments(&parts);
        let breakpoints = breakpoints(&sent, LEAD);
        // Counted as the provider's cache keys them: without the breakpoints, which move.
        let compared: Vec<Cow<'_, str>> = sent.iter().map(|t| without_cache_control(t)).collect();
        let texts: Vec<&str> = compared.iter().map(|t| t.as_ref()).collect();
        let request = self
            .cache
            .request(&texts, breakpoints)
            .with_lead(LEAD)
            .with_tag(line);
        let later = request.clone();
        let seen = self.sim.observe(request);

        let (reported, reported_error) = match logged
            .response
            .map(|r| super::logged::reported_usage(parts.shape, r))
        {
            None | Some(Ok(None)) => (None, None),
            Some(Ok(Some((provider, usage)))) => (
                Some(Reported {
                    provider,
                    usage,
                    hit_rate: usage.hit_rate(),
                }),
                None,
            ),
            Some(Err(e)) => (None, Some(e)),
        };

        let tokens = seen.tokens as u64;
        self.requests = self.requests.saturating_add(1);
        self.tokens = self.tokens.saturating_add(tokens);
        for (rule, outcome) in seen.outcomes() {
            *self.sums.entry(rule).or_default() += outcome;
        }
        // The limit is compared with the reported usage over the same requests: those the
        // session could add.
        if let Some(r) = &reported
            && self.reported.record(r.usage)
        {
            self.reported_limit = self
                .reported_limit
                .saturating_add(seen.outcome(Rule::Limit).read);
            self.reported_tokens = self.reported_tokens.saturating_add(tokens);
        }
        let divergence = seen
            .best
            .as_ref()
            .map(|best| diverge(&best.earlier, &later, best.common));
        if let Some(d) = &divergence {
            if d.new_conversation {
                self.new_conversations = self.new_conversations.saturating_add(1);
            } else {
                let n = self.classifications.entry(d.classification).or_default();
                *n = n.saturating_add(1);
            }
            if d.tokens_lost > 0 {
                self.record_breaker(line, d);
            }
        }
        Ok(RequestAudit {
            line,
            shape: parts.shape,
            tokens,
            messages: parts.messages.len(),
            cached: seen.outcomes().map(|(r, o)| (r, o.read)).collect(),
            anthropic_write: seen.outcome(Rule::Anthropic).write,
            reported,
            reported_error,
            divergence,
        })
    }

    fn record_breaker(&mut self, line: u64, d: &CacheBreak) {
        let index = match d.classification {
            Classification::HeadRewrite | Classification::ToolSchemaChange => d.at.message_index,
            _ => None,
        };
        let key = (d.classification, d.part, d.earlier_role.clone(), index);
        if !self.breakers.contains_key(&key) && self.breakers.len() >= self.config.max_breakers {
            let smallest = self
                .breakers
                .iter()
                .min_by_key(|(_, b)| b.tokens_lost)
                .map(|(k, _)| k.clone());
            if let Some(k) = smallest {
                self.breakers.remove(&k);
            }
        }
        let b = self.breakers.entry(key).or_insert_with(|| Breaker {
            classification: d.classification,
            part: d.part,
            message_index: d.at.message_index,
            role: d.earlier_role.clone(),
            tokens_lost: 0,
            requests: 0,
            first_line: line,
            detail: d.detail.clone(),
        });
        b.tokens_lost = b.tokens_lost.saturating_add(d.tokens_lost);
        b.requests = b.requests.saturating_add(1);
    }

    /// The summary so far.
    pub fn summary(&self) -> AuditSummary {
        let limit = self.sums.get(&Rule::Limit).copied().unwrap_or_default();
        let backends = Rule::ALL
            .into_iter()
            .map(|rule| {
                let o = self.sums.get(&rule).copied().unwrap_or_default();
                let summary = RuleSummary {
                    cached_share: share(o.read, self.tokens),
                    limit_share: share(o.read, limit.read),
                    cached_tokens: o.read,
                    write_tokens: o.write,
                };
                (rule, summary)
            })
            .collect();
        let prices = self.config.prices.get(self.config.backend);
        let (hit_rate, source, actual, ideal_share, priced) = if self.reported.requests > 0 {
            let u = self.reported.total;
            let input = u.input() as f64;
            let actual = if input == 0.0 {
                0.0
            } else {
                (prices.miss * u.input_uncached as f64
                    + prices.read * u.cache_read as f64
                    + prices.write * u.cache_write as f64)
                    / input
            };
            let set_aside = match self.reported.overflowed {
                0 => String::new(),
                n => format!(", {n} more set aside: their counts overflow the sum"),
            };
            (
                u.hit_rate(),
                format!(
                    "reported usage ({} requests{set_aside})",
                    self.reported.requests
                ),
                actual,
                share(self.reported_limit, self.reported_tokens),
                u.input(),
            )
        } else {
            let o = self
                .sums
                .get(&self.config.backend)
                .copied()
                .unwrap_or_default();
            let actual = if self.tokens == 0 {
                0.0
            } else {
                prices.cost(&o) / self.tokens as f64
            };
            (
                share(o.read, self.tokens),
                format!("{} rule", self.config.backend),
                actual,
                share(limit.read, self.tokens),
                self.tokens,
            )
        };
        let ideal = prices.miss * (1.0 - ideal_share) + prices.read * ideal_share;
        let (overspend_pct, overspend_undefined) = if priced == 0 {
            (None, Some(NO_INPUT_TOKENS))
        } else if ideal <= 0.0 {
            (None, Some("the price table makes the ideal cost zero"))
        } else {
            (Some((actual / ideal - 1.0) * 100.0), None)
        };
        let mut top: Vec<Breaker> = self.breakers.values().cloned().collect();
        top.sort_by(|a, b| {
            b.tokens_lost
                .cmp(&a.tokens_lost)
                .then(a.first_line.cmp(&b.first_line))
        });
        top.truncate(self.config.top);
        AuditSummary {
            requests: self.requests,
            malformed: self.malformed,
            tokens: self.tokens,
            hit_rate,
            hit_rate_source: source,
            limit_share: share(limit.read, self.tokens),
            overspend_pct,
            overspend_undefined,
            tokenizer: self.cache.tokenizer().name().to_owned(),
            backends,
            reported: (self.reported.requests > 0 || self.reported.overflowed > 0)
                .then_some(self.reported),
            classifications: self.classifications.clone(),
            new_conversations: self.new_conversations,
            top_breakers: top,
            retained: self.sim.retained(),
            retained_cache_tokens: self.cache.retained_tokens(),
        }
    }
}

/// Explicit `cache_control` markers (at most the last four count), else after the leading
/// system messages and after the last message.
fn breakpoints(texts: &[&str], lead: usize) -> Vec<usize> {
    let explicit: Vec<usize> = texts
        .iter()
        .enumerate()
        .filter(|(_, t)| t.contains("\"cache_control\""))
        .map(|(i, _)| i + 1)
        .collect();
    if !explicit.is_empty() {
        return explicit;
    }
    let system = texts[lead..]
        .iter()
        .take_while(|m| is_system(role_of(m).as_deref()))
        .count();
    let mut out = Vec::with_capacity(2);
    if system > 0 {
        out.push(lead + system);
    } else if lead > 0 {
        out.push(lead);
    }
    if texts.len() > out.last().copied().unwrap_or(0) {
        out.push(texts.len());
    }
    out
}

/// Byte offset of message `index` in `[m0,m1,…]`.
fn message_offset(messages: &[super::sim::Segment], index: usize) -> usize {
    1 + messages[..index.min(messages.len())]
        .iter()
        .map(|m| m.text().len() + 1)
        .sum::<usize>()
}

fn same_value(a: &str, b: &str) -> bool {
    match (
        serde_json::from_str::<Value>(a),
        serde_json::from_str::<Value>(b),
    ) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

fn diverge(earlier: &TokenizedRequest, later: &TokenizedRequest, common: Common) -> CacheBreak {
    let new_conversation = !later
        .messages()
        .iter()
        .any(|m| is_assistant(role_of(m.text()).as_deref()));
    let tokens_lost = if new_conversation {
        0
    } else {
        (earlier.len() - common.tokens.min(earlier.len())) as u64
    };
    let base =
        |classification, part, message_index, byte_offset, excerpt, detail: String| CacheBreak {
            at: Divergence {
                byte_offset,
                message_index,
                producer: None,
                excerpt,
            },
            earlier_line: earlier.tag(),
            classification,
            part,
            role: None,
            earlier_role: None,
            detail,
            common_tokens: common.tokens as u64,
            tokens_lost,
            new_conversation,
        };
    if common.segment == SYSTEM_SEGMENT {
        let (e, l) = (
            earlier.segments()[SYSTEM_SEGMENT].text(),
            later.segments()[SYSTEM_SEGMENT].text(),
        );
        let offset = match check_prefix(e.as_bytes(), l.as_bytes()) {
            PrefixCheck::Diverged(d) => d.byte_offset,
            PrefixCheck::Prefix => e.len(),
        };
        let detail = match (e.is_empty(), l.is_empty()) {
            (true, _) => "a system field was added".to_owned(),
            (_, true) => "the system field was removed".to_owned(),
            _ => "the system field was rewritten".to_owned(),
        };
        let mut d = base(
            Classification::HeadRewrite,
            Part::System,
            None,
            offset,
            Excerpt::around(e.as_bytes(), l.as_bytes(), offset),
            detail,
        );
        d.role = Some("system".to_owned());
        d.earlier_role = d.role.clone();
        return d;
    }
    if common.segment < LEAD {
        let (e, l) = (
            earlier.segments().first().map_or("", |s| s.text()),
            later.segments().first().map_or("", |s| s.text()),
        );
        let (offset, detail) = tools_change(e, l);
        return base(
            Classification::ToolSchemaChange,
            Part::Tools,
            message_index_at(l.as_bytes(), offset),
            offset,
            Excerpt::around(e.as_bytes(), l.as_bytes(), offset),
            detail,
        );
    }
    let em = earlier.messages();
    let lm = later.messages();
    let i = common.segment - LEAD;
    let earlier_len = message_offset(em, em.len()) + usize::from(em.is_empty());
    if i >= em.len() {
        // The earlier request is a prefix of this one.
        let offset = earlier_len.saturating_sub(1);
        let added = lm.len().saturating_sub(em.len());
        let detail = if added == 0 && lm.len() == em.len() {
            format!("identical to line {} (a retry?)", earlier.tag())
        } else {
            format!("appends {added} message(s) to line {}", earlier.tag())
        };
        let mut d = base(
            Classification::AppendOnly,
            Part::Messages,
            Some(em.len()),
            offset,
            Excerpt {
                earlier: em.last().map_or(String::new(), |m| {
                    Excerpt::of(m.text().as_bytes(), m.text().len())
                }),
                later: lm
                    .get(em.len())
                    .map_or(String::new(), |m| Excerpt::of(m.text().as_bytes(), 0)),
            },
            detail,
        );
        d.role = lm.get(em.len()).and_then(|m| role_of(m.text()));
        // Extending an earlier request is continuing it, assistant message or not.
        d.new_conversation = false;
        return d;
    }
    let (e, l) = (em[i].text(), lm.get(i).map_or("", |m| m.text()));
    let within = match check_prefix(e.as_bytes(), l.as_bytes()) {
        PrefixCheck::Diverged(d) => d.byte_offset,
        PrefixCheck::Prefix => e.len(),
    };
    let offset = message_offset(em, i) + within;
    let role = lm.get(i).and_then(|m| role_of(m.text()));
    let earlier_role = role_of(e);
    let leading_system = em
        .iter()
        .take_while(|m| is_system(role_of(m.text()).as_deref()))
        .count();
    let find = |list: &[super::sim::Segment], text: &str| {
        list.iter()
            .enumerate()
            .skip(i + 1)
            .find(|(_, m)| m.text() == text)
            .map(|(j, _)| j)
    };
    let moved_on = find(lm, e);
    let moved_back = if l.is_empty() { None } else { find(em, l) };
    let who = |r: &Option<String>| r.clone().unwrap_or_else(|| "?".to_owned());
    let (classification, detail) = if lm.len() <= i {
        (
            Classification::HistoryEdit,
            format!(
                "the earlier request's messages from {i} on are gone ({} removed)",
                em.len() - i
            ),
        )
    } else if same_value(e, l) {
        (
            Classification::Reorder,
            format!(
                "message {i} has the same content, serialized differently (key order or whitespace)"
            ),
        )
    } else if i == 0 {
        (
            Classification::HeadRewrite,
            format!("message {i} ({}) was rewritten", who(&earlier_role)),
        )
    } else if moved_on.is_some() && moved_back.is_some() {
        (
            Classification::Reorder,
            format!(
                "messages moved: earlier message {i} ({}) is now later in the request",
                who(&earlier_role)
            ),
        )
    } else if let Some(j) = moved_back {
        (
            Classification::HistoryEdit,
            format!(
                "earlier message {i} ({}) was removed{}",
                who(&earlier_role),
                if j - i > 1 {
                    format!(" with the {} after it", j - i - 1)
                } else {
                    String::new()
                }
            ),
        )
    } else if let Some(j) = moved_on {
        (
            Classification::HistoryEdit,
            format!(
                "{} message(s) inserted before earlier message {i} ({})",
                j - i,
                who(&earlier_role)
            ),
        )
    } else if i < leading_system {
        (
            Classification::HeadRewrite,
            format!(
                "message {i} ({}), in the leading system messages, was rewritten",
                who(&earlier_role)
            ),
        )
    } else {
        (
            Classification::HistoryEdit,
            format!("message {i} ({}) was edited", who(&earlier_role)),
        )
    };
    let detail = if new_conversation {
        format!(
            "a new conversation (no assistant message yet) sharing {} tokens with line {}; {detail}",
            common.tokens,
            earlier.tag()
        )
    } else {
        detail
    };
    let mut d = base(
        classification,
        Part::Messages,
        Some(i),
        offset,
        Excerpt::around(e.as_bytes(), l.as_bytes(), within),
        detail,
    );
    d.role = role;
    d.earlier_role = earlier_role;
    d
}

/// Byte offset of the first difference between two `tools` arrays, and what changed.
/// Linear in the arrays' size (tools are compared as multisets through a canonical
/// serialization), and the sentence names at most [`NAMES_LISTED`] tools.
fn tools_change(earlier: &str, later: &str) -> (usize, String) {
    let offset = match check_prefix(earlier.as_bytes(), later.as_bytes()) {
        PrefixCheck::Diverged(d) => d.byte_offset,
        PrefixCheck::Prefix => earlier.len().saturating_sub(1),
    };
    let parse = |s: &str| serde_json::from_str::<Vec<Value>>(s).unwrap_or_default();
    let (e, l) = (parse(earlier), parse(later));
    let name = |v: &Value| {
        let n = v
            .pointer("/function/name")
            .or_else(|| v.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("?");
        shorten(n, NAME_BYTES)
    };
    let names = |tools: &mut dyn Iterator<Item = &Value>| {
        let mut listed: Vec<String> = Vec::new();
        let mut more = 0usize;
        for t in tools {
            if listed.len() < NAMES_LISTED {
                listed.push(name(t));
            } else {
                more += 1;
            }
        }
        if more > 0 {
            listed.push(format!("… {more} more"));
        }
        listed.join(", ")
    };
    let detail = if earlier.is_empty() {
        format!("tools added ({} tools)", l.len())
    } else if later.is_empty() {
        "tools removed".to_owned()
    } else {
        let (ek, lk): (Vec<String>, Vec<String>) = (
            e.iter().map(canonical).collect(),
            l.iter().map(canonical).collect(),
        );
        // What each side has that the other lacks, counting duplicates.
        let mut counts: HashMap<&str, isize> = HashMap::with_capacity(ek.len());
        for k in &ek {
            *counts.entry(k).or_default() += 1;
        }
        let added: Vec<usize> = lk
            .iter()
            .enumerate()
            .filter_map(|(i, k)| match counts.get_mut(k.as_str()) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    None
                }
                _ => Some(i),
            })
            .collect();
        let mut counts: HashMap<&str, isize> = HashMap::with_capacity(lk.len());
        for k in &lk {
            *counts.entry(k).or_default() += 1;
        }
        let removed: Vec<usize> = ek
            .iter()
            .enumerate()
            .filter_map(|(i, k)| match counts.get_mut(k.as_str()) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    None
                }
                _ => Some(i),
            })
            .collect();
        if added.is_empty() && removed.is_empty() {
            if ek == lk {
                "same tools, serialized differently (key order or whitespace)".to_owned()
            } else {
                format!(
                    "same tools in a different order: [{}] → [{}]",
                    names(&mut e.iter()),
                    names(&mut l.iter())
                )
            }
        } else {
            format!(
                "tools changed: new or edited [{}], gone or edited [{}]",
                names(&mut added.iter().map(|&i| &l[i])),
                names(&mut removed.iter().map(|&i| &e[i]))
            )
        }
    };
    (offset, detail)
}

/// One line read by [`LineReader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line<'a> {
    /// The line's bytes, without its `\n` and any `\r` before it.
    Text(&'a [u8]),
    /// A line longer than the limit, read through and discarded: its length in bytes (its
    /// `\n` excluded).
    TooLong(u64),
}

/// Reads lines from a [`BufRead`] without ever holding more than `max_line_bytes` of one: a
/// longer line is consumed in the reader's own chunks, counted and dropped, and reading goes
/// on with the next line. Its buffer's capacity never exceeds the limit
/// ([`LineReader::buffer_capacity`]).
#[derive(Debug)]
pub struct LineReader<R> {
    reader: R,
    buf: Vec<u8>,
    max: usize,
    line: u64,
}

impl<R: BufRead> LineReader<R> {
    /// Lines of `reader`, at most `max_line_bytes` each (the `\n` excluded).
    pub fn new(reader: R, max_line_bytes: usize) -> Self {
        Self {
            reader,
            buf: Vec::new(),
            max: max_line_bytes,
            line: 0,
        }
    }

    /// The number of the line last returned, from 1 (0 before the first).
    pub fn line_number(&self) -> u64 {
        self.line
    }

    /// The capacity of the line buffer: at most the limit, whatever was read.
    pub fn buffer_capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The text of the line last returned, taken out of the reader, which starts its next
    /// line in a buffer of its own: for a caller that keeps the line, without a copy.
    pub fn take_line(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.buf)
    }

    /// The next line; `None` at the end of the input. A last line without `\n` counts.
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        self.buf.clear();
        let mut len = 0u64;
        let mut too_long = false;
        let mut any = false;
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(chunk) => chunk,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                break;
            }
            any = true;
            let (part, used, end) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (&chunk[..i], i + 1, true),
                None => (chunk, chunk.len(), false),
            };
            len = len.saturating_add(part.len() as u64);
            if !too_long {
                let needed = self.buf.len().saturating_add(part.len());
                if needed > self.max {
                    too_long = true;
                    self.buf.clear();
                } else {
                    if needed > self.buf.capacity() {
                        // Grow geometrically, but never past the limit.
                        let target = needed
                            .max(self.buf.capacity().saturating_mul(2))
                            .min(self.max);
                        self.buf.reserve_exact(target - self.buf.len());
                    }
                    self.buf.extend_from_slice(part);
                }
            }
            self.reader.consume(used);
            if end {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        self.line = self.line.saturating_add(1);
        if too_long {
            return Ok(Some(Line::TooLong(len)));
        }
        while self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(Some(Line::Text(&self.buf)))
    }
}

/// Streams `reader` (a JSONL log named `path`) through `auditor`, handing each result to
/// `sink` as soon as it is produced. Stops only on a read error or a sink error. Lines are
/// read by a [`LineReader`] capped at [`AuditConfig::max_line_bytes`]: a longer line is
/// skipped ([`LineProblem::TooLong`]) and never held whole.
pub fn audit_reader<R: BufRead>(
    reader: R,
    path: &Path,
    auditor: &mut Auditor<'_>,
    mut sink: impl FnMut(Event<'_>) -> std::io::Result<()>,
) -> Result<(), AuditError> {
    let limit = auditor.config().max_line_bytes;
    let mut lines = LineReader::new(reader, limit);
    loop {
        let line = lines.line_number().saturating_add(1);
        let next = lines.next_line().map_err(|source| AuditError::Read {
            path: path.to_owned(),
            line,
            source,
        })?;
        let outcome = match next {
            None => return Ok(()),
            Some(Line::TooLong(bytes)) => {
                auditor.skip();
                Err(LineProblem::TooLong { line, bytes, limit })
            }
            Some(Line::Text(bytes)) => match std::str::from_utf8(bytes) {
                Ok(text) => auditor.push_line(line, text),
                Err(e) => {
                    auditor.skip();
                    Err(LineProblem::NotUtf8(e.valid_up_to()))
                }
            },
        };
        match outcome {
            Ok(Some(audit)) => sink(Event::Request(&audit)),
            Ok(None) => Ok(()),
            Err(problem) => sink(Event::Skipped(&LineError {
                path: path.to_owned(),
                line,
                problem,
            })),
        }
        .map_err(AuditError::Output)?;
    }
}
