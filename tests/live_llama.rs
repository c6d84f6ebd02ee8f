//! Live llama.cpp suite: prompt-cache reuse and system-update compliance measured on a real
//! `llama-server` (SmolLM2-135M-Instruct), installed by `scripts/llama-server.sh`.
//!
//! Which server: a URL file written by `scripts/llama-server.sh start` (`CACHELINE_LLAMA_URL_FILE`,
//! else the default one) means "llama-server is installed: run the live tests". The tests
//! then do not use that server, which anything else may be using (an app, another test run),
//! but start **their own instance** once per test process (`scripts/llama-server.sh instance`:
//! the same binary and model, one slot, a free loopback port, a URL file and log of its
//! own), which stops when the process exits. `CACHELINE_LLAMA_URL` names a server to use as
//! given instead: the exact token counts then hold only if nothing else uses it. Without
//! either each test prints why it is skipped (to stderr, uncaptured) and returns; under
//! `CI=true` a missing or unhealthy server fails every test instead.
//!
//! The tests share their server's one slot, so they take turns (a process-wide lock), and the
//! cache tests share one bench run. Assertions are on token counts, never on time.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use prompt_core::divergence::common_prefix_len;
use prompt_llama::bench::{self, ComposedTurn};
use prompt_llama::probe::{self, Condition};
use prompt_llama::{
    ChatOptions, LlamaClient, ServerLocation, URL_ENV, URL_FILE_ENV, default_log_file,
    locate_server,
};
use prompt_reference::scenario::{self, INSTRUCTIONS_EDIT_TURN, ScenarioSize};
use prompt_registry::Registry;

/// Turns of the scripted session (the assistant instructions are edited at turn 7).
pub(crate) const TURNS: u64 = 8;
/// Tokens a turn may re-process beyond its new tokens: llama.cpp always re-evaluates at
/// least the last prompt token, and a token at the seam can merge differently.
pub(crate) const SLACK: u64 = 4;
/// The environment variable naming the server log a child process of these tests reads.
pub(crate) const LOG_ENV: &str = "CACHELINE_LLAMA_LOG";

static SERVER: Mutex<()> = Mutex::new(());
static BENCH: OnceLock<Result<bench::BenchReport, String>> = OnceLock::new();
static INSTANCE: OnceLock<Result<Instance, String>> = OnceLock::new();

/// This process's own llama-server, run by `scripts/llama-server.sh instance`.
struct Instance {
    url: String,
    log: PathBuf,
    _script: Spawned,
}

/// A script that runs something for as long as its stdin stays open (`instance`).
pub(crate) struct Spawned {
    /// The script's stdin. Never written, never closed while the process runs (it lives in
    /// a static, which is not dropped): when the process exits, however it exits, the pipe
    /// closes and the script stops what it started.
    _stdin: ChildStdin,
    _stdout: ChildStdout,
    _child: Child,
}

/// `scripts/<name>` of this checkout.
pub(crate) fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name)
}

