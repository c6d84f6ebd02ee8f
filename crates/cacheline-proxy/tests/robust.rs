//! The proxy under hostile and unlucky traffic (issue 34): memory held for the analysis,
//! timeouts, connection shedding, a log left by a kill or failing, who may read the proxy's
//! own routes, forged verdict lines, and framing. Raw sockets on loopback, bounded in count
//! and time.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use cacheline_proxy::{Limits, LocalRoutes, ProxyConfig, verdict_line};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// How a read of a whole connection ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// A clean end (FIN).
    Clean,
    /// A reset, or another read error.
    Reset,
    /// Nothing within the wait.
    Open,
}

/// Reads until the connection ends, or `wait`.
async fn read_to_end(s: &mut TcpStream, wait: Duration) -> (Vec<u8>, End) {
    let mut out = Vec::new();
    let mut tmp = [0u8; 65536];
    let end = tokio::time::timeout(wait, async {
        loop {
            match s.read(&mut tmp).await {
                Ok(0) => return End::Clean,
                Ok(n) => out.extend_from_slice(&tmp[..n]),
                Err(_) => return End::Reset,
            }
        }
    })
    .await
    .unwrap_or(End::Open);
    (out, end)
}

/// Reads one reply whose body has a `Content-Length`, leaving the connection open.
async fn read_sized_reply(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut tmp = [0u8; 65536];
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Some(end) = find(&out, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&out[..end]).into_owned();
                let len: usize = header(&head, "content-length")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if out.len() >= end + 4 + len {
                    return;
                }
            }
            let n = s.read(&mut tmp).await.unwrap();
            assert!(n > 0, "closed before the reply was whole");
            out.extend_from_slice(&tmp[..n]);
        }
    })
    .await
    .expect("a reply in time");
    out
}

fn get(path: &str, host: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").into_bytes()
}

// 1. Memory of uploads in flight.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_in_flight_are_held_within_the_analysis_budget_and_forwarded_whole() {
    let go = Arc::new(Notify::new());
    let g = go.clone();
    let up = upstream(Arc::new(move |_, _| {
        vec![
            // Every reply waits: the copies of all the requests are in flight at once.
            Step::Wait(g.clone()),
            Step::Send(whole(
                "200 OK",
                &[("Content-Type", "application/json")],
                br#"{"usage":{"prompt_tokens":3}}"#,
            )),
        ]
    }))
    .await;
    let budget = 1 << 20;
    let config = ProxyConfig::default()
        .with_limits(Limits::default().with_analysis_budget(budget))
        .with_queue(64);
    let proxy = proxy(config, &up.url()).await;
    let addr = proxy.addr();
    let n = 8;
    let body = chat_body(&"upload ".repeat(400 << 10 >> 3));
    let tasks = post_chat_concurrently(addr, n, &body);
    // Every request reached the upstream whole, none answered yet.
    for _ in 0..400 {
        if up.received().len() == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(up.received().len(), n, "every upload reached the upstream");
    let held = proxy.state().analysis_held_bytes();
    assert!(
        held <= budget,
        "{held} bytes held for the analysis, over the {budget}-byte budget"
    );
    assert!(held > 0, "copies within the budget are held");
    for _ in 0..n {
        go.notify_one();
    }
    for t in tasks {
        assert!(t.await.unwrap(), "every upload is answered");
    }
    for r in up.received() {
        assert!(r.ends_with(body.as_bytes()), "forwarded whole");
    }
    rows(&proxy.state(), n as u64).await;
    let summary = proxy.shutdown().await;
    let t = &summary.totals;
    assert!(t.analysis_over_budget > 0, "{t:?}");
    assert_eq!(t.analysed + t.analysis_dropped, n as u64, "{t:?}");
    assert!(
        summary.text().contains("its memory budget was full"),
        "{}",
        summary.text()
    );
}

// 3. Timeouts and shedding.

