//! A fleet of engine replicas behind a router, simulated: which share of prompt tokens the
//! replicas' prefix caches serve under each routing policy, at any scale.
//!
//! A prefix cache lives in one replica. A request that lands on a replica that has not seen
//! its prefix pays for the whole prompt again. The simulator plays many sessions of the same
//! agent (one shared frozen prefix, each session its own append-only history, of varied
//! length) arriving over time, and routes every request to one of `R` replicas. Each replica
//! keeps a KV cache of fixed capacity in tokens, as blocks with least-recently-used eviction
//! (vLLM's and SGLang's model: a block is reused only when every block before it is); a
//! request reuses its longest cached block chain and re-processes the rest, which the
//! replica then keeps. Routing policies: round robin, least loaded (shortest backlog),
//! session-key rendezvous hashing, prefix-fingerprint rendezvous hashing, the library's key
//! as sglang-router's `manual` policy uses it ([`Policy::LibraryKey`]: a session's key is
//! assigned to the least-loaded replica when first seen, then kept), and a longest-prefix-match
//! oracle that knows every replica's cache and backlog.
//!
//! ```
//! use prompt_measure::fleet::{simulate_fleet, FleetConfig, Policy, SessionShape};
//! // An 8,000-token prefix; each request adds 1,000 tokens of history.
//! let shape = SessionShape::linear(8_000, 1_000, 20);
//! let config = FleetConfig::default().with_replicas(4).with_sessions(40);
//! let spread = simulate_fleet(&shape, &config, Policy::RoundRobin);
//! let kept = simulate_fleet(&shape, &config, Policy::SessionHash);
//! assert!(kept.cached_share > spread.cached_share);
//! assert_eq!(kept.requests, spread.requests);
//! ```

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use serde::Serialize;

/// The requests of one session: prompt lengths in tokens, the prefix they share with every
/// session of the agent, and where the history restarts (a compaction's new epoch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionShape {
    /// Tokens of the frozen prefix (tools and system text), the same in every session.
    pub prefix_tokens: u64,
    /// Prompt tokens of each request, in order.
    pub requests: Vec<u64>,
    /// For each request, its cache epoch: the history after the prefix is new when it
    /// changes.
    pub epochs: Vec<u32>,
    /// For each request, the tokens it shares with the request before it in the same epoch
    /// (the rest, from the previous request's ephemeral tail on, is new). Missing entries:
    /// all of the previous request.
    #[serde(default)]
    pub shared: Vec<u64>,
}

impl SessionShape {
    /// A prefix and `requests` requests that each add `step` tokens, one epoch.
    pub fn linear(prefix_tokens: u64, step: u64, requests: usize) -> Self {
        let requests: Vec<u64> = (1..=requests as u64)
            .map(|k| prefix_tokens.saturating_add(step.saturating_mul(k)))
            .collect();
        Self {
            prefix_tokens,
            epochs: vec![0; requests.len()],
            shared: Vec::new(),
            requests,
        }
    }

    /// For each request and each of its full blocks, the request that last wrote the block:
    /// a block is kept from the request before while it lies within the tokens they share.
    fn generations(&self, block: u64) -> Vec<Vec<u32>> {
        let block = block.max(1);
        let mut out: Vec<Vec<u32>> = Vec::with_capacity(self.requests.len());
        for (k, &tokens) in self.requests.iter().enumerate() {
            let blocks = usize::try_from(tokens / block).unwrap_or(usize::MAX);
            let here = u32::try_from(k).unwrap_or(u32::MAX);
            let same_epoch = k > 0 && self.epochs.get(k) == self.epochs.get(k - 1);
            let kept = match (same_epoch, out.last()) {
                (true, Some(previous)) => {
                    let shared = self
                        .shared
                        .get(k)
                        .copied()
                        .unwrap_or_else(|| self.requests[k - 1]);
                    usize::try_from(shared / block)
                        .unwrap_or(usize::MAX)
                        .min(previous.len())
                }
                _ => 0,
            };
            let mut generations = Vec::with_capacity(blocks);
            for i in 0..blocks {
                generations.push(match out.last() {
                    Some(previous) if i < kept => previous[i],
                    _ => here,
                });
            }
            out.push(generations);
        }
        out
    }
}

