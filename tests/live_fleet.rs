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
//! using, but starts its own once per test process (`scripts/fleet.sh instance 2`: two
//! replicas and the `manual` and `round_robin` routers, in a fleet directory of its own),
//! which stops when the process exits. Without a fleet the test says why it is skipped;
//! under `CI=true` it fails instead.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::OnceLock;
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

/// This process's own fleet, run by `scripts/fleet.sh instance 2`.
struct OwnFleet {
    dir: PathBuf,
    _script: Spawned,
}

static FLEET: OnceLock<Result<OwnFleet, String>> = OnceLock::new();

fn start_fleet() -> Result<OwnFleet, String> {
    let dir = process_dir("fleet")?;
    let started = Instant::now();
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
}

/// The router for `policy` and the first replica of this process's own fleet, or why
/// there is none (no fleet started by `scripts/fleet.sh start`). An installed fleet whose
/// copy does not start fails the test.
fn fleet(policy: &str) -> Result<(LlamaClient, LlamaClient), String> {
    let shared = fleet::default_fleet_dir().ok_or("no cache directory (HOME unset)")?;
    fleet::fleet_url(&shared, "router-manual")
        .map_err(|e| format!("{e} (scripts/fleet.sh start 2)"))?;
    let dir = match FLEET.get_or_init(start_fleet) {
        Ok(own) => &own.dir,
        Err(e) => panic!(
            "live_fleet: a fleet is installed ({}), but the test's own fleet did not start: {e}",
            shared.display()
        ),
    };
    let url = |name: &str| fleet::fleet_url(dir, name).map_err(|e| e.to_string());
    let (router, replica) = (
        LlamaClient::new(url(&format!("router-{policy}"))?),
        LlamaClient::new(url("replica-1")?),
    );
    router
        .health()
        .and_then(|()| replica.health())
        .map_err(|e| e.to_string())?;
    Ok((router, replica))
}

fn play(policy: &str, key: bool) -> Option<PolicyReport> {
    let test = "live_fleet";
    let (router, tokenizer) = match fleet(policy) {
        Ok(clients) => clients,
        Err(reason) => {
            assert!(!in_ci(), "{test}: CI=true and no fleet: {reason}");
            say(&format!("SKIPPED {test}: no fleet: {reason}"));
            return None;
        }
    };
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
    Some(fleet::play(&router, &sessions, &new, SEED, &mut |_| {}).unwrap_or_else(|e| panic!("{e}")))
}

#[test]
fn live_fleet_keeps_each_session_on_its_replica_with_the_library_key() {
    let Some(keyed) = play("manual", true) else {
        return;
    };
    let spread = play("round_robin", false).unwrap_or_else(|| panic!("round_robin router"));
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
