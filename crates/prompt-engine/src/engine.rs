//! The engine over a stream of requests: each request put in its session and lane, its
//! predecessor found through an index of prefix hashes, every change listed, and what the
//! provider's rule says it should have read held against what it did.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};

use rustc_hash::FxHasher;
use serde::{Deserialize, Serialize};

use prompt_core::ApiKind;
use prompt_core::profile::{GapFate, Lifetime, Profile, Provider, Retention};
use prompt_core::raw_json::Object;

use crate::body::error::GuardError;
use crate::body::memo::MessageMemo;

use crate::canon::{self, Block, Canonical, Context};
use crate::cause::{Cause, Change, Place};
use crate::diff::diff;
use crate::exchange::{Exchange, ReportedRead};
use crate::session::{self, SessionKey};

/// The engine's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineConfig {
    /// Requests held for the predecessor search (oldest dropped first, and counted).
    pub max_requests: usize,
    /// Elements held across those requests (oldest requests dropped first).
    pub max_elements: usize,
    /// The most recent requests whose bodies are kept for excerpts; older ones keep their
    /// hashes only.
    pub keep_bodies: usize,
    /// Response ids remembered for `previous_response_id` chains.
    pub max_response_ids: usize,
    /// Messages remembered by their bytes, per generation (two generations): a message
    /// resent with the history is looked up, not read again.
    pub memo_entries: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            max_requests: 4096,
            max_elements: 1 << 20,
            keep_bodies: 64,
            max_response_ids: 1 << 16,
            memo_entries: 1 << 16,
        }
    }
}

impl EngineConfig {
    /// The same, holding at most `max_requests` requests.
    pub fn with_max_requests(mut self, max_requests: usize) -> Self {
        self.max_requests = max_requests.max(1);
        self
    }

    /// The same, holding at most `max_elements` elements.
    pub fn with_max_elements(mut self, max_elements: usize) -> Self {
        self.max_elements = max_elements.max(1);
        self
    }

    /// The same, keeping the bodies of the last `keep_bodies` requests.
    pub fn with_keep_bodies(mut self, keep_bodies: usize) -> Self {
        self.keep_bodies = keep_bodies;
        self
    }
}

/// The request a request is compared with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Predecessor {
    /// Its tag (the log line, the proxy's request number).
    pub tag: u64,
    /// Whether its tag is a line of the log this request is in: `false` for a request an
    /// earlier launch saw without that log ([`Engine::restore`]), named by its time instead.
    pub logged: bool,
    /// When it was sent, in seconds since the Unix epoch, if known.
    pub ts: Option<f64>,
    /// Whether another launch saw it (a proxy started again, an agent resumed in a new
    /// process): this request continues a session across launches.
    pub earlier_launch: bool,
    /// Whether it is of the same lane (model and endpoint); `false`: the session's request
    /// in another lane, found because this lane had none.
    pub same_lane: bool,
    /// Elements the two share from the start.
    pub common_elements: usize,
    /// Seconds between the two, when both were timed.
    pub gap_secs: Option<f64>,
}

/// What the engine says of one request.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    /// The caller's tag for it.
    pub tag: u64,
    /// The API (in JSON, its shape: `chat_completions`, `anthropic`…).
    #[serde(serialize_with = "crate::body::shape::serialize_shape")]
    pub shape: ApiKind,
    /// Whose cache: the provider its shape and model name (`None`: not known, so no
    /// minimum or lifetime is held against it).
    pub provider: Option<Provider>,
    /// How long the predecessor's entry lived, as the provider documents it for what the
    /// predecessor asked (`cache_control.ttl`, `prompt_cache_retention`).
    pub lifetime: Option<Lifetime>,
    /// How long the entries this request writes live, as the provider documents it for what
    /// it asks (`cache_control.ttl`, `prompt_cache_retention`, else the default); `None`
    /// when its provider is not known.
    pub asks_lifetime: Option<Lifetime>,
    /// The model, bounded.
    pub model: Option<String>,
    /// The lane: endpoint and model.
    pub lane: String,
    /// The session, and where its key came from.
    pub session: SessionKey,
    /// The earlier request it is compared with; `None` for a cold start.
    pub predecessor: Option<Predecessor>,
    /// Every change from the predecessor (at most [`MAX_CHANGES`](crate::MAX_CHANGES)).
    pub changes: Vec<Change>,
    /// The verdict: the first change that loses tokens, a timing or provider finding, a
    /// cold start; `None` when the request extends its predecessor and read what it should.
    pub cause: Option<Cause>,
    /// This request starts a conversation (no assistant message yet); a break is then not
    /// blamed on it.
    pub new_conversation: bool,
    /// Earlier requests of its session were held, yet none is its predecessor: it shares no
    /// element with any of them (a new conversation in a known session).
    pub session_seen: bool,
    /// How its tokens lost were counted, for [`Analysis::settle`].
    #[serde(skip)]
    loss: Option<LossBasis>,
    /// Its tokens, by the caller's counter.
    pub tokens: u64,
    /// Tokens it shares with the predecessor from the start.
    pub common_tokens: u64,
    /// Tokens of the predecessor an append-only request would have reused, lost here.
    pub tokens_lost: u64,
    /// Tokens the provider's rule says should be read from the cache.
    pub expected_cached: u64,
    /// What the provider said it read.
    pub reported: Option<ReportedRead>,
    /// Tokens the provider read short of the expectation, in the provider's tokens.
    pub shortfall: Option<u64>,
    /// Its messages (after the system field).
    pub messages: usize,
    /// Its elements before the messages: the tools and the system blocks.
    pub lead: usize,
    /// Its explicit breakpoints, as positions in its elements ([`Canonical::breakpoints`]).
    pub breakpoints: Vec<u32>,
}