/// A directory of this process's own under the temporary directory.
pub(crate) fn process_dir(what: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("cacheline-live-{}/{what}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    Ok(dir)
}

/// The last `lines` lines of `path`, for an error message.
fn tail(path: &Path, lines: usize) -> String {
    let mut text = String::new();
    if let Ok(file) = std::fs::File::open(path) {
        let _ = file.take(1 << 20).read_to_string(&mut text);
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `bash scripts/<name> args…` with `env`, its stderr to `script_log`, and waits for
/// the URL it prints on its first line once what it started is ready.
pub(crate) fn spawn_instance(
    name: &str,
    args: &[&str],
    env: &[(&str, &OsStr)],
    script_log: &Path,
) -> Result<(String, Spawned), String> {
    let stderr = std::fs::File::create(script_log)
        .map_err(|e| format!("creating {}: {e}", script_log.display()))?;
    let mut command = Command::new("bash");
    command
        .arg(script(name))
        .args(args)
        .env_remove("CACHELINE_LLAMA_PORT")
        .env_remove(URL_ENV)
        .env_remove(LOG_ENV)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr);
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot run bash {}: {e}", script(name).display()))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("the script's stdin and stdout are not pipes".to_owned());
    };
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    let read = (&mut reader).take(4096).read_line(&mut line);
    let url = line.trim().to_owned();
    if read.is_err() || !url.starts_with("http://") {
        let status = child
            .wait()
            .map_or_else(|e| e.to_string(), |s| s.to_string());
        return Err(format!(
            "`scripts/{name} {}` printed no URL ({status}); its log ({}):\n{}",
            args.join(" "),
            script_log.display(),
            tail(script_log, 15)
        ));
    }
    let spawned = Spawned {
        _stdin: stdin,
        _stdout: reader.into_inner(),
        _child: child,
    };
    Ok((url, spawned))
}

/// Starts this process's own llama-server instance.
fn start_instance() -> Result<Instance, String> {
    let dir = process_dir("llama")?;
    let (url_file, log) = (dir.join("llama-server.url"), dir.join("llama-server.log"));
    let started = Instant::now();
    let (url, script) = spawn_instance(
        "llama-server.sh",
        &["instance"],
        &[
            (URL_FILE_ENV, url_file.as_os_str()),
            (LOG_ENV, log.as_os_str()),
        ],
        &dir.join("instance.log"),
    )?;
    say(&format!(
        "live tests: own llama-server at {url}, ready in {:.1} s (log: {})",
        started.elapsed().as_secs_f64(),
        log.display()
    ));
    Ok(Instance {
        url,
        log,
        _script: script,
    })
}

pub(crate) fn in_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok(v) if !v.is_empty() && v != "false" && v != "0")
}

/// Writes to the process's stderr directly: the test harness does not capture it, so a
/// skip is visible in a plain `cargo test` run.
pub(crate) fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// The log of the server the tests use: their own instance's, else `CACHELINE_LLAMA_LOG` or
/// the script's default (which is that server's only if the script started it).
pub(crate) fn server_log() -> Option<PathBuf> {
    match INSTANCE.get() {
        Some(Ok(instance)) => Some(instance.log.clone()),
        _ => default_log_file(),
    }
}

/// The environment a child process of these tests needs to use the same server: its URL
/// (so the child starts no instance of its own) and its log.
pub(crate) fn child_env(client: &LlamaClient) -> Vec<(&'static str, String)> {
    let mut env = vec![(URL_ENV, client.base_url().to_owned())];
    if let Some(log) = server_log() {
        env.push((LOG_ENV, log.display().to_string()));
    }
    env
}

