//! `cacheline audit`: the provider rules over a real request log, and what broke the cache.
//!
//! A log is JSON Lines: one request body per line, of any API the wire's guard knows
//! ([`prompt_wire::body_parts`]: OpenAI Chat Completions and Responses, Anthropic Messages,
//! Gemini, llama.cpp), or `{"request": body, "response": …}`; a response (beside the body's
//! keys, or in the wrapper) is the whole reply or the streamed reply's server-sent events,
//! and its usage is read with [`Usage::detect`] (a stream's through the wire's stream reader:
//! the same usage as its whole reply's). A wrapped line may also carry the request's `path`,
//! `headers` (only those that key a cache or name a session or agent are read), `ts` and
//! `session`. Each request is read by the one comparison engine ([`prompt_wire::engine`]):
//! its elements as the provider caches them (tools, system, messages), its lane and session,
//! its predecessor, every change and its [`Cause`]; each element is tokenized once and the
//! request replayed through a bounded [`CacheSim`] of its lane.
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

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::io::{self, BufRead};
use std::path::{Path, PathBuf};

use prompt_core::ApiKind;
use prompt_core::profile::Provider as Host;
use prompt_wire::engine::{Context, Engine, EngineConfig, Exchange, ReportedRead};
use prompt_wire::{GuardError, ProviderDiagnosis};
use serde::Serialize;

use super::catalogue::{
    AgentId, Catalogue, Element, LearnedBlock, MAX_ELEMENT_BYTES, VolatileBlocks, WriterFinding,
    WriterMatch,
};
use super::logged::LoggedExchange;
use super::meter::{Provider, SessionUsage, Usage};
use super::provider_verdict::{ProviderTally, ProviderVerdict, diagnostics_api};
use super::sim::{
    CacheSim, Retained, RuleOutcome, Segment, SimConfig, TokenCache, TokenizedRequest,
};
use super::tokenizer::Tokenizer;
use super::{PriceTable, Rule, share, shorten};

pub use prompt_wire::engine::{Analysis, Cause, CauseKind, Change, Place, Predecessor};

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
    /// The request body's API, as the engine reads it (in JSON, its shape:
    /// `chat_completions`, `responses`, `anthropic`, `gemini`).
    #[serde(serialize_with = "prompt_engine::serialize_shape")]
    pub shape: ApiKind,
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
    /// Whose prices it is priced at: the provider its reported usage came from, else the
    /// provider its shape and model say it went to.
    #[serde(serialize_with = "by_name")]
    pub priced_as: Provider,
    /// The engine's verdict: its session and lane, its predecessor, every change, the cause,
    /// and tokens lost, expected and short.
    pub verdict: Analysis,
    /// The agent that sent it, from its `user-agent` (or `originator`) header.
    pub agent: Option<AgentId>,
    /// Who wrote the verdict's change: a writer catalogue entry whose agent, versions, cause,
    /// path and pattern match, or a learned volatile block ([`crate::catalogue`]).
    pub writer: Option<WriterFinding>,
    /// The provider's verdict beside the engine's, when the logged response carries cache
    /// diagnostics ([`ProviderVerdict`]).
    pub provider_verdict: Option<ProviderVerdict>,
    /// What `cacheline proxy --stabilize` did to it (the audited request is then what was
    /// sent upstream).
    pub repair: Option<crate::logged::RepairNote>,
}

