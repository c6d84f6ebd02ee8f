//! The proxy between a raw client and a real upstream on a socket.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cacheline_proxy::{Outcome, ProxyConfig, bind, verdict_line};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_reach_the_upstream_byte_for_byte_but_hop_by_hop_headers() {
    let up = upstream(ok_json("{}")).await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    let body = br#"{"model":"gpt-4o",  "messages":[{"role":"user","content":"h\u00e9"}]}"#;
    let request = [
        format!(
            "POST /v1/chat/completions?a=1&b=%20 HTTP/1.1\r\nHost: proxy.local\r\nX-MiXeD-Case: A  b\r\nConnection: close, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nProxy-Authorization: Basic eA==\r\nAuthorization: Bearer sk-1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes(),
        body.to_vec(),
    ]
    .concat();
    let (reply, _) = raw(proxy.addr(), &request).await;
    assert!(
        reply.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let expected = [
        format!(
            "POST /v1/chat/completions?a=1&b=%20 HTTP/1.1\r\nHost: {}\r\nX-MiXeD-Case: A  b\r\nAuthorization: Bearer sk-1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            up.addr(),
            body.len()
        )
        .into_bytes(),
        body.to_vec(),
    ]
    .concat();
    let got = up.received();
    assert_eq!(
        String::from_utf8_lossy(&got[0]),
        String::from_utf8_lossy(&expected)
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_reply_comes_back_frame_by_frame_unchanged() {
    let go = Arc::new(Notify::new());
    let events: Vec<Vec<u8>> = vec![
        b"data: {\"choices\":[{\"delta\":{\"content\":\"he\"}}]}\n\n".to_vec(),
        b"data: {\"choices\":[{\"delta\":{\"content\":\"llo\"}}]}\n\n: keep-alive\n\n".to_vec(),
        b"data: [DONE]\n\n".to_vec(),
    ];
    let (g, ev) = (go.clone(), events.clone());
    let up = upstream(Arc::new(move |_, _| {
        vec![
            Step::Send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Request-Id: r-1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec()),
            Step::Send(chunk(&ev[0])),
            // The second event is sent only once the client has read the first: a proxy
            // that buffered the reply would never let it.
            Step::Wait(g.clone()),
            Step::Send(chunk(&ev[1])),
            Step::Send(chunk(&ev[2])),
            Step::Send(b"0\r\n\r\n".to_vec()),
        ]
    })).await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    let mut s = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    s.write_all(&post("/v1/chat/completions", &[], CHAT))
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut tmp = [0u8; 4096];
    tokio::time::timeout(Duration::from_secs(10), async {
        while !got
            .windows(events[0].len())
            .any(|w| w == events[0].as_slice())
        {
            let n = s.read(&mut tmp).await.unwrap();
            assert!(n > 0, "closed before the first event");
            got.extend_from_slice(&tmp[..n]);
        }
    })
    .await
    .expect("the first event arrived before the upstream sent the second");
    go.notify_one();
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut tmp))
            .await
            .unwrap()
            .unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&tmp[..n]);
    }
    let (head, body) = split(&got);
    assert_eq!(
        head,
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Request-Id: r-1\r\nconnection: close\r\nTransfer-Encoding: chunked",
        "the upstream's head, with the proxy's own hop-by-hop headers toward this client"
    );
    let (chunks, complete) = dechunk(&body);
    assert!(complete);
    assert_eq!(chunks, events, "every frame as the upstream sent it");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_pass_through_unchanged() {
    for (status, body) in [
        (
            "429 Too Many Requests",
            r#"{"error":{"type":"rate_limit_error"}}"#,
        ),
        (
            "529 Overloaded",
            r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
        ),
        ("400 Bad Request", "not json at all"),
    ] {
        let reply = whole(
            status,
            &[("Retry-After", "7"), ("X-Odd", "a,  b")],
            body.as_bytes(),
        );
        let r = reply.clone();
        let up = upstream(Arc::new(move |_, _| vec![Step::Send(r.clone())])).await;
        let proxy = proxy(ProxyConfig::default(), &up.url()).await;
        let (got, _) = raw(proxy.addr(), &post("/v1/messages", &[], b"{}")).await;
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&reply)
        );
        proxy.shutdown().await;
    }
}

fn anthropic(system: &str, turns: &[&str]) -> Vec<u8> {
    let messages: Vec<serde_json::Value> = turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            serde_json::json!({"role": if i % 2 == 0 {"user"} else {"assistant"}, "content": t})
        })
        .collect();
    serde_json::to_vec(&serde_json::json!({
        "model": "claude-sonnet-4-5", "max_tokens": 64, "system": system, "messages": messages
    }))
    .unwrap()
}