/// The server, or `None` after printing why the test is skipped. Under CI: panics instead.
/// A located URL file starts this process's own instance (once); `CACHELINE_LLAMA_URL` is
/// used as given.
pub(crate) fn server(test: &str) -> Option<(LlamaClient, MutexGuard<'static, ()>)> {
    let reason = match locate_server() {
        Ok(ServerLocation::Found { url, source }) if source == URL_ENV => {
            let client = LlamaClient::new(url.clone());
            match client.health() {
                Ok(()) => {
                    let guard = SERVER.lock().unwrap_or_else(|e| e.into_inner());
                    return Some((client, guard));
                }
                Err(e) => format!("the server at {url} (from {source}) is not healthy: {e}"),
            }
        }
        Ok(ServerLocation::Found { source, .. }) => match INSTANCE.get_or_init(start_instance) {
            Ok(instance) => {
                let guard = SERVER.lock().unwrap_or_else(|e| e.into_inner());
                return Some((LlamaClient::new(instance.url.clone()), guard));
            }
            // Installed (the URL file says so) but not startable: a failure, not a skip.
            Err(e) => panic!(
                "{test}: {source} says llama-server is installed, but the live tests' own instance did not start: {e}"
            ),
        },
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

/// Requests of the isolation test: the compact script's first requests, as the library
/// composes them.
const ISOLATION_REQUESTS: usize = 6;

/// The most the isolation test waits for the other client's next answer: a liveness cap on
/// a loaded machine, not a measurement.
const OTHER_CLIENT_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Waits until the other client has had more than `seen` requests answered.
fn other_client_answered(answered: &AtomicU64, seen: u64) {
    let started = Instant::now();
    while answered.load(Ordering::SeqCst) <= seen {
        assert!(
            started.elapsed() < OTHER_CLIENT_WAIT,
            "the other client got no answer from the shared server within {} s",
            OTHER_CLIENT_WAIT.as_secs()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Isolation: while another client keeps sending unrelated requests to the shared server
/// (the one the URL file names: what an app, or another test run, uses), the tests' own
/// server still re-processes only each request's new tokens. Before each request the test
/// waits until the other client has been answered since the previous one: on one
/// single-slot server the other client's prompt would then hold the slot, and the request
/// would be re-processed whole.
#[test]
fn live_isolation_exact_reuse_while_another_client_uses_the_shared_server() {
    let test = "live_isolation_exact_reuse_while_another_client_uses_the_shared_server";
    let Some((client, _guard)) = server(test) else {
        return;
    };
    let shared = match locate_server() {
        Ok(ServerLocation::Found { url, source }) if source != URL_ENV => LlamaClient::new(url),
        _ => {
            say(&format!(
                "SKIPPED {test}: {URL_ENV} names the server the tests use: no shared server apart from it"
            ));
            return;
        }
    };
    if let Err(e) = shared.health() {
        assert!(
            !in_ci(),
            "{test}: CI=true and the shared server is down: {e}"
        );
        say(&format!(
            "SKIPPED {test}: the shared server is down, nothing to interfere: {e}"
        ));
        return;
    }
    let requests: Vec<Vec<u8>> = paired()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .take(ISOLATION_REQUESTS)
        .map(|t| t.library)
        .collect();
    let stop = AtomicBool::new(false);
    let answered = AtomicU64::new(0);
    std::thread::scope(|scope| {
        // The other client: short unrelated prompts, cached as an app's would be.
        scope.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let messages =
                    format!(r#"[{{"role":"user","content":"Interference {i}: name a colour."}}]"#);
                if shared
                    .chat(messages.as_bytes(), &ChatOptions::cached(4))
                    .is_ok()
                {
                    answered.fetch_add(1, Ordering::SeqCst);
                }
                i += 1;
            }
        });
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut previous: Vec<i64> = Vec::new();
            let mut seen = 0;
            for (i, request) in requests.iter().enumerate() {
                other_client_answered(&answered, seen);
                let tokens = client
                    .prompt_tokens(request)
                    .unwrap_or_else(|e| panic!("tokenizing: {e}"));
                let new = (tokens.len() - common_prefix_len(&previous, &tokens)) as u64;
                let reply = client
                    .chat(request, &ChatOptions::cached(4))
                    .unwrap_or_else(|e| panic!("request {}: {e}", i + 1));
                // The other client's next answer comes after this request's.
                seen = answered.load(Ordering::SeqCst);
                say(&format!(
                    "isolation: request {}: {} tokens, {} new, {} re-processed, {} reused; the other client answered {seen} requests so far",
                    i + 1,
                    tokens.len(),
                    new,
                    reply.timings.prompt_n,
                    reply.timings.cache_n,
                ));
                if i > 0 {
                    assert!(
                        reply.timings.prompt_n <= new + SLACK,
                        "request {}: re-processed {} tokens, but only {new} are new, while another client used the shared server",
                        i + 1,
                        reply.timings.prompt_n
                    );
                }
                previous = tokens;
            }
        }));
        stop.store(true, Ordering::SeqCst);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
}

/// `cacheline proxy --stabilize` on a Qwen Code session rolled past midnight, on the live
/// server: the date line of its setup context (`messages[1]`, what the catalogue's
/// `qwen-code-session-date` names) is rewritten by the agent; the proxy's repair (the same
/// function the proxy runs, `RepairState::decide`) sends the first day's line and appends
/// the new one. Asked for today's date, the model must give the new date at least as often
/// as after the agent's own rewrite (within a tenth of the trials) and far more often than
/// with no update; and the repaired request re-processes only what follows the history,
/// where the rewrite re-processes everything after the system message.
mod stabilize_live {
    use cacheline_proxy::stabilize::{Decision, RepairState, repairable};
    use prompt_llama::ChatOptions;
    use prompt_measure::catalogue::{AgentId, Catalogue};

    use super::{say, server};

    /// The days: the session's first, and the one after it.
    const DAYS: [(&str, &[&str], &str, &[&str]); 2] = [
        (
            "Friday, December 4, 2026",
            &["december 4", "dec 4", "friday", "12/04", "2026-12-04"],
            "Saturday, December 5, 2026",
            &["december 5", "dec 5", "saturday", "12/05", "2026-12-05"],
        ),
        (
            "Sunday, February 28, 2027",
            &["february 28", "feb 28", "sunday", "02/28", "2027-02-28"],
            "Monday, March 1, 2027",
            &["march 1", "mar 1", "monday", "03/01", "2027-03-01"],
        ),
    ];

    const QUESTIONS: [&str; 5] = [
        "What is today's date?",
        "What day is it today?",
        "Tell me today's date.",
        "Which date is it now?",
        "What's the date today?",
    ];

    const EXCHANGES: [(&str, &str); 6] = [
        (
            "List the files here.",
            "There are README.md and src/main.rs.",
        ),
        ("What does main.rs do?", "It prints a greeting."),
        ("Run the tests.", "All tests passed."),
        ("Add a comment to main.rs.", "Done: the comment is added."),
        ("Show the git status.", "One file is modified."),
        ("Commit the change.", "The change is committed."),
    ];

    const HISTORIES: [usize; 4] = [0, 1, 3, 6];

    /// Qwen Code's shape: a system message, the setup context with the date line (as a text
    /// part, as Qwen Code sends it), its acknowledgement, `history` exchanges, `question`.
    fn body(date: &str, history: usize, question: &str) -> Vec<u8> {
        let system = "You are Qwen Code, an interactive CLI agent for software engineering tasks. Answer briefly. ".repeat(6);
        let setup = format!(
            "This is the Qwen Code. We are setting up the context for our chat.\nToday's date is {date} (formatted according to the user's locale).\nMy operating system is: linux\n"
        );
        let mut messages = vec![
            serde_json::json!({"role": "system", "content": system}),
            serde_json::json!({"role": "user", "content": [{"type": "text", "text": setup}]}),
            serde_json::json!({"role": "assistant", "content": "Got it. Thanks for the context!"}),
        ];
        for (q, a) in EXCHANGES.iter().take(history) {
            messages.push(serde_json::json!({"role": "user", "content": q}));
            messages.push(serde_json::json!({"role": "assistant", "content": a}));
        }
        messages.push(serde_json::json!({"role": "user", "content": question}));
        serde_json::json!({"model": "qwen3-coder-plus", "messages": messages})
            .to_string()
            .into_bytes()
    }

    fn messages(body: &[u8]) -> Vec<u8> {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}"));
        v["messages"].to_string().into_bytes()
    }

    /// The request `--stabilize` sends for the second day's `later`, after the first day's
    /// `earlier` was seen.
    fn repaired(earlier: &[u8], later: &[u8]) -> Vec<u8> {
        let catalogue = Catalogue::builtin().unwrap_or_else(|e| panic!("{e}"));
        let entries = repairable(
            catalogue.writers(),
            Some(&["qwen-code-session-date".to_owned()]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let agent = AgentId::from_user_agent("QwenCode/0.15.10 (linux; x64)");
        let mut state = RepairState::default();
        let api = prompt_core::ApiKind::OpenAi;
        assert!(matches!(
            state.decide(&entries, api, agent.as_ref(), earlier, 1),
            Decision::Untouched
        ));
        match state.decide(&entries, api, agent.as_ref(), later, 2) {
            Decision::Repaired { body, .. } => body,
            other => panic!("not repaired: {other:?}"),
        }
    }

    #[derive(Clone, Copy, PartialEq, Eq, Debug)]
    enum Arm {
        NoUpdate,
        AgentRewrite,
        Stabilized,
    }

    #[test]
    fn live_stabilize_the_model_still_learns_the_new_date_and_the_cache_is_kept() {
        let Some((client, _guard)) =
            server("live_stabilize_the_model_still_learns_the_new_date_and_the_cache_is_kept")
        else {
            return;
        };
        let options = ChatOptions::greedy_uncached(16);
        let arms = [Arm::NoUpdate, Arm::AgentRewrite, Arm::Stabilized];
        // (new, old) answers per arm, and per arm and history for the spread.
        let mut new = [0usize; 3];
        let mut old = [0usize; 3];
        let mut by_history = [[0usize; HISTORIES.len()]; 3];
        let mut trials = 0;
        for (first, old_marks, second, new_marks) in DAYS {
            for (h, &history) in HISTORIES.iter().enumerate() {
                for question in QUESTIONS {
                    trials += 1;
                    let earlier = body(first, history, question);
                    let later = body(second, history, question);
                    for (a, arm) in arms.iter().enumerate() {
                        let sent = match arm {
                            Arm::NoUpdate => earlier.clone(),
                            Arm::AgentRewrite => later.clone(),
                            Arm::Stabilized => repaired(&earlier, &later),
                        };
                        let reply = client
                            .chat(&messages(&sent), &options)
                            .unwrap_or_else(|e| panic!("{arm:?}: {e}"));
                        let text = reply.content.to_lowercase();
                        let says_new = new_marks.iter().any(|m| text.contains(m));
                        let says_old = old_marks.iter().any(|m| text.contains(m));
                        if says_new {
                            new[a] += 1;
                            by_history[a][h] += 1;
                        } else if says_old {
                            old[a] += 1;
                        }
                    }
                }
            }
        }
        for (a, arm) in arms.iter().enumerate() {
            let per: Vec<String> = HISTORIES
                .iter()
                .zip(by_history[a])
                .map(|(h, n)| format!("h{h} {n}/{}", DAYS.len() * QUESTIONS.len()))
                .collect();
            say(&format!(
                "stabilize probe: {arm:?}: the new date {}/{trials}, the old date {}/{trials} (by history: {})",
                new[a],
                old[a],
                per.join(", ")
            ));
        }
        assert!(trials >= 40, "{trials} trials");
        let [none, rewrite, stabilized] = new;
        assert!(
            stabilized + trials / 10 >= rewrite,
            "repaired: the new date {stabilized}/{trials}, the agent's rewrite {rewrite}/{trials}"
        );
        assert!(
            stabilized >= none + trials / 4,
            "repaired: the new date {stabilized}/{trials}, no update {none}/{trials}"
        );

        // The cache: the first day's request, then the second day's, rewritten or repaired,
        // each pair on a slot of its own (the prompt cache on).
        let cached = ChatOptions::cached(4);
        let mut reprocessed = Vec::new();
        for arm in [Arm::AgentRewrite, Arm::Stabilized] {
            let earlier = body(DAYS[0].0, 6, "Summarize what we did.");
            let later_agent = body(DAYS[0].2, 6, "Summarize what we did.");
            // The next turn on the next day: the history plus the reply and a new question.
            let mut later: serde_json::Value =
                serde_json::from_slice(&later_agent).unwrap_or_else(|e| panic!("{e}"));
            if let Some(list) = later["messages"].as_array_mut() {
                list.push(
                    serde_json::json!({"role": "assistant", "content": "We committed a change."}),
                );
                list.push(serde_json::json!({"role": "user", "content": "What is next?"}));
            }
            let later = later.to_string().into_bytes();
            let sent = match arm {
                Arm::Stabilized => repaired(&earlier, &later),
                _ => later,
            };
            let first = client
                .chat(&messages(&earlier), &cached)
                .unwrap_or_else(|e| panic!("{e}"));
            let second = client
                .chat(&messages(&sent), &cached)
                .unwrap_or_else(|e| panic!("{e}"));
            let before = client
                .prompt_tokens(&messages(&earlier))
                .unwrap_or_else(|e| panic!("{e}"));
            let tokens = client
                .prompt_tokens(&messages(&sent))
                .unwrap_or_else(|e| panic!("{e}"));
            // What a perfect prefix cache must evaluate: the tokens past the common prefix.
            let new = tokens.len() - prompt_core::divergence::common_prefix_len(&before, &tokens);
            say(&format!(
                "stabilize cache: {arm:?}: the first day's request {} tokens; the next day's {} tokens, {new} of them new, {} re-processed, {} reused",
                first.timings.prompt_n + first.timings.cache_n,
                tokens.len(),
                second.timings.prompt_n,
                second.timings.cache_n
            ));
            reprocessed.push((second.timings.prompt_n, new as u64));
        }
        let [(rewrite, _), (stabilized, stabilized_new)] = reprocessed[..] else {
            panic!("two arms");
        };
        // The repaired request extends the first day's: only its new tokens (the update, the
        // reply, the question) are evaluated; the rewrite evaluates its history again.
        assert!(
            stabilized <= stabilized_new + super::SLACK,
            "repaired re-processed {stabilized} tokens, {stabilized_new} are new"
        );
        assert!(
            stabilized < rewrite,
            "repaired re-processed {stabilized} tokens, the rewrite {rewrite}"
        );
    }
}
