//! The provider-rule simulator: per request, the tokens each backend would serve from cache.
//!
//! A request is a sequence of **segments** (a tools array, then one segment per message),
//! each tokenized on its own, as chat templates separate messages with special tokens. Its
//! tokens are the concatenation. Comparing two requests is a longest common prefix on those
//! token arrays; BPE can tokenize the bytes around a boundary differently, so no byte-level
//! shortcut is taken.
//!
//! Per request, [`CacheSim::observe`] computes:
//!
//! | rule | tokens served from cache |
//! |---|---|
//! | [`Rule::LlamaCpp`] | exact token LCP against the best request in the window (the prompts still cached) |
//! | [`Rule::Vllm`] | leading 16-token blocks whose chained hash is in the block store; never the last token |
//! | [`Rule::OpenAi`] | 0 below 1,024 tokens of shared prefix, else 1,024 + whole 128-token increments |
//! | [`Rule::DeepSeek`] | the longest *cache prefix unit* the request matches whole: the input of an earlier request, or a prefix two earlier requests shared; in 64-token units |
//! | [`Rule::Anthropic`] | the longest prefix ending at a breakpoint or one of the 20 segment boundaries before it that an earlier request wrote at a breakpoint; breakpoints past it (≥ the per-model minimum) are written |
//! | [`Rule::Limit`] | the longest prefix already sent: the maximum of the exact window LCP, the block-store match and the Anthropic hit |
//!
//! OpenAI quantizes the physical limit; DeepSeek's units are prefixes of earlier requests;
//! every rule is therefore at most the limit, and the limit at most the request.
//!
//! **DeepSeek's units** follow its context-caching guide
//! (<https://api-docs.deepseek.com/guides/kv_cache>): a request hits only a cache prefix unit
//! it matches *whole*; units are persisted at the end of each request's input, at the end of
//! the model's output, at a common prefix detected between requests, and at fixed token
//! intervals of long inputs. The simulator sees requests only, so it persists the first and
//! the third (the common prefix with the best earlier request, usable from the next request
//! on), for the requests of the window; the output's unit and the interval (the guide gives
//! none) are not modelled. A request that drops its predecessor's per-request tail therefore
//! hits only what the two requests before it shared.
//!
//! **Memory.** The window keeps at most [`SimConfig::window`] requests and
//! [`SimConfig::window_tokens`] tokens (segments are shared through [`TokenCache`], so a
//! history resent in every request is stored once). The block store and the Anthropic store
//! are two-generation sets of 64-bit hashes holding between `capacity` and `2 × capacity`
//! entries, oldest generation dropped first. [`SimConfig::unbounded`] keeps everything, so
//! the limit is exact; with bounds, requests older than the window count at 16-token
//! granularity through the block store.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::ops::AddAssign;
use std::sync::Arc;

use prompt_core::divergence::common_prefix_len;
use serde::Serialize;

use super::Rule;
use super::tokenizer::Tokenizer;

/// One tokenized piece of a request: a message or a tools array.
#[derive(Debug, Clone)]
pub struct Segment {
    text: Arc<str>,
    tokens: Arc<[u32]>,
}

impl Segment {
    /// A segment from its text and tokens.
    pub fn new(text: impl Into<Arc<str>>, tokens: impl Into<Arc<[u32]>>) -> Self {
        Self {
            text: text.into(),
            tokens: tokens.into(),
        }
    }

    /// Its serialized JSON text (empty for segments built from tokens alone).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Its tokens.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether it has no tokens.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    fn same_tokens(&self, other: &Segment) -> bool {
        Arc::ptr_eq(&self.tokens, &other.tokens) || self.tokens == other.tokens
    }
}

/// A request as the simulator sees it: segments, and Anthropic breakpoints.
#[derive(Debug, Clone, Default)]
pub struct TokenizedRequest {
    segments: Vec<Segment>,
    ends: Vec<usize>,
    breakpoints: Vec<usize>,
    lead: usize,
    tag: u64,
    /// DeepSeek's cache prefix units this request persisted once observed: its input, and
    /// the prefix it shared with its best earlier request (length, prefix key).
    units: [(usize, u64); 2],
}

/// Where two requests stop sharing tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Common {
    /// Length of the common token prefix.
    pub tokens: usize,
    /// Index of the first segment that differs (the shorter request's segment count when one
    /// is a prefix of the other).
    pub segment: usize,
}

impl TokenizedRequest {
    /// A request from its segments. A breakpoint is a segment count: `2` places one after
    /// the second segment. Out-of-range breakpoints are ignored.
    pub fn from_segments(segments: Vec<Segment>, breakpoints: Vec<usize>) -> Self {
        let mut ends = Vec::with_capacity(segments.len());
        let mut at = 0;
        for s in &segments {
            at += s.len();
            ends.push(at);
        }
        Self {
            segments,
            ends,
            breakpoints,
            lead: 0,
            tag: 0,
            units: [(0, 0); 2],
        }
    }