fn short(limits: Limits) -> ProxyConfig {
    ProxyConfig::default().with_limits(limits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_sends_a_byte_is_closed_after_the_header_read_timeout() {
    let up = upstream(ok_json("{}")).await;
    let limits = Limits::default().with_header_read_timeout(Duration::from_millis(300));
    let proxy = proxy(short(limits), &up.url()).await;
    let mut silent = TcpStream::connect(proxy.addr()).await.unwrap();
    let (_, end) = read_to_end(&mut silent, Duration::from_secs(20)).await;
    assert_ne!(end, End::Open, "a silent connection is held");
    // A head begun and never finished, likewise.
    let mut slow = TcpStream::connect(proxy.addr()).await.unwrap();
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let (_, end) = read_to_end(&mut slow, Duration::from_secs(20)).await;
    assert_ne!(end, End::Open, "a head never finished is held");
    assert!(up.received().is_empty());
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_serves_requests_then_closes_after_the_idle_timeout() {
    let up = upstream(ok_json("{}")).await;
    let limits = Limits::default().with_idle_timeout(Duration::from_millis(500));
    let proxy = proxy(short(limits), &up.url()).await;
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        CHAT.len()
    );
    for _ in 0..2 {
        s.write_all(&[request.as_bytes(), CHAT].concat())
            .await
            .unwrap();
        let reply = read_sized_reply(&mut s).await;
        assert!(reply.starts_with(b"HTTP/1.1 200 OK\r\n"));
    }
    let (rest, end) = read_to_end(&mut s, Duration::from_secs(20)).await;
    assert!(rest.is_empty());
    assert_eq!(end, End::Clean, "an idle connection is closed");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_pooled_upstream_connection_is_closed_after_its_timeout() {
    // An upstream that keeps its connection alive and says when the proxy closed it.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let closed = Arc::new(Notify::new());
    let c = closed.clone();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 65536];
        let mut got = Vec::new();
        while find(&got, b"\r\n\r\n").is_none() {
            let n = s.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        s.write_all(&whole("200 OK", &[], b"{}")).await.unwrap();
        // Kept alive: the proxy's pool holds it until its idle timeout.
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        c.notify_one();
    });
    let limits = Limits::default().with_upstream_idle_timeout(Duration::from_millis(300));
    let proxy = proxy(short(limits), &url).await;
    let (got, _) = raw(proxy.addr(), &post("/v1/chat/completions", &[], CHAT)).await;
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    tokio::time::timeout(Duration::from_secs(20), closed.notified())
        .await
        .expect("the idle upstream connection was closed");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_limit_idle_connections_are_shed_for_a_new_one() {
    let up = upstream(ok_json("{}")).await;
    let proxy = proxy(short(Limits::default().with_max_connections(2)), &up.url()).await;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        CHAT.len()
    );
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
        s.write_all(&[request.as_bytes(), CHAT].concat())
            .await
            .unwrap();
        assert!(
            read_sized_reply(&mut s)
                .await
                .starts_with(b"HTTP/1.1 200 OK\r\n")
        );
        idle.push(s);
    }
    // Both kept alive and idle (the idle timeout is 120 s): a third client is served.
    let (got, _) = raw(proxy.addr(), &post("/v1/chat/completions", &[], CHAT)).await;
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    let mut shed = 0;
    for mut s in idle {
        let (_, end) = read_to_end(&mut s, Duration::from_secs(5)).await;
        shed += usize::from(end != End::Open);
    }
    assert!(shed >= 1, "an idle connection made room for the new one");
    proxy.shutdown().await;
}

