//! `--stabilize` on real agents' captured sessions (tests/fixtures/agents): each capture's
//! requests replayed through the proxy, one launch before the day rolled over and one after
//! (the repair state carried in the state directory), against the scripted upstream, which
//! records the bytes it received.

mod common;

use std::path::{Path, PathBuf};

use cacheline_proxy::sessions::StateConfig;
use cacheline_proxy::{ProxyConfig, RequestRow, StabilizeMode};
use common::{always, audit, post, proxy, raw, rows, split, upstream, whole};
use prompt_engine::compare;

/// A fresh directory for one test.
fn fresh(name: &str) -> PathBuf {
    common::fresh_dir(&format!("stabilize-{name}"))
}

/// One captured request: its path, the headers it was sent with (but those of the hop) and
/// its body.
struct Captured {
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Captured {
    /// The request as the agent sent it, with `extra` headers.
    fn request(&self, extra: &[(&str, &str)]) -> Vec<u8> {
        let mut headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        headers.extend_from_slice(extra);
        post(&self.path, &headers, &self.body)
    }
}

/// The requests of `tests/fixtures/agents/<agent>/capture.jsonl`, by line (a line without a
/// body, a `HEAD /`, is `None`).
fn capture(agent: &str) -> Vec<Option<Captured>> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/agents")
        .join(agent)
        .join("capture.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let body = v["request"].as_str().unwrap_or_default();
            if body.is_empty() {
                return None;
            }
            let headers = v["headers"]
                .as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "host"
                            | "content-length"
                            | "connection"
                            | "accept-encoding"
                            | "transfer-encoding"
                    )
                })
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect();
            Some(Captured {
                path: v["path"].as_str().unwrap().to_owned(),
                headers,
                body: body.as_bytes().to_vec(),
            })
        })
        .collect()
}

const REPLY: &[u8] = br#"{"id":"r1","ok":true}"#;

/// What one replay gave: the bodies the upstream received, the replies the agent got, the
/// proxy's rows (by request), in line order of the requests sent.
struct Replay {
    sent: Vec<Vec<u8>>,
    replies: Vec<Vec<u8>>,
    rows: Vec<RequestRow>,
    agent: Vec<Vec<u8>>,
    /// `cacheline audit`'s verdict text of each line of the proxy's `--log`.
    audited: Vec<String>,
    /// Each log line's `repair` and whether it holds the agent's own body.
    logged: Vec<(Option<serde_json::Value>, bool)>,
}

/// Replays `agent`'s capture through `--stabilize` (`mode`), a launch for the lines before
/// `rollover` (1-based) and one for the rest, with one state directory.
async fn replay(test: &str, agent: &str, rollover: usize, mode: StabilizeMode) -> Replay {
    let up = upstream(always(whole(
        "200 OK",
        &[("content-type", "application/json")],
        REPLY,
    )))
    .await;
    let dir = fresh(&format!("{test}-{agent}"));
    let lines = capture(agent);
    let mut out = Replay {
        sent: Vec::new(),
        replies: Vec::new(),
        rows: Vec::new(),
        agent: Vec::new(),
        audited: Vec::new(),
        logged: Vec::new(),
    };
    for launch in [&lines[..rollover - 1], &lines[rollover - 1..]] {
        let config = ProxyConfig::default()
            .with_stabilize(mode.clone())
            .with_log(dir.join("proxy.jsonl"))
            .with_state(Some(StateConfig::in_dir(dir.join("state"))));
        let proxy = proxy(config, &up.url()).await;
        let mut events = proxy.state().subscribe();
        let mut sent = 0u64;
        for c in launch.iter().flatten() {
            let (reply, _) = raw(proxy.addr(), &c.request(&[])).await;
            out.replies.push(split(&reply).1);
            out.agent.push(c.body.clone());
            sent += 1;
        }
        rows(&proxy.state(), sent).await;
        for _ in 0..sent {
            out.rows.push(events.recv().await.unwrap());
        }
        proxy.shutdown().await;
    }
    out.sent = up
        .received()
        .iter()
        .map(|r| cacheline_upstream::split_request(r).1)
        .collect();
    assert_eq!(
        out.sent.len(),
        out.agent.len(),
        "{agent}: every request reached the upstream"
    );
    let log = dir.join("proxy.jsonl");
    out.audited = audit(&log).into_iter().map(|(_, v)| v).collect();
    out.logged = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v.get("repair").cloned(), v.get("agent_request").is_some())
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// Each case: the agent, the rollover's line in its capture (and its index among the
/// requests with a body), the entry, the old and the new date as the element writes them.
const ROLLOVERS: [(&str, usize, usize, &str, &str, &str); 4] = [
    (
        "opencode",
        6,
        5,
        "opencode-env-date",
        "Fri Dec 04 2026",
        "Sat Dec 05 2026",
    ),
    (
        "gemini-cli",
        5,
        4,
        "gemini-cli-session-date",
        "Friday, December 4, 2026",
        "Saturday, December 5, 2026",
    ),
    (
        "qwen-code",
        5,
        4,
        "qwen-code-session-date",
        "Friday, December 4, 2026",
        "Saturday, December 5, 2026",
    ),
    (
        "claude-code",
        8,
        4,
        "claude-code-current-date",
        "2026-12-04",
        "2026-12-05",
    ),
];

