//! A quick figure of the proxy's added latency: the same requests to a local upstream,
//! directly and through the proxy, one at a time on kept-alive connections; p50 and p99
//! of each and of the difference. (The side-by-side benchmark is another command.)
//!
//! `cargo run --release -p cacheline-proxy --example added_latency [N]`

use std::time::{Duration, Instant};

use bytes::Bytes;
use cacheline_proxy::{Proxy, ProxyConfig, Upstreams, bind};
use cacheline_upstream::{Upstream, always, whole};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

const BODY: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}]}"#;
const REPLY: &str = r#"{"id":"c1","object":"chat.completion","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1}}"#;

/// The workspace's scripted upstream, answering every request with [`REPLY`].
async fn upstream() -> std::net::SocketAddr {
    let reply = whole("200 OK", &[], REPLY.as_bytes());
    Upstream::start(always(reply)).await.unwrap().addr()
}

async fn times(addr: std::net::SocketAddr, n: usize) -> Vec<Duration> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut out = Vec::with_capacity(n);
    for i in 0..n + 100 {
        let req = Request::post(format!("http://{addr}/v1/chat/completions"))
            .header("content-type", "application/json")
            .header("x-session-id", format!("s-{}", i % 50))
            .body(Full::new(Bytes::from_static(BODY.as_bytes())))
            .unwrap();
        let start = Instant::now();
        let res = client.request(req).await.unwrap();
        let _ = res.into_body().collect().await.unwrap();
        if i >= 100 {
            out.push(start.elapsed());
        }
    }
    out.sort();
    out
}

fn pct(v: &[Duration], p: f64) -> Duration {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let up = upstream().await;
    let listener = bind("127.0.0.1:0".parse().unwrap(), false).await.unwrap();
    let config =
        ProxyConfig::default().with_upstreams(Upstreams::all(&format!("http://{up}")).unwrap());
    let proxy = Proxy::start(listener, config).await.unwrap();
    let direct = times(up, n).await;
    let through = times(proxy.addr(), n).await;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!("{n} sequential requests, kept-alive connections, local upstream");
    println!(
        "direct:  p50 {:.0} µs, p99 {:.0} µs",
        us(pct(&direct, 0.5)),
        us(pct(&direct, 0.99))
    );
    println!(
        "proxied: p50 {:.0} µs, p99 {:.0} µs",
        us(pct(&through, 0.5)),
        us(pct(&through, 0.99))
    );
    println!(
        "added:   p50 {:.0} µs, p99 {:.0} µs",
        us(pct(&through, 0.5)) - us(pct(&direct, 0.5)),
        us(pct(&through, 0.99)) - us(pct(&direct, 0.99))
    );
    let summary = proxy.shutdown().await;
    println!(
        "analysed {}, dropped {}",
        summary.totals.analysed, summary.totals.analysis_dropped
    );
}
