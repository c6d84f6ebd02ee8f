//! The workspace's scripted upstream (a real socket that records exactly the bytes it
//! received and answers with scripted bytes), a proxy in front of it, and a raw client: no
//! mock of the proxy between them.
#![allow(dead_code)]

use std::time::Duration;

use cacheline_proxy::{Proxy, ProxyConfig, ProxyState, Upstreams, bind};
// Each test binary uses some of these.
#[allow(unused_imports)]
pub use cacheline_upstream::{Script, Step, Upstream, always, chunk, dechunk, find, header, whole};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The scripted upstream, started on the test's runtime.
pub async fn upstream(script: Script) -> cacheline_upstream::Upstream {
    cacheline_upstream::Upstream::start(script)
        .await
        .unwrap_or_else(|e| panic!("the scripted upstream does not start: {e}"))
}

pub async fn proxy(config: ProxyConfig, upstream: &str) -> Proxy {
    let listener = bind("127.0.0.1:0".parse().unwrap(), false).await.unwrap();
    Proxy::start(
        listener,
        config.with_upstreams(Upstreams::all(upstream).unwrap()),
    )
    .await
    .unwrap()
}

/// Sends raw bytes, reads until the connection closes (or `limit`); returns what came.
pub async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), async {
        let mut tmp = [0u8; 65536];
        loop {
            match s.read(&mut tmp).await {
                Ok(0) => return true,
                Ok(n) => out.extend_from_slice(&tmp[..n]),
                Err(_) => return false,
            }
        }
    })
    .await;
    // The proxy's own connection header toward this client (hop-by-hop: the client asked
    // to close) is the one line not from the upstream.
    if let Some(end) = find(&out, b"\r\n\r\n")
        && let Some(at) = find(&out[..end + 2], b"connection: close\r\n")
    {
        out.drain(at..at + 19);
    }
    (out, read.unwrap_or(false))
}

/// Splits a raw reply into its head and body.
pub fn split(reply: &[u8]) -> (String, Vec<u8>) {
    let end = find(reply, b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no reply head in {:?}", String::from_utf8_lossy(reply)));
    (
        String::from_utf8_lossy(&reply[..end]).into_owned(),
        reply[end + 4..].to_vec(),
    )
}

pub fn post(path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!("POST {path} HTTP/1.1\r\nHost: proxy.local\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    r
}

/// Waits until `n` requests have a row (analysed or not).
pub async fn rows(state: &ProxyState, n: u64) {
    for _ in 0..1200 {
        let t = state.totals();
        if t.analysed + t.not_analysed + t.analysis_dropped >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{n} rows never came: {:?}", state.totals());
}

/// A Chat Completions body of `gpt-4o` with one user message of `content` (plain text: it
/// is not escaped).
pub fn chat_body(content: &str) -> String {
    format!(r#"{{"model":"gpt-4o","messages":[{{"role":"user","content":"{content}"}}]}}"#)
}

/// `n` tasks each posting `body` to `/v1/chat/completions` on `addr` over a connection of its
/// own; each resolves to whether its reply was `200 OK`.
pub fn post_chat_concurrently(
    addr: std::net::SocketAddr,
    n: usize,
    body: &str,
) -> Vec<tokio::task::JoinHandle<bool>> {
    (0..n)
        .map(|_| {
            let body = body.to_owned();
            tokio::spawn(async move {
                let (got, _) = raw(addr, &post("/v1/chat/completions", &[], body.as_bytes())).await;
                got.starts_with(b"HTTP/1.1 200 OK\r\n")
            })
        })
        .collect()
}

/// A small Chat Completions body.
pub const CHAT: &[u8] = br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;

/// An upstream answering every request `200 OK` with this JSON body.
pub fn ok_json(body: &str) -> Script {
    always(whole(
        "200 OK",
        &[("Content-Type", "application/json")],
        body.as_bytes(),
    ))
}

/// `cacheline audit`'s verdict text of every line of `log`, with its line number.
pub fn audit(log: &std::path::Path) -> Vec<(u64, String)> {
    let tokenizer = prompt_measure::O200kBase::shared().unwrap();
    let mut auditor =
        prompt_measure::Auditor::new(tokenizer, prompt_measure::AuditConfig::default());
    let file = std::io::BufReader::new(std::fs::File::open(log).unwrap());
    let mut audited = Vec::new();
    prompt_measure::audit::audit_reader(file, log, &mut auditor, |e| {
        if let prompt_measure::audit::Event::Request(r) = e {
            audited.push((r.line, prompt_measure::audit::verdict_text(r)));
        }
        Ok(())
    })
    .unwrap();
    audited
}

/// A fresh directory `cacheline-NAME-PID` under the temporary directory.
pub fn fresh_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cacheline-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