impl RequestAudit {
    /// What its provider's own column says this request lost against `pred`, independently
    /// of the engine's count: what the provider's rule would read of an append-only
    /// continuation of `pred`, less what it read of this request (Anthropic: `pred`'s read
    /// and its writes, against this request's read by the simulator; elsewhere the exact
    /// shared prefix, the `llama_cpp` column, read by the provider's minimum and steps). With
    /// the tolerance a comparison with [`Analysis::tokens_lost`] allows: the rule's step, or
    /// two tokens (the tokenizer cut at the change), and on Anthropic the tokens of the
    /// breakpoint markers that moved. `None` where the columns cannot tell: a cause not in
    /// the prompt's text ([`CauseKind::in_the_prompt`]: the simulator's columns read the
    /// prompt's tokens alone, so a model, cache-key or parameter change is invisible to them).
    ///
    /// [`Analysis::tokens_lost`]: prompt_wire::engine::Analysis::tokens_lost
    /// [`CauseKind::in_the_prompt`]: prompt_wire::engine::CauseKind::in_the_prompt
    pub fn lost_by_provider_column(&self, pred: &RequestAudit) -> Option<(u64, u64)> {
        if !self
            .verdict
            .cause
            .as_ref()
            .is_some_and(|c| c.kind().in_the_prompt())
        {
            return None;
        }
        use prompt_core::profile::{Granularity, Profile};
        let column = |r: &RequestAudit, rule: Rule| r.cached.get(&rule).copied().unwrap_or(0);
        if self.verdict.provider == Some(Host::Anthropic) {
            let ideal = column(pred, Rule::Anthropic) + pred.anthropic_write;
            // The simulator tokenizes an element in the form it was first seen, the engine in
            // the request's own: a `cache_control` marker that moved off a message is counted
            // on one side only (about ten tokens of JSON each).
            const MARKER_TOKENS: u64 = 12;
            let markers = (pred.verdict.breakpoints.len() + self.verdict.breakpoints.len()) as u64;
            return Some((
                ideal.saturating_sub(column(self, Rule::Anthropic)),
                2 + MARKER_TOKENS * markers,
            ));
        }
        let profile = Profile::lookup(
            self.shape,
            self.verdict.model.as_deref().unwrap_or(""),
            None,
        );
        let step = match profile.granularity() {
            Granularity::Steps(s) | Granularity::Units(s) | Granularity::Blocks(s) => u64::from(s),
            Granularity::Tokens => 2,
        };
        let ideal = profile.readable(pred.tokens, pred.tokens + 1);
        let read = profile.readable(column(self, Rule::LlamaCpp), self.tokens);
        Some((ideal.saturating_sub(read), step))
    }
}

/// The most element forms whose own token count is remembered ([`Auditor`]).
const OWN_TOKENS_CAP: usize = 1 << 17;

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
    #[error("{path}: cannot open: {}", prompt_core::input::chain(.source))]
    Open {
        /// The log.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Reading failed.
    #[error("{path}:{line}: read error: {}", prompt_core::input::chain(.source))]
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
#[non_exhaustive]
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
    /// The comparison engine's bounds (requests and elements held for the predecessor
    /// search, bodies kept for excerpts).
    pub engine: EngineConfig,
}

impl AuditConfig {
    /// The same, with `sim` (rules and memory bounds of the simulator).
    pub fn with_sim(mut self, sim: SimConfig) -> Self {
        self.sim = sim;
        self
    }

    /// The same, with `token_cache` (tokens per generation of the token cache).
    pub fn with_token_cache(mut self, token_cache: usize) -> Self {
        self.token_cache = token_cache;
        self
    }

    /// The same, with `backend` (the rule whose figures stand for the hit rate and the overspend when no response).
    pub fn with_backend(mut self, backend: Rule) -> Self {
        self.backend = backend;
        self
    }

    /// The same, with `prices` (prices).
    pub fn with_prices(mut self, prices: PriceTable) -> Self {
        self.prices = prices;
        self
    }

    /// The same, with `top` (cache-breakers listed in the summary).
    pub fn with_top(mut self, top: usize) -> Self {
        self.top = top;
        self
    }

    /// The same, with `max_breakers` (breaker groups tracked (the smallest is dropped when full)).
    pub fn with_max_breakers(mut self, max_breakers: usize) -> Self {
        self.max_breakers = max_breakers;
        self
    }

    /// The same, with `max_line_bytes` (the longest line audited, in bytes (its `\n` excluded); a longer line is skipped as).
    pub fn with_max_line_bytes(mut self, max_line_bytes: usize) -> Self {
        self.max_line_bytes = max_line_bytes;
        self
    }
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
            engine: EngineConfig::default(),
        }
    }
}

