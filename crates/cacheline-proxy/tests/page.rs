//! The proxy's own routes: `/metrics` (parsed by a real Prometheus text-format parser), the
//! state and event stream, and the live page rendered by headless Chromium.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use cacheline_proxy::{Proxy, ProxyConfig, Upstreams, bind};
use cacheline_upstream::{Upstream, always, whole};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A scripted OpenAI-style upstream: every request gets the same chat completion.
async fn upstream() -> SocketAddr {
    let body = r#"{"id":"c1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":40,"completion_tokens":1,"total_tokens":41,"prompt_tokens_details":{"cached_tokens":0}}}"#;
    let reply = whole(
        "200 OK",
        &[("content-type", "application/json")],
        body.as_bytes(),
    );
    Upstream::start(always(reply)).await.unwrap().addr()
}

async fn start_proxy() -> Proxy {
    let up = upstream().await;
    let listener = bind("127.0.0.1:0".parse().unwrap(), false).await.unwrap();
    let config =
        ProxyConfig::default().with_upstreams(Upstreams::all(&format!("http://{up}")).unwrap());
    Proxy::start(listener, config).await.unwrap()
}

/// One HTTP/1.1 exchange on its own connection: (status, body).
async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nuser-agent: claude-cli/1.0.83 (external, cli)\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text[9..12].parse().unwrap();
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

const SYSTEM: &str = "You are a terse assistant for the cacheline project. Answer in one line.";
const HOSTILE: &str = "<img src=x onerror=\"document.title='pwned'\"><b>bold</b>";

fn chat(system: &str, turns: usize) -> String {
    // Project notes after the instructions: the prompt is over OpenAI's 1,024-token minimum,
    // so a changed system prompt loses what OpenAI would have read.
    let notes = "Project notes: the cache keeps the longest unchanged prefix. ".repeat(120);
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": format!("{system}\n\n{notes}")}),
        serde_json::json!({"role": "user", "content": "List the files in src."}),
    ];
    for i in 1..turns {
        messages.push(serde_json::json!({"role": "assistant", "content": format!("ok {i}")}));
        messages.push(serde_json::json!({"role": "user", "content": if i == 1 { HOSTILE.to_owned() } else { format!("next step {i}") }}));
    }
    serde_json::json!({"model": "gpt-4o-mini", "messages": messages}).to_string()
}

/// Three requests of one session, the third with a changed system prompt (a break).
async fn scripted_session(addr: SocketAddr, proxy: &Proxy) {
    for body in [
        chat(SYSTEM, 1),
        chat(SYSTEM, 2),
        chat(&SYSTEM.replace("terse", "verbose <script>x</script>"), 3),
    ] {
        let (status, _) = http(addr, "POST", "/v1/chat/completions", &body).await;
        assert_eq!(status, 200);
    }
    wait_analysed(proxy, 3).await;
}

