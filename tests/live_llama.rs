//! Live llama.cpp suite: prompt-cache reuse and system-update compliance measured on a real
//! `llama-server` (SmolLM2-135M-Instruct), started by `scripts/llama-server.sh start`.
//!
//! The server URL comes from `CACHELINE_LLAMA_URL`, else the file the script writes. Without
//! a server each test prints why it is skipped (to stderr, uncaptured) and returns; under
//! `CI=true` a missing or unhealthy server fails every test instead.
//!
//! The tests share one server slot, so they take turns (a process-wide lock), and the cache
//! tests share one bench run. Assertions are on token counts, never on time.

use std::io::Write;
use std::sync::{Mutex, MutexGuard, OnceLock};

use prompt_core::divergence::common_prefix_len;
use prompt_llama::bench::{self, ComposedTurn};
use prompt_llama::probe::{self, Condition};
use prompt_llama::{LlamaClient, ServerLocation, locate_server};
use prompt_reference::scenario::{self, INSTRUCTIONS_EDIT_TURN, ScenarioSize};
use prompt_registry::Registry;

/// Turns of the scripted session (the assistant instructions are edited at turn 7).
pub(crate) const TURNS: u64 = 8;
/// Tokens a turn may re-process beyond its new tokens: llama.cpp always re-evaluates at
/// least the last prompt token, and a token at the seam can merge differently.
pub(crate) const SLACK: u64 = 4;

static SERVER: Mutex<()> = Mutex::new(());
static BENCH: OnceLock<Result<bench::BenchReport, String>> = OnceLock::new();

pub(crate) fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok(v) if !v.is_empty() && v != "false" && v != "0")
}

/// Writes to the process's stderr directly: the test harness does not capture it, so a
/// skip is visible in a plain `cargo test` run.
pub(crate) fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// The server, or `None` after printing why the test is skipped. Under CI: panics instead.
pub(crate) fn server(test: &str) -> Option<(LlamaClient, MutexGuard<'static, ()>)> {
    let reason = match locate_server() {
        Ok(ServerLocation::Found { url, source }) => {
            let client = LlamaClient::new(url.clone());
            match client.health() {
                Ok(()) => {
                    let guard = SERVER.lock().unwrap_or_else(|e| e.into_inner());
                    return Some((client, guard));
                }
                Err(e) => format!("the server at {url} (from {source}) is not healthy: {e}"),
            }
        }
        Ok(ServerLocation::Absent { reason }) => reason,
        Err(e) => e.to_string(),
    };
    if in_ci() {
        panic!("{test}: CI=true and no live llama.cpp server: {reason}");
    }
    say(&format!(
        "SKIPPED {test}: no live llama.cpp server: {reason}"
    ));
    None
}

/// The scripted session at its compact size, both ways, under the built-in agent.toml.
fn paired() -> Result<Vec<scenario::PairedTurn>, String> {
    let registry = Registry::linked().map_err(|e| e.to_string())?;
    let policy = scenario::default_policy(&registry).map_err(|e| e.to_string())?;
    ScenarioSize::Compact
        .paired(&registry, &policy, TURNS)
        .map_err(|e| e.to_string())
}

fn bench_report(client: &LlamaClient) -> &'static bench::BenchReport {
    let report = BENCH.get_or_init(|| {
        let script = paired()?
            .into_iter()
            .map(|t| ComposedTurn {
                turn: t.turn,
                label: t.label,
                events: t.events,
                library: t.library,
                head: t.head,
            })
            .collect();
        // No warm-up: the assertions are on token counts, which a cold server does not change.
        let options = bench::BenchOptions::default().with_warmup(0);
        let report = bench::run(client, script, options).map_err(|e| e.to_string())?;
        let mut table = Vec::new();
        let _ = report.write_table(&mut table);
        say(&String::from_utf8_lossy(&table));
        Ok(report)
    });
    match report {
        Ok(report) => report,
        Err(e) => panic!("the bench run failed: {e}"),
    }
}

#[test]
fn cache_library_session_reprocesses_only_new_tokens() {
    let Some((client, _guard)) = server("cache_library_session_reprocesses_only_new_tokens") else {
        return;
    };
    let report = bench_report(&client);
    let user_requests = report
        .turns
        .iter()
        .filter(|t| t.label == t.turn.to_string());
    assert_eq!(user_requests.count() as u64, TURNS);
    let edit = report
        .turns
        .iter()
        .find(|t| t.label == INSTRUCTIONS_EDIT_TURN.to_string())
        .unwrap_or_else(|| panic!("no turn {INSTRUCTIONS_EDIT_TURN}"));
    assert!(
        edit.events.iter().any(|e| e.contains("instructions")),
        "the system prompt is edited on the way: {:?}",
        edit.events
    );
    for pair in report.turns.windows(2) {
        let (previous, t) = (&pair[0].library, &pair[1]);
        let l = &t.library;
        assert!(
            l.prompt_n <= l.new_tokens + SLACK,
            "request {}: re-processed {} tokens, but only {} are new (events: {:?})",
            t.label,
            l.prompt_n,
            l.new_tokens,
            t.events
        );
        // The library only appends: the previous request is a token prefix of this one but
        // for its ephemeral tail (git state, recalled memories: under a fifth of it). Holds
        // until the compaction before turn 10.
        let kept = l.prompt_tokens - l.new_tokens;
        assert!(
            kept * 5 >= previous.prompt_tokens * 4,
            "request {}: only {kept} tokens of the previous {}-token request are a prefix of this one: the library should only append",
            t.label,
            previous.prompt_tokens
        );
    }
}