    /// A request from token ids alone (tests, other tokenizers).
    pub fn from_token_segments(segments: Vec<Vec<u32>>, breakpoints: Vec<usize>) -> Self {
        Self::from_segments(
            segments.into_iter().map(|t| Segment::new("", t)).collect(),
            breakpoints,
        )
    }

    /// Marks the first `lead` segments as not being messages (a tools array).
    pub fn with_lead(mut self, lead: usize) -> Self {
        self.lead = lead.min(self.segments.len());
        self
    }

    /// Attaches a caller's label (the audit uses the log line number).
    pub fn with_tag(mut self, tag: u64) -> Self {
        self.tag = tag;
        self
    }

    /// Total tokens.
    pub fn len(&self) -> usize {
        self.ends.last().copied().unwrap_or(0)
    }

    /// Whether it has no tokens.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Token offset of the end of each segment.
    pub fn segment_ends(&self) -> &[usize] {
        &self.ends
    }

    /// The breakpoints, as given.
    pub fn breakpoints(&self) -> &[usize] {
        &self.breakpoints
    }

    /// Number of leading non-message segments.
    pub fn lead(&self) -> usize {
        self.lead
    }

    /// The caller's label.
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// The message segments (after the lead).
    pub fn messages(&self) -> &[Segment] {
        &self.segments[self.lead..]
    }

    /// The common token prefix with `other`, segment by segment.
    pub fn common_prefix(&self, other: &TokenizedRequest) -> Common {
        let mut tokens = 0;
        for (i, (a, b)) in self.segments.iter().zip(&other.segments).enumerate() {
            if a.same_tokens(b) {
                tokens += a.len();
                continue;
            }
            let within = common_prefix_len(a.tokens(), b.tokens());
            // One segment's tokens may be a prefix of the other's; the next segment then
            // continues the comparison at the token level.
            if within == a.len() || within == b.len() {
                let (short, long) = if a.len() <= b.len() {
                    (self, other)
                } else {
                    (other, self)
                };
                let short_rest = short.tokens_from(i + 1);
                let long_rest = long.segments[i].tokens()[within..]
                    .iter()
                    .chain(long.tokens_from(i + 1));
                let more = short_rest
                    .zip(long_rest)
                    .take_while(|(x, y)| x == y)
                    .count();
                return Common {
                    tokens: tokens + within + more,
                    segment: i,
                };
            }
            return Common {
                tokens: tokens + within,
                segment: i,
            };
        }
        Common {
            tokens,
            segment: self.segments.len().min(other.segments.len()),
        }
    }

    fn tokens_from(&self, segment: usize) -> impl Iterator<Item = &u32> {
        self.segments
            .get(segment..)
            .unwrap_or(&[])
            .iter()
            .flat_map(|s| s.tokens().iter())
    }

    /// Every token, in order.
    pub fn tokens(&self) -> impl Iterator<Item = u32> + '_ {
        self.tokens_from(0).copied()
    }
}

/// Tokenizes segments once: a segment seen again (the history resent in every request) is
/// looked up by its bytes and shares the same token array.
///
/// Bounded: two generations of at most `capacity` tokens each; when the newer one is full
/// the older one is dropped.
pub struct TokenCache<'t> {
    tokenizer: &'t dyn Tokenizer,
    segments: TokenGenerations<u64, Segment, BuildHasherDefault<PassThrough>>,
}

impl std::fmt::Debug for TokenCache<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache")
            .field("tokenizer", &self.tokenizer.name())
            .field("segments", &self.segments.len())
            .finish()
    }
}

impl<'t> TokenCache<'t> {
    /// A cache over `tokenizer` keeping up to about `2 × capacity` tokens.
    pub fn new(tokenizer: &'t dyn Tokenizer, capacity: usize) -> Self {
        Self {
            tokenizer,
            segments: TokenGenerations::new(capacity),
        }
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &dyn Tokenizer {
        self.tokenizer
    }

    /// Tokens held.
    pub fn retained_tokens(&self) -> usize {
        self.segments.tokens()
    }

    /// The segment for `text`, tokenized now or found in the cache.
    pub fn segment(&mut self, text: &str) -> Segment {
        let key = text_hash(text);
        if let Some(seg) = self.segments.get(key, |s| &*s.text == text) {
            return seg.clone();
        }
        let seg = Segment::new(text, self.tokenizer.encode(text));
        self.segments.admit(key, seg.clone());
        seg
    }

    /// The segment of the text whose hash is `key` (the hash [`TokenCache::segment`] keys by:
    /// a comparison engine element's, `prompt_wire::engine::Block::hash`), found in the cache
    /// without building the text, or tokenized from `text()`. A hit is trusted on the 64-bit
    /// hash alone, as the engine's comparisons are; the text is built only on a miss.
    pub fn segment_keyed<'s>(&mut self, key: u64, text: impl FnOnce() -> Cow<'s, str>) -> Segment {
        if let Some(seg) = self.segments.get(key, |_| true) {
            return seg.clone();
        }
        let text = text();
        let seg = Segment::new(text.as_ref(), self.tokenizer.encode(&text));
        self.segments.admit(key, seg.clone());
        seg
    }