/// What the engine keeps of one request to compare later requests with: its elements'
/// hashes and token counts, its session, lane and time; no body, no header, no credential.
/// A proxy keeps the latest of each session across its launches ([`Engine::last_record`],
/// [`Engine::restore`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Its tag where it was analysed (the log line, the proxy's request number).
    pub tag: u64,
    /// When it was sent, in seconds since the Unix epoch.
    pub ts: Option<f64>,
    /// The launch that saw it ([`Exchange::launch`], hashed).
    pub launch: u64,
    /// Its session.
    pub session: SessionKey,
    /// Its lane (endpoint and model).
    pub lane: String,
    /// Each element's tokens, by the analysing counter.
    pub tokens: Vec<u32>,
    /// The id of its reply, when known (a later `previous_response_id` names it).
    pub response_id: Option<String>,
    /// A hash of its body's bytes, to know the body again ([`Engine::restore`]).
    pub body_hash: Option<u64>,
    /// The request as the provider caches it, without its body.
    pub canonical: Canonical<'static>,
}

/// The hash a launch id is kept under ([`Exchange::launch`]; 0: none).
pub fn launch_hash(launch: Option<&str>) -> u64 {
    launch.map_or(0, |l| hash_str(l).max(1))
}

/// Whether two requests have any element in common (a tool, a system block, a message),
/// wherever it stands.
fn shares_any(a: &Canonical<'_>, b: &Canonical<'_>) -> bool {
    let seen: std::collections::HashSet<u64, BuildHasherDefault<FxHasher>> =
        a.chain_blocks().map(|b| b.hash).collect();
    b.chain_blocks().any(|block| seen.contains(&block.hash))
}

/// What a break's tokens lost were counted from: what an append-only continuation of the
/// predecessor would have read, by the request's own provider rule, and where this request
/// stops sharing.
#[derive(Debug, Clone, PartialEq)]
struct LossBasis {
    profile: Profile,
    /// What the rule reads of an append-only continuation.
    ideal: u64,
    /// Tokens of the whole elements shared.
    common_tokens: u64,
    /// The request's tokens.
    total: u64,
    /// The first changed element's bytes before the change, in the request's body: its
    /// start and the change's byte (`None`: the change is the request's model, key or a
    /// parameter, or Anthropic's breakpoints decide).
    partial: Option<(usize, usize)>,
}

impl Analysis {
    /// Where the first changed element starts and where the change is, in the request's
    /// body: the bytes still shared inside it, which a caller with a tokenizer counts for
    /// [`Analysis::settle`]. `None` when nothing inside an element is shared, or the rule
    /// reads whole blocks (Anthropic's breakpoints).
    pub fn partial_span(&self) -> Option<(usize, usize)> {
        self.loss.as_ref()?.partial
    }

    /// Whether a break lost nothing because its provider caches nothing of the
    /// predecessor: under its minimum (or, for Anthropic, no breakpoint wrote an entry).
    pub fn nothing_cached(&self) -> bool {
        self.loss.as_ref().is_some_and(|l| l.ideal == 0)
    }

    /// Settles a break's tokens lost with the tokens of the changed element before the change
    /// (`shared_inside`, counted over [`Analysis::partial_span`]): where the provider's rule
    /// stops reading — token by token (llama.cpp), in steps (OpenAI), units (DeepSeek) or
    /// blocks (vLLM) — not where the element starts.
    pub fn settle(&mut self, shared_inside: u64) {
        let Some(loss) = &self.loss else {
            return;
        };
        let shared = loss.common_tokens.saturating_add(shared_inside);
        let read = loss.profile.readable(shared, loss.total);
        self.tokens_lost = loss.ideal.saturating_sub(read);
    }
}

/// What an append-only continuation of `pred` would read by `profile`'s rule: for
/// Anthropic, the tokens up to its last cache write (its last breakpoint), if over the
/// minimum; elsewhere all of it, as finely as the provider reads.
fn ideal_read(profile: &Profile, pred: &Stored) -> u64 {
    let total: u64 = pred.tokens.iter().map(|&t| u64::from(t)).sum();
    if profile.lookback_blocks().is_some() {
        let last = pred
            .canonical
            .breakpoints
            .iter()
            .max()
            .map_or(0, |&p| p as usize);
        let written = sum(&pred.tokens, last);
        let minimum = u64::from(profile.min_cache_tokens().unwrap_or(0));
        return if written < minimum { 0 } else { written };
    }
    profile.readable(total, total.saturating_add(1))
}