#[tokio::test]
async fn stabilize_replays_day_rollovers_so_every_request_after_it_extends_the_one_before() {
    for (agent, line, at, entry, old, new) in ROLLOVERS {
        let r = replay("rollover", agent, line, StabilizeMode::Every).await;
        // Before the rollover: the agent's bytes, untouched.
        for i in 0..at {
            assert_eq!(
                r.sent[i], r.agent[i],
                "{agent}: request {i} before the rollover"
            );
            assert!(
                !r.rows[i].verdict.starts_with("repaired"),
                "{agent}: {}",
                r.rows[i].verdict
            );
        }
        // From it on: each sent request extends the one before it (its lane's: the same
        // model), the element keeps the old date, and the update appended tells the new one.
        for i in at..r.sent.len() {
            let verdict = compare(&r.sent[i - 1], &r.sent[i]).unwrap();
            if agent == "gemini-cli" && i == at {
                // Gemini CLI 0.61.0's resume also re-serializes its history (a
                // functionResponse part repeated in contents[2], the thoughtSignature dropped
                // from contents[5]): another writer, left as it is. The date no longer
                // breaks contents[0]; the break is where that writer's is.
                let prompt_engine::Verdict::Breaks(b) = &verdict else {
                    panic!("{agent}: the resume's own rewrite is forwarded as it is");
                };
                assert_eq!(b.divergence.message_index, Some(2), "{agent}: {verdict:?}");
                assert!(
                    r.rows[i]
                        .place
                        .as_deref()
                        .is_some_and(|p| p.starts_with("message 2")),
                    "{agent}: {}",
                    r.rows[i].verdict
                );
            } else {
                assert!(
                    verdict.extends(),
                    "{agent}: request {i} does not extend {}: {verdict:?}",
                    i - 1
                );
                assert_eq!(
                    r.rows[i].cause, None,
                    "{agent}: request {i}: {}",
                    r.rows[i].verdict
                );
                assert_eq!(
                    r.rows[i].reprocessed, 0,
                    "{agent}: request {i}: {}",
                    r.rows[i].verdict
                );
            }
            let sent = String::from_utf8_lossy(&r.sent[i]);
            let agent_body = String::from_utf8_lossy(&r.agent[i]);
            assert!(
                agent_body.contains(new) && !agent_body.contains(old),
                "{agent}: the capture"
            );
            assert!(
                sent.contains(old),
                "{agent}: request {i} keeps the old date at the head"
            );
            let update = sent
                .find("from=\\\"date\\\">")
                .unwrap_or_else(|| panic!("{agent}: request {i} has no update: {sent}"));
            assert!(
                sent[update..].contains(new),
                "{agent}: request {i}'s update tells the new date"
            );
            assert!(
                r.rows[i]
                    .verdict
                    .starts_with(&format!("repaired: {entry} — ")),
                "{agent}: request {i}: {}",
                r.rows[i].verdict
            );
        }
        // And without it: the rollover breaks the cache, as the capture's verdicts say, and
        // re-processes more.
        let verdict = compare(&r.agent[at - 1], &r.agent[at]).unwrap();
        assert!(
            !verdict.extends(),
            "{agent}: the agent's own rollover request"
        );
        let plain = replay("plain", agent, line, StabilizeMode::Off).await;
        assert_eq!(
            plain.sent, plain.agent,
            "{agent}: forwarded as it came without --stabilize"
        );
        assert!(
            plain.rows[at].reprocessed > r.rows[at].reprocessed,
            "{agent}: {} without, {} with",
            plain.rows[at].verdict,
            r.rows[at].verdict
        );
        eprintln!(
            "{agent}: rollover re-processed {} tokens without --stabilize, {} with",
            plain.rows[at].reprocessed, r.rows[at].reprocessed
        );
        // The log: what was sent, the agent's own body beside it where they differ, the
        // repair; `cacheline audit` of it says what the proxy printed.
        for (i, (repair, has_agent)) in r.logged.iter().enumerate() {
            assert_eq!(*has_agent, i >= at, "{agent}: line {}", i + 1);
            let outcome = repair.as_ref().and_then(|v| v["outcome"].as_str());
            assert_eq!(
                outcome,
                (i >= at).then_some("repaired"),
                "{agent}: line {}",
                i + 1
            );
        }
        // (The scripted reply reports no usage: the proxy's line says so, the audit not.)
        let printed: Vec<&str> = r
            .rows
            .iter()
            .map(|row| {
                row.verdict
                    .split("; usage not read:")
                    .next()
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(r.audited, printed, "{agent}: the audit of the log");
        // Every reply reached the agent as the upstream sent it.
        for reply in &r.replies {
            assert_eq!(reply, REPLY, "{agent}");
        }
    }
}

#[tokio::test]
async fn sessions_with_nothing_to_repair_are_forwarded_byte_for_byte() {
    // Codex writes no date above its history (a resume appends its environment item);
    // opencode's same-day turns carry one date.
    for (agent, line) in [("codex", 4), ("opencode", 3)] {
        let r = replay("nothing", agent, line, StabilizeMode::Every).await;
        let same_day = if agent == "opencode" { 5 } else { r.sent.len() };
        for i in 0..same_day {
            assert_eq!(r.sent[i], r.agent[i], "{agent}: request {i}");
            assert!(
                !r.rows[i].verdict.contains("repaired"),
                "{agent}: {}",
                r.rows[i].verdict
            );
        }
    }
}

#[tokio::test]
async fn only_the_chosen_entries_are_repaired() {
    let r = replay(
        "chosen",
        "opencode",
        6,
        StabilizeMode::Only(vec!["gemini-cli-session-date".to_owned()]),
    )
    .await;
    assert_eq!(
        r.sent, r.agent,
        "an entry of another agent repairs nothing here"
    );
}

#[tokio::test]
async fn an_unknown_or_unrepairable_entry_is_refused_at_start() {
    let up = upstream(always(whole("200 OK", &[], b"{}"))).await;
    for (ids, says) in [
        (
            vec!["no-such-entry"],
            "no catalogue entry \"no-such-entry\"",
        ),
        (vec!["opencode-skills-listing"], "is not marked `repair`"),
    ] {
        let listener = cacheline_proxy::bind("127.0.0.1:0".parse().unwrap(), false)
            .await
            .unwrap();
        let config = ProxyConfig::default()
            .with_upstreams(cacheline_proxy::Upstreams::all(&up.url()).unwrap())
            .with_stabilize(StabilizeMode::Only(
                ids.iter().map(|s| s.to_string()).collect(),
            ));
        let err = cacheline_proxy::Proxy::start(listener, config)
            .await
            .err()
            .unwrap_or_else(|| panic!("{ids:?} started"));
        assert!(err.to_string().contains(says), "{err}");
    }
}

#[tokio::test]
async fn a_compressed_or_unreadable_body_is_forwarded_unchanged_with_its_reason() {
    let lines = capture("opencode");
    let c = lines[5].as_ref().unwrap();
    let up = upstream(always(whole("200 OK", &[], REPLY))).await;
    let dir = fresh("refusals");
    let config = ProxyConfig::default()
        .with_stabilize(StabilizeMode::Every)
        .with_state(Some(StateConfig::in_dir(&dir)));
    let proxy = proxy(config, &up.url()).await;
    let mut events = proxy.state().subscribe();
    // Not JSON.
    let broken = &c.body[..c.body.len() / 2];
    let cut = Captured {
        path: c.path.clone(),
        headers: c.headers.clone(),
        body: broken.to_vec(),
    };
    raw(proxy.addr(), &cut.request(&[])).await;
    // Said to be compressed (the bytes are what they are: never read).
    raw(proxy.addr(), &c.request(&[("content-encoding", "gzip")])).await;
    rows(&proxy.state(), 2).await;
    let got = [events.recv().await.unwrap(), events.recv().await.unwrap()];
    proxy.shutdown().await;
    let received: Vec<Vec<u8>> = up
        .received()
        .iter()
        .map(|r| cacheline_upstream::split_request(r).1)
        .collect();
    assert_eq!(received, [broken.to_vec(), c.body.clone()]);
    assert!(
        got[0]
            .verdict
            .contains("not repaired (opencode-env-date): the body is not one JSON object"),
        "{}",
        got[0].verdict
    );
    assert!(
        got[1].verdict.contains(
            "not repaired (opencode-env-date): a compressed request body is not repaired"
        ),
        "{}",
        got[1].verdict
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_body_over_the_copy_cap_is_forwarded_unchanged_with_its_reason() {
    let lines = capture("opencode");
    let c = lines[5].as_ref().unwrap();
    let up = upstream(always(whole("200 OK", &[], REPLY))).await;
    let config = ProxyConfig::default()
        .with_stabilize(StabilizeMode::Every)
        .with_max_copy_bytes(4096);
    let proxy = proxy(config, &up.url()).await;
    let mut events = proxy.state().subscribe();
    let (reply, _) = raw(proxy.addr(), &c.request(&[])).await;
    assert_eq!(split(&reply).1, REPLY);
    rows(&proxy.state(), 1).await;
    let row = events.recv().await.unwrap();
    proxy.shutdown().await;
    let received = cacheline_upstream::split_request(&up.received()[0]).1;
    assert_eq!(received, c.body, "forwarded as it came");
    assert!(
        row.verdict.contains(
            "not repaired (opencode-env-date): the body is over the copy cap or did not end in time"
        ),
        "{}",
        row.verdict
    );
}