    /// Tokenizes a request given as segment texts.
    pub fn request(&mut self, segments: &[&str], breakpoints: Vec<usize>) -> TokenizedRequest {
        let segs = segments.iter().map(|s| self.segment(s)).collect();
        TokenizedRequest::from_segments(segs, breakpoints)
    }
}

/// What a [`TokenGenerations`] entry weighs: the tokens it holds.
trait Weighed {
    fn tokens(&self) -> usize;
}

impl Weighed for Segment {
    fn tokens(&self) -> usize {
        self.len()
    }
}

/// A bounded map weighed in tokens: two generations of at most `capacity` tokens each; when
/// the newer one is full the older one is dropped, and an entry found in the older one moves
/// to the newer (the token cache's segments, the simulator's remembered segment keys).
#[derive(Debug)]
struct TokenGenerations<K, V, S = std::hash::RandomState> {
    current: HashMap<K, V, S>,
    previous: HashMap<K, V, S>,
    current_tokens: usize,
    capacity: usize,
}

impl<K: Hash + Eq + Copy, V: Weighed, S: std::hash::BuildHasher + Default>
    TokenGenerations<K, V, S>
{
    fn new(capacity: usize) -> Self {
        Self {
            current: HashMap::default(),
            previous: HashMap::default(),
            current_tokens: 0,
            capacity: capacity.max(1),
        }
    }

    /// The entry of `key` when it `holds` (an entry under the key that does not is let go
    /// from the older generation).
    fn get(&mut self, key: K, holds: impl Fn(&V) -> bool) -> Option<&V> {
        if !self.current.contains_key(&key)
            && let Some(value) = self.previous.remove(&key)
            && holds(&value)
        {
            self.admit(key, value);
        }
        self.current.get(&key).filter(|v| holds(v))
    }

    fn admit(&mut self, key: K, value: V) {
        let tokens = value.tokens();
        if self.current_tokens.saturating_add(tokens) > self.capacity && !self.current.is_empty() {
            self.previous = std::mem::take(&mut self.current);
            self.current_tokens = 0;
        }
        self.current_tokens = self.current_tokens.saturating_add(tokens);
        if let Some(old) = self.current.insert(key, value) {
            self.current_tokens = self.current_tokens.saturating_sub(old.tokens());
        }
    }

    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    fn tokens(&self) -> usize {
        self.current_tokens + self.previous.values().map(Weighed::tokens).sum::<usize>()
    }
}

fn text_hash(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// A hasher for keys that are already well-mixed 64-bit hashes.
#[derive(Debug, Default)]
pub struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// splitmix64's finalizer: a bijection on 64 bits with good avalanche.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A bounded set of hashes: two generations, the older dropped when the newer is full.
#[derive(Debug)]
struct GenSet {
    current: HashSet<u64, BuildHasherDefault<PassThrough>>,
    previous: HashSet<u64, BuildHasherDefault<PassThrough>>,
    capacity: usize,
}

impl GenSet {
    fn new(capacity: usize) -> Self {
        Self {
            current: HashSet::default(),
            previous: HashSet::default(),
            capacity: capacity.max(1),
        }
    }

    /// Whether `key` is present; a hit is refreshed into the newer generation.
    fn touch(&mut self, key: u64) -> bool {
        if self.current.contains(&key) {
            return true;
        }
        if self.previous.remove(&key) {
            self.insert(key);
            return true;
        }
        false
    }

    fn insert(&mut self, key: u64) {
        if self.current.len() >= self.capacity && !self.current.contains(&key) {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key);
    }

    fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

/// Anthropic's prompt-caching rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AnthropicRule {
    /// Breakpoints per request (the API accepts 4); the last ones are kept.
    pub max_breakpoints: usize,
    /// Segment boundaries checked before each breakpoint.
    pub lookback_blocks: usize,
    /// The per-model minimum cacheable prefix (1,024 for Sonnet and Opus 4; 2,048 or 4,096
    /// for Haiku and some newer models).
    pub min_tokens: usize,
}

impl Default for AnthropicRule {
    fn default() -> Self {
        Self {
            max_breakpoints: 4,
            lookback_blocks: 20,
            min_tokens: 1024,
        }
    }
}

/// Parameters of the rules and bounds of the simulator's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SimConfig {
    /// Requests kept for exact comparison (llama.cpp's cached prompts).
    pub window: usize,
    /// Total tokens of the requests kept in the window.
    pub window_tokens: usize,
    /// vLLM block size.
    pub block_size: usize,
    /// Block hashes per generation of the block store (vLLM's KV pool, and the limit beyond
    /// the window).
    pub block_capacity: usize,
    /// OpenAI: shortest cached prefix.
    pub openai_minimum: usize,
    /// OpenAI: increment above the minimum.
    pub openai_increment: usize,
    /// DeepSeek: storage granularity (hits are whole multiples of it; 64 tokens in the
    /// earlier version of its guide).
    pub deepseek_unit: usize,

    /// Anthropic's rule.
    pub anthropic: AnthropicRule,
    /// Anthropic cache entries per generation.
    pub anthropic_capacity: usize,
}

