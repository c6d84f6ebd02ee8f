//! A real upstream on a TCP socket that records exactly the bytes it received and answers
//! with scripted bytes, and a raw client: no mock of the proxy between them.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use cacheline_proxy::{Proxy, ProxyConfig, ProxyState, Upstreams, bind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// One step of a scripted reply.
#[derive(Clone)]
pub enum Step {
    /// Write these bytes (and flush).
    Send(Vec<u8>),
    /// Wait until notified.
    Wait(Arc<Notify>),
    /// Close the connection at once.
    Close,
    /// Never answer (until the connection is dropped).
    Hang,
}

pub type Script = Arc<dyn Fn(usize, &[u8]) -> Vec<Step> + Send + Sync>;

pub struct Upstream {
    pub addr: std::net::SocketAddr,
    pub received: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Set when a write to a client failed or the client closed while a reply was sent.
    pub client_gone: Arc<Notify>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

/// Reads one raw request (head and body, chunked or sized) from `buf` + the stream.
async fn read_request(s: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(end) = find(buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let body_start = end + 4;
            let total = if let Some(n) = header(&head, "content-length") {
                body_start + n.parse::<usize>().ok()?
            } else if header(&head, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
                loop {
                    if let Some(n) = chunked_end(&buf[body_start..]) {
                        break body_start + n;
                    }
                    let mut tmp = [0u8; 65536];
                    let n = s.read(&mut tmp).await.ok()?;
                    if n == 0 {
                        return None;
                    }
                    buf.extend_from_slice(&tmp[..n]);
                }
            } else {
                body_start
            };
            while buf.len() < total {
                let mut tmp = [0u8; 65536];
                let n = s.read(&mut tmp).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&tmp[..n]);
            }
            let req = buf[..total].to_vec();
            buf.drain(..total);
            return Some(req);
        }
        let mut tmp = [0u8; 65536];
        let n = s.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

/// The length of a complete chunked body at the start of `b`, if complete.
fn chunked_end(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    loop {
        let line = find(&b[i..], b"\r\n")?;
        let size = usize::from_str_radix(
            std::str::from_utf8(&b[i..i + line])
                .ok()?
                .split(';')
                .next()?
                .trim(),
            16,
        )
        .ok()?;
        i += line + 2;
        if size == 0 {
            // No trailers in these tests.
            return (b.len() >= i + 2).then_some(i + 2);
        }
        if b.len() < i + size + 2 {
            return None;
        }
        i += size + 2;
    }
}

/// The chunks of a chunked body and whether it ended with its last chunk.
pub fn dechunk(b: &[u8]) -> (Vec<Vec<u8>>, bool) {
    let mut chunks = Vec::new();
    let mut i = 0;
    loop {
        let Some(line) = find(&b[i..], b"\r\n") else {
            return (chunks, false);
        };
        let Ok(size) = usize::from_str_radix(
            std::str::from_utf8(&b[i..i + line]).unwrap_or("x").trim(),
            16,
        ) else {
            return (chunks, false);
        };
        i += line + 2;
        if size == 0 {
            return (chunks, true);
        }
        if b.len() < i + size {
            chunks.push(b[i..].to_vec());
            return (chunks, false);
        }
        chunks.push(b[i..i + size].to_vec());
        i += size + 2;
    }
}

impl Upstream {
    pub async fn start(script: Script) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let client_gone = Arc::new(Notify::new());
        let (rec, gone) = (received.clone(), client_gone.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    continue;
                };
                let (rec, gone, script) = (rec.clone(), gone.clone(), script.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    while let Some(req) = read_request(&mut s, &mut buf).await {
                        let n = {
                            let mut r = rec.lock().unwrap();
                            r.push(req.clone());
                            r.len() - 1
                        };
                        for step in script(n, &req) {
                            match step {
                                Step::Send(b) => {
                                    if s.write_all(&b).await.is_err() || s.flush().await.is_err() {
                                        gone.notify_one();
                                        return;
                                    }
                                }
                                Step::Wait(n) => {
                                    // Watch the client while waiting: a closed
                                    // connection ends the reply.
                                    let mut probe = [0u8; 1];
                                    tokio::select! {
                                        _ = n.notified() => {}
                                        r = s.read(&mut probe) => {
                                            if matches!(r, Ok(0) | Err(_)) {
                                                gone.notify_one();
                                                return;
                                            }
                                        }
                                    }
                                }
                                Step::Close => {
                                    #[allow(deprecated)]
                                    let _ = s.set_linger(Some(Duration::ZERO));
                                    return;
                                }
                                Step::Hang => {
                                    let mut probe = [0u8; 1];
                                    let _ = s.read(&mut probe).await;
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        Upstream {
            addr,
            received,
            client_gone,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn received(&self) -> Vec<Vec<u8>> {
        self.received.lock().unwrap().clone()
    }
}

/// A whole reply with a Content-Length.
pub fn whole(status: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
    let mut r = format!("HTTP/1.1 {status}\r\n");
    for (k, v) in headers {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    r.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut r = r.into_bytes();
    r.extend_from_slice(body);
    r
}

pub fn chunk(data: &[u8]) -> Vec<u8> {
    let mut c = format!("{:x}\r\n", data.len()).into_bytes();
    c.extend_from_slice(data);
    c.extend_from_slice(b"\r\n");
    c
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