/// Requests whose verdict has the same cause at the same place, grouped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Breaker {
    /// The cause.
    pub cause: CauseKind,
    /// Where (`tools[1]`, `system block 0`, `message 0`, `a user message`, `the request`).
    pub place: String,
    /// Tokens lost, summed.
    pub tokens_lost: u64,
    /// Requests in the group.
    pub requests: u64,
    /// The first request's line.
    pub first_line: u64,
    /// The first request's cause, as a sentence.
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
    /// Requests per verdict cause (cold starts, new conversations among them).
    pub causes: BTreeMap<CauseKind, u64>,
    /// Requests that start a conversation (no assistant message yet).
    pub new_conversations: u64,
    /// Requests with a provider's verdict, by how it stood to the engine's.
    pub provider_verdicts: ProviderTally,
    /// Requests the engine held for the predecessor search at the end, and dropped.
    pub engine: prompt_wire::engine::Held,
    /// The cache-breakers that lost the most tokens.
    pub top_breakers: Vec<Breaker>,
    /// What the audit held at the end (its memory bound in action).
    pub retained: Retained,
    /// Tokens held by the token cache at the end.
    pub retained_cache_tokens: usize,
    /// Cache lifetime economics: expiries, the longer lifetime's net, keep-warm
    /// ([`crate::lifetime`]).
    pub lifetime: super::lifetime::LifetimeSummary,
    /// Blocks that changed, with no catalogue entry, in at least
    /// [`crate::catalogue::LEARNED_SESSIONS`] sessions of one agent (most sessions first, at
    /// most [`crate::catalogue::MAX_LEARNED_LISTED`]).
    pub learned_volatile: Vec<LearnedBlock>,
}

/// What a sink receives.
#[derive(Debug)]
pub enum Event<'a> {
    /// A request was audited.
    Request(&'a RequestAudit),
    /// A line was skipped.
    Skipped(&'a LineError),
}

/// Breakers are grouped by cause and place.
type BreakerKey = (CauseKind, String);

/// The bounded number of lanes simulated apart (caches are per model); past it, the
/// requests of new lanes share one more simulator.
const MAX_LANES: usize = 256;

/// Audits requests one line at a time.
pub struct Auditor<'t> {
    config: AuditConfig,
    cache: TokenCache<'t>,
    /// Each element form's own token count, by the hash of its bytes as sent: an element equal
    /// to one cached but sent otherwise is counted once in its own form, then looked up.
    own_tokens: HashMap<u64, u32>,
    engine: Engine,
    sims: HashMap<String, CacheSim>,
    overflow_sim: CacheSim,
    requests: u64,
    malformed: u64,
    tokens: u64,
    sums: BTreeMap<Rule, RuleOutcome>,
    reported: SessionUsage,
    reported_limit: u64,
    reported_tokens: u64,
    /// Cost of the reported usage at each request's provider's prices, and its ideal.
    reported_cost: (f64, f64),
    /// Cost of the backend rule's outcome at each request's provider's prices, and its
    /// ideal.
    simulated_cost: (f64, f64),
    causes: BTreeMap<CauseKind, u64>,
    new_conversations: u64,
    provider_verdicts: ProviderTally,
    breakers: HashMap<BreakerKey, Breaker>,
    lifetime: super::lifetime::LifetimeStats,
    catalogue: Catalogue,
    volatile: VolatileBlocks,
    /// The reply id of the request audited last.
    last_response_id: Option<String>,
}

impl std::fmt::Debug for Auditor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auditor")
            .field("requests", &self.requests)
            .finish()
    }
}

/// The provider whose prices a request is billed at: its reported usage's, else the one
/// its shape and model name (self-hosted servers at llama.cpp's prices; an unknown one at
/// OpenAI's, the shape it speaks).
fn provider_of(reported: Option<&Reported>, host: Option<Host>) -> Provider {
    match (reported, host) {
        (Some(r), _) => r.provider,
        (None, Some(Host::Anthropic)) => Provider::Anthropic,
        (None, Some(Host::DeepSeek)) => Provider::DeepSeek,
        (None, Some(Host::Gemini)) => Provider::Gemini,
        (None, Some(Host::LlamaCpp | Host::Vllm | Host::Sglang | Host::Ollama)) => {
            Provider::LlamaCpp
        }
        (None, Some(Host::OpenAi | Host::AzureOpenAi) | None) => Provider::OpenAi,
    }
}

/// A provider by its name (`openai`, `llama_cpp`), as `--prices` keys it.
fn by_name<S: serde::Serializer>(p: &Provider, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(p)
}