impl SimConfig {
    /// The same, with `window` (requests kept for exact comparison (llama.cpp's cached prompts)).
    pub fn with_window(mut self, window: usize) -> Self {
        self.window = window;
        self
    }

    /// The same, with `window_tokens` (total tokens of the requests kept in the window).
    pub fn with_window_tokens(mut self, window_tokens: usize) -> Self {
        self.window_tokens = window_tokens;
        self
    }

    /// The same, with `block_size` (vLLM block size).
    pub fn with_block_size(mut self, block_size: usize) -> Self {
        self.block_size = block_size;
        self
    }

    /// The same, with `block_capacity` (block hashes per generation of the block store (vLLM's KV pool, and the limit beyond).
    pub fn with_block_capacity(mut self, block_capacity: usize) -> Self {
        self.block_capacity = block_capacity;
        self
    }

    /// The same, with `openai_minimum` (openAI: shortest cached prefix).
    pub fn with_openai_minimum(mut self, openai_minimum: usize) -> Self {
        self.openai_minimum = openai_minimum;
        self
    }

    /// The same, with `openai_increment` (openAI: increment above the minimum).
    pub fn with_openai_increment(mut self, openai_increment: usize) -> Self {
        self.openai_increment = openai_increment;
        self
    }

    /// The same, with `deepseek_unit` (deepSeek: storage granularity (hits are whole multiples of it; 64 tokens in the).
    pub fn with_deepseek_unit(mut self, deepseek_unit: usize) -> Self {
        self.deepseek_unit = deepseek_unit;
        self
    }

    /// The same, with `anthropic` (anthropic's rule).
    pub fn with_anthropic(mut self, anthropic: AnthropicRule) -> Self {
        self.anthropic = anthropic;
        self
    }

    /// The same, with `anthropic_capacity` (anthropic cache entries per generation).
    pub fn with_anthropic_capacity(mut self, anthropic_capacity: usize) -> Self {
        self.anthropic_capacity = anthropic_capacity;
        self
    }
}

impl Default for SimConfig {
    /// Bounded, for logs: 32 requests and 4 M tokens in the window, 2^20 block hashes and
    /// 2^16 Anthropic entries per generation.
    fn default() -> Self {
        Self {
            window: 32,
            window_tokens: 4 << 20,
            block_size: 16,
            block_capacity: 1 << 20,
            openai_minimum: 1024,
            openai_increment: 128,
            deepseek_unit: 64,
            anthropic: AnthropicRule::default(),
            anthropic_capacity: 1 << 16,
        }
    }
}

impl SimConfig {
    /// Keeps every request: the limit is the exact LCP against the union of all earlier
    /// requests. For scripted sessions.
    pub fn unbounded() -> Self {
        Self {
            window: usize::MAX,
            window_tokens: usize::MAX,
            block_capacity: usize::MAX,
            anthropic_capacity: usize::MAX,
            ..Self::default()
        }
    }
}

/// What one rule did with one request (or a sum over requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct RuleOutcome {
    /// Tokens served from cache.
    pub read: u64,
    /// Tokens written to cache (Anthropic only).
    pub write: u64,
    /// Other input tokens.
    pub miss: u64,
}

impl RuleOutcome {
    pub(crate) fn new(tokens: usize, read: usize, write: usize) -> Self {
        let read = read.min(tokens);
        let write = write.min(tokens - read);
        Self {
            read: read as u64,
            write: write as u64,
            miss: (tokens - read - write) as u64,
        }
    }

    /// `read + write + miss`, saturating at `u64::MAX`.
    pub fn tokens(&self) -> u64 {
        self.read
            .saturating_add(self.write)
            .saturating_add(self.miss)
    }

    /// `read / tokens` (0 for no tokens).
    pub fn cached_share(&self) -> f64 {
        super::share(self.read, self.tokens())
    }
}

/// Count by count, saturating at `u64::MAX` instead of wrapping.
impl AddAssign for RuleOutcome {
    fn add_assign(&mut self, rhs: Self) {
        self.read = self.read.saturating_add(rhs.read);
        self.write = self.write.saturating_add(rhs.write);
        self.miss = self.miss.saturating_add(rhs.miss);
    }
}

/// The best earlier request in the window.
#[derive(Debug, Clone)]
pub struct Best {
    /// The earlier request (its tag is the caller's label).
    pub earlier: TokenizedRequest,
    /// Where they stop sharing tokens.
    pub common: Common,
}

/// The simulator's verdict on one request.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The request's tokens.
    pub tokens: usize,
    outcomes: [RuleOutcome; 6],
    /// The earlier request in the window sharing the longest prefix (the most recent on
    /// ties); `None` for the first request.
    pub best: Option<Best>,
}