/// A routing policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "policy")]
pub enum Policy {
    /// Each request to the next replica.
    RoundRobin,
    /// Each request to the replica with the shortest backlog.
    LeastLoaded,
    /// Rendezvous hashing of the session key: a session keeps its replica.
    SessionHash,
    /// Rendezvous hashing of the prefix fingerprint: every session of an agent on one
    /// replica.
    PrefixHash,
    /// The library's routing key (one per session, `Request::routing_key`) as sglang-router's
    /// `manual` policy with `--assignment-mode min_load` uses it: a key seen for the first
    /// time goes to the replica with the shortest backlog, and stays there.
    LibraryKey,
    /// A router that sees every replica's cache and backlog: of the replicas holding the
    /// longest prefix of the request and the least-loaded replica, the one that would finish
    /// the request first (backlog plus the tokens it would re-process).
    Oracle,
}

impl Policy {
    /// A short name for tables.
    pub fn name(&self) -> String {
        match self {
            Policy::RoundRobin => "round_robin".to_owned(),
            Policy::LeastLoaded => "least_loaded".to_owned(),
            Policy::SessionHash => "session_hash".to_owned(),
            Policy::PrefixHash => "prefix_hash".to_owned(),
            Policy::LibraryKey => "library_key".to_owned(),
            Policy::Oracle => "oracle".to_owned(),
        }
    }
}

/// The fleet and its load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FleetConfig {
    /// Engine replicas.
    pub replicas: usize,
    /// KV-cache capacity of each replica, in tokens.
    pub capacity_tokens: u64,
    /// Tokens per cache block.
    pub block_tokens: u64,
    /// Concurrent sessions.
    pub sessions: usize,
    /// Each session plays between this many requests…
    pub min_requests: usize,
    /// …and this many (capped by the shape).
    pub max_requests: usize,
    /// Sessions start spread over this many time units.
    pub arrival_spread: u64,
    /// Mean time between two requests of a session.
    pub think_time: u64,
    /// Time a replica spends per re-processed token (a cached token is free), for the
    /// backlog least-loaded routing sees.
    pub cost_per_token: u64,
    /// Agents (distinct frozen prefixes); sessions are dealt to them in turn.
    pub agents: usize,
    /// Seed of the session lengths and timings.
    pub seed: u64,
    /// Each replica keeps only the blocks of the request it served last, as a llama-server
    /// slot keeps one conversation (`capacity_tokens` still bounds it).
    pub one_conversation_per_replica: bool,
}

impl FleetConfig {
    /// The same, with `replicas` (engine replicas).
    pub fn with_replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas;
        self
    }

    /// The same, with `capacity_tokens` (KV-cache capacity of each replica, in tokens).
    pub fn with_capacity_tokens(mut self, capacity_tokens: u64) -> Self {
        self.capacity_tokens = capacity_tokens;
        self
    }

    /// The same, with `block_tokens` (tokens per cache block).
    pub fn with_block_tokens(mut self, block_tokens: u64) -> Self {
        self.block_tokens = block_tokens;
        self
    }

    /// The same, with `sessions` (concurrent sessions).
    pub fn with_sessions(mut self, sessions: usize) -> Self {
        self.sessions = sessions;
        self
    }

    /// The same, with `min_requests` (each session plays between this many requests).
    pub fn with_min_requests(mut self, min_requests: usize) -> Self {
        self.min_requests = min_requests;
        self
    }

    /// The same, with `max_requests` (…and this many (capped by the shape)).
    pub fn with_max_requests(mut self, max_requests: usize) -> Self {
        self.max_requests = max_requests;
        self
    }

    /// The same, with `arrival_spread` (sessions start spread over this many time units).
    pub fn with_arrival_spread(mut self, arrival_spread: u64) -> Self {
        self.arrival_spread = arrival_spread;
        self
    }

    /// The same, with `think_time` (mean time between two requests of a session).
    pub fn with_think_time(mut self, think_time: u64) -> Self {
        self.think_time = think_time;
        self
    }

    /// The same, with `cost_per_token` (time a replica spends per re-processed token (a cached token is free), for the).
    pub fn with_cost_per_token(mut self, cost_per_token: u64) -> Self {
        self.cost_per_token = cost_per_token;
        self
    }

    /// The same, with `agents` (agents (distinct frozen prefixes); sessions are dealt to them in turn).
    pub fn with_agents(mut self, agents: usize) -> Self {
        self.agents = agents;
        self
    }

    /// The same, with `seed` (seed of the session lengths and timings).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The same, with `one_conversation_per_replica` (each replica keeps only the blocks of the request it served last, as a llama-server).
    pub fn with_one_conversation_per_replica(mut self, one_conversation_per_replica: bool) -> Self {
        self.one_conversation_per_replica = one_conversation_per_replica;
        self
    }
}

