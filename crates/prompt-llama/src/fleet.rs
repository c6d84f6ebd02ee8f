//! Sessions played through a router in front of several llama.cpp replicas
//! (`scripts/fleet.sh`), to measure what each routing policy leaves in the replicas' caches.
//!
//! The caller composes the sessions ([`FleetSession`]: each request's Chat Completions body
//! and the session's routing key); [`play`] sends every session's first request at once (users
//! arriving together), then the rest one at a time in one mixed order (a seeded shuffle that
//! keeps each session's requests in sequence, as concurrent users produce them) through one
//! router, and reads from each reply which replica answered (the
//! `model` a replica started with `--alias` answers with) and what it re-processed
//! (`timings.prompt_n`) and reused (`timings.cache_n`). The limit for a request is its new
//! tokens: those past the longest common prefix with the previous request of its session, by
//! the server's own tokenizer. `cacheline bench-fleet` plays `prompt-reference`'s scripted
//! session this way.
//!
//! ```
//! use prompt_llama::fleet::{mixed_order, FleetRequest, FleetSession};
//! let session = |n: usize| FleetSession {
//!     routing_key: format!("key-{n}"),
//!     requests: (0..3)
//!         .map(|i| FleetRequest { label: i.to_string(), body: Vec::new() })
//!         .collect(),
//! };
//! let order = mixed_order(&[session(0), session(1)], 7);
//! assert_eq!(order.len(), 6);
//! // Each session's requests stay in their order.
//! let of_first: Vec<usize> = order.iter().filter(|(s, _)| *s == 0).map(|(_, r)| *r).collect();
//! assert_eq!(of_first, [0, 1, 2]);
//! ```

use std::collections::BTreeMap;
use std::io::{self, Write};

use prompt_core::divergence::common_prefix_len;
use serde::{Deserialize, Serialize};

use super::client::{LiveError, LlamaClient};

/// One session's requests, composed ahead.
#[derive(Debug, Clone)]
pub struct FleetSession {
    /// The session's routing key (`Request::routing_key`), sent in the routing header when
    /// the router is told to route by it.
    pub routing_key: String,
    /// Its requests, in order.
    pub requests: Vec<FleetRequest>,
}

impl FleetSession {
    /// A session from its routing key and its `(label, body)` requests, in order (what
    /// `prompt_reference::scenario::fleet_sessions` composes).
    pub fn new(routing_key: String, requests: Vec<(String, Vec<u8>)>) -> Self {
        Self {
            routing_key,
            requests: requests
                .into_iter()
                .map(|(label, body)| FleetRequest { label, body })
                .collect(),
        }
    }
}

/// One request of a session.
#[derive(Debug, Clone)]
pub struct FleetRequest {
    /// The request's label (`3`, or `3.1` for a continuation).
    pub label: String,
    /// The Chat Completions body, as sent.
    pub body: Vec<u8>,
}

/// A router to play the sessions through.
#[derive(Debug, Clone)]
pub struct Router {
    /// The router's policy, for the report (`manual`, `round_robin`, `cache_aware`…).
    pub policy: String,
    /// Its client.
    pub client: LlamaClient,
    /// The header to send each session's routing key in; `None`: send none.
    pub routing_header: Option<String>,
}

/// One request as a replica answered it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FleetOutcome {
    /// Index of the session.
    pub session: usize,
    /// The request's label.
    pub label: String,
    /// The replica that answered (the reply's `model`).
    pub replica: String,
    /// Tokens in the prompt (`prompt_n + cache_n`).
    pub prompt_tokens: u64,
    /// Tokens the replica re-processed (`timings.prompt_n`).
    pub reprocessed: u64,
    /// Tokens it reused from its cache (`timings.cache_n`).
    pub cached: u64,
    /// The least a cache that kept the session could re-process: the prompt's tokens past
    /// its common prefix with the session's previous prompt (all of them for the first).
    pub new_tokens: u64,
}

/// What one router did with the sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyReport {
    /// The router's policy.
    pub policy: String,
    /// Whether the sessions' routing keys were sent.
    pub routing_key_sent: bool,
    /// Every request, in the order sent.
    pub requests: Vec<FleetOutcome>,
}