impl Observation {
    /// What `rule` served.
    pub fn outcome(&self, rule: Rule) -> RuleOutcome {
        self.outcomes[rule.index()]
    }

    /// Every rule's outcome, in [`Rule::ALL`] order.
    pub fn outcomes(&self) -> impl Iterator<Item = (Rule, RuleOutcome)> + '_ {
        Rule::ALL.into_iter().map(|r| (r, self.outcome(r)))
    }
}

/// How much the simulator holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Retained {
    /// Requests in the window (summed over the lanes' simulators).
    pub requests: usize,
    /// Their total tokens.
    pub request_tokens: usize,
    /// Block hashes.
    pub blocks: usize,
    /// Anthropic cache entries.
    pub anthropic_entries: usize,
}

impl Retained {
    /// Both together (two simulators' holdings).
    pub fn plus(self, other: Retained) -> Retained {
        Retained {
            requests: self.requests.saturating_add(other.requests),
            request_tokens: self.request_tokens.saturating_add(other.request_tokens),
            blocks: self.blocks.saturating_add(other.blocks),
            anthropic_entries: self
                .anthropic_entries
                .saturating_add(other.anthropic_entries),
        }
    }
}

/// Replays requests in order and applies every [`Rule`] to each.
#[derive(Debug)]
pub struct CacheSim {
    config: SimConfig,
    window: VecDeque<TokenizedRequest>,
    window_tokens: usize,
    blocks: GenSet,
    anthropic: GenSet,
    segment_keys: SegmentKeyMemo,
}