fn usage_reply(input: u64, cached: u64) -> Vec<u8> {
    let body = serde_json::json!({"id": "msg_1", "type": "message", "role": "assistant",
        "content": [{"type": "text", "text": "ok"}], "model": "claude-sonnet-4-5",
        "stop_reason": "end_turn", "usage": {"input_tokens": input,
        "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0, "output_tokens": 1}});
    whole(
        "200 OK",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_of_the_log_gives_the_verdicts_the_proxy_printed() {
    let dir = std::env::temp_dir().join(format!("cacheline-proxy-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("proxy.jsonl");
    let _ = std::fs::remove_file(&log);
    let up = upstream(Arc::new(|n, _| {
        vec![Step::Send(usage_reply(900, [0, 800, 0, 0][n.min(3)]))]
    }))
    .await;
    let proxy = proxy(ProxyConfig::default().with_log(&log), &up.url()).await;
    let long = "Follow the house style. ".repeat(80);
    let bodies = [
        anthropic(&format!("{long} Today is 2026-12-04."), &["hello"]),
        anthropic(
            &format!("{long} Today is 2026-12-04."),
            &["hello", "hi", "more"],
        ),
        anthropic(
            &format!("{long} Today is 2026-12-05."),
            &["hello", "hi", "more", "ok", "again"],
        ),
        b"{\"model\": \"claude-sonnet-4-5\", \"messages\": [".to_vec(),
    ];
    let mut events = proxy.state().subscribe();
    for b in &bodies {
        raw(
            proxy.addr(),
            &post("/v1/messages", &[("x-claude-code-session-id", "s-1")], b),
        )
        .await;
    }
    rows(&proxy.state(), bodies.len() as u64).await;
    let mut printed = Vec::new();
    for _ in 0..bodies.len() {
        printed.push(events.recv().await.unwrap());
    }
    proxy.shutdown().await;
    for row in &printed {
        eprintln!("{}", verdict_line(row));
    }
    // The break the test is about is there: the date in the system prompt.
    assert!(printed[2].cause.is_some(), "{}", verdict_line(&printed[2]));
    assert_eq!(printed[1].cached, Some(800), "{}", printed[1].verdict);
    assert!(
        printed[3].verdict.starts_with("could not be read"),
        "{}",
        printed[3].verdict
    );
    // `cacheline audit`'s own reader and printer over the log.
    let tokenizer = prompt_measure::O200kBase::shared().unwrap();
    let mut auditor =
        prompt_measure::Auditor::new(tokenizer, prompt_measure::AuditConfig::default());
    let file = std::io::BufReader::new(std::fs::File::open(&log).unwrap());
    let mut audited = Vec::new();
    prompt_measure::audit::audit_reader(file, &log, &mut auditor, |e| {
        match e {
            prompt_measure::audit::Event::Request(r) => {
                audited.push((r.line, prompt_measure::audit::verdict_text(r)))
            }
            prompt_measure::audit::Event::Skipped(e) => {
                audited.push((e.line, format!("could not be read: {}", e.problem)))
            }
        }
        Ok(())
    })
    .unwrap();
    let proxy_said: Vec<(u64, String)> = printed
        .iter()
        .map(|r| (r.line.unwrap(), r.verdict.clone()))
        .collect();
    assert_eq!(proxy_said, audited);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_never_written_to_the_log_or_the_rows() {
    let dir = std::env::temp_dir().join(format!("cacheline-proxy-cred-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("proxy.jsonl");
    let up = upstream(ok_json(r#"{"usage":{"prompt_tokens":3}}"#)).await;
    let proxy = proxy(ProxyConfig::default().with_log(&log), &up.url()).await;
    let secrets = [
        ("authorization", "Bearer SECRET-authorization"),
        ("x-api-key", "SECRET-x-api-key"),
        ("x-goog-api-key", "SECRET-x-goog-api-key"),
        ("cookie", "session=SECRET-cookie"),
        ("api-key", "SECRET-api-key"),
    ];
    raw(proxy.addr(), &post("/v1/chat/completions", &secrets, CHAT)).await;
    let gemini = br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
    raw(
        proxy.addr(),
        &post(
            "/v1beta/models/gemini-2.5-flash:generateContent?key=SECRET-query-key",
            &[],
            gemini,
        ),
    )
    .await;
    rows(&proxy.state(), 2).await;
    let state = proxy.state();
    let summary = proxy.shutdown().await;
    // They did reach the upstream: the proxy forwards them.
    let sent = String::from_utf8_lossy(&up.received().concat()).into_owned();
    assert!(sent.contains("SECRET-x-goog-api-key") && sent.contains("SECRET-query-key"));
    let written = std::fs::read_to_string(&log).unwrap();
    assert_eq!(written.lines().count(), 2);
    let rows = format!("{:?}", state.snapshot());
    let lines: Vec<String> = state
        .snapshot()
        .iter()
        .flat_map(|s| s.rows.iter().map(verdict_line))
        .collect();
    for text in [written, rows, lines.join("\n"), summary.text()] {
        assert!(!text.contains("SECRET"), "a credential was written: {text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_a_502_naming_it() {
    // A port just freed: nothing listens there.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = proxy(ProxyConfig::default(), &format!("http://{free}")).await;
    let (got, _) = raw(proxy.addr(), &post("/v1/messages", &[], b"{}")).await;
    let (head, body) = split(&got);
    assert!(head.starts_with("HTTP/1.1 502 Bad Gateway"), "{head}");
    let body = String::from_utf8(body).unwrap();
    assert!(
        body.contains(&format!("upstream anthropic (http://{free}) failed")),
        "{body}"
    );
    rows(&proxy.state(), 1).await;
    let row = proxy.state().snapshot()[0].rows[0].clone();
    assert_eq!(row.outcome, Outcome::Unreachable);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_does_not_answer_in_time_is_a_502() {
    let up = upstream(Arc::new(|_, _| vec![Step::Hang])).await;
    let config = ProxyConfig::default().with_upstream_timeout(Duration::from_millis(300));
    let proxy = proxy(config, &up.url()).await;
    let (got, _) = raw(proxy.addr(), &post("/v1/responses", &[], b"{}")).await;
    let (head, body) = split(&got);
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    let body = String::from_utf8(body).unwrap();
    assert!(
        body.contains("upstream openai") && body.contains("did not answer within 0.3 s"),
        "{body}"
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_mid_stream_reaches_the_client_as_an_aborted_body() {
    let up = upstream(Arc::new(|_, _| {
        vec![
            Step::Send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec()),
            Step::Send(chunk(b"data: {\"a\":1}\n\n")),
            Step::Close,
        ]
    })).await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    let (got, _) = raw(proxy.addr(), &post("/v1/chat/completions", &[], CHAT)).await;
    let (_, body) = split(&got);
    let (chunks, complete) = dechunk(&body);
    assert_eq!(chunks, vec![b"data: {\"a\":1}\n\n".to_vec()]);
    assert!(!complete, "an aborted stream must not end cleanly");
    rows(&proxy.state(), 1).await;
    assert_eq!(
        proxy.state().snapshot()[0].rows[0].outcome,
        Outcome::UpstreamAborted
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_stream_ends_the_upstream_request() {
    let never = Arc::new(Notify::new());
    let n2 = never.clone();
    let up = upstream(Arc::new(move |_, _| {
        vec![
            Step::Send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec()),
            Step::Send(chunk(b"data: 1\n\n")),
            Step::Wait(n2.clone()),
        ]
    }))
    .await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    let mut s = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    s.write_all(&post("/v1/chat/completions", &[], CHAT))
        .await
        .unwrap();
    let mut tmp = [0u8; 4096];
    let mut got = Vec::new();
    while !got.windows(7).any(|w| w == b"data: 1") {
        let n = s.read(&mut tmp).await.unwrap();
        assert!(n > 0);
        got.extend_from_slice(&tmp[..n]);
    }
    drop(s);
    tokio::time::timeout(Duration::from_secs(10), up.client_gone().notified())
        .await
        .expect("the upstream saw its request ended");
    rows(&proxy.state(), 1).await;
    assert_eq!(
        proxy.state().snapshot()[0].rows[0].outcome,
        Outcome::ClientGone
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_sessions_are_served() {
    let up = upstream(Arc::new(|_, req| {
        let len = req.len().to_string();
        vec![Step::Send(whole("200 OK", &[("X-Len", &len)], b"{}"))]
    }))
    .await;
    let proxy = proxy(ProxyConfig::default().with_queue(2048), &up.url()).await;
    let addr = proxy.addr();
    let tasks: Vec<_> = (0..1000)
        .map(|i| {
            tokio::spawn(async move {
                let body = format!(
                    r#"{{"model":"gpt-4o","messages":[{{"role":"user","content":"session {i}"}}]}}"#
                );
                let session = format!("s-{i}");
                let (got, _) = raw(
                    addr,
                    &post(
                        "/v1/chat/completions",
                        &[("x-session-id", &session)],
                        body.as_bytes(),
                    ),
                )
                .await;
                got.starts_with(b"HTTP/1.1 200 OK\r\n") && got.ends_with(b"{}")
            })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        ok += usize::from(t.await.unwrap());
    }
    assert_eq!(ok, 1000);
    assert_eq!(up.received().len(), 1000);
    rows(&proxy.state(), 1000).await;
    let t = proxy.state().totals();
    assert_eq!(t.forwarded, 1000);
    assert_eq!(t.analysed + t.analysis_dropped, 1000);
    assert_eq!(t.sessions + t.sessions_dropped, t.analysed);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_is_forwarded_and_its_verdict_says_it_could_not_be_read() {
    let up = upstream(ok_json("{}")).await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    let body = b"{\"model\": \"gpt-4o\", \"messages\": [ oops";
    raw(proxy.addr(), &post("/v1/chat/completions", &[], body)).await;
    assert!(up.received()[0].ends_with(body));
    rows(&proxy.state(), 1).await;
    let row = proxy.state().snapshot()[0].rows[0].clone();
    assert!(
        row.verdict.starts_with("could not be read: "),
        "{}",
        row.verdict
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_copy_cap_is_forwarded_whole_and_not_analysed() {
    let up = upstream(ok_json("{}")).await;
    let proxy = proxy(ProxyConfig::default().with_max_copy_bytes(1000), &up.url()).await;
    let body = chat_body(&"x".repeat(5000));
    raw(
        proxy.addr(),
        &post("/v1/chat/completions", &[], body.as_bytes()),
    )
    .await;
    assert!(up.received()[0].ends_with(body.as_bytes()));
    rows(&proxy.state(), 1).await;
    let row = proxy.state().snapshot()[0].rows[0].clone();
    assert!(
        row.verdict
            .starts_with("not analysed: body over 1000 bytes"),
        "{}",
        row.verdict
    );
    assert_eq!(row.line, None);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_reply_is_read_for_analysis_and_forwarded_compressed() {
    use std::io::Write;
    let json = br#"{"id":"c1","object":"chat.completion","choices":[],"usage":{"prompt_tokens":1200,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":1024}}}"#;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(json).unwrap();
    let gz = e.finish().unwrap();
    let reply = whole(
        "200 OK",
        &[
            ("Content-Encoding", "gzip"),
            ("Content-Type", "application/json"),
        ],
        &gz,
    );
    let r = reply.clone();
    let up = upstream(Arc::new(move |_, _| vec![Step::Send(r.clone())])).await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    let (got, _) = raw(proxy.addr(), &post("/v1/chat/completions", &[], CHAT)).await;
    assert_eq!(got, reply);
    rows(&proxy.state(), 1).await;
    let row = proxy.state().snapshot()[0].rows[0].clone();
    assert_eq!(row.cached, Some(1024), "{}", row.verdict);
    proxy.shutdown().await;
}

#[tokio::test]
async fn listening_beyond_loopback_needs_allow_remote() {
    let e = bind("0.0.0.0:0".parse().unwrap(), false).await.unwrap_err();
    assert!(e.to_string().contains("pass --allow-remote"), "{e}");
    assert!(bind("0.0.0.0:0".parse().unwrap(), true).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_launcher_sets_base_urls_and_returns_the_childs_exit_code() {
    use std::ffi::OsString;
    let addr: std::net::SocketAddr = "127.0.0.1:4567".parse().unwrap();
    let sh = OsString::from("sh");
    let check = OsString::from(
        r#"test "$ANTHROPIC_BASE_URL" = http://127.0.0.1:4567 && test "$OPENAI_BASE_URL" = http://127.0.0.1:4567/v1 && test "$GOOGLE_GEMINI_BASE_URL" = http://127.0.0.1:4567 && exit 3"#,
    );
    let code = cacheline_proxy::launcher::run(&sh, &["-c".into(), check], addr)
        .await
        .unwrap();
    assert_eq!(code, 3);
    let killed = OsString::from("kill -TERM $$");
    let code = cacheline_proxy::launcher::run(&sh, &["-c".into(), killed], addr)
        .await
        .unwrap();
    assert_eq!(code, 128 + 15);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_analysis_queue_drops_copies_and_counts_them() {
    let up = upstream(ok_json(r#"{"usage":{"prompt_tokens":3}}"#)).await;
    let proxy = proxy(ProxyConfig::default().with_queue(1), &up.url()).await;
    let addr = proxy.addr();
    let long = chat_body(&"a long prompt to tokenize. ".repeat(400));
    let tasks = post_chat_concurrently(addr, 200, &long);
    for t in tasks {
        assert!(t.await.unwrap(), "every request is answered");
    }
    rows(&proxy.state(), 200).await;
    let summary = proxy.shutdown().await;
    let t = &summary.totals;
    assert_eq!(t.forwarded, 200);
    assert!(t.analysis_dropped > 0, "{t:?}");
    assert_eq!(t.analysed + t.analysis_dropped, 200);
    assert!(
        summary
            .text()
            .contains(&format!("analysis dropped {} requests", t.analysis_dropped)),
        "{}",
        summary.text()
    );
}
