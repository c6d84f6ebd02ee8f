//! Sessions across launches: a proxy started again (or a second one beside it) compares each
//! request with its session's last one, whichever launch saw it, and prints what
//! `cacheline audit` of the shared log prints; a damaged, foreign or full state is set aside,
//! cut or compacted, and said, never fatal.

mod common;

use std::path::{Path, PathBuf};

use cacheline_proxy::sessions::{JOURNAL_FILE, StateConfig};
use cacheline_proxy::{ProxyConfig, RequestRow};
use common::{always, audit, post, proxy, raw, rows, upstream, whole};

/// A fresh directory for one test.
fn fresh(name: &str) -> PathBuf {
    common::fresh_dir(&format!("sessions-{name}"))
}

/// An Anthropic body: a long system prompt (so the prefix is over the minimum) and `turns`
/// alternating user and assistant messages.
fn body(turns: usize) -> Vec<u8> {
    let system = "Follow the house style and keep answers short. ".repeat(60);
    let messages: Vec<serde_json::Value> = (0..turns)
        .map(|t| {
            let role = if t % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({"role": role, "content": format!("turn {t} of the conversation")})
        })
        .collect();
    serde_json::json!({
        "model": "claude-sonnet-4-5", "max_tokens": 100,
        "system": system, "messages": messages,
    })
    .to_string()
    .into_bytes()
}

fn reply() -> Vec<u8> {
    let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":10,"output_tokens":1}}"#;
    whole("200 OK", &[("content-type", "application/json")], body)
}

/// Sends each body as session `session`, waits for their rows, stops the proxy; its rows.
async fn launch(
    up: &str,
    config: ProxyConfig,
    session: &str,
    bodies: &[Vec<u8>],
) -> (Vec<RequestRow>, Vec<String>) {
    let proxy = proxy(config, up).await;
    let mut events = proxy.state().subscribe();
    for b in bodies {
        raw(
            proxy.addr(),
            &post("/v1/messages", &[("x-claude-code-session-id", session)], b),
        )
        .await;
    }
    rows(&proxy.state(), bodies.len() as u64).await;
    let mut printed = Vec::new();
    for _ in 0..bodies.len() {
        printed.push(events.recv().await.unwrap());
    }
    let warnings = proxy.state().totals().warnings;
    proxy.shutdown().await;
    (printed, warnings)
}

/// A launch's config: the log `dir/proxy.jsonl` and the state `dir/state`, as every launch
/// of a user's shared the same.
fn with_log_and_state(dir: &Path) -> ProxyConfig {
    ProxyConfig::default()
        .with_log(dir.join("proxy.jsonl"))
        .with_state(Some(StateConfig::in_dir(dir.join("state"))))
}

/// Asserts one of `warnings` holds `text`, and only one.
fn said_once(warnings: &[String], text: &str) {
    let n = warnings.iter().filter(|w| w.contains(text)).count();
    assert_eq!(n, 1, "{text:?} in {warnings:?}");
}