impl Default for FleetConfig {
    fn default() -> Self {
        Self {
            replicas: 8,
            capacity_tokens: 2_000_000,
            block_tokens: 256,
            sessions: 100,
            min_requests: 5,
            max_requests: usize::MAX,
            arrival_spread: 1_000_000,
            think_time: 20_000,
            cost_per_token: 1,
            agents: 1,
            seed: 1,
            one_conversation_per_replica: false,
        }
    }
}

/// What a policy did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetReport {
    /// The policy.
    pub policy: String,
    /// Replicas.
    pub replicas: usize,
    /// Sessions.
    pub sessions: usize,
    /// Requests routed.
    pub requests: u64,
    /// Prompt tokens over all requests.
    pub tokens: u64,
    /// Tokens served from a replica's cache.
    pub cached: u64,
    /// Tokens re-processed.
    pub reprocessed: u64,
    /// `cached / tokens`.
    pub cached_share: f64,
    /// Most requests on one replica over the mean per replica (1.0: perfectly even).
    pub imbalance: f64,
}

/// SplitMix64: a fast, well-mixed hash of one word, for block ids and rendezvous scores.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn mix2(a: u64, b: u64) -> u64 {
    mix(a ^ mix(b))
}

/// Rendezvous hashing: the replica with the highest score for `key`.
fn rendezvous(key: u64, replicas: usize) -> usize {
    (0..replicas)
        .max_by_key(|&r| mix2(key, r as u64))
        .unwrap_or(0)
}

/// One replica's KV cache: blocks with least-recently-used eviction.
struct Replica {
    capacity: usize,
    /// Block → the tick of its last use.
    blocks: HashMap<u64, u64>,
    /// (block, tick) in use order; entries whose tick is stale are skipped.
    order: VecDeque<(u64, u64)>,
    busy_until: u64,
    requests: u64,
}

impl Replica {
    fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            blocks: HashMap::new(),
            order: VecDeque::new(),
            busy_until: 0,
            requests: 0,
        }
    }

    /// Leading blocks of `chain` present.
    fn cached_blocks(&self, chain: &[u64]) -> usize {
        chain
            .iter()
            .take_while(|b| self.blocks.contains_key(b))
            .count()
    }

    /// Keeps `chain` as most recently used; evicts what no longer fits, reporting evicted
    /// blocks to `evicted`.
    /// Keeps only `chain`: what a single slot holds after serving it.
    fn keep_only(&mut self, chain: &[u64], evicted: &mut dyn FnMut(u64)) {
        let keep: std::collections::HashSet<u64> = chain.iter().copied().collect();
        self.blocks.retain(|block, _| {
            let kept = keep.contains(block);
            if !kept {
                evicted(*block);
            }
            kept
        });
        self.order.retain(|(block, _)| keep.contains(block));
    }

    fn touch(&mut self, chain: &[u64], tick: &mut u64, evicted: &mut dyn FnMut(u64)) {
        for &block in chain {
            *tick += 1;
            self.blocks.insert(block, *tick);
            self.order.push_back((block, *tick));
        }
        while self.blocks.len() > self.capacity {
            let Some((block, at)) = self.order.pop_front() else {
                break;
            };
            if let Entry::Occupied(entry) = self.blocks.entry(block)
                && *entry.get() == at
            {
                entry.remove();
                evicted(block);
            }
        }
        // Stale entries are dropped when they reach the front; keep the queue bounded.
        if self.order.len() > 4 * self.capacity + 1024 {
            let blocks = &self.blocks;
            self.order.retain(|(b, at)| blocks.get(b) == Some(at));
        }
    }
}