/// The chain element a change is in (a message for a change inside one of its blocks).
fn chain_element(place: &Place, c: &Canonical<'_>) -> Option<Block> {
    match place {
        Place::Message { index, .. } => Place::Message {
            index: *index,
            block: None,
        }
        .element_in(c),
        other => other.element_in(c),
    }
}

/// Whether a request is a new conversation: nothing the model wrote is in it.
fn starts_conversation(c: &Canonical<'_>) -> bool {
    !c.messages.iter().any(|m| {
        let role = c.role(m);
        matches!(role, "assistant" | "model" | "reasoning")
            || role.ends_with("_call")
            || role.ends_with("_call_output")
    })
}

/// The largest body whose memory is kept for the next one ([`Index::spare_body`]).
const SPARE_BODY_BYTES: usize = 4 << 20;

struct Stored {
    canonical: Canonical<'static>,
    tokens: Vec<u32>,
    chain: Vec<u64>,
    /// The chain of the messages alone ([`history_of`]).
    history: Vec<u64>,
    scope: u64,
    session: u64,
    ts: Option<f64>,
    tag: u64,
    /// Whether `tag` is a line of the log this engine's requests are in.
    logged: bool,
    /// The launch that saw it ([`Exchange::launch`], hashed; 0: not known).
    launch: u64,
}

/// Finds predecessors: prefix hashes of every held request, per scope (session and lane).
#[derive(Default)]
struct Index {
    /// By [`prefix_key`]: the scope and the prefix's hash, already uniformly distributed,
    /// so the map does not hash them again.
    prefixes: HashMap<u64, u64, BuildHasherDefault<Prehashed>>,
    /// By [`prefix_key`] of a request's whole chain (and of its whole history): the
    /// request that ends there. Of several requests sharing a prefix, the one that ends
    /// where a later request stops sharing is the one it continues (a parallel side call
    /// forked from the same request is not).
    ends: HashMap<u64, u64, BuildHasherDefault<Prehashed>>,
    latest: HashMap<u64, u64>,
    scopes_of_session: HashMap<u64, Vec<u64>>,
    /// Requests held per scope: a scope none is held for leaves the index.
    held_in_scope: HashMap<u64, usize>,
    /// Boxed: a record is hundreds of bytes, and a map's spare capacity holds no copy of it.
    requests: HashMap<u64, Box<Stored>>,
    order: VecDeque<u64>,
    bodies: VecDeque<u64>,
    /// The last body let go, its memory reused for the next body kept (a body is copied
    /// for every request; a fresh allocation of that size is mapped and faulted in anew).
    spare_body: Option<String>,
    elements: usize,
    dropped: u64,
}