fn said(rows: &[RequestRow]) -> Vec<(u64, String)> {
    rows.iter()
        .map(|r| (r.line.unwrap(), r.verdict.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumed_by_a_new_launch_is_compared_with_its_last_request() {
    let dir = fresh("resume");
    let log = dir.join("proxy.jsonl");
    let up = upstream(always(reply())).await;
    let config = || with_log_and_state(&dir);
    let (first, _) = launch(&up.url(), config(), "s-1", &[body(1), body(3)]).await;
    let (second, _) = launch(&up.url(), config(), "s-1", &[body(5)]).await;
    assert!(
        second[0].verdict.starts_with("extends line 2:"),
        "the resumed request continues line 2 of the shared log: {}",
        second[0].verdict
    );
    assert_eq!(second[0].line, Some(3), "numbered after the log's lines");
    let mut printed = said(&first);
    printed.extend(said(&second));
    assert_eq!(printed, audit(&log), "each printed verdict is the audit's");
    // Without the state, the same resumed request is a cold start (the test can fail).
    let alone = fresh("resume-alone");
    let (cold, _) = launch(
        &up.url(),
        ProxyConfig::default().with_log(alone.join("proxy.jsonl")),
        "s-1",
        &[body(5)],
    )
    .await;
    assert!(
        cold[0].verdict.starts_with("cold_start"),
        "{}",
        cold[0].verdict
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_request_with_no_shared_log_names_its_predecessor_by_time() {
    let dir = fresh("no-log");
    let up = upstream(always(reply())).await;
    let config = || ProxyConfig::default().with_state(Some(StateConfig::in_dir(dir.join("state"))));
    launch(&up.url(), config(), "s-2", &[body(3)]).await;
    let (second, _) = launch(&up.url(), config(), "s-2", &[body(5)]).await;
    let v = &second[0].verdict;
    assert!(
        v.starts_with("extends the request of 20") && v.contains("UTC (an earlier launch)"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_launches_at_once_see_each_other_s_requests_in_the_log_s_order() {
    let dir = fresh("together");
    let log = dir.join("proxy.jsonl");
    let up = upstream(always(reply())).await;
    let config = || with_log_and_state(&dir);
    let a = proxy(config(), &up.url()).await;
    let b = proxy(config(), &up.url()).await;
    let mut printed = Vec::new();
    // One session's turns alternate between the two launches.
    for (i, turns) in [1usize, 3, 5, 7].into_iter().enumerate() {
        let p = if i % 2 == 0 { &a } else { &b };
        let mut events = p.state().subscribe();
        raw(
            p.addr(),
            &post(
                "/v1/messages",
                &[("x-claude-code-session-id", "s-3")],
                &body(turns),
            ),
        )
        .await;
        printed.push(events.recv().await.unwrap());
    }
    a.shutdown().await;
    b.shutdown().await;
    for (i, row) in printed.iter().enumerate().skip(1) {
        assert!(
            row.verdict.starts_with(&format!("extends line {i}:")),
            "line {}: {}",
            i + 1,
            row.verdict
        );
    }
    assert_eq!(said(&printed), audit(&log));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_state_is_cut_where_it_stops_holding_and_said_once() {
    let dir = fresh("damaged");
    let up = upstream(always(reply())).await;
    let config = || with_log_and_state(&dir);
    launch(&up.url(), config(), "s-4", &[body(1), body(3)]).await;
    // A torn tail: half an entry, as a crash mid-write leaves it.
    let journal = dir.join("state").join(JOURNAL_FILE);
    let mut bytes = std::fs::read(&journal).unwrap();
    let keep = bytes.len();
    bytes.extend_from_slice(b"0123456789abcdef {\"log\":nul");
    std::fs::write(&journal, &bytes).unwrap();
    let (second, warnings) = launch(&up.url(), config(), "s-4", &[body(5)]).await;
    assert!(
        second[0].verdict.starts_with("extends line 2:"),
        "what held is kept: {}",
        second[0].verdict
    );
    said_once(&warnings, "damaged entry");
    let now = String::from_utf8(std::fs::read(&journal).unwrap()).unwrap();
    assert!(!now.contains("{\"log\":nul"), "the torn entry is cut away");
    assert!(now.len() > keep, "the new launch's entry follows what held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_of_another_version_is_set_aside_with_one_warning() {
    let dir = fresh("version");
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join(JOURNAL_FILE), "cacheline-sessions 0\n{}\n").unwrap();
    let up = upstream(always(reply())).await;
    let config = ProxyConfig::default()
        .with_log(dir.join("proxy.jsonl"))
        .with_state(Some(StateConfig::in_dir(&state)));
    let (rows, warnings) = launch(&up.url(), config, "s-5", &[body(1), body(3)]).await;
    assert!(
        rows[1].verdict.starts_with("extends line 1:"),
        "{}",
        rows[1].verdict
    );
    said_once(&warnings, "another version");
    let aside = std::fs::read_dir(&state)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".set-aside"))
        .count();
    assert_eq!(aside, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_state_keeps_the_latest_sessions_within_its_cap() {
    let dir = fresh("full");
    let state = dir.join("state");
    let up = upstream(always(reply())).await;
    let cap = 64 << 10;
    let config = ProxyConfig::default().with_state(Some(StateConfig {
        dir: state.clone(),
        max_bytes: cap,
        max_sessions: 10_000,
    }));
    let bodies: Vec<Vec<u8>> = (0..1).map(|_| body(3)).collect();
    let p = proxy(config, &up.url()).await;
    for s in 0..240 {
        raw(
            p.addr(),
            &post(
                "/v1/messages",
                &[("x-claude-code-session-id", &format!("full-{s}"))],
                &bodies[0],
            ),
        )
        .await;
    }
    rows(&p.state(), 240).await;
    let warnings = p.state().totals().warnings;
    p.shutdown().await;
    let len = std::fs::metadata(state.join(JOURNAL_FILE)).unwrap().len();
    assert!(
        len <= cap,
        "the journal holds {len} bytes, over its {cap}-byte cap"
    );
    // Compacted again and again in this launch (240 sessions through a 64 KiB cap), said once.
    said_once(&warnings, "least recently active sessions dropped");
}