/// Which replicas hold a block: for the oracle, so a lookup never scans every replica.
#[derive(Default)]
struct Holders {
    map: HashMap<u64, Vec<u64>>,
    words: usize,
}

impl Holders {
    fn new(replicas: usize) -> Self {
        Self {
            map: HashMap::new(),
            words: replicas.div_ceil(64),
        }
    }

    fn add(&mut self, block: u64, replica: usize) {
        let words = self.words;
        let bits = self.map.entry(block).or_insert_with(|| vec![0; words]);
        bits[replica / 64] |= 1 << (replica % 64);
    }

    fn remove(&mut self, block: u64, replica: usize) {
        if let Some(bits) = self.map.get_mut(&block) {
            bits[replica / 64] &= !(1 << (replica % 64));
            if bits.iter().all(|w| *w == 0) {
                self.map.remove(&block);
            }
        }
    }

    /// Replicas holding the longest prefix of `chain`, and its length in blocks.
    fn longest(&self, chain: &[u64], replicas: usize) -> (Vec<u64>, usize) {
        let mut candidates = vec![u64::MAX; self.words];
        if !replicas.is_multiple_of(64)
            && let Some(last) = candidates.last_mut()
        {
            *last = (1u64 << (replicas % 64)) - 1;
        }
        let mut depth = 0;
        for block in chain {
            let Some(bits) = self.map.get(block) else {
                break;
            };
            let next: Vec<u64> = candidates.iter().zip(bits).map(|(a, b)| a & b).collect();
            if next.iter().all(|w| *w == 0) {
                break;
            }
            candidates = next;
            depth += 1;
        }
        (candidates, depth)
    }
}

/// The agent a session belongs to.
fn agent_of(config: &FleetConfig, session: usize) -> u64 {
    (session % config.agents.max(1)) as u64
}

/// One session's timeline.
struct SessionPlan {
    requests: usize,
    start: u64,
    /// Seed of the think time before each request.
    think: u64,
}

impl SessionPlan {
    /// The think time before request `k + 1`: half to one and a half `think_time`, drawn
    /// per request, so sessions interleave in no fixed pattern.
    fn gap(&self, config: &FleetConfig, k: usize) -> u64 {
        let think = config.think_time.max(1);
        (think / 2 + mix2(self.think, k as u64) % think).max(1)
    }
}

fn plan(config: &FleetConfig, shape: &SessionShape, session: usize) -> SessionPlan {
    let h = mix2(config.seed, session as u64);
    let most = shape.requests.len().min(config.max_requests).max(1);
    let least = config.min_requests.clamp(1, most);
    let requests = least + (h % (most - least + 1) as u64) as usize;
    let start = mix(h) % config.arrival_spread.max(1);
    SessionPlan {
        requests,
        start,
        think: mix(h ^ 1),
    }
}

/// The block chain of `session`'s request `k`: full blocks only; those inside the shared
/// prefix are the agent's, the rest the session's (per epoch and per the request that wrote
/// the block, `generations`).
fn chain(
    shape: &SessionShape,
    generations: &[Vec<u32>],
    config: &FleetConfig,
    session: usize,
    k: usize,
    out: &mut Vec<u64>,
) {
    out.clear();
    let block = config.block_tokens.max(1);
    let epoch = shape.epochs.get(k).copied().unwrap_or(0);
    let shared = shape.prefix_tokens / block;
    let agent = agent_of(config, session);
    let Some(blocks) = generations.get(k) else {
        return;
    };
    for (i, &generation) in (0u64..).zip(blocks) {
        out.push(if i < shared {
            mix2(mix2(0xa9e7, agent), i)
        } else {
            mix2(
                mix2(session as u64 + 1, u64::from(epoch)),
                mix2(i, u64::from(generation)),
            )
        });
    }
}

/// Plays every session through the fleet under `policy`, each request at the time its
/// session's plan gives.
pub fn simulate_fleet(shape: &SessionShape, config: &FleetConfig, policy: Policy) -> FleetReport {
    simulate(shape, config, policy, None)
}