async fn wait_analysed(proxy: &Proxy, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while proxy.state().totals().analysed < n {
        assert!(Instant::now() < deadline, "the analysis did not finish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_with_a_prometheus_parser_and_count_by_agent_model_and_cause() {
    let proxy = start_proxy().await;
    let addr = proxy.addr();
    scripted_session(addr, &proxy).await;
    let (status, text) = http(addr, "GET", "/metrics", "").await;
    assert_eq!(status, 200);
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("a Prometheus text parser reads it");
    let value = |name: &str, labels: &[(&str, &str)]| -> f64 {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    let agent = [("agent", "claude-code"), ("model", "gpt-4o-mini")];
    assert_eq!(value("cacheline_proxy_requests_total", &agent), 3.0);
    let breaks: f64 = scrape
        .samples
        .iter()
        .filter(|s| s.metric == "cacheline_proxy_requests_total")
        .filter(|s| {
            !matches!(
                s.labels.get("cause"),
                Some("none") | Some("cold_start") | None
            )
        })
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) => v,
            _ => 0.0,
        })
        .sum();
    assert!(breaks >= 1.0, "one break by a named cause:\n{text}");
    assert!(value("cacheline_proxy_input_tokens_total", &agent) > 0.0);
    assert!(value("cacheline_proxy_reprocessed_tokens_total", &agent) > 0.0);
    assert_eq!(value("cacheline_proxy_forwarded_total", &[]), 3.0);
    assert_eq!(value("cacheline_proxy_analysis_dropped_total", &[]), 0.0);
    assert_eq!(value("cacheline_proxy_sessions_dropped_total", &[]), 0.0);
    // The analysis thread's own CPU time, apart from the forwarding: three exchanges read,
    // tokenized and compared cost some, and far less than the test's seconds.
    let cpu = value("cacheline_proxy_analysis_cpu_seconds_total", &[]);
    assert!(cpu > 0.0 && cpu < 5.0, "analysis CPU {cpu} s:\n{text}");
    let histogram = scrape
        .samples
        .iter()
        .find(|s| s.metric == "cacheline_proxy_added_latency_seconds")
        .expect("the latency histogram");
    match &histogram.value {
        prometheus_parse::Value::Histogram(buckets) => {
            let inf = buckets
                .iter()
                .find(|b| b.less_than == f64::INFINITY)
                .unwrap();
            assert_eq!(inf.count, 3.0);
            assert!(buckets.iter().any(|b| b.less_than == 0.00005));
        }
        other => panic!("not a histogram: {other:?}"),
    }
    for name in [
        "cacheline_proxy_requests_total",
        "cacheline_proxy_cached_tokens_total",
        "cacheline_proxy_expected_cached_tokens_total",
    ] {
        assert!(scrape.docs.contains_key(name), "HELP for {name}");
    }
    // Its own route: never forwarded (the upstream would have answered a chat completion).
    assert!(!text.contains("chat.completion"));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_sends_each_row_as_it_is_analysed_and_the_state_holds_the_session() {
    let proxy = start_proxy().await;
    let addr = proxy.addr();
    let mut events = TcpStream::connect(addr).await.unwrap();
    events
        .write_all(format!("GET /_cacheline/events HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // The head and the opening comment: subscribed before any request.
    while !String::from_utf8_lossy(&got).contains(": cacheline") {
        let n = tokio::time::timeout(Duration::from_secs(10), events.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no event stream: {}", String::from_utf8_lossy(&got)))
            .unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&got).contains("text/event-stream"));
    scripted_session(addr, &proxy).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while String::from_utf8_lossy(&got).matches("data: {").count() < 3 {
        let n = tokio::time::timeout_at(deadline.into(), events.read(&mut buf))
            .await
            .expect("three events in time")
            .unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("\"request\":3"), "{text}");
    let (status, state) = http(addr, "GET", "/_cacheline/state", "").await;
    assert_eq!(status, 200);
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    let rows: usize = state["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["rows"].as_array().unwrap().len())
        .sum();
    assert_eq!(rows, 3);
    assert_eq!(state["totals"]["analysed"], 3);
    // The audit's cache lifetime counters, as of the last analysed request.
    assert_eq!(state["lifetime"]["requests"], 3, "{state}");
    assert_eq!(state["lifetime"]["gaps"].as_array().map(Vec::len), Some(5));
    // An open event stream does not hold the proxy's shutdown.
    tokio::time::timeout(Duration::from_secs(10), proxy.shutdown())
        .await
        .expect("shutdown with an open event stream");
}

/// Headless Chromium, or why not: under `CI=true` a missing browser fails the test.
fn chromium() -> Option<String> {
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return Some(name.to_owned());
        }
    }
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("chromium is missing (CI=true): .ci/run installs Debian's `chromium`");
    }
    eprintln!("SKIPPED: chromium is not installed (apt-get install chromium)");
    None
}

/// A headless Chromium driven over the DevTools protocol (one page target).
struct Browser {
    child: std::process::Child,
    profile: std::path::PathBuf,
    ws: tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>,
    id: u64,
}

impl Browser {
    async fn open(program: &str) -> Browser {
        let profile = std::env::temp_dir().join(format!(
            "cacheline-page-{}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos()
        ));
        let _ = std::fs::remove_dir_all(&profile);
        std::fs::create_dir_all(&profile).unwrap();
        let child = Command::new(program)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--window-size=1100,640",
                "--remote-debugging-port=0",
                &format!("--user-data-dir={}", profile.display()),
                "about:blank",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let file = profile.join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port: u16 = loop {
            if let Ok(text) = std::fs::read_to_string(&file)
                && let Some(Ok(p)) = text.lines().next().map(str::parse)
            {
                break p;
            }
            assert!(Instant::now() < deadline, "chromium did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let devtools: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let list = devtools_list(devtools).await;
        let list: serde_json::Value = serde_json::from_str(&list).unwrap();
        let url = list
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["type"] == "page")
            .and_then(|t| t["webSocketDebuggerUrl"].as_str())
            .unwrap()
            .to_owned();
        let (ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Browser {
            child,
            profile,
            ws,
            id: 0,
        }
    }

    async fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use futures_util::{SinkExt, StreamExt};
        self.id += 1;
        let id = self.id;
        let msg = serde_json::json!({"id": id, "method": method, "params": params}).to_string();
        self.ws.send(msg.into()).await.unwrap();
        loop {
            let m = tokio::time::timeout(Duration::from_secs(30), self.ws.next())
                .await
                .expect("a DevTools reply")
                .unwrap()
                .unwrap();
            let Ok(text) = m.into_text() else { continue };
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            if v["id"] == id {
                assert!(v.get("error").is_none(), "{method}: {v}");
                return v["result"].clone();
            }
        }
    }

    async fn eval(&mut self, expression: &str) -> serde_json::Value {
        let r = self
            .call(
                "Runtime.evaluate",
                serde_json::json!({"expression": expression, "returnByValue": true}),
            )
            .await;
        r["result"]["value"].clone()
    }

    /// Waits until `expression` is true in the page.
    async fn until(&mut self, expression: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.eval(expression).await != serde_json::Value::Bool(true) {
            assert!(
                Instant::now() < deadline,
                "never true in the page: {expression}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// DevTools' target list (its HTTP server keeps the connection open: read by length).
async fn devtools_list(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET /json/list HTTP/1.1\r\nhost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf))
            .await
            .expect("DevTools answers")
            .unwrap();
        assert!(n > 0, "DevTools closed early");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap();
            if body.len() >= len {
                return body[..len].to_owned();
            }
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_renders_sessions_bars_and_the_break_in_headless_chromium() {
    let Some(program) = chromium() else {
        return;
    };
    let proxy = start_proxy().await;
    let addr = proxy.addr();
    let mut browser = Browser::open(&program).await;
    // The page is open before the session starts: every row arrives as an event.
    browser
        .call(
            "Page.navigate",
            serde_json::json!({"url": format!("http://{addr}/_cacheline/")}),
        )
        .await;
    browser
        .until("document.body && document.body.dataset.loaded === 'true' && document.getElementById('status').textContent === 'live'")
        .await;
    scripted_session(addr, &proxy).await;
    browser
        .until("document.querySelectorAll('.req').length === 3")
        .await;
    // A fourth request while the page is open; then a reload renders the same from the state.
    let (status, _) = http(
        addr,
        "POST",
        "/v1/chat/completions",
        &chat("Another agent's prompt.", 1),
    )
    .await;
    assert_eq!(status, 200);
    wait_analysed(&proxy, 4).await;
    browser
        .until("document.querySelectorAll('.req').length === 4")
        .await;
    if let Ok(path) = std::env::var("CACHELINE_PAGE_SCREENSHOT") {
        use base64::Engine;
        let shot = browser
            .call(
                "Page.captureScreenshot",
                serde_json::json!({"format": "png"}),
            )
            .await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::write(path, png).unwrap();
    }
    let live = browser.eval("document.documentElement.outerHTML").await;
    browser.call("Page.reload", serde_json::json!({})).await;
    browser
        .until("document.body && document.body.dataset.loaded === 'true' && document.querySelectorAll('.req').length === 4")
        .await;
    let reloaded = browser.eval("document.documentElement.outerHTML").await;
    let title = browser.eval("document.title").await;
    assert_eq!(title, "cacheline proxy", "no script from traffic ran");
    for dom in [live.as_str().unwrap(), reloaded.as_str().unwrap()] {
        assert_page(dom);
    }
    drop(browser);
    proxy.shutdown().await;
}

fn assert_page(dom: &str) {
    // One session (the engine keys these four requests alike), four rows.
    assert_eq!(dom.matches("class=\"session\"").count(), 1, "{dom}");
    for n in 1..=4 {
        assert!(
            dom.contains(&format!("data-request=\"{n}\"")),
            "row {n}:\n{dom}"
        );
    }
    let row = |n: u32| {
        let start = dom.find(&format!("data-request=\"{n}\"")).unwrap();
        let rest = &dom[start..];
        let end = rest[1..]
            .find("data-request=\"")
            .map_or(rest.len(), |e| e + 1);
        rest[..end].to_owned()
    };
    // The break: its row marked with its cause, its verdict and its excerpt as text.
    let third = row(3);
    assert!(
        dom.contains("class=\"req break\" data-request=\"3\""),
        "{third}"
    );
    assert!(third.contains("data-cause=\"system_changed\""), "{third}");
    assert!(
        third.contains("the system field was rewritten"),
        "the verdict:\n{third}"
    );
    // Its bar: nothing shared; re-processed, what OpenAI would have read of an append-only
    // request (1,280 tokens, in its 128-token steps); the rest new; widths add up.
    assert!(
        third.contains("data-cached=\"0\" data-reprocessed=\"1280\" data-new=\"148\""),
        "{third}"
    );
    assert!(
        third.contains("width: 89.64%") && third.contains("width: 10.36%"),
        "{third}"
    );
    assert!(
        dom.contains("class=\"req\" data-request=\"1\""),
        "a cold start is not a break"
    );
    assert!(!third.contains("data-cause=\"\""), "{third}");
    assert!(
        third.contains("class=\"earlier\"") && third.contains("class=\"later\""),
        "{third}"
    );
    assert!(
        third.contains("verbose &lt;script&gt;x&lt;/script&gt;"),
        "the excerpt, escaped:\n{third}"
    );
    // Bars: three segments whose data match the row.
    let first = row(1);
    for seg in ["seg cached", "seg reprocessed", "seg new"] {
        assert!(first.contains(&format!("class=\"{seg}\"")), "{first}");
    }
    assert!(
        first.contains("width: 100%"),
        "a cold start is all new tokens:\n{first}"
    );
    assert!(
        third.contains("data-reprocessed=\"") && !third.contains("data-reprocessed=\"0\""),
        "{third}"
    );
    // The injection attempt is shown as text, never parsed as HTML.
    assert!(!dom.contains("<script>x</script>"), "{dom}");
    assert!(!dom.contains("<img src=\"x\""), "{dom}");
}