/// Where a change is, as a breaker group names it: tools and system by index, the first
/// messages by index, later ones by role (an injected message's index grows with the
/// history).
fn breaker_place(change: Option<&Change>) -> String {
    match change.map(|c| &c.place) {
        None | Some(Place::Request) => "the request".to_owned(),
        Some(Place::Message { index, .. }) if *index < 2 => format!("message {index}"),
        Some(Place::Message { .. }) => format!(
            "a {} message",
            change
                .and_then(|c| c.divergence.producer.as_deref())
                .unwrap_or("?")
        ),
        Some(Place::System { .. }) => "the system field".to_owned(),
        Some(other) => other.to_string(),
    }
}

impl<'t> Auditor<'t> {
    /// An auditor counting tokens with `tokenizer`.
    pub fn new(tokenizer: &'t dyn Tokenizer, config: AuditConfig) -> Self {
        Self {
            cache: TokenCache::new(tokenizer, config.token_cache),
            own_tokens: HashMap::new(),
            engine: Engine::new(config.engine),
            sims: HashMap::new(),
            overflow_sim: CacheSim::new(config.sim),
            config,
            requests: 0,
            malformed: 0,
            tokens: 0,
            sums: BTreeMap::new(),
            reported: SessionUsage::new(),
            reported_limit: 0,
            reported_tokens: 0,
            reported_cost: (0.0, 0.0),
            simulated_cost: (0.0, 0.0),
            causes: BTreeMap::new(),
            new_conversations: 0,
            provider_verdicts: ProviderTally::default(),
            breakers: HashMap::new(),
            lifetime: super::lifetime::LifetimeStats::new(Default::default()),
            catalogue: Catalogue::builtin().cloned().unwrap_or_default(),
            volatile: VolatileBlocks::default(),
            last_response_id: None,
        }
    }

    /// The same, pricing the lifetime economics with `prices` (the longer lifetimes'
    /// writes, the models' input prices: the `"lifetime"` key of `--prices`).
    pub fn with_lifetime_prices(mut self, prices: super::lifetime::LifetimePrices) -> Self {
        self.lifetime = super::lifetime::LifetimeStats::new(prices);
        self
    }

    /// The cache lifetime counters over every request so far, without the rest of the
    /// summary (cheap enough to read after each request).
    pub fn lifetime_total(&self) -> &super::lifetime::LifetimeCounts {
        self.lifetime.total()
    }

