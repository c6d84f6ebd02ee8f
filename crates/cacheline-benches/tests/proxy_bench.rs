//! The proxy benchmark's driver against its scripted upstream, directly: the open loop keeps its
//! rate and both wires answer, whole and streamed.

use std::time::Duration;

use cacheline_benches::proxy_bench::driver::{self, LoadConfig, Target};
use cacheline_benches::proxy_bench::report::{self, Record};
use cacheline_upstream::Upstream;
use cacheline_upstream::provider::{self, ProviderConfig};

async fn start_upstream(config: ProviderConfig) -> String {
    let upstream = Upstream::start(provider::script(config)).await.unwrap();
    upstream.url()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_second_at_ten_per_second_gives_ten_answers_whole_and_streamed() {
    let base = start_upstream(ProviderConfig::default()).await;
    let client = driver::client();
    for stream in [false, true] {
        let config = LoadConfig {
            rate: 10,
            duration: Duration::from_secs(1),
            stream,
            sessions: 4,
            max_turns: 8,
            timeout: Duration::from_secs(5),
            bodies: None,
        };
        let started = std::time::Instant::now();
        let result = driver::run(&client, &Target::direct(base.clone()), &config).await;
        assert!(
            (9..=11).contains(&result.samples.len()),
            "{} answers, {:?}",
            result.samples.len(),
            result.first_error
        );
        assert_eq!(result.errors, 0, "{:?}", result.first_error);
        // Open loop: the last request leaves at 0.9 s, not after ten round trips of waiting.
        assert!(
            started.elapsed() >= Duration::from_millis(850),
            "{:?}",
            started.elapsed()
        );
        for sample in &result.samples {
            assert!(sample.ttfb <= sample.total);
        }
        match Record::load("direct", stream, 10, &result) {
            Record::Load {
                ok,
                total_us: Some(_),
                ttfb_us: Some(_),
                ..
            } => assert_eq!(ok, result.samples.len()),
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_arrives_event_by_event_so_first_byte_precedes_the_end() {
    let base = start_upstream(ProviderConfig {
        events: 3,
        event_delay: Duration::from_millis(20),
    })
    .await;
    let client = driver::client();
    let config = LoadConfig {
        rate: 1,
        duration: Duration::from_secs(1),
        stream: true,
        sessions: 2,
        max_turns: 2,
        timeout: Duration::from_secs(5),
        bodies: None,
    };
    // Request 0 is OpenAI (6 events), request 1 Anthropic (9 events): both at least 5 pauses long.
    for j in 0..2 {
        let sample = driver::send(&client, &Target::direct(base.clone()), j, &config)
            .await
            .unwrap();
        assert!(
            sample.total >= sample.ttfb + Duration::from_millis(90),
            "{sample:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_route_is_a_counted_error_with_its_status() {
    let base = start_upstream(ProviderConfig::default()).await;
    let target = Target {
        openai_path: "/nowhere".into(),
        anthropic_path: "/nowhere".into(),
        ..Target::direct(base)
    };
    let result = driver::open_idle_sessions(
        &driver::client(),
        &target,
        0..3,
        2,
        Duration::from_secs(5),
        None,
        None,
    )
    .await;
    assert_eq!((result.samples.len(), result.errors), (0, 3));
    assert!(result.first_error.unwrap().starts_with("status 404"));
}

#[test]
fn the_table_subtracts_the_direct_run_and_says_what_was_not_measured() {
    let load = |label: &str, t: (u64, u64), f: (u64, u64)| Record::Load {
        label: label.into(),
        stream: false,
        rate: 100,
        sent: 500,
        ok: 500,
        first_error: None,
        total_us: Some(t),
        ttfb_us: Some(f),
        repeat: 0,
        body_bytes: None,
        analysis: None,
    };
    let records = vec![
        load("direct", (300, 900), (250, 800)),
        load("fast", (400, 1500), (300, 900)),
        Record::Skipped {
            label: "broken".into(),
            reason: "exited: no such option".into(),
        },
        Record::Idle {
            label: "fast".into(),
            sessions: 10_000,
            warm_up: 0,
            ok: 10_000,
            first_error: None,
            rss_before_kib: 1000,
            rss_after_kib: 11_000,
            body_bytes: None,
            analysis: None,
        },
    ];
    let table = report::markdown(&records);
    assert!(table.contains("| fast | whole | 100 | 500/500 | 0.400 | 1.500 | 0.300 | 0.900 | +0.100 | +0.600 | +0.050 | +0.100 |"), "{table}");
    assert!(
        table.contains("| broken | — | — | — | not measured: exited: no such option |"),
        "{table}"
    );
    assert!(
        table.contains("| fast | 10000 (10000) | 0 | synthetic | 1000 | 11000 | 1024 | — | — |"),
        "{table}"
    );
    assert!(
        table.contains("| fast | +0.600 | +0.100 | 1024 | — | yes |"),
        "{table}"
    );
    assert!(
        table.contains("| broken | not measured | not measured | not measured | not measured |"),
        "{table}"
    );
}

#[test]
fn the_rss_of_this_process_is_read() {
    let kib = report::tree_rss_kib(std::process::id()).unwrap();
    assert!(kib > 100, "{kib}");
    assert!(report::rss_kib(u32::MAX).is_err());
}

fn agent_bodies() -> std::sync::Arc<driver::AgentBodies> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/agents");
    std::sync::Arc::new(driver::AgentBodies::from_fixtures(&dir).unwrap())
}

#[test]
fn agent_sessions_send_the_captured_bodies_with_a_session_header_each_and_grow_by_appends() {
    let bodies = agent_bodies();
    let config = LoadConfig {
        rate: 1,
        duration: Duration::ZERO,
        stream: false,
        sessions: 4,
        max_turns: 3,
        timeout: Duration::from_secs(5),
        bodies: Some(bodies.clone()),
    };
    // Requests 1 and 5: session 1 (Anthropic, Claude Code) at turns 0 and 1.
    let (openai, first, headers) = driver::request_of(1, &config);
    let (_, second, again) = driver::request_of(5, &config);
    assert!(!openai);
    assert!(first.len() > 100_000, "{}", first.len());
    let session = |h: &[(String, String)]| {
        h.iter()
            .find(|(n, _)| n == "x-claude-code-session-id")
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(session(&headers), session(&again));
    assert!(
        headers
            .iter()
            .any(|(n, v)| n == "user-agent" && v.starts_with("claude-cli/"))
    );
    // The body's own session id is the header's.
    assert!(first.contains(&session(&headers)));
    // Turn 1 is turn 0 with messages appended before the array's end.
    let cut = first.find(r#"],"system""#).unwrap();
    assert!(second.starts_with(&first[..cut]) && second.ends_with(&first[cut..]));
    assert!(second.len() > first.len());
    for body in [&first, &second] {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["stream"], false);
    }
    // Another session: another header; the OpenAI ones are Qwen Code's body.
    let (_, _, other) = driver::request_of(3, &config);
    assert_ne!(session(&headers), session(&other));
    let (openai, body, headers) = driver::request_of(2, &config);
    assert!(openai && body.len() > 70_000);
    assert!(headers.iter().any(|(n, _)| n == "x-session-id"));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["model"], "qwen3-coder-plus");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_up_sessions_are_sessions_of_their_own_past_the_counted_ones() {
    let base = start_upstream(ProviderConfig::default()).await;
    let target = Target::direct(base);
    let client = driver::client();
    let open = |range: std::ops::Range<u64>| {
        driver::open_idle_sessions(
            &client,
            &target,
            range,
            2,
            Duration::from_secs(5),
            Some(agent_bodies()),
            None,
        )
    };
    assert_eq!(open(4..6).await.samples.len(), 2, "the warm-up's sessions");
    assert_eq!(open(0..4).await.samples.len(), 4, "the counted ones");
    // Session `j` of either range is request `j` of a run of `range.end` sessions: every
    // session id distinct, so no counted session continues a warm-up's.
    let config = |sessions: usize| LoadConfig {
        rate: 1,
        duration: Duration::ZERO,
        stream: false,
        sessions,
        max_turns: 1,
        timeout: Duration::from_secs(5),
        bodies: Some(agent_bodies()),
    };
    let id = |j: u64, sessions: usize| {
        let (_, _, headers) = driver::request_of(j, &config(sessions));
        headers
            .into_iter()
            .find(|(n, _)| n.ends_with("session-id"))
            .map(|(_, v)| v)
            .unwrap()
    };
    let ids: std::collections::HashSet<String> = (0..4)
        .map(|j| id(j, 4))
        .chain((4..6).map(|j| id(j, 6)))
        .collect();
    assert_eq!(ids.len(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_sessions_are_answered_whole_and_streamed() {
    let base = start_upstream(ProviderConfig::default()).await;
    let client = driver::client();
    for stream in [false, true] {
        let config = LoadConfig {
            rate: 20,
            duration: Duration::from_millis(500),
            stream,
            sessions: 4,
            max_turns: 4,
            timeout: Duration::from_secs(5),
            bodies: Some(agent_bodies()),
        };
        let result = driver::run(&client, &Target::direct(base.clone()), &config).await;
        assert_eq!(result.errors, 0, "{:?}", result.first_error);
        assert_eq!(result.samples.len(), 10);
    }
}

fn load(
    label: &str,
    repeat: u32,
    p50_us: u64,
    p99_us: u64,
    analysis: Option<report::AnalysisFigures>,
) -> Record {
    Record::Load {
        label: label.into(),
        stream: false,
        rate: 100,
        sent: 10,
        ok: 10,
        first_error: None,
        total_us: Some((p50_us, p99_us)),
        ttfb_us: Some((p50_us, p99_us)),
        repeat,
        body_bytes: Some(100_000),
        analysis,
    }
}

#[test]
fn repeats_give_the_median_and_range_of_what_each_repeat_added_over_its_own_direct_run() {
    let cpu = |analysed: u64, cpu_seconds: f64| {
        Some(report::AnalysisFigures {
            analysed,
            dropped: 0,
            cpu_seconds,
        })
    };
    let records = vec![
        load("direct", 0, 100, 1_000, None),
        load("proxy", 0, 200, 1_500, cpu(10, 0.010)),
        load("direct", 1, 300, 2_000, None),
        load("proxy", 1, 350, 2_100, cpu(10, 0.012)),
        load("direct", 2, 100, 900, None),
        load("proxy", 2, 400, 1_900, cpu(10, 0.020)),
        Record::Idle {
            label: "proxy".into(),
            sessions: 1000,
            warm_up: 100,
            ok: 1000,
            first_error: None,
            rss_before_kib: 1000,
            rss_after_kib: 4000,
            body_bytes: Some(156_000),
            analysis: cpu(1000, 1.0),
        },
    ];
    let table = report::markdown(&records);
    let row = table
        .lines()
        .find(|l| l.starts_with("| proxy | whole | 100 |"))
        .expect(&table);
    // Added p50 per repeat: +0.100, +0.050, +0.300; p99: +0.500, +0.100, +1.000.
    assert!(row.contains("+0.100 (+0.050…+0.300)"), "{row}");
    assert!(row.contains("+0.500 (+0.100…+1.000)"), "{row}");
    assert!(row.contains("30/30"), "{row}");
    // The analysis: 1.0, 1.2 and 2.0 ms per request over the repeats.
    let analysis = table
        .lines()
        .find(|l| l.starts_with("| proxy | whole | 100 | 100000 |"))
        .expect(&table);
    assert!(analysis.contains("1.200 (1.000…2.000)"), "{analysis}");
    // Idle: 3,000 KiB over 1,000 sessions; 1 ms per 156 KB request is 0.5 ms per 78 KB.
    let target = table
        .lines()
        .find(|l| l.starts_with("| proxy | +0.500 |"))
        .expect(&table);
    assert!(target.contains("| 3072 | 0.500 | no |"), "{target}");
}