/// A hasher for keys that are hashes already: it passes the key through.
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; anything else is folded in, never lost.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A prefix's key in the index: its scope's and its own hash, both SipHash outputs,
/// combined (multiplying by an odd constant keeps the combination a bijection of each).
fn prefix_key(scope: u64, prefix: u64) -> u64 {
    prefix ^ scope.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn mix(a: u64, b: u64) -> u64 {
    let mut h = FxHasher::default();
    (a, b).hash(&mut h);
    h.finish()
}

fn hash_str(text: &str) -> u64 {
    canon::hash_of(text)
}

/// The scope the message histories of `scope` are indexed in.
fn history_scope(scope: u64) -> u64 {
    scope ^ 0x6869_7374_6f72_7921
}

/// The chain of the messages alone: what a request whose tools or system changed still
/// shares with the conversation it continues.
fn history_of(c: &Canonical<'_>) -> Vec<u64> {
    let mut h = 0u64;
    c.messages
        .iter()
        .map(|m| {
            h = mix(h, m.block.hash);
            h
        })
        .collect()
}

/// The chain of prefix hashes: element `i`'s is the hash of elements `0..=i`.
fn chain_of(c: &Canonical<'_>) -> Vec<u64> {
    let mut h = 0u64;
    c.chain_blocks()
        .map(|b| {
            h = mix(h, b.hash);
            h
        })
        .collect()
}

/// The keys of [`Index::ends`] for a request: its whole chain's and its whole history's.
fn ends_of(stored: &Stored) -> impl Iterator<Item = u64> + use<> {
    let chain = stored.chain.last().map(|h| prefix_key(stored.scope, *h));
    let history = stored
        .history
        .last()
        .map(|h| prefix_key(history_scope(stored.scope), *h));
    chain.into_iter().chain(history)
}

impl Index {
    /// The held request of `scope` sharing the longest prefix with `chain`, and how many
    /// elements it shares; the scope's latest request when none shares any.
    fn find(
        &self,
        scope: u64,
        chain: &[u64],
        history: &[u64],
        lead: usize,
    ) -> Option<(u64, usize)> {
        let full = self.deepest(scope, chain);
        if let Some((_, depth)) = full
            && depth > lead
        {
            return full;
        }
        // The prefix ends in the tools or the system field: the request whose history this
        // one continues is the same conversation with its head changed, not an older
        // request that happened to share the head.
        if let Some((id, depth)) = self.deepest(history_scope(scope), history) {
            return Some((id, depth));
        }
        full.or_else(|| self.latest.get(&scope).map(|&id| (id, 0)))
    }

    /// The held request sharing the longest prefix of `chain` in `scope`, and its depth.
    fn deepest(&self, scope: u64, chain: &[u64]) -> Option<(u64, usize)> {
        let mut best = None;
        for (i, h) in chain.iter().enumerate() {
            match self.prefixes.get(&prefix_key(scope, *h)) {
                Some(&id) => best = Some((id, i + 1)),
                None => break,
            }
        }
        best
    }

    /// Of the held requests of `scope` sharing `depth` elements of `chain` with it, the one
    /// found (`id`, the latest) or, when the later request goes on from there with a message
    /// of another role than the latest's next one, the request whose own chain ends there:
    /// the latest is then a branch off it (a parallel side call), which the later request
    /// does not continue. A message of the same role is an edit of the latest's, which it
    /// does continue.
    fn continued(
        &self,
        scope: u64,
        chain: &[u64],
        later: &Canonical<'_>,
        id: u64,
        depth: usize,
    ) -> u64 {
        let Some(h) = depth.checked_sub(1).and_then(|i| chain.get(i)) else {
            return id;
        };
        let Some(&ended) = self.ends.get(&prefix_key(scope, *h)) else {
            return id;
        };
        let (Some(latest), true) = (self.requests.get(&id), self.requests.contains_key(&ended))
        else {
            return id;
        };
        let next_role = |c: &Canonical<'_>| {
            let lead = c.tools.len() + c.system.len();
            depth
                .checked_sub(lead)
                .and_then(|k| c.messages.get(k))
                .map(|m| c.role(m).to_owned())
        };
        match (next_role(&latest.canonical), next_role(later)) {
            (Some(a), Some(b)) if a == b => id,
            _ => ended,
        }
    }

    fn insert(&mut self, id: u64, stored: Stored, config: &EngineConfig) {
        for h in &stored.chain {
            self.prefixes.insert(prefix_key(stored.scope, *h), id);
        }
        let history = history_scope(stored.scope);
        for h in &stored.history {
            self.prefixes.insert(prefix_key(history, *h), id);
        }
        for key in ends_of(&stored) {
            self.ends.insert(key, id);
        }
        self.latest.insert(stored.scope, id);
        let held = self.held_in_scope.entry(stored.scope).or_default();
        if *held == 0 {
            self.scopes_of_session
                .entry(stored.session)
                .or_default()
                .push(stored.scope);
        }
        *held += 1;
        self.elements = self
            .elements
            .saturating_add(stored.chain.len() + stored.history.len());
        self.requests.insert(id, Box::new(stored));
        self.order.push_back(id);
        self.bodies.push_back(id);
        while self.bodies.len() > config.keep_bodies {
            if let Some(old) = self.bodies.pop_front()
                && let Some(s) = self.requests.get_mut(&old)
                && let Some(body) = s.canonical.take_body()
                && body.capacity() <= SPARE_BODY_BYTES
            {
                self.spare_body = Some(body);
            }
        }
        while self.order.len() > config.max_requests || self.elements > config.max_elements {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            self.drop_request(old);
        }
    }

    fn drop_request(&mut self, id: u64) {
        let Some(stored) = self.requests.remove(&id) else {
            return;
        };
        self.dropped = self.dropped.saturating_add(1);
        self.elements = self
            .elements
            .saturating_sub(stored.chain.len() + stored.history.len());
        let history = history_scope(stored.scope);
        let keys = stored.chain.iter().map(|h| prefix_key(stored.scope, *h));
        let keys = keys.chain(stored.history.iter().map(|h| prefix_key(history, *h)));
        for key in keys {
            if self.prefixes.get(&key) == Some(&id) {
                self.prefixes.remove(&key);
            }
        }
        for key in ends_of(&stored) {
            if self.ends.get(&key) == Some(&id) {
                self.ends.remove(&key);
            }
        }
        if self.latest.get(&stored.scope) == Some(&id) {
            self.latest.remove(&stored.scope);
        }
        let held = self.held_in_scope.entry(stored.scope).or_default();
        *held = held.saturating_sub(1);
        if *held == 0 {
            self.held_in_scope.remove(&stored.scope);
            if let Some(scopes) = self.scopes_of_session.get_mut(&stored.session) {
                scopes.retain(|&s| s != stored.scope);
                if scopes.is_empty() {
                    self.scopes_of_session.remove(&stored.session);
                }
            }
        }
    }
}

/// What the engine holds, for a caller reporting its memory bound in action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Held {
    /// Requests held for the predecessor search.
    pub requests: usize,
    /// Their elements.
    pub elements: usize,
    /// Requests dropped to stay within the bounds.
    pub dropped: u64,
    /// Sessions with a request held.
    pub sessions: usize,
    /// Messages remembered by their bytes.
    pub memo: usize,
}