    /// The same, naming writers by `catalogue` (the built-in one, extended by a user's file)
    /// instead of the built-in catalogue.
    pub fn with_catalogue(mut self, catalogue: Catalogue) -> Self {
        self.catalogue = catalogue;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &AuditConfig {
        &self.config
    }

    /// What the engine keeps of the request audited last (`audit`), to compare later
    /// requests with it in a later launch ([`prompt_engine::RequestRecord`]).
    pub fn last_record(&self, audit: &RequestAudit) -> Option<prompt_engine::RequestRecord> {
        self.engine
            .last_record(&audit.verdict, self.last_response_id.as_deref())
    }

    /// Holds a request an earlier launch audited ([`prompt_engine::Engine::restore`]).
    pub fn restore(
        &mut self,
        record: prompt_engine::RequestRecord,
        tag: u64,
        logged: bool,
        body: Option<&str>,
    ) {
        self.engine.restore(record, tag, logged, body);
    }

    /// Counts a line skipped by the caller (not UTF-8, too long, unreadable).
    pub fn skip(&mut self) {
        self.malformed = self.malformed.saturating_add(1);
    }

    /// Audits one line as a [`LineReader`] read it: a line over the cap or not UTF-8 is
    /// counted as skipped and its problem returned; else as [`Auditor::push_line`].
    pub fn push_read(
        &mut self,
        line: u64,
        read: Line<'_>,
    ) -> Result<Option<RequestAudit>, LineProblem> {
        match read {
            Line::TooLong(bytes) => {
                self.skip();
                Err(LineProblem::TooLong {
                    line,
                    bytes,
                    limit: self.config.max_line_bytes,
                })
            }
            Line::Text(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => self.push_line(line, text),
                Err(e) => {
                    self.skip();
                    Err(LineProblem::NotUtf8(e.valid_up_to()))
                }
            },
        }
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

    /// Audits one exchange handed over as it is (the proxy's, or a line read by
    /// [`read_line`](super::logged::read_line)): the same audit as [`Auditor::push_line`],
    /// with no JSON between. A request that cannot be read is counted and its problem
    /// returned.
    pub fn push_exchange(
        &mut self,
        line: u64,
        exchange: LoggedExchange<'_>,
    ) -> Result<RequestAudit, LineProblem> {
        let result = self.audit_exchange(line, exchange);
        if result.is_err() {
            self.skip();
        }
        result
    }

    fn audit(&mut self, line: u64, text: &str) -> Result<RequestAudit, LineProblem> {
        let logged = super::logged::read_line(text)?;
        self.audit_exchange(line, logged)
    }

    fn audit_exchange(
        &mut self,
        line: u64,
        logged: LoggedExchange<'_>,
    ) -> Result<RequestAudit, LineProblem> {
        // Read once: the engine's view gives the shape the response is read by.
        let context = Context {
            path: logged.path.as_deref(),
            headers: &logged.headers,
        };
        let canonical = match logged.top {
            // A bare body: its top-level object was read with the line.
            Some(top) => self.engine.read_object(&logged.request, top, context),
            None => self.engine.read(logged.request.as_bytes(), context),
        }
        .map_err(LineProblem::Request)?;
        let shape = canonical.shape;
        let response = logged
            .response
            .as_ref()
            .map(|r| super::logged::read_response(shape, r));
        let response_id = response.as_ref().and_then(|r| r.id.clone());
        self.last_response_id.clone_from(&response_id);
        let replied = response
            .as_ref()
            .is_some_and(|r| matches!(r.usage, Ok(Some(_))));
        let diagnostics = response.as_ref().and_then(|r| r.diagnostics.clone());
        let repair = logged.repair.clone();
        // Anthropic omits `diagnostics` when its comparison found no divergence: a reply
        // without them, to a request that named the previous reply, is its "no change".
        let asked = shape == ApiKind::Anthropic
            && replied
            && (logged.diagnosed_against.is_some() || names_previous_message(&logged.request));
        // Usage handed over as counts (a session store keeps them, not the reply) stands for
        // a response's.
        let usage = match (response.map(|r| r.usage), logged.usage) {
            (None | Some(Ok(None)), Some(given)) => Some(Ok(Some(given))),
            (read, _) => read,
        };
        let (reported, reported_error) = match usage {
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
        let exchange = Exchange {
            path: logged.path.as_deref(),
            headers: &logged.headers,
            body: logged.request.as_bytes(),
            ts: logged.ts,
            session: logged.session.as_deref(),
            reported: reported.as_ref().map(|r| ReportedRead {
                input: r.usage.input(),
                cached: r.usage.cache_read,
            }),
            response_id: response_id.as_deref(),
            launch: logged.launch.as_deref(),
        };
        // Each element tokenized once as the provider caches it (the token cache keyed by
        // its text), for the engine's counts and the simulator's rules alike.
        let mut segments: Vec<Segment> = Vec::new();
        let cache = &mut self.cache;
        let own_tokens = &mut self.own_tokens;
        // Bounded like the token cache: forgotten at once past it, then counted again.
        if own_tokens.len() >= OWN_TOKENS_CAP {
            own_tokens.clear();
        }
        let mut verdict = self
            .engine
            .analyze_read(canonical, &exchange, line, &mut |c, b| {
                let segment = cache.segment_keyed(b.hash, || c.sent_text(b));
                // The engine counts the element's own bytes: one equal as cached but sent
                // otherwise (a string re-sent as its one text block) is not counted as the
                // form seen first, so a verdict does not depend on what else was seen (a
                // proxy launched per turn prints what the audit of its log says). Each
                // form is compared once, by the hash of its bytes.
                let len = *own_tokens.entry(b.raw_hash).or_insert_with(|| {
                    let sent = c.sent_text(b);
                    let n = if segment.text() == sent.as_ref() {
                        segment.len()
                    } else {
                        cache.tokenizer().encode(&sent).len()
                    };
                    u32::try_from(n).unwrap_or(u32::MAX)
                });
                segments.push(segment);
                len
            });
        // A break's tokens lost end where the provider's rule stops reading: inside the
        // changed element, after the tokens still shared there.
        if let Some((start, at)) = verdict.partial_span() {
            let body: &str = &logged.request;
            let start = body.floor_char_boundary(start.min(body.len()));
            let at = body.floor_char_boundary(at.min(body.len()));
            if at > start {
                let shared = self.cache.tokenizer().encode(&body[start..at]).len();
                verdict.settle(shared as u64);
            }
        }
        let lead = verdict.lead;
        let breakpoints = if verdict.breakpoints.is_empty() {
            // Where the library would place them: after the tools and system, and at the end.
            let mut b = Vec::with_capacity(2);
            if lead > 0 {
                b.push(lead);
            }
            if segments.len() > lead {
                b.push(segments.len());
            }
            b
        } else {
            verdict.breakpoints.iter().map(|&p| p as usize).collect()
        };
        let request = TokenizedRequest::from_segments(segments, breakpoints)
            .with_lead(lead)
            .with_tag(line);
        let sim = if self.sims.contains_key(&verdict.lane) || self.sims.len() < MAX_LANES {
            self.sims
                .entry(verdict.lane.clone())
                .or_insert_with(|| CacheSim::new(self.config.sim))
        } else {
            &mut self.overflow_sim
        };
        let seen = sim.observe(request);

        let tokens = seen.tokens as u64;
        self.requests = self.requests.saturating_add(1);
        self.tokens = self.tokens.saturating_add(tokens);
        for (rule, outcome) in seen.outcomes() {
            *self.sums.entry(rule).or_default() += outcome;
        }
        let provider = provider_of(reported.as_ref(), verdict.provider);
        let prices = *self.config.prices.of_provider(provider);
        let limit = seen.outcome(Rule::Limit).read;
        let limit_share = share(limit, tokens);
        // The limit is compared with the reported usage over the same requests: those the
        // session could add.
        if let Some(r) = &reported
            && self.reported.record(r.usage)
        {
            self.reported_limit = self.reported_limit.saturating_add(limit);
            self.reported_tokens = self.reported_tokens.saturating_add(tokens);
            let u = r.usage;
            let input = u.input() as f64;
            self.reported_cost.0 += prices.miss * u.input_uncached as f64
                + prices.read * u.cache_read as f64
                + prices.write * u.cache_write as f64;
            self.reported_cost.1 +=
                input * (prices.miss * (1.0 - limit_share) + prices.read * limit_share);
        }
        let backend = seen.outcome(self.config.backend);
        self.simulated_cost.0 += prices.cost(&backend);
        self.simulated_cost.1 +=
            prices.miss * tokens.saturating_sub(limit) as f64 + prices.read * limit as f64;

        if verdict.new_conversation && verdict.predecessor.is_some() {
            self.new_conversations = self.new_conversations.saturating_add(1);
        }
        if let Some(cause) = &verdict.cause {
            let n = self.causes.entry(cause.kind()).or_default();
            *n = n.saturating_add(1);
        }
        if verdict.tokens_lost > 0 {
            self.record_breaker(line, &verdict);
        }
        let agent = AgentId::from_headers(&logged.headers);
        let writer = self.writer_of(line, &verdict, agent.as_ref());
        let provider_verdict = diagnostics_api(shape).and_then(|api| match diagnostics {
            Some(Ok(d)) => Some(ProviderVerdict::reconcile(d, &verdict, api)),
            Some(Err(problem)) => Some(ProviderVerdict::unreadable(problem)),
            None if asked => Some(ProviderVerdict::reconcile(
                ProviderDiagnosis::NoChange,
                &verdict,
                api,
            )),
            None => None,
        });
        if let Some(p) = &provider_verdict {
            self.provider_verdicts.count(p);
        }
        let audit = RequestAudit {
            line,
            shape,
            tokens,
            messages: verdict.messages,
            cached: seen.outcomes().map(|(r, o)| (r, o.read)).collect(),
            anthropic_write: seen.outcome(Rule::Anthropic).write,
            reported,
            reported_error,
            priced_as: provider,
            verdict,
            agent,
            writer,
            provider_verdict,
            repair,
        };
        self.lifetime.record(&audit, &self.config.prices);
        Ok(audit)
    }

    /// Who wrote the verdict's change: the first change that loses tokens (or, for a verdict
    /// whose cause has no change of its own, such as `provider_side`, the changes listed
    /// beside it), looked up in the catalogue in the later request's element and in its
    /// predecessor's; failing that, the block is counted towards a learned volatile block.
    fn writer_of(
        &mut self,
        line: u64,
        v: &Analysis,
        agent: Option<&AgentId>,
    ) -> Option<WriterFinding> {
        let cause = v.cause.as_ref()?;
        let pred = v.predecessor.as_ref()?;
        // A change that loses nothing is no one's doing, unless it only lost nothing because
        // the prompt was shorter than the provider caches (the writer breaks a longer one).
        if v.tokens_lost == 0 && v.shortfall.is_none() && !v.nothing_cached() {
            return None;
        }
        let own = v.changes.iter().find(|c| c.cause == *cause);
        let candidates: Vec<&Change> = match own {
            Some(c) => vec![c],
            None => v.changes.iter().take(4).collect(),
        };
        if let Some(agent) = agent {
            for c in &candidates {
                let later = self.engine.element_text(line, &c.place);
                let earlier = self.engine.element_text(pred.tag, &c.place);
                let mut elements = Vec::with_capacity(2);
                if let Some((text, start)) = later {
                    let at = c.divergence.byte_offset.checked_sub(start as usize);
                    elements.push(Element {
                        text: prompt_core::input::head(text, MAX_ELEMENT_BYTES),
                        change_at: at,
                    });
                }
                if let Some((text, _)) = earlier {
                    elements.push(Element {
                        text: prompt_core::input::head(text, MAX_ELEMENT_BYTES),
                        change_at: None,
                    });
                }
                if let Some(w) = self.catalogue.find(
                    agent,
                    cause.kind(),
                    &c.json_path,
                    &elements,
                    pred.earlier_launch,
                ) {
                    return Some(WriterFinding::Catalogue(WriterMatch::of(w, agent)));
                }
            }
        }
        // Only a change that lost tokens teaches which blocks are volatile.
        let change = own?;
        let session = {
            use std::hash::{Hash, Hasher};
            let mut h = std::hash::DefaultHasher::new();
            v.session.id.hash(&mut h);
            h.finish()
        };
        let name = agent.map_or("?", |a| a.name.as_str());
        self.volatile
            .record(name, &change.json_path, session)
            .map(WriterFinding::Learned)
    }

    fn record_breaker(&mut self, line: u64, v: &Analysis) {
        let Some(cause) = &v.cause else {
            return;
        };
        let change = v.changes.iter().find(|c| c.cause == *cause);
        let key = (cause.kind(), breaker_place(change));
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
        let b = self.breakers.entry(key.clone()).or_insert_with(|| Breaker {
            cause: key.0,
            place: key.1.clone(),
            tokens_lost: 0,
            requests: 0,
            first_line: line,
            detail: shorten(&cause.to_string(), 256),
        });
        b.tokens_lost = b.tokens_lost.saturating_add(v.tokens_lost);
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
        let (hit_rate, source, (actual, ideal), priced) = if self.reported.requests > 0 {
            let u = self.reported.total;
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
                self.reported_cost,
                u.input(),
            )
        } else {
            let o = self
                .sums
                .get(&self.config.backend)
                .copied()
                .unwrap_or_default();
            (
                share(o.read, self.tokens),
                format!("{} rule", self.config.backend),
                self.simulated_cost,
                self.tokens,
            )
        };
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
            causes: self.causes.clone(),
            new_conversations: self.new_conversations,
            provider_verdicts: self.provider_verdicts,
            engine: self.engine.held(),
            top_breakers: top,
            retained: self
                .sims
                .values()
                .chain(std::iter::once(&self.overflow_sim))
                .map(CacheSim::retained)
                .fold(Retained::default(), |a, b| a.plus(b)),
            retained_cache_tokens: self.cache.retained_tokens(),
            lifetime: self.lifetime.summary(&self.config.prices),
            learned_volatile: self.volatile.learned(),
        }
    }
}

/// Whether an Anthropic request body names the previous reply for cache diagnostics
/// (`diagnostics.previous_message_id`, a string).
fn names_previous_message(body: &str) -> bool {
    // Most bodies have no such key: not parsed again for it.
    if !body.contains("\"diagnostics\"") {
        return false;
    }
    let Ok(top) = prompt_core::raw_json::Object::parse(body) else {
        return false;
    };
    top.get("diagnostics")
        .and_then(|d| prompt_core::raw_json::Object::of(d).ok())
        .is_some_and(|d| d.str("previous_message_id").is_some())
}

pub use super::report::verdict_text;
pub use prompt_core::input::thousands;

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
        let Some(read) = next else {
            return Ok(());
        };
        match auditor.push_read(line, read) {
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