/// Tokens of message 0 in `request` (a serialized message array): the longest common
/// token prefix of the templated request and of message 0 templated alone.
fn message_0_tokens(client: &LlamaClient, request: &[u8]) -> u64 {
    let messages: Vec<serde_json::Value> =
        serde_json::from_slice(request).unwrap_or_else(|e| panic!("a composed request: {e}"));
    let first = format!("[{}]", messages[0]);
    let tokens = |bytes: &[u8]| {
        client
            .prompt_tokens(bytes)
            .unwrap_or_else(|e| panic!("tokenizing a request: {e}"))
    };
    let (alone, whole) = (tokens(first.as_bytes()), tokens(request));
    common_prefix_len(&alone, &whole) as u64
}

/// Replace-at-head as `cacheline simulate` composes it puts its per-turn writers last in
/// message 0 (the most charitable order), so the cache keeps most of message 0; but those
/// writers change every turn, so the whole history after them is re-processed at every
/// turn's first request. (A turn's continuations keep its message 0.)
#[test]
fn cache_replace_at_head_reprocesses_its_whole_history() {
    let Some((client, _guard)) = server("cache_replace_at_head_reprocesses_its_whole_history")
    else {
        return;
    };
    let report = bench_report(&client);
    let script = paired().unwrap_or_else(|e| panic!("{e}"));
    for (t, composed) in report.turns.iter().zip(&script).skip(1) {
        if t.label != t.turn.to_string() {
            continue; // a continuation
        }
        let h = &t.head;
        let head = message_0_tokens(&client, &composed.head);
        assert!(
            h.cache_n <= head,
            "turn {}: replace-at-head reused {} tokens, more than its {head}-token message 0",
            t.turn,
            h.cache_n
        );
        assert!(
            h.prompt_n + SLACK >= h.prompt_tokens - head,
            "turn {}: replace-at-head re-processed {} of {} tokens, less than everything after its {head}-token message 0",
            t.turn,
            h.prompt_n,
            h.prompt_tokens
        );
    }
    // The gap grows with the history: 2.7x over turns 2-8 of this script, 4.4x at turn 9.
    let lib = report.library_totals(2..=TURNS);
    let head = report.head_totals(2..=TURNS);
    assert!(
        head.prompt_n >= 2 * lib.prompt_n,
        "turns 2+: replace-at-head re-processed {} tokens, the library {}",
        head.prompt_n,
        lib.prompt_n
    );
}

#[test]
fn cache_timings_agree_with_usage() {
    let Some((client, _guard)) = server("cache_timings_agree_with_usage") else {
        return;
    };
    let report = bench_report(&client);
    for t in &report.turns {
        for (arm, a) in [("library", &t.library), ("head", &t.head)] {
            assert_eq!(
                a.cached_tokens,
                Some(a.cache_n),
                "turn {} {arm}: usage.prompt_tokens_details.cached_tokens != timings.cache_n",
                t.turn
            );
            assert_eq!(
                a.prompt_n + a.cache_n,
                a.prompt_tokens,
                "turn {} {arm}: prompt_n + cache_n != usage.prompt_tokens",
                t.turn
            );
        }
    }
}

#[test]
fn behaviour_appended_system_update_is_followed() {
    let Some((client, _guard)) = server("behaviour_appended_system_update_is_followed") else {
        return;
    };
    let table = match probe::run(&client, probe::MAX_TOKENS) {
        Ok(table) => table,
        Err(e) => panic!("the probe run failed: {e}"),
    };
    let mut text = Vec::new();
    let _ = table.write_table(&mut text, true);
    say(&String::from_utf8_lossy(&text));

    let (none, n) = table.rate(Condition::NoUpdate);
    let (head, _) = table.rate(Condition::HeadRewrite);
    let (library, _) = table.rate(Condition::AppendedSystem);
    for c in Condition::ALL {
        assert_eq!(
            table.rate(c).1,
            n,
            "{c:?}: every condition gets the same probes"
        );
    }
    // "Clearly more often" than no update: by at least half of the probes.
    assert!(
        library >= none + n.div_ceil(2),
        "the library's appended system update was followed {library}/{n} times, no update {none}/{n}"
    );
    // "Not clearly less often" than a head rewrite: within a quarter of the probes.
    assert!(
        library + n.div_ceil(4) >= head,
        "the library's appended system update was followed {library}/{n} times, a head rewrite {head}/{n}"
    );
}