impl CacheSim {
    /// An empty cache.
    pub fn new(config: SimConfig) -> Self {
        Self {
            blocks: GenSet::new(config.block_capacity),
            anthropic: GenSet::new(config.anthropic_capacity),
            config,
            window: VecDeque::new(),
            window_tokens: 0,
            segment_keys: SegmentKeyMemo::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// How much is held.
    pub fn retained(&self) -> Retained {
        Retained {
            requests: self.window.len(),
            request_tokens: self.window_tokens,
            blocks: self.blocks.len(),
            anthropic_entries: self.anthropic.len(),
        }
    }

    /// Applies every rule to `request`, then records it as sent.
    pub fn observe(&mut self, request: TokenizedRequest) -> Observation {
        let n = request.len();
        let c = &self.config;
        let block = c.block_size.max(1);

        let mut best: Option<(usize, Common)> = None;
        for (i, earlier) in self.window.iter().enumerate() {
            let common = earlier.common_prefix(&request);
            if best.is_none_or(|(_, b)| common.tokens >= b.tokens) {
                best = Some((i, common));
            }
        }
        let exact = best.map_or(0, |(_, b)| b.tokens);

        // DeepSeek: the units of the requests in the window (each one's input, and what it
        // shared with its best earlier request), by length; the longest one this request
        // matches whole. Its own shared prefix becomes a unit for the next requests.
        let mut units: Vec<(usize, u64)> = self
            .window
            .iter()
            .flat_map(|r| r.units)
            .filter(|&(len, _)| len > 0 && len <= n)
            .collect();
        units.sort_unstable();
        // The keys of the prefixes ending where a unit ends or the exact match stops: only
        // there is a prefix's key needed, not at every token.
        let mut wanted: Vec<usize> = units.iter().map(|&(len, _)| len).collect();
        if exact > 0 {
            wanted.push(exact);
        }
        wanted.sort_unstable();
        wanted.dedup();
        let (block_keys, segment_keys, keys_at) =
            prefix_keys(&request, block, &wanted, &mut self.segment_keys);
        let key_at = |at: usize| {
            wanted
                .binary_search(&at)
                .ok()
                .and_then(|i| keys_at.get(i).copied())
        };
        let unit_hit = units
            .iter()
            .filter(|&&(len, unit)| key_at(len) == Some(unit))
            .map(|&(len, _)| len)
            .max()
            .unwrap_or(0);
        let shared = match key_at(exact) {
            Some(key) if exact > 0 => (exact, key),
            _ => (0, 0),
        };
        let matched_blocks = block_keys
            .iter()
            .take_while(|&&k| self.blocks.touch(k))
            .count();
        let block_hit = matched_blocks * block;

        // Anthropic: read the longest prefix written at an earlier breakpoint and ending at a
        // breakpoint or within the lookback before it; write the breakpoints past it.
        let mut breakpoints: Vec<usize> = request
            .breakpoints
            .iter()
            .copied()
            .filter(|&b| b >= 1 && b <= request.segments.len())
            .collect();
        breakpoints.sort_unstable();
        breakpoints.dedup();
        let keep = breakpoints
            .len()
            .saturating_sub(c.anthropic.max_breakpoints);
        let breakpoints = &breakpoints[keep..];
        let mut anthropic_read = 0;
        for &b in breakpoints {
            let lowest = b.saturating_sub(c.anthropic.lookback_blocks).max(1);
            for k in (lowest..=b).rev() {
                let pos = request.ends[k - 1];
                if pos <= anthropic_read {
                    break;
                }
                if self.anthropic.touch(segment_keys[k - 1]) {
                    anthropic_read = pos;
                    break;
                }
            }
        }
        let mut written_to = anthropic_read;
        for &b in breakpoints {
            let pos = request.ends[b - 1];
            if pos > anthropic_read && pos >= c.anthropic.min_tokens {
                self.anthropic.insert(segment_keys[b - 1]);
                written_to = written_to.max(pos);
            }
        }

        let limit = exact.max(block_hit).max(anthropic_read).min(n);
        let vllm = block_hit.min(n.saturating_sub(1) / block * block);
        let openai = if limit >= c.openai_minimum && c.openai_minimum > 0 {
            let inc = c.openai_increment.max(1);
            c.openai_minimum + (limit - c.openai_minimum) / inc * inc
        } else {
            0
        };
        let unit = c.deepseek_unit.max(1);
        let outcomes = [
            RuleOutcome::new(n, exact, 0),
            RuleOutcome::new(n, vllm, 0),
            RuleOutcome::new(n, openai, 0),
            RuleOutcome::new(n, unit_hit.min(limit) / unit * unit, 0),
            RuleOutcome::new(n, anthropic_read, written_to - anthropic_read),
            RuleOutcome::new(n, limit, 0),
        ];

        for k in block_keys {
            self.blocks.insert(k);
        }

        let best = best.and_then(|(i, common)| {
            self.window.get(i).map(|earlier| Best {
                earlier: earlier.clone(),
                common,
            })
        });
        self.window_tokens = self.window_tokens.saturating_add(n);
        let mut request = request;
        request.units = [(n, segment_keys.last().copied().unwrap_or(0)), shared];
        self.window.push_back(request);
        while self.window.len() > 1
            && (self.window.len() > c.window || self.window_tokens > c.window_tokens)
        {
            if let Some(old) = self.window.pop_front() {
                self.window_tokens = self.window_tokens.saturating_sub(old.len());
            }
        }
        Observation {
            tokens: n,
            outcomes,
            best,
        }
    }
}

/// One pass over the tokens: the chained hash at the end of each full block, the key of the
/// prefix ending at each segment end (hash and length), and the key of the prefix ending at
/// each of `wanted` (sorted, distinct, non-zero token counts; a count past the request has
/// none, and only those past it). A segment `memo` holds from the same state (the hash and
/// position it starts at) adds its remembered block keys instead of being hashed again.
fn prefix_keys(
    request: &TokenizedRequest,
    block: usize,
    wanted: &[usize],
    memo: &mut SegmentKeyMemo,
) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    // Per token one multiply (FxHash's step, over the token and the running state); the
    // finalizer runs only where a key is taken. A prefix's key is thus a function of its
    // tokens alone, wherever it is taken (a block end, a segment end, a wanted length).
    const SEED: u64 = 0x517c_c1b7_2722_0a95;
    let key = |h: u64, at: usize| mix(h ^ (at as u64).rotate_left(32));
    let mut blocks = Vec::with_capacity(request.len() / block);
    let mut segments = Vec::with_capacity(request.segments.len());
    let mut keys_at = Vec::with_capacity(wanted.len());
    let mut next = wanted.iter().copied().peekable();
    let mut h: u64 = 0x6a09_e667_f3bc_c908;
    let mut at = 0usize;
    // Counted down rather than `at % block`: a division per token was a third of the loop.
    let block = block.max(1);
    let mut to_block_end = block;
    for seg in &request.segments {
        let end = at + seg.len();
        // A wanted length inside the segment needs the hash there: hashed token by token.
        let remembered =
            seg.len() >= SegmentKeyMemo::MIN_TOKENS && next.peek().is_none_or(|&w| w > end);
        if remembered && let Some(known) = memo.get(h, at, &seg.tokens) {
            blocks.extend_from_slice(&known.blocks);
            h = known.end_hash;
            at = end;
            to_block_end = block - at % block;
            segments.push(key(h, at));
            continue;
        }
        let (start_hash, start_at, first_block) = (h, at, blocks.len());
        for &t in seg.tokens() {
            h = (h.rotate_left(5) ^ u64::from(t)).wrapping_mul(SEED);
            at += 1;
            to_block_end -= 1;
            if to_block_end == 0 {
                blocks.push(mix(h));
                to_block_end = block;
            }
            if next.peek() == Some(&at) {
                keys_at.push(key(h, at));
                next.next();
            }
        }
        if remembered {
            let added = blocks.get(first_block..).unwrap_or_default();
            memo.insert(start_hash, start_at, &seg.tokens, h, added);
        }
        segments.push(key(h, at));
    }
    (blocks, segments, keys_at)
}

/// The block keys of segments hashed before, by where each started (the running hash and the
/// position: the same state and the same tokens give the same keys) and by which token array
/// it is: an agent resends its whole history with every request, and every segment of it
/// starts from the state it started from the last time, so only the new ones are hashed.
///
/// Bounded: two generations of at most [`SegmentKeyMemo::TOKENS`] tokens each
/// ([`TokenGenerations`]).
#[derive(Debug)]
struct SegmentKeyMemo {
    /// By the start's hash, its position and the token array's address.
    known: TokenGenerations<(u64, usize, usize), SegmentKeys>,
}

#[derive(Debug)]
struct SegmentKeys {
    /// Held, so the array's address names these tokens while they are remembered.
    tokens: Arc<[u32]>,
    end_hash: u64,
    blocks: Box<[u64]>,
}

impl Weighed for SegmentKeys {
    fn tokens(&self) -> usize {
        self.tokens.len()
    }
}

impl Default for SegmentKeyMemo {
    fn default() -> Self {
        Self {
            known: TokenGenerations::new(Self::TOKENS),
        }
    }
}

impl SegmentKeyMemo {
    /// Tokens per generation: 1 MiB of token arrays and 128 KiB of block keys at most (of
    /// 16-token blocks), each; the arrays are mostly the token cache's own.
    const TOKENS: usize = 1 << 18;
    /// A shorter segment is hashed again: a lookup costs about as much.
    const MIN_TOKENS: usize = 64;

