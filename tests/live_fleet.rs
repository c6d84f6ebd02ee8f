//! Live fleet: the scripted session played by two users at once through sglang-router in
//! front of two llama-server replicas (`scripts/fleet.sh start 2`).
//!
//! With the library's routing key in `X-SMG-Routing-Key` (the router's `manual` policy),
//! every session is answered by one replica throughout, and from its second request on each
//! request re-processes at most its new tokens + [`SLACK`]. The same sessions through the
//! `round_robin` router, without the key, are measured and printed beside it. Which replica
//! a new key lands on is the router's choice and is not asserted.
//!
//! A fleet started by `scripts/fleet.sh start 2` (its manual router's URL file in
//! `CACHELINE_FLEET_DIR`, else `fleet/` in the cache directory) means "the fleet is
//! installed: run the test". The test does not use that fleet, which anything else may be
//! using, but starts its own (`scripts/fleet.sh instance 2`: two replicas and the `manual`
//! and `round_robin` routers, in a fleet directory of its own), which stops when the test
//! ends, or when its process exits, however it exits. Without a fleet the test says why it
//! is skipped; under `CI=true` it fails instead.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::Instant;

use prompt_llama::LlamaClient;
use prompt_llama::fleet::{self, FleetSession, PolicyReport, Router};
use prompt_reference::scenario::{self, ScenarioSize};
use prompt_registry::Registry;
use prompt_registry::wire::DEFAULT_ROUTING_HEADER;

use crate::live_llama::{SLACK, Spawned, in_ci, process_dir, say, spawn_instance};

const SESSIONS: usize = 2;
const TURNS: u64 = 4;
const SEED: u64 = 1;

/// The test's own fleet, run by `scripts/fleet.sh instance 2`; dropping it (at the end of
/// the test, or as a failing test unwinds) closes the script's stdin, which stops the fleet.
struct OwnFleet {
    dir: PathBuf,
    _script: Spawned,
}

/// Starts the test's own fleet if a fleet is installed (`scripts/fleet.sh start` wrote its
/// manual router's URL file); else says why the test is skipped, or fails under CI. An
/// installed fleet whose copy does not start fails the test.
fn own_fleet(test: &str) -> Option<OwnFleet> {
    let installed = fleet::default_fleet_dir()
        .ok_or_else(|| "no cache directory (HOME unset)".to_owned())
        .and_then(|shared| {
            fleet::fleet_url(&shared, "router-manual")
                .map(|_| shared)
                .map_err(|e| format!("{e} (scripts/fleet.sh start 2)"))
        });
    let shared = match installed {
        Ok(shared) => shared,
        Err(reason) => {
            assert!(!in_ci(), "{test}: CI=true and no fleet: {reason}");
            say(&format!("SKIPPED {test}: no fleet: {reason}"));
            return None;
        }
    };
    let started = Instant::now();
    let own = process_dir("fleet").and_then(|dir| {
        let (url, script) = spawn_instance(
            "fleet.sh",
            &["instance", "2"],
            &[
                (fleet::FLEET_DIR_ENV, dir.as_os_str()),
                ("CACHELINE_FLEET_POLICIES", OsStr::new("manual round_robin")),
            ],
            &dir.join("instance.log"),
        )?;
        say(&format!(
            "live fleet: own fleet, manual router at {url}, ready in {:.1} s (logs: {}/logs)",
            started.elapsed().as_secs_f64(),
            dir.display()
        ));
        Ok(OwnFleet {
            dir,
            _script: script,
        })
    });
    match own {
        Ok(own) => Some(own),
        Err(e) => panic!(
            "{test}: a fleet is installed ({}), but the test's own fleet did not start: {e}",
            shared.display()
        ),
    }
}

/// The own fleet's router for `policy`, and its first replica (for its tokenizer).
fn clients(own: &OwnFleet, policy: &str) -> (LlamaClient, LlamaClient) {
    let url = |name: &str| fleet::fleet_url(&own.dir, name).unwrap_or_else(|e| panic!("{e}"));
    let (router, replica) = (
        LlamaClient::new(url(&format!("router-{policy}"))),
        LlamaClient::new(url("replica-1")),
    );
    router
        .health()
        .and_then(|()| replica.health())
        .unwrap_or_else(|e| panic!("the own fleet's {policy} router or replica-1: {e}"));
    (router, replica)
}

fn play(own: &OwnFleet, policy: &str, key: bool) -> PolicyReport {
    let (router, tokenizer) = clients(own, policy);
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let policy_toml = scenario::default_policy(&registry).unwrap_or_else(|e| panic!("{e}"));
    // Users of their own per run and process, so nothing of theirs is cached yet.
    let run = format!("live-fleet-{policy}-{}", std::process::id());
    let sessions: Vec<FleetSession> = scenario::fleet_sessions(
        ScenarioSize::Compact,
        &registry,
        &policy_toml,
        &run,
        SESSIONS,
        TURNS,
        4,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .into_iter()
    .map(|s| FleetSession::new(s.routing_key, s.requests))
    .collect();
    let new = fleet::new_tokens(&tokenizer, &sessions).unwrap_or_else(|e| panic!("{e}"));
    let router = Router {
        policy: policy.to_owned(),
        client: router,
        routing_header: key.then(|| DEFAULT_ROUTING_HEADER.to_owned()),
    };
    fleet::play(&router, &sessions, &new, SEED, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn live_fleet_keeps_each_session_on_its_replica_with_the_library_key() {
    let Some(own) = own_fleet("live_fleet_keeps_each_session_on_its_replica_with_the_library_key")
    else {
        return;
    };
    let keyed = play(&own, "manual", true);
    let spread = play(&own, "round_robin", false);
    drop(own);
    let mut table = Vec::new();
    fleet::write_table(&[keyed.clone(), spread.clone()], &mut table).unwrap_or_default();
    say(&String::from_utf8_lossy(&table));

    assert_eq!(
        keyed.sessions_kept(),
        SESSIONS,
        "every session keeps its replica: {:?}",
        keyed.replicas_of_sessions()
    );
    let mut seen = std::collections::BTreeSet::new();
    for r in &keyed.requests {
        assert_eq!(r.reprocessed + r.cached, r.prompt_tokens, "{r:?}");
        if seen.insert(r.session) {
            continue;
        }
        assert!(
            r.reprocessed <= r.new_tokens + SLACK,
            "session {} request {}: re-processed {} of {} tokens, {} new",
            r.session,
            r.label,
            r.reprocessed,
            r.prompt_tokens,
            r.new_tokens
        );
    }
    let (reprocessed, limit) = keyed.after_first();
    assert!(
        reprocessed <= limit + SLACK * keyed.requests.len() as u64,
        "{reprocessed} > {limit}"
    );
    assert_eq!(spread.requests.len(), keyed.requests.len());
}
