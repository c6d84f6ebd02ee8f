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
    let result =
        driver::open_idle_sessions(&driver::client(), &target, 3, 2, Duration::from_secs(5)).await;
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
            ok: 10_000,
            first_error: None,
            rss_before_kib: 1000,
            rss_after_kib: 11_000,
        },
    ];
    let table = report::markdown(&records);
    assert!(table.contains("| fast | whole | 100 | 500/500 | 0.400 | 1.500 | 0.300 | 0.900 | +0.100 | +0.600 | +0.050 | +0.100 |"), "{table}");
    assert!(
        table.contains("| broken | — | — | — | not measured: exited: no such option |"),
        "{table}"
    );
    assert!(
        table.contains("| fast | 10000 (10000) | 1000 | 11000 | 1024 |"),
        "{table}"
    );
    assert!(
        table.contains("| fast | +0.600 | +0.100 | 1024 | yes |"),
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