    fn slot(start_hash: u64, start_at: usize, tokens: &Arc<[u32]>) -> (u64, usize, usize) {
        (
            start_hash,
            start_at,
            Arc::as_ptr(tokens).cast::<u32>() as usize,
        )
    }

    fn get(
        &mut self,
        start_hash: u64,
        start_at: usize,
        tokens: &Arc<[u32]>,
    ) -> Option<&SegmentKeys> {
        self.known
            .get(Self::slot(start_hash, start_at, tokens), |known| {
                Arc::ptr_eq(&known.tokens, tokens)
            })
    }

    fn insert(
        &mut self,
        start_hash: u64,
        start_at: usize,
        tokens: &Arc<[u32]>,
        end_hash: u64,
        blocks: &[u64],
    ) {
        if tokens.len() > Self::TOKENS {
            return;
        }
        let known = SegmentKeys {
            tokens: tokens.clone(),
            end_hash,
            blocks: blocks.into(),
        };
        self.known
            .admit(Self::slot(start_hash, start_at, tokens), known);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(tokens: &[u32], cuts: &[usize]) -> TokenizedRequest {
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (tokens.len() + 1)).collect();
        cuts.push(tokens.len());
        cuts.sort_unstable();
        cuts.dedup();
        let mut from = 0;
        let mut segments = Vec::new();
        for c in cuts {
            if c > from {
                segments.push(tokens[from..c].to_vec());
                from = c;
            }
        }
        TokenizedRequest::from_token_segments(segments, vec![])
    }

    proptest::proptest! {
        /// A prefix's key is a function of its tokens alone: however the tokens are cut
        /// into segments, and whether taken at a segment's end or as a wanted length.
        #[test]
        fn a_prefix_key_depends_on_its_tokens_alone(
            tokens in proptest::collection::vec(0u32..50, 1..300),
            cuts_a in proptest::collection::vec(0usize..400, 0..6),
            cuts_b in proptest::collection::vec(0usize..400, 0..6),
            block in 1usize..20,
            changed in 0usize..300,
        ) {
            let (a, b) = (split(&tokens, &cuts_a), split(&tokens, &cuts_b));
            let ends_a: Vec<usize> = a.segments.iter().scan(0, |n, s| { *n += s.len(); Some(*n) }).collect();
            let (blocks_a, segments_a, _) = prefix_keys(&a, block, &[], &mut SegmentKeyMemo::default());
            let (blocks_b, _, wanted_b) = prefix_keys(&b, block, &ends_a, &mut SegmentKeyMemo::default());
            proptest::prop_assert_eq!(&blocks_a, &blocks_b);
            proptest::prop_assert_eq!(blocks_a.len(), tokens.len() / block);
            proptest::prop_assert_eq!(&segments_a, &wanted_b);
            // One token changed: the blocks before it keep their keys, its own changes.
            let changed = changed % tokens.len();
            let mut other = tokens.clone();
            other[changed] += 1;
            let (blocks_c, _, _) = prefix_keys(&split(&other, &cuts_a), block, &[], &mut SegmentKeyMemo::default());
            let first = changed / block;
            proptest::prop_assert_eq!(&blocks_a[..first.min(blocks_a.len())], &blocks_c[..first.min(blocks_c.len())]);
            if first < blocks_a.len() {
                proptest::prop_assert_ne!(blocks_a[first], blocks_c[first]);
            }
        }
    }