impl PolicyReport {
    /// Prompt tokens over all requests.
    pub fn tokens(&self) -> u64 {
        self.requests
            .iter()
            .fold(0u64, |sum, r| sum.saturating_add(r.prompt_tokens))
    }

    /// Tokens served from a replica's cache over all requests.
    pub fn cached(&self) -> u64 {
        self.requests
            .iter()
            .fold(0u64, |sum, r| sum.saturating_add(r.cached))
    }

    /// `cached / tokens`.
    pub fn cached_share(&self) -> f64 {
        match self.tokens() {
            0 => 0.0,
            t => self.cached() as f64 / t as f64,
        }
    }

    /// Requests after each session's first: re-processed tokens and their limit (new
    /// tokens), summed.
    pub fn after_first(&self) -> (u64, u64) {
        let mut seen = std::collections::BTreeSet::new();
        let (mut reprocessed, mut limit) = (0, 0);
        for r in &self.requests {
            if !seen.insert(r.session) {
                reprocessed = u64::saturating_add(reprocessed, r.reprocessed);
                limit = u64::saturating_add(limit, r.new_tokens);
            }
        }
        (reprocessed, limit)
    }

    /// Requests answered by each replica.
    pub fn per_replica(&self) -> BTreeMap<&str, usize> {
        let mut counts = BTreeMap::new();
        for r in &self.requests {
            *counts.entry(r.replica.as_str()).or_default() += 1;
        }
        counts
    }

    /// The replicas each session was answered by, session by session.
    pub fn replicas_of_sessions(&self) -> BTreeMap<usize, Vec<&str>> {
        let mut of: BTreeMap<usize, Vec<&str>> = BTreeMap::new();
        for r in &self.requests {
            let replicas = of.entry(r.session).or_default();
            if !replicas.contains(&r.replica.as_str()) {
                replicas.push(&r.replica);
            }
        }
        of
    }

    /// Sessions answered by one replica throughout.
    pub fn sessions_kept(&self) -> usize {
        self.replicas_of_sessions()
            .values()
            .filter(|r| r.len() == 1)
            .count()
    }
}

/// Writes one line per policy: cached share, re-processed against the limit from each
/// session's second request on, requests per replica, sessions kept on one replica.
pub fn write_table(reports: &[PolicyReport], out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        "{:<28} {:>7} {:>18} {:>9}  requests per replica",
        "routing", "cached", "re-processed/limit", "sessions"
    )?;
    for report in reports {
        let (reprocessed, limit) = report.after_first();
        let sessions = report.replicas_of_sessions().len();
        let per_replica: Vec<String> = report
            .per_replica()
            .iter()
            .map(|(replica, n)| format!("{replica}: {n}"))
            .collect();
        let routing = if report.routing_key_sent {
            format!("{} + routing key", report.policy)
        } else {
            report.policy.clone()
        };
        writeln!(
            out,
            "{:<28} {:>6.1}% {:>18} {:>9}  {}",
            routing,
            report.cached_share() * 100.0,
            format!("{reprocessed}/{limit}"),
            format!("{}/{} kept", report.sessions_kept(), sessions),
            per_replica.join(", ")
        )?;
    }
    Ok(())
}