// 4. A log left mid-line by a kill.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_left_mid_line_by_a_kill_gets_its_newline_and_the_new_lines_are_whole() {
    let dir = std::env::temp_dir().join(format!("cacheline-proxy-killed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("proxy.jsonl");
    let whole_line =
        r#"{"request":"{}","response":null,"path":"/v1/chat/completions","headers":{},"ts":1.0}"#;
    std::fs::write(&log, format!("{whole_line}\n{{\"request\":\"{{\\\"mo")).unwrap();
    let up = upstream(ok_json(r#"{"usage":{"prompt_tokens":3}}"#)).await;
    let proxy = proxy(ProxyConfig::default().with_log(&log), &up.url()).await;
    for _ in 0..2 {
        raw(proxy.addr(), &post("/v1/chat/completions", &[], CHAT)).await;
    }
    rows(&proxy.state(), 2).await;
    proxy.shutdown().await;
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert_eq!(
        lines[1], "{\"request\":\"{\\\"mo",
        "the fragment stays a line"
    );
    for l in &lines[2..] {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert_eq!(v["path"], "/v1/chat/completions");
    }
    assert!(text.ends_with('\n'));
    std::fs::remove_dir_all(&dir).unwrap();
}

// 5. A failing log.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_log_is_warned_of_once_and_counted_in_the_metrics() {
    let up = upstream(ok_json(r#"{"usage":{"prompt_tokens":3}}"#)).await;
    // Every write to /dev/full fails as a full disk does (ENOSPC).
    let proxy = proxy(ProxyConfig::default().with_log("/dev/full"), &up.url()).await;
    let mut warnings = proxy.state().subscribe_warnings();
    for _ in 0..3 {
        raw(proxy.addr(), &post("/v1/chat/completions", &[], CHAT)).await;
    }
    rows(&proxy.state(), 3).await;
    let warning = warnings.try_recv().expect("a warning when the log failed");
    assert!(
        warning.contains("writing the log /dev/full failed") && warning.contains("no more lines"),
        "{warning}"
    );
    assert!(warnings.try_recv().is_err(), "warned of once");
    let (got, _) = raw(proxy.addr(), &get("/metrics", "127.0.0.1")).await;
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains("\ncacheline_proxy_log_write_failures_total 1\n"),
        "{text}"
    );
    assert!(
        text.contains("\ncacheline_proxy_log_lines_not_written_total 3\n"),
        "{text}"
    );
    let t = proxy.state().totals();
    assert_eq!((t.log_failures, t.log_lines_not_written), (1, 3));
    proxy.shutdown().await;
}

// 6. The proxy's own routes and the Host they are asked with.

const SECRET_PROMPT: &str = "the user's private prompt";

async fn proxy_with_a_session(routes: LocalRoutes) -> (cacheline_proxy::Proxy, Upstream) {
    let up = upstream(ok_json(r#"{"usage":{"prompt_tokens":3}}"#)).await;
    let proxy = proxy(ProxyConfig::default().with_local_routes(routes), &up.url()).await;
    for turn in 0..2 {
        let body = serde_json::json!({"model": "gpt-4o", "messages": [
            {"role": "system", "content": format!("{SECRET_PROMPT} {turn}")},
            {"role": "user", "content": "hi"}]});
        raw(
            proxy.addr(),
            &post(
                "/v1/chat/completions",
                &[("x-session-id", "s-1")],
                body.to_string().as_bytes(),
            ),
        )
        .await;
    }
    rows(&proxy.state(), 2).await;
    (proxy, up)
}

/// The status of a local route asked with these headers, and what came (the head only, for
/// the event stream).
async fn ask(addr: SocketAddr, path: &str, headers: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (got, _) = read_to_end(&mut s, Duration::from_secs(2)).await;
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

const LOCAL: [&str; 4] = [
    "/metrics",
    "/_cacheline/",
    "/_cacheline/state",
    "/_cacheline/events",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxys_own_routes_answer_only_a_loopback_host() {
    let (proxy, _up) = proxy_with_a_session(LocalRoutes::default()).await;
    let addr = proxy.addr();
    let port = addr.port();
    for path in LOCAL {
        // A page of another site whose name resolves to 127.0.0.1 (DNS rebinding).
        for host in [
            format!("attacker.example:{port}"),
            "attacker.example".to_owned(),
            "127.0.0.1.attacker.example".to_owned(),
        ] {
            let (status, text) = ask(addr, path, &format!("Host: {host}\r\n")).await;
            assert_eq!(status, 403, "{path} with Host {host}: {text}");
            assert!(
                !text.contains(SECRET_PROMPT) && !text.contains("s-1"),
                "{text}"
            );
        }
        let (status, _) = ask(addr, path, "").await;
        assert_eq!(status, 403, "{path} without a Host");
        for host in [
            format!("127.0.0.1:{port}"),
            format!("localhost:{port}"),
            format!("[::1]:{port}"),
        ] {
            let (status, text) = ask(addr, path, &format!("Host: {host}\r\n")).await;
            assert_eq!(status, 200, "{path} with Host {host}: {text}");
        }
    }
    let (_, state) = ask(addr, "/_cacheline/state", "Host: localhost\r\n").await;
    assert!(state.contains("\"session\":\"s-1\""), "{state}");
    // Forwarding does not depend on the Host: an agent's own is not the proxy's business.
    let (got, _) = raw(addr, &post("/v1/chat/completions", &[], CHAT)).await;
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_proxys_own_routes_need_it_and_off_they_are_not_answered() {
    let token = "0123456789abcdef0123456789abcdef";
    let (proxy, _up) = proxy_with_a_session(LocalRoutes::Token(token.to_owned())).await;
    let addr = proxy.addr();
    for path in LOCAL {
        for headers in [
            "Host: localhost\r\n".to_owned(),
            "Host: 192.168.1.5:8790\r\nAuthorization: Bearer wrong\r\n".to_owned(),
        ] {
            let (status, text) = ask(addr, path, &headers).await;
            assert_eq!(status, 401, "{path} {headers}: {text}");
            assert!(!text.contains(SECRET_PROMPT));
        }
        let (status, _) = ask(
            addr,
            path,
            &format!("Host: 192.168.1.5:8790\r\nAuthorization: Bearer {token}\r\n"),
        )
        .await;
        assert_eq!(status, 200, "{path} with the token");
        let (status, _) = ask(
            addr,
            &format!("{path}?token={token}"),
            "Host: cacheline.lan\r\n",
        )
        .await;
        assert_eq!(status, 200, "{path} with the token in the query");
    }
    proxy.shutdown().await;
    let (proxy, _up) = proxy_with_a_session(LocalRoutes::Off).await;
    for path in LOCAL {
        let (status, _) = ask(proxy.addr(), path, "Host: localhost\r\n").await;
        assert_eq!(status, 404, "{path} off");
    }
    proxy.shutdown().await;
}

// 7. Forged verdict lines.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_or_user_id_with_newlines_or_escapes_prints_as_one_escaped_line() {
    let up = upstream(ok_json(r#"{"usage":{"input_tokens":3}}"#)).await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    let mut events = proxy.state().subscribe();
    let body = serde_json::json!({
        "model": "claude-sonnet-4-5\ncacheline proxy: s-9 #1 anthropic claude input=1 cached=1 expected=1 status=200: extends line 1\u{1b}[2J",
        "max_tokens": 8,
        "metadata": {"user_id": "user_x_account_y_session_s\u{1b}]0;retitled\u{7}\r"},
        "messages": [{"role": "user", "content": "hi"}]
    });
    raw(
        proxy.addr(),
        &post("/v1/messages", &[], body.to_string().as_bytes()),
    )
    .await;
    let row = tokio::time::timeout(Duration::from_secs(30), events.recv())
        .await
        .unwrap()
        .unwrap();
    let line = verdict_line(&row);
    assert!(!line.chars().any(char::is_control), "{line:?}");
    assert!(
        line.contains("claude-sonnet-4-5\\ncacheline proxy: s-9"),
        "{line}"
    );
    assert!(line.contains("\\x1b]0;retitled\\x07\\r"), "{line}");
    proxy.shutdown().await;
}

// 9. Framing and headers.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_abort_never_reaches_a_client_as_a_clean_end() {
    let heads: [&[u8]; 3] = [
        // Close-delimited: only a reset can tell the client the reply broke off.
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n",
    ];
    for (framing, head) in ["close-delimited", "chunked", "sized"]
        .into_iter()
        .zip(heads)
    {
        let chunked = find(head, b"chunked").is_some();
        let data = b"data: {\"a\":1}\n\n".to_vec();
        let first = if chunked { chunk(&data) } else { data.clone() };
        let h = head.to_vec();
        let up = upstream(Arc::new(move |_, _| {
            vec![
                Step::Send(h.clone()),
                Step::Send(first.clone()),
                Step::Close,
            ]
        }))
        .await;
        let proxy = proxy(ProxyConfig::default(), &up.url()).await;
        for version in ["HTTP/1.0", "HTTP/1.1"] {
            let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
            let req = format!(
                "POST /v1/chat/completions {version}\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                CHAT.len()
            );
            s.write_all(&[req.as_bytes(), CHAT].concat()).await.unwrap();
            let (got, end) = read_to_end(&mut s, Duration::from_secs(20)).await;
            let shown = String::from_utf8_lossy(&got);
            assert!(shown.contains("data: {\"a\":1}"), "{version}: {shown}");
            assert_eq!(
                end,
                End::Reset,
                "{version} client, {framing} reply: an aborted reply must not end cleanly: {shown}"
            );
        }
        proxy.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_with_both_chunked_and_a_length_reaches_the_client_whole_without_the_length() {
    let mut reply = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n".to_vec();
    reply.extend(chunk(b"hello"));
    reply.extend(chunk(b" world"));
    reply.extend(b"0\r\n\r\n");
    let up = upstream(always(reply)).await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    let (got, _) = raw(proxy.addr(), &post("/v1/chat/completions", &[], CHAT)).await;
    let (head, body) = split(&got);
    assert!(header(&head, "content-length").is_none(), "{head}");
    let (chunks, complete) = dechunk(&body);
    assert!(complete, "{head}");
    assert_eq!(chunks.concat(), b"hello world");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trailers_are_forwarded_both_ways() {
    let mut reply = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTrailer: x-reply-sum\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    reply.extend(chunk(b"{}"));
    reply.extend(b"0\r\nx-reply-sum: 42\r\n\r\n");
    let up = upstream(always(reply)).await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    let mut request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTE: trailers\r\nTrailer: x-request-sum\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
    request.extend(chunk(CHAT));
    request.extend(b"0\r\nx-request-sum: 7\r\n\r\n");
    let (got, _) = raw(proxy.addr(), &request).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("\r\n0\r\nx-reply-sum: 42\r\n\r\n"), "{text}");
    let sent = String::from_utf8_lossy(&up.received()[0]).into_owned();
    assert!(sent.contains("\r\n0\r\nx-request-sum: 7\r\n\r\n"), "{sent}");
    let (head, _) = sent.split_once("\r\n\r\n").unwrap();
    assert_eq!(header(head, "te"), Some("trailers"), "{head}");
    assert_eq!(header(head, "trailer"), Some("x-request-sum"), "{head}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_with_a_chunked_body_reaches_the_upstream_with_its_body() {
    let up = upstream(ok_json("{}")).await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    let mut request =
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            .to_vec();
    request.extend(chunk(b"{\"q\":"));
    request.extend(chunk(b"1}"));
    request.extend(b"0\r\n\r\n");
    let (got, _) = raw(proxy.addr(), &request).await;
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    let (head, body) = cacheline_upstream::split_request(&up.received()[0]);
    assert_eq!(body, b"{\"q\":1}", "{head}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_headers_keep_their_values_order_and_come_together_at_the_first() {
    let up = upstream(ok_json("{}")).await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-A: 1\r\nX-B: 2\r\nx-a: 3\r\nX-C: 4\r\nX-A: 5\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        CHAT.len()
    );
    raw(proxy.addr(), &[request.as_bytes(), CHAT].concat()).await;
    let sent = String::from_utf8_lossy(&up.received()[0]).into_owned();
    let (head, _) = sent.split_once("\r\n\r\n").unwrap();
    let lines: Vec<&str> = head.lines().skip(2).collect();
    assert_eq!(
        lines[..5],
        ["X-A: 1", "x-a: 3", "X-A: 5", "X-B: 2", "X-C: 4"],
        "what docs/proxy.md says is kept: {head}"
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_request_on_a_pooled_connection_the_upstream_closed_is_retried_once() {
    // Request 1 is answered and its connection kept alive; the upstream then closes that
    // connection as the next request arrives on it (a reset, no reply): a pooled connection
    // the upstream had just closed.
    let up = upstream(Arc::new(|n, _| match n {
        1 => vec![Step::Close],
        _ => vec![Step::Send(whole("200 OK", &[], b"{}"))],
    }))
    .await;
    let first = proxy(ProxyConfig::default(), &up.url()).await;
    let (got, _) = raw(first.addr(), &get("/v1/models", "x")).await;
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    let (got, _) = raw(first.addr(), &get("/v1/models", "x")).await;
    assert!(
        got.starts_with(b"HTTP/1.1 200 OK\r\n"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(
        up.received().len(),
        3,
        "sent again once, on a new connection"
    );
    first.shutdown().await;

    // A POST is not sent twice: its 502 says why.
    let up = upstream(Arc::new(|n, _| match n {
        1 => vec![Step::Close],
        _ => vec![Step::Send(whole("200 OK", &[], b"{}"))],
    }))
    .await;
    let proxy = proxy(ProxyConfig::default(), &up.url()).await;
    raw(proxy.addr(), &post("/v1/chat/completions", &[], CHAT)).await;
    let (got, _) = raw(proxy.addr(), &post("/v1/chat/completions", &[], CHAT)).await;
    assert!(
        got.starts_with(b"HTTP/1.1 502"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert_eq!(up.received().len(), 2);
    proxy.shutdown().await;
}