    proptest::proptest! {
        /// Segments remembered from earlier requests (the same token arrays, resent as the
        /// history is, or moved elsewhere) give the keys hashing them anew gives, with wanted
        /// lengths anywhere.
        #[test]
        fn remembered_segments_give_the_keys_hashed_anew(
            pool in proptest::collection::vec(proptest::collection::vec(0u32..50, 0..160), 1..6),
            first in proptest::collection::vec(0usize..6, 0..6),
            kept in 0usize..6,
            more in proptest::collection::vec(0usize..6, 0..4),
            wanted in proptest::collection::vec(1usize..900, 0..4),
            block in 1usize..20,
        ) {
            let pool: Vec<Segment> = pool.into_iter().map(|t| Segment::new("", t)).collect();
            let request = |picks: &[usize]| TokenizedRequest::from_segments(
                picks.iter().map(|&i| pool[i % pool.len()].clone()).collect(),
                vec![],
            );
            let a = request(&first);
            // The next request: a prefix of the first one's segments, then others.
            let mut second: Vec<usize> = first.iter().copied().take(kept).collect();
            second.extend(&more);
            let b = request(&second);
            let mut wanted = wanted;
            wanted.sort_unstable();
            wanted.dedup();
            let mut memo = SegmentKeyMemo::default();
            prefix_keys(&a, block, &[], &mut memo);
            let remembered = prefix_keys(&b, block, &wanted, &mut memo);
            let anew = prefix_keys(&b, block, &wanted, &mut SegmentKeyMemo::default());
            proptest::prop_assert_eq!(remembered, anew);
            // And again, with both requests' segments remembered.
            let again = prefix_keys(&b, block, &wanted, &mut memo);
            proptest::prop_assert_eq!(again, prefix_keys(&b, block, &wanted, &mut SegmentKeyMemo::default()));
        }
    }

    #[test]
    fn the_segment_key_memo_remembers_and_stays_bounded() {
        let long = Segment::new("", vec![7u32; 4096]);
        let request = TokenizedRequest::from_segments(vec![long.clone(), long.clone()], vec![]);
        let mut memo = SegmentKeyMemo::default();
        let keys = prefix_keys(&request, 16, &[], &mut memo);
        // The second copy starts from another state: two entries.
        assert_eq!(memo.known.current.len(), 2);
        assert_eq!(prefix_keys(&request, 16, &[], &mut memo), keys);
        assert_eq!(memo.known.current.len(), 2);
        // Ever new token arrays: at most two generations of TOKENS tokens held.
        for i in 0..200u32 {
            let fresh = Segment::new("", vec![i; 4096]);
            prefix_keys(
                &TokenizedRequest::from_segments(vec![fresh], vec![]),
                16,
                &[],
                &mut memo,
            );
            assert!(
                memo.known.tokens() <= 2 * SegmentKeyMemo::TOKENS,
                "{}",
                memo.known.tokens()
            );
        }
        assert!(memo.known.tokens() > SegmentKeyMemo::TOKENS / 2);
    }

    fn req(segs: &[(u32, usize)], bps: &[usize]) -> TokenizedRequest {
        TokenizedRequest::from_token_segments(
            segs.iter().map(|&(t, n)| vec![t; n]).collect(),
            bps.to_vec(),
        )
    }

    #[test]
    fn common_prefix_crosses_segment_boundaries_at_token_level() {
        let a = TokenizedRequest::from_token_segments(vec![vec![1, 2], vec![3, 4]], vec![]);
        let b = TokenizedRequest::from_token_segments(vec![vec![1, 2, 3], vec![4, 5]], vec![]);
        let common = a.common_prefix(&b);
        assert_eq!(common.tokens, 4);
        assert_eq!(common.segment, 0);
        assert_eq!(b.common_prefix(&a).tokens, 4);
    }

    #[test]
    fn anthropic_reads_within_lookback_only() {
        let mut sim = CacheSim::new(SimConfig::unbounded());
        sim.observe(req(&[(1, 2000)], &[1]));
        // 20 new segments after the written breakpoint: found.
        let mut segs = vec![(1, 2000)];
        segs.extend((0..20).map(|i| (100 + i, 3)));
        let seen = sim.observe(req(&segs, &[segs.len()]));
        assert_eq!(seen.outcome(Rule::Anthropic).read, 2000);
        // 21 new segments past any written breakpoint: not found.
        let mut sim = CacheSim::new(SimConfig::unbounded());
        sim.observe(req(&[(1, 2000)], &[1]));
        let mut segs = vec![(1, 2000)];
        segs.extend((0..21).map(|i| (100 + i, 3)));
        let seen = sim.observe(req(&segs, &[segs.len()]));
        assert_eq!(seen.outcome(Rule::Anthropic).read, 0);
        assert_eq!(seen.outcome(Rule::Anthropic).write, 2063);
        assert_eq!(seen.outcome(Rule::Limit).read, 2000);
    }

    #[test]
    fn bounded_stores_stay_bounded() {
        let config = SimConfig {
            window: 3,
            block_capacity: 64,
            anthropic_capacity: 4,
            ..SimConfig::default()
        };
        let mut sim = CacheSim::new(config);
        for i in 0..50 {
            sim.observe(req(&[(i, 500), (i + 1, 700)], &[1, 2]));
        }
        let r = sim.retained();
        assert_eq!(r.requests, 3);
        assert!(r.blocks <= 128, "{r:?}");
        assert!(r.anthropic_entries <= 8, "{r:?}");
    }
}