/// The order to send the sessions' requests in: at each step a session drawn by a seeded
/// generator among those with requests left, its next request. `(session, request)` pairs.
pub fn mixed_order(sessions: &[FleetSession], seed: u64) -> Vec<(usize, usize)> {
    let mut next = vec![0usize; sessions.len()];
    let mut state = seed;
    let mut order = Vec::new();
    loop {
        let open: Vec<usize> = (0..sessions.len())
            .filter(|&s| next[s] < sessions[s].requests.len())
            .collect();
        if open.is_empty() {
            return order;
        }
        state = splitmix(state);
        let s = open[(state % open.len() as u64) as usize];
        order.push((s, next[s]));
        next[s] += 1;
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The prompt tokens of a Chat Completions `body` (tools included, generation prompt
/// added), by `tokenizer`'s chat template and tokenizer.
pub fn body_tokens(tokenizer: &LlamaClient, body: &[u8]) -> Result<Vec<i64>, LiveError> {
    #[derive(Deserialize)]
    struct Applied {
        prompt: String,
    }
    let path = "/apply-template";
    let bytes = tokenizer.post_body(path, body)?;
    let applied: Applied = serde_json::from_slice(&bytes).map_err(|source| LiveError::Parse {
        url: format!("{}{path}", tokenizer.base_url()),
        excerpt: String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
        source,
    })?;
    tokenizer.tokenize(&applied.prompt)
}

/// Each request's new tokens (see [`FleetOutcome::new_tokens`]), session by session.
pub fn new_tokens(
    tokenizer: &LlamaClient,
    sessions: &[FleetSession],
) -> Result<Vec<Vec<u64>>, LiveError> {
    sessions
        .iter()
        .map(|session| {
            let mut previous: Vec<i64> = Vec::new();
            session
                .requests
                .iter()
                .map(|request| {
                    let tokens = body_tokens(tokenizer, &request.body)?;
                    let shared = common_prefix_len(&previous, &tokens);
                    let new = (tokens.len() - shared) as u64;
                    previous = tokens;
                    Ok(new)
                })
                .collect()
        })
        .collect()
}

#[derive(Deserialize)]
struct Reply {
    model: Option<String>,
    timings: Option<ReplyTimings>,
}

#[derive(Deserialize)]
struct ReplyTimings {
    prompt_n: u64,
    cache_n: u64,
}

/// Sends one request through `router` and reads which replica answered and its timings.
fn send(
    router: &Router,
    sessions: &[FleetSession],
    new_tokens: &[Vec<u64>],
    (s, r): (usize, usize),
) -> Result<FleetOutcome, LiveError> {
    let path = "/v1/chat/completions";
    let url = format!("{}{path}", router.client.base_url());
    let (session, request) = (&sessions[s], &sessions[s].requests[r]);
    let headers: Vec<(&str, &str)> = router
        .routing_header
        .as_deref()
        .map(|name| (name, session.routing_key.as_str()))
        .into_iter()
        .collect();
    let bytes = router
        .client
        .post_body_with_headers(path, &request.body, &headers)?;
    let reply: Reply = serde_json::from_slice(&bytes).map_err(|source| LiveError::Parse {
        url: url.clone(),
        excerpt: String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned(),
        source,
    })?;
    let timings = reply.timings.ok_or_else(|| LiveError::Missing {
        url: url.clone(),
        field: "timings",
    })?;
    Ok(FleetOutcome {
        session: s,
        label: request.label.clone(),
        replica: reply.model.ok_or(LiveError::Missing {
            url,
            field: "model",
        })?,
        prompt_tokens: timings.prompt_n.saturating_add(timings.cache_n),
        reprocessed: timings.prompt_n,
        cached: timings.cache_n,
        new_tokens: new_tokens
            .get(s)
            .and_then(|n| n.get(r))
            .copied()
            .unwrap_or(0),
    })
}

/// How far apart the sessions' first requests start: long enough for the router to count
/// the one before as in flight, far shorter than a prompt takes.
const ARRIVAL_GAP: std::time::Duration = std::time::Duration::from_millis(300);

/// Plays the sessions through `router` as users who arrive together: every session's first
/// request at once (started 300 ms apart, so a router that balances by requests in
/// flight sees the earlier ones), then the rest one at a time in
/// [`mixed_order`]`(sessions, seed)`. `new_tokens` as [`new_tokens`] gives them.
pub fn play(
    router: &Router,
    sessions: &[FleetSession],
    new_tokens: &[Vec<u64>],
    seed: u64,
    progress: &mut dyn FnMut(&FleetOutcome),
) -> Result<PolicyReport, LiveError> {
    let mut requests = Vec::new();
    let arrivals: Vec<Result<FleetOutcome, LiveError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..sessions.len())
            .filter(|&s| !sessions[s].requests.is_empty())
            .enumerate()
            .map(|(k, s)| {
                scope.spawn(move || {
                    std::thread::sleep(ARRIVAL_GAP * k as u32);
                    send(router, sessions, new_tokens, (s, 0))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(LiveError::Stream {
                        url: router.client.base_url().to_owned(),
                        source: io::Error::other("a request thread panicked"),
                    })
                })
            })
            .collect()
    });
    for outcome in arrivals {
        let outcome = outcome?;
        progress(&outcome);
        requests.push(outcome);
    }
    for (s, r) in mixed_order(sessions, seed) {
        if r == 0 {
            continue;
        }
        let outcome = send(router, sessions, new_tokens, (s, r))?;
        progress(&outcome);
        requests.push(outcome);
    }
    Ok(PolicyReport {
        policy: router.policy.clone(),
        routing_key_sent: router.routing_header.is_some(),
        requests,
    })
}