/// Plays the requests `order` names, `(session, request index)`, in that order (one every
/// `think_time / sessions` time units), under `policy`: to replay a live run's order.
/// Pairs out of range (a session past `config.sessions`, an index past the shape) are skipped.
pub fn simulate_fleet_in_order(
    shape: &SessionShape,
    config: &FleetConfig,
    policy: Policy,
    order: &[(usize, usize)],
) -> FleetReport {
    simulate(shape, config, policy, Some(order))
}

fn simulate(
    shape: &SessionShape,
    config: &FleetConfig,
    policy: Policy,
    order: Option<&[(usize, usize)]>,
) -> FleetReport {
    let replicas_n = config.replicas.max(1);
    let capacity =
        usize::try_from(config.capacity_tokens / config.block_tokens.max(1)).unwrap_or(usize::MAX);
    let mut replicas: Vec<Replica> = (0..replicas_n).map(|_| Replica::new(capacity)).collect();
    let mut holders = Holders::new(if policy == Policy::Oracle {
        replicas_n
    } else {
        0
    });
    let plans: Vec<SessionPlan> = (0..config.sessions)
        .map(|s| plan(config, shape, s))
        .collect();
    // (time, session, request index), earliest first.
    let mut events: BinaryHeap<Reverse<(u64, usize, usize)>> = match order {
        Some(_) => BinaryHeap::new(),
        None => plans
            .iter()
            .enumerate()
            .map(|(s, p)| Reverse((p.start, s, 0)))
            .collect(),
    };
    let mut ordered = order
        .unwrap_or_default()
        .iter()
        .filter(|&&(s, k)| s < config.sessions && k < shape.requests.len())
        .enumerate()
        .map(|(i, &(s, k))| {
            let step = config.think_time / config.sessions.max(1) as u64;
            (step.saturating_mul(i as u64), s, k)
        });
    let (mut tick, mut next_rr) = (0u64, 0usize);
    // LibraryKey: the replica each session's key was assigned to.
    let mut assigned: HashMap<u64, usize> = HashMap::new();
    let (mut requests, mut tokens, mut cached) = (0u64, 0u64, 0u64);
    let mut blocks = Vec::new();
    let generations = shape.generations(config.block_tokens);
    loop {
        let next = match order {
            Some(_) => ordered.next(),
            None => events.pop().map(|Reverse(event)| event),
        };
        let Some((now, session, k)) = next else {
            break;
        };
        chain(shape, &generations, config, session, k, &mut blocks);
        let request_tokens = shape.requests.get(k).copied().unwrap_or(0);
        let session_key = mix2(config.seed ^ 0x5e55, session as u64);
        let prefix_key = mix2(0x0000_7072_6566_6978, agent_of(config, session));
        // The shortest backlog; among idle replicas, the one that has served least.
        let least_loaded = |replicas: &[Replica]| {
            (0..replicas.len())
                .min_by_key(|&r| (replicas[r].busy_until.max(now), replicas[r].requests))
                .unwrap_or(0)
        };
        let target = match policy {
            Policy::RoundRobin => {
                next_rr = (next_rr + 1) % replicas_n;
                next_rr
            }
            Policy::LeastLoaded => least_loaded(&replicas),
            Policy::SessionHash => rendezvous(session_key, replicas_n),
            Policy::PrefixHash => rendezvous(prefix_key, replicas_n),
            Policy::LibraryKey => *assigned
                .entry(session_key)
                .or_insert_with(|| least_loaded(&replicas)),
            Policy::Oracle => {
                let (candidates, depth) = holders.longest(&blocks, replicas_n);
                let idle = least_loaded(&replicas);
                if depth == 0 {
                    idle
                } else {
                    let holder = (0..replicas_n)
                        .filter(|r| candidates[r / 64] >> (r % 64) & 1 == 1)
                        .min_by_key(|&r| replicas[r].busy_until.max(now))
                        .unwrap_or(idle);
                    let finish = |r: usize| {
                        let hit = (replicas[r].cached_blocks(&blocks) as u64)
                            .saturating_mul(config.block_tokens)
                            .min(request_tokens);
                        replicas[r].busy_until.max(now).saturating_add(
                            (request_tokens - hit).saturating_mul(config.cost_per_token),
                        )
                    };
                    if finish(idle) < finish(holder) {
                        idle
                    } else {
                        holder
                    }
                }
            }
        };
        let replica = &mut replicas[target];
        let hit_blocks = replica.cached_blocks(&blocks) as u64;
        let hit = hit_blocks
            .saturating_mul(config.block_tokens)
            .min(request_tokens);
        let miss = request_tokens - hit;
        replica.busy_until = replica
            .busy_until
            .max(now)
            .saturating_add(miss.saturating_mul(config.cost_per_token));
        replica.requests += 1;
        if policy == Policy::Oracle {
            for &b in &blocks {
                holders.add(b, target);
            }
            let holders = &mut holders;
            if config.one_conversation_per_replica {
                replica.keep_only(&blocks, &mut |b| holders.remove(b, target));
            }
            replica.touch(&blocks, &mut tick, &mut |b| holders.remove(b, target));
        } else {
            if config.one_conversation_per_replica {
                replica.keep_only(&blocks, &mut |_| {});
            }
            replica.touch(&blocks, &mut tick, &mut |_| {});
        }
        requests += 1;
        tokens = tokens.saturating_add(request_tokens);
        cached = cached.saturating_add(hit);
        let plan = &plans[session];
        if order.is_none() && k + 1 < plan.requests {
            events.push(Reverse((
                now.saturating_add(plan.gap(config, k)),
                session,
                k + 1,
            )));
        }
    }
    let most = replicas.iter().map(|r| r.requests).max().unwrap_or(0);
    let mean = requests as f64 / replicas_n as f64;
    FleetReport {
        policy: policy.name(),
        replicas: replicas_n,
        sessions: config.sessions,
        requests,
        tokens,
        cached,
        reprocessed: tokens - cached,
        cached_share: if tokens == 0 {
            0.0
        } else {
            cached as f64 / tokens as f64
        },
        imbalance: if mean == 0.0 { 0.0 } else { most as f64 / mean },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> FleetConfig {
        FleetConfig {
            replicas: 4,
            sessions: 12,
            capacity_tokens: 10_000_000,
            ..FleetConfig::default()
        }
    }

    #[test]
    fn a_session_kept_on_its_replica_reprocesses_only_what_is_new() {
        let shape = SessionShape::linear(1024, 512, 10);
        let config = FleetConfig {
            min_requests: 10,
            ..small()
        };
        let report = simulate_fleet(&shape, &config, Policy::SessionHash);
        // Each session: its first request is cold but for the shared prefix; later ones
        // reuse everything but the new 512 tokens.
        assert_eq!(report.requests, 12 * 10);
        let per_session_new = 1024 + 512 + 9 * 512;
        assert!(
            report.reprocessed <= 12 * per_session_new as u64,
            "{report:?}"
        );
    }

    #[test]
    fn the_oracle_never_does_worse_than_any_hash() {
        let shape = SessionShape::linear(4096, 1024, 15);
        let config = FleetConfig {
            capacity_tokens: 60_000,
            ..small()
        };
        let oracle = simulate_fleet(&shape, &config, Policy::Oracle);
        for policy in [Policy::RoundRobin, Policy::SessionHash, Policy::PrefixHash] {
            let other = simulate_fleet(&shape, &config, policy);
            assert!(
                oracle.cached + 4096 * 12 >= other.cached,
                "{policy:?}: {other:?} vs {oracle:?}"
            );
        }
    }

    #[test]
    fn prefix_hashing_piles_every_session_on_one_replica() {
        let shape = SessionShape::linear(1024, 256, 8);
        let report = simulate_fleet(&shape, &small(), Policy::PrefixHash);
        assert!((report.imbalance - 4.0).abs() < 1e-9, "{report:?}");
        let spread = simulate_fleet(&shape, &small(), Policy::LibraryKey);
        assert!(spread.imbalance < report.imbalance, "{spread:?}");
    }

    #[test]
    fn the_library_key_keeps_each_session_on_one_replica_and_spreads_new_ones() {
        let shape = SessionShape::linear(1024, 512, 10);
        let config = FleetConfig {
            min_requests: 10,
            ..small()
        };
        let kept = simulate_fleet(&shape, &config, Policy::SessionHash);
        let library = simulate_fleet(&shape, &config, Policy::LibraryKey);
        let spread = simulate_fleet(&shape, &config, Policy::RoundRobin);
        // Kept on its replica: as good as session hashing on cache…
        assert!(library.cached >= kept.cached, "{library:?} vs {kept:?}");
        assert!(
            library.cached_share > spread.cached_share + 0.2,
            "{library:?}"
        );
        // …and new sessions go where the backlog is shortest, not where a hash says.
        assert!(
            library.imbalance <= kept.imbalance,
            "{library:?} vs {kept:?}"
        );
    }

    #[test]
    fn a_changed_tail_is_re_processed_even_on_the_sessions_replica() {
        // 1,024-token prefix; each request adds 512 tokens, of which the last 256 (the
        // tail) change every request.
        let mut shape = SessionShape::linear(1024, 512, 6);
        shape.shared = shape
            .requests
            .iter()
            .map(|&tokens| tokens.saturating_sub(512 + 256))
            .collect();
        let config = FleetConfig {
            replicas: 1,
            sessions: 1,
            min_requests: 6,
            block_tokens: 256,
            ..small()
        };
        let plain = simulate_fleet(
            &SessionShape::linear(1024, 512, 6),
            &config,
            Policy::SessionHash,
        );
        let tailed = simulate_fleet(&shape, &config, Policy::SessionHash);
        // Each request after the first re-processes its 512 new tokens, plus the 256 of
        // the tail before it when the tail changes.
        assert_eq!(plain.reprocessed, 1536 + 5 * 512);
        assert_eq!(tailed.reprocessed, 1536 + 5 * (512 + 256));
    }

    #[test]
    fn a_replica_holding_one_conversation_loses_a_session_another_took_over() {
        let shape = SessionShape::linear(1024, 512, 6);
        let config = FleetConfig {
            replicas: 1,
            sessions: 2,
            min_requests: 6,
            block_tokens: 256,
            // Both sessions at once, so their requests interleave.
            arrival_spread: 1,
            ..small()
        };
        let paged = simulate_fleet(&shape, &config, Policy::SessionHash);
        let slot = simulate_fleet(
            &shape,
            &FleetConfig {
                one_conversation_per_replica: true,
                ..config
            },
            Policy::SessionHash,
        );
        // A paged cache keeps both sessions; one slot keeps the prefix for both and the
        // history of whichever spoke last.
        assert_eq!(paged.reprocessed, 2 * 512 + 1024 + 2 * 5 * 512);
        assert!(
            slot.reprocessed > paged.reprocessed,
            "{slot:?} vs {paged:?}"
        );
    }

    #[test]
    fn an_explicit_order_is_played_as_given() {
        let shape = SessionShape::linear(1024, 512, 4);
        let config = FleetConfig {
            replicas: 2,
            sessions: 2,
            block_tokens: 256,
            one_conversation_per_replica: true,
            ..small()
        };
        // Strict alternation: round robin happens to keep each session on one replica.
        let alternating: Vec<(usize, usize)> = (0..4).flat_map(|k| [(0, k), (1, k)]).collect();
        // Two in a row: every request lands where the other session just was.
        let paired: Vec<(usize, usize)> = [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2)]
            .into_iter()
            .chain([(1, 3), (0, 3), (9, 0), (0, 99)])
            .collect();
        let kept = simulate_fleet_in_order(&shape, &config, Policy::RoundRobin, &alternating);
        let lost = simulate_fleet_in_order(&shape, &config, Policy::RoundRobin, &paired);
        assert_eq!(kept.requests, 8);
        assert_eq!(lost.requests, 8, "out-of-range pairs are skipped");
        assert_eq!(kept.reprocessed, 2 * 1536 + 6 * 512);
        assert!(lost.reprocessed > kept.reprocessed, "{lost:?}");
    }

    #[test]
    fn eviction_bounds_each_replica_to_its_capacity() {
        let mut replica = Replica::new(3);
        let mut tick = 0;
        let mut evicted = Vec::new();
        replica.touch(&[1, 2, 3], &mut tick, &mut |b| evicted.push(b));
        replica.touch(&[1, 4], &mut tick, &mut |b| evicted.push(b));
        assert_eq!(evicted, [2]);
        assert_eq!(replica.cached_blocks(&[1, 3, 4]), 3);
        assert_eq!(replica.cached_blocks(&[2, 1]), 0);
    }
}