/// The comparison engine over a stream of requests.
pub struct Engine {
    config: EngineConfig,
    index: Index,
    responses: HashMap<String, SessionKey>,
    response_order: VecDeque<String>,
    memo: MessageMemo,
    next_id: u64,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("held", &self.held())
            .finish()
    }
}

impl Engine {
    /// An engine holding nothing yet.
    pub fn new(config: EngineConfig) -> Self {
        Self {
            config,
            index: Index::default(),
            responses: HashMap::new(),
            response_order: VecDeque::new(),
            memo: MessageMemo::new(config.memo_entries),
            next_id: 0,
        }
    }

    /// What it holds.
    pub fn held(&self) -> Held {
        Held {
            requests: self.index.requests.len(),
            elements: self.index.elements,
            dropped: self.index.dropped,
            sessions: self.index.scopes_of_session.len(),
            memo: self.memo.len(),
        }
    }

    /// Reads one request, compares it with its predecessor and holds it for the requests
    /// after it. `count` gives the tokens of an element (the audit's tokenizer over
    /// [`Canonical::sent_text`], keyed by [`Block::hash`] so that an element seen before,
    /// in any spelling, is not counted again; an estimate where there is none). `tag` names the request in
    /// later verdicts (a log line).
    pub fn analyze(
        &mut self,
        exchange: &Exchange<'_>,
        tag: u64,
        count: &mut dyn FnMut(&Canonical<'_>, &Block) -> u32,
    ) -> Result<Analysis, GuardError> {
        let canonical = self.read(
            exchange.body,
            Context {
                path: exchange.path,
                headers: exchange.headers,
            },
        )?;
        Ok(self.analyze_read(canonical, exchange, tag, count))
    }

    /// [`Canonical::read`], with the messages this engine read before looked up by their
    /// bytes instead of read again: what a caller of [`Engine::analyze_read`] reads with.
    pub fn read<'b>(
        &mut self,
        body: &'b [u8],
        context: Context<'_>,
    ) -> Result<Canonical<'b>, GuardError> {
        Canonical::read_memoized(body, context, Some(&mut self.memo))
    }

    /// [`Engine::read`] of a body whose top-level object its caller has read already
    /// (`top`: [`Object::parse`] of `body`), as a log reader that looked for a wrapper's
    /// keys has: the body is not scanned a second time.
    pub fn read_object<'b>(
        &mut self,
        body: &'b str,
        top: Object<'b>,
        context: Context<'_>,
    ) -> Result<Canonical<'b>, GuardError> {
        Canonical::read_object(body, top, context, Some(&mut self.memo))
    }

    /// [`Engine::analyze`] of a body its caller has read already
    /// ([`Engine::read`] of `exchange.body` with its path and headers): for a caller that
    /// needs the body's shape before it can say what the provider reported.
    pub fn analyze_read(
        &mut self,
        canonical: Canonical<'_>,
        exchange: &Exchange<'_>,
        tag: u64,
        count: &mut dyn FnMut(&Canonical<'_>, &Block) -> u32,
    ) -> Analysis {
        let session = session::session_of(exchange, &canonical, &self.responses);
        let lane = session::lane_of(exchange.path, &canonical);
        let session_hash = hash_str(&session.id);
        let scope = mix(session_hash, hash_str(&lane));
        let tokens: Vec<u32> = canonical
            .chain_blocks()
            .map(|b| count(&canonical, b))
            .collect();
        let total: u64 = tokens.iter().map(|&t| u64::from(t)).sum();
        let chain = chain_of(&canonical);
        let history = history_of(&canonical);
        let lead = canonical.tools.len() + canonical.system.len();
        let profile = profile_of(&canonical);

        // A candidate that shares no element with this request is no predecessor: a new
        // conversation, or one whose predecessor was not seen (a side call of another lane, a
        // request of an earlier launch not kept).
        let shares = |id: u64| {
            self.index
                .requests
                .get(&id)
                .is_some_and(|s| shares_any(&s.canonical, &canonical))
        };
        let found = self
            .index
            .find(scope, &chain, &history, lead)
            .filter(|&(id, depth)| depth > 0 || shares(id))
            .map(|(id, depth)| {
                // Past the lead, the depth is of the whole chain.
                let id = if depth > lead {
                    self.index.continued(scope, &chain, &canonical, id, depth)
                } else {
                    id
                };
                (id, true)
            })
            .or_else(|| {
                // No request of this lane in the session: the session's latest in another lane
                // (a model switch), the one sharing the most.
                let scopes = self.index.scopes_of_session.get(&session_hash)?;
                scopes
                    .iter()
                    .filter(|&&s| s != scope)
                    .filter_map(|&s| self.index.find(s, &chain, &history, lead))
                    .filter(|&(id, depth)| depth > 0 || shares(id))
                    .max_by_key(|&(id, depth)| (depth, id))
                    .map(|(id, _)| (id, false))
            });

        let new_conversation = starts_conversation(&canonical);
        let mut analysis = Analysis {
            tag,
            shape: canonical.shape,
            provider: profile.provider(),
            lifetime: None,
            asks_lifetime: profile
                .provider()
                .map(|_| lifetime_of(&profile, &canonical)),
            model: canonical.model.as_deref().map(str::to_owned),
            lane,
            session,
            predecessor: None,
            changes: Vec::new(),
            cause: Some(Cause::ColdStart),
            new_conversation,
            session_seen: self.index.scopes_of_session.contains_key(&session_hash),
            loss: None,
            tokens: total,
            common_tokens: 0,
            tokens_lost: 0,
            expected_cached: 0,
            reported: exchange.reported,
            shortfall: None,
            messages: canonical.messages.len(),
            lead: canonical.tools.len() + canonical.system.len(),
            breakpoints: canonical.breakpoints.clone(),
        };
        if let Some((id, same_lane)) = found
            && let Some(pred) = self.index.requests.get(&id)
        {
            let found = diff(&pred.canonical, &canonical);
            let common_tokens: u64 = tokens[..found.common.min(tokens.len())]
                .iter()
                .map(|&t| u64::from(t))
                .sum();
            let gap_secs = match (pred.ts, exchange.ts) {
                (Some(a), Some(b)) if b >= a => Some(b - a),
                _ => None,
            };
            let launch = launch_hash(exchange.launch);
            analysis.predecessor = Some(Predecessor {
                tag: pred.tag,
                logged: pred.logged,
                ts: pred.ts,
                earlier_launch: pred.launch != 0 && launch != 0 && pred.launch != launch,
                same_lane,
                common_elements: found.common,
                gap_secs,
            });
            analysis.common_tokens = common_tokens;
            let expected = expected_read(&profile, pred, &canonical, &tokens, found.common);
            analysis.expected_cached = match expected {
                Expected::Tokens(t)
                | Expected::BreakpointMoved { read: t }
                | Expected::LookbackExceeded { read: t } => t,
                Expected::BelowMinimum => 0,
            };
            analysis.cause = match found.first_break() {
                Some(_) if new_conversation && !same_lane => Some(Cause::ColdStart),
                Some(_) if new_conversation => {
                    // A new conversation (a side call, a subagent) sharing what it can: it
                    // continues nothing, so it breaks nothing.
                    Some(Cause::ColdStart)
                }
                Some(change) => {
                    // Lost: what the provider's rule reads of an append-only continuation,
                    // less what it reads of this request (nothing, for a change of the
                    // model, key or a parameter the cache is keyed by).
                    let ideal = ideal_read(&profile, pred);
                    // A change of what keys the cache (the model, the key, a header or a
                    // parameter) leaves nothing readable; one in the prompt's elements (a
                    // tool, a system block, a message, removed at the end included) leaves
                    // what comes before it.
                    let keyed = matches!(
                        change.place,
                        Place::Model
                            | Place::CacheKey
                            | Place::Parameter { .. }
                            | Place::Header { .. }
                    );
                    let read = match expected {
                        _ if keyed => 0,
                        Expected::Tokens(t)
                        | Expected::BreakpointMoved { read: t }
                        | Expected::LookbackExceeded { read: t } => t,
                        Expected::BelowMinimum => 0,
                    };
                    analysis.tokens_lost = ideal.saturating_sub(read);
                    // Read on into the changed element only where the earlier request had the
                    // same element there (an edit in place): the divergence of a tool is
                    // told against the earlier tool of its name, wherever that was.
                    let in_place = match change.place {
                        Place::Tools { index } => {
                            pred.canonical.tools.get(index).map(|t| &t.name)
                                == canonical.tools.get(index).map(|t| &t.name)
                        }
                        _ => true,
                    };
                    let partial = chain_element(&change.place, &canonical)
                        .filter(|_| in_place && profile.lookback_blocks().is_none())
                        .map(|b| (b.start as usize, change.divergence.byte_offset))
                        .filter(|(start, at)| at > start);
                    if !keyed {
                        analysis.loss = Some(LossBasis {
                            profile: profile.clone(),
                            ideal,
                            common_tokens,
                            total,
                            partial,
                        });
                    }
                    Some(change.cause.clone())
                }
                None => timing_and_usage(&mut analysis, &profile, pred, expected, gap_secs),
            };
            analysis.changes = found.changes;
        }
        if let Some(id) = exchange.response_id {
            self.remember_response(id, &analysis.session);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let spare = self.index.spare_body.take();
        self.index.insert(
            id,
            Stored {
                canonical: canonical.into_owned_in(spare),
                tokens,
                chain,
                history,
                scope,
                session: session_hash,
                ts: exchange.ts,
                tag,
                logged: true,
                launch: launch_hash(exchange.launch),
            },
            &self.config,
        );
        analysis
    }

    /// What the engine keeps of the request it analysed last (`analysis`, its result, names
    /// its session and lane): its elements' hashes and tokens, no body ([`RequestRecord`]).
    /// `None` when it holds none.
    pub fn last_record(
        &self,
        analysis: &Analysis,
        response_id: Option<&str>,
    ) -> Option<RequestRecord> {
        let id = self.next_id.checked_sub(1)?;
        let stored = self.index.requests.get(&id)?;
        let body_hash = stored.canonical.body().map(canon::hash_of);
        let canonical = stored.canonical.without_body();
        Some(RequestRecord {
            tag: stored.tag,
            ts: stored.ts,
            launch: stored.launch,
            session: analysis.session.clone(),
            lane: analysis.lane.clone(),
            tokens: stored.tokens.clone(),
            response_id: response_id.map(|r| prompt_core::input::excerpt(r, 256).into_owned()),
            body_hash,
            canonical,
        })
    }

    /// Holds a request an earlier launch analysed, as if it had been analysed here: later
    /// requests of its session are compared with it. `tag` names it in their verdicts, a
    /// line of this engine's log when `logged`, else a tag of the caller's that no log line
    /// takes (it is then named by its time). `body`, when given and the very bytes the
    /// record was read from (its hash checked), is kept for excerpts and writer lookups.
    pub fn restore(&mut self, record: RequestRecord, tag: u64, logged: bool, body: Option<&str>) {
        let mut canonical = record.canonical;
        if let (Some(body), Some(hash)) = (body, record.body_hash)
            && canon::hash_of(body) == hash
        {
            canonical.keep_body(body.to_owned());
        }
        let session_hash = hash_str(&record.session.id);
        let scope = mix(session_hash, hash_str(&record.lane));
        let chain = chain_of(&canonical);
        let history = history_of(&canonical);
        if let Some(id) = &record.response_id {
            self.remember_response(id, &record.session);
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.index.insert(
            id,
            Stored {
                canonical,
                tokens: record.tokens,
                chain,
                history,
                scope,
                session: session_hash,
                ts: record.ts,
                tag,
                logged,
                launch: record.launch,
            },
            &self.config,
        );
    }

    /// The bytes of the element at `place` (a tool, a system block, a message or one of its
    /// content blocks) in the held request tagged `tag`, with where they start in its body;
    /// `None` when that request's body is no longer kept (only the last
    /// [`EngineConfig::keep_bodies`] are, and only those are searched), or it has no such
    /// element. What a caller reads to say who wrote a change, in the later request (just
    /// analysed) or its predecessor ([`Predecessor::tag`]).
    pub fn element_text(&self, tag: u64, place: &Place) -> Option<(&str, u32)> {
        let stored = self
            .index
            .bodies
            .iter()
            .rev()
            .filter_map(|id| self.index.requests.get(id))
            .find(|s| s.tag == tag)?;
        let c = &stored.canonical;
        let body = c.body()?;
        let block = place.element_in(c)?;
        Some((block.bytes(body), block.start))
    }

    fn remember_response(&mut self, id: &str, session: &SessionKey) {
        let id = prompt_core::input::excerpt(id, 256).into_owned();
        if self.responses.insert(id.clone(), session.clone()).is_none() {
            self.response_order.push_back(id);
        }
        while self.response_order.len() > self.config.max_response_ids {
            if let Some(old) = self.response_order.pop_front() {
                self.responses.remove(&old);
            }
        }
    }
}

/// What the provider's rule says the request should read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expected {
    /// These tokens.
    Tokens(u64),
    /// Nothing: the shared prefix is below the provider's minimum.
    BelowMinimum,
    /// Anthropic: no breakpoint of this request reaches the predecessor's last cache
    /// write; `read` tokens of an earlier write of it (the tools and system) still are.
    BreakpointMoved {
        /// Tokens still read.
        read: u64,
    },
    /// Anthropic: this request's breakpoints are past the lookback from the predecessor's
    /// last cache write; `read` tokens of an earlier write still are.
    LookbackExceeded {
        /// Tokens still read.
        read: u64,
    },
}

fn sum(tokens: &[u32], n: usize) -> u64 {
    tokens[..n.min(tokens.len())]
        .iter()
        .map(|&t| u64::from(t))
        .sum()
}

/// The profile of a request's provider, from its API and model.
fn profile_of(c: &Canonical<'_>) -> Profile {
    Profile::lookup(c.shape, c.model.as_deref().unwrap_or(""), None)
}

/// How long the predecessor's entry lives: the `ttl` its markers asked for, the retention
/// it asked for, else the provider's default.
fn lifetime_of(profile: &Profile, pred: &Canonical<'_>) -> Lifetime {
    if let Some(ttl) = pred.marker_ttl
        && profile.provider() == Some(Provider::Anthropic)
    {
        return ttl.lifetime();
    }
    let extended = pred
        .keys
        .iter()
        .any(|k| k.name.as_ref() == "prompt_cache_retention" && k.value.contains("24h"));
    if extended {
        return profile
            .clone()
            .with_retention(Retention::TwentyFourHours)
            .lifetime();
    }
    profile.lifetime()
}

fn expected_read(
    profile: &Profile,
    pred: &Stored,
    later: &Canonical<'_>,
    tokens: &[u32],
    common: usize,
) -> Expected {
    let minimum = u64::from(profile.min_cache_tokens().unwrap_or(0));
    let Some(lookback) = profile.lookback_blocks() else {
        let shared = sum(tokens, common);
        return if common > 0 && shared < minimum {
            Expected::BelowMinimum
        } else {
            // As finely as the provider reads (OpenAI's 128-token steps, vLLM's blocks).
            Expected::Tokens(profile.readable(shared, sum(tokens, tokens.len())))
        };
    };
    // Anthropic reads at a breakpoint of this request an entry the predecessor wrote at
    // one of its own, at most `lookback` elements back (counted here in
    // the engine's elements: tools, system blocks, messages).
    let written: Vec<usize> = pred
        .canonical
        .breakpoints
        .iter()
        .map(|&p| p as usize)
        .filter(|&p| p <= common)
        .collect();
    if written.is_empty() {
        return Expected::Tokens(0);
    }
    let reads = |p: usize| {
        later
            .breakpoints
            .iter()
            .any(|&q| (q as usize) >= p && (q as usize) - p <= lookback)
    };
    // The predecessor's last write within the shared prefix: what an append-only request
    // reads. An earlier write read instead (the tools and system, marked apart) leaves the
    // messages after it unread: the breakpoints moved, or went past the lookback.
    let last = written.iter().copied().max().unwrap_or(0);
    let past = |p: usize| later.breakpoints.iter().any(|&q| q as usize >= p);
    let read = written.iter().rev().find(|&&p| reads(p)).copied();
    match read {
        Some(p) if p >= last => {
            let t = sum(tokens, p);
            if t < minimum {
                Expected::BelowMinimum
            } else {
                Expected::Tokens(t)
            }
        }
        _ => {
            let read = read.map_or(0, |p| sum(tokens, p));
            let read = if read < minimum { 0 } else { read };
            if past(last) {
                Expected::LookbackExceeded { read }
            } else {
                Expected::BreakpointMoved { read }
            }
        }
    }
}

/// Share points of the input below the expectation that make a shortfall (the audit's
/// tokenizer is not the provider's).
const SHORTFALL_SHARE: f64 = 0.05;
/// Provider tokens short that make a shortfall.
const SHORTFALL_TOKENS: f64 = 256.0;

/// For a request whose bytes extend its predecessor: the lifetime, the provider's rule
/// and what it reported.
fn timing_and_usage(
    analysis: &mut Analysis,
    profile: &Profile,
    pred: &Stored,
    expected: Expected,
    gap_secs: Option<f64>,
) -> Option<Cause> {
    let lifetime = lifetime_of(profile, &pred.canonical);
    analysis.lifetime = Some(lifetime);
    // Seconds, rounded down: an entry whose lifetime is reached exactly is gone.
    let fate = gap_secs.map(|g| lifetime.after_gap(g as u64));
    let expected_tokens = match expected {
        Expected::Tokens(t) => t,
        Expected::BelowMinimum => {
            return (analysis.common_tokens > 0).then_some(Cause::BelowMinimum);
        }
        Expected::BreakpointMoved { read } => {
            analysis.tokens_lost = analysis.common_tokens.saturating_sub(read);
            return Some(Cause::BreakpointMoved);
        }
        Expected::LookbackExceeded { read } => {
            analysis.tokens_lost = analysis.common_tokens.saturating_sub(read);
            return Some(Cause::LookbackExceeded);
        }
    };
    if expected_tokens == 0 {
        return None;
    }
    let Some(reported) = analysis.reported else {
        // No usage: the lifetime alone says the entry is gone.
        if fate == Some(GapFate::Expired) {
            analysis.tokens_lost = expected_tokens;
            return Some(Cause::TtlExpired);
        }
        return None;
    };
    let expected_share = if analysis.tokens == 0 {
        0.0
    } else {
        expected_tokens as f64 / analysis.tokens as f64
    };
    let reported_share = if reported.input == 0 {
        0.0
    } else {
        reported.cached as f64 / reported.input as f64
    };
    let short_share = expected_share - reported_share;
    let short_tokens = short_share * reported.input as f64;
    if short_share < SHORTFALL_SHARE || short_tokens < SHORTFALL_TOKENS {
        return None;
    }
    analysis.shortfall = Some(short_tokens.round() as u64);
    analysis.tokens_lost = (short_share * analysis.tokens as f64).round() as u64;
    // The entry may be gone (OpenAI's 5–10 minutes) and less was read: it is.
    Some(match fate {
        Some(GapFate::Expired | GapFate::MaybeExpired) => Cause::TtlExpired,
        Some(GapFate::Kept) => Cause::ProviderSide,
        // No timestamps, or a lifetime the provider does not document: expiry cannot be
        // told from the provider's side.
        Some(GapFate::Unknown) | None => Cause::Unknown,
    })
}