/// The URL `scripts/fleet.sh` wrote for `name` (`router-<policy>`, `replica-<i>`) in `dir`.
pub fn fleet_url(dir: &std::path::Path, name: &str) -> Result<String, LiveError> {
    let path = dir.join(format!("{name}.url"));
    match crate::read_url_file(&path) {
        Ok(text) => Ok(text.trim().to_owned()),
        Err(source) => Err(LiveError::UrlFile { path, source }),
    }
}

/// Environment variable naming the fleet's state directory (as `scripts/fleet.sh` reads it).
pub const FLEET_DIR_ENV: &str = "CACHELINE_FLEET_DIR";

/// Where `scripts/fleet.sh` keeps its state (`router-<policy>.url`, `replica-<i>.url`):
/// `CACHELINE_FLEET_DIR`, else `fleet/` beside [`crate::default_url_file`].
pub fn default_fleet_dir() -> Option<std::path::PathBuf> {
    if let Some(dir) = std::env::var_os(FLEET_DIR_ENV).filter(|v| !v.is_empty()) {
        return Some(dir.into());
    }
    Some(crate::default_url_file()?.parent()?.join("fleet"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(session: usize, label: &str, replica: &str, reprocessed: u64) -> FleetOutcome {
        FleetOutcome {
            session,
            label: label.to_owned(),
            replica: replica.to_owned(),
            prompt_tokens: 100,
            reprocessed,
            cached: 100 - reprocessed,
            new_tokens: 10,
        }
    }

    #[test]
    fn a_report_counts_from_each_sessions_second_request_and_who_kept_its_replica() {
        let report = PolicyReport {
            policy: "manual".into(),
            routing_key_sent: true,
            requests: vec![
                outcome(0, "1", "replica-1", 100),
                outcome(1, "1", "replica-2", 100),
                outcome(0, "2", "replica-1", 11),
                outcome(1, "2", "replica-1", 90),
            ],
        };
        assert_eq!(report.after_first(), (101, 20));
        assert_eq!(report.sessions_kept(), 1);
        assert_eq!(
            report.per_replica().into_iter().collect::<Vec<_>>(),
            [("replica-1", 3), ("replica-2", 1)]
        );
        assert!((report.cached_share() - 99.0 / 400.0).abs() < 1e-12);
        let mut table = Vec::new();
        write_table(&[report], &mut table).unwrap();
        let table = String::from_utf8(table).unwrap();
        assert!(table.contains("manual + routing key"), "{table}");
        assert!(table.contains("101/20"), "{table}");
        assert!(table.contains("1/2 kept"), "{table}");
    }

    #[test]
    fn the_mixed_order_is_seeded_and_mixes_sessions() {
        let sessions: Vec<FleetSession> = (0..3)
            .map(|n| FleetSession {
                routing_key: n.to_string(),
                requests: (0..5)
                    .map(|i| FleetRequest {
                        label: i.to_string(),
                        body: Vec::new(),
                    })
                    .collect(),
            })
            .collect();
        let order = mixed_order(&sessions, 1);
        assert_eq!(order, mixed_order(&sessions, 1));
        assert_ne!(order, mixed_order(&sessions, 2));
        // Not session by session: some session's requests are interleaved with another's.
        assert!(order.windows(2).any(|w| w[0].0 != w[1].0));
        assert_ne!(
            order,
            (0..3)
                .flat_map(|s| (0..5).map(move |r| (s, r)))
                .collect::<Vec<_>>()
        );
    }
}
