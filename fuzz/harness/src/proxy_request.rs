//! The `proxy_request` target: arbitrary bytes sent by a client to `cacheline proxy`, through
//! its whole request path (hyper's parser, the routes, the access check of its own routes,
//! the header policy, `--diagnose`'s rewrite, the copy for the analysis, forwarding to a
//! scripted upstream and the reply back), on loopback.
//!
//! The first byte picks how: bit 0, which proxy (its own routes on a loopback `Host`, with
//! `--diagnose`; or behind a token, with a small analysis budget); bit 1, whether the client
//! half-closes after sending (else it waits for the proxy to end the connection). The rest is
//! what the client sends.
//!
//! Invariants besides "no panic" (a panic on any of the proxy's threads counts): the proxy
//! ends every connection within its header-read and idle timeouts (the client never waits
//! past a bound), but for its own event stream, open by design; what it holds for the
//! analysis stays within its budget; its own routes answer a request that lacks the token
//! with no data of theirs.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cacheline_proxy::{Limits, LocalRoutes, Proxy, ProxyConfig, Upstreams, bind};
use cacheline_upstream::{Upstream, always, whole};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The token of the second proxy's routes.
const TOKEN: &str = "00112233445566778899aabbccddeeff";

/// The second proxy's analysis budget.
const SMALL_BUDGET: u64 = 64 << 10;

/// The most of a reply the client reads (the rest is read and dropped).
const REPLY_CAP: usize = 1 << 20;

/// How long a connection may stay open: both timeouts below, and the upstream's answer,
/// with room to spare on a loaded machine.
const CONNECTION_BOUND: Duration = Duration::from_secs(10);

struct Fixture {
    runtime: tokio::runtime::Runtime,
    proxies: [(SocketAddr, Arc<cacheline_proxy::ProxyState>); 2],
    _upstream: Upstream,
    _keep: Vec<Proxy>,
}

static PANICKED: AtomicBool = AtomicBool::new(false);

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        // A panic on any thread (a connection's task included, which tokio would catch) is
        // noted, then handled as before (libFuzzer's hook aborts).
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICKED.store(true, Ordering::SeqCst);
            previous(info);
        }));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime");
        let (upstream, keep) = runtime.block_on(async {
            let reply = whole(
                "200 OK",
                &[("content-type", "application/json")],
                br#"{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","usage":{"input_tokens":3,"cache_read_input_tokens":0,"output_tokens":1}}"#,
            );
            let upstream = Upstream::start(always(reply)).await.expect("an upstream");
            let short = Limits::default()
                .with_header_read_timeout(Duration::from_millis(100))
                .with_idle_timeout(Duration::from_millis(100))
                .with_upstream_idle_timeout(Duration::from_millis(500));
            let base = || {
                ProxyConfig::default()
                    .with_upstreams(Upstreams::all(&upstream.url()).expect("its URL"))
                    .with_max_sessions(64)
                    .with_upstream_timeout(Duration::from_secs(5))
            };
            let configs = [
                base().with_limits(short.clone()).with_diagnose(true),
                base()
                    .with_limits(short.with_analysis_budget(SMALL_BUDGET))
                    .with_local_routes(LocalRoutes::Token(TOKEN.to_owned())),
            ];
            let mut keep = Vec::new();
            for config in configs {
                let listener = bind("127.0.0.1:0".parse().expect("an address"), false)
                    .await
                    .expect("a listener");
                keep.push(Proxy::start(listener, config).await.expect("a proxy"));
            }
            (upstream, keep)
        });
        let proxies = [
            (keep[0].addr(), keep[0].state()),
            (keep[1].addr(), keep[1].state()),
        ];
        Fixture {
            runtime,
            proxies,
            _upstream: upstream,
            _keep: keep,
        }
    })
}

/// Starts the proxies (the analysis' tokenizer takes a second or more to load): for a
/// fuzzer's `init`, so that the first input is not charged for it.
pub fn proxy_request_init() {
    fixture();
}

/// Sends `data[1..]` to a proxy as a client would, reads the reply, and checks the
/// invariants.
pub fn proxy_request(data: &[u8]) {
    exchange(data);
}

/// [`proxy_request`], returning what the client read.
fn exchange(data: &[u8]) -> Vec<u8> {
    let Some((&mode, request)) = data.split_first() else {
        return Vec::new();
    };
    let f = fixture();
    let (addr, state) = &f.proxies[usize::from(mode & 1)];
    let half_close = mode & 2 != 0;
    let (reply, ended) = f.runtime.block_on(async {
        let Ok(mut s) = TcpStream::connect(addr).await else {
            return (Vec::new(), true);
        };
        // The proxy may answer (and close) before reading it all: a failed write is fine.
        let _ = s.write_all(request).await;
        if half_close {
            let _ = s.shutdown().await;
        }
        let mut reply = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        let ended = tokio::time::timeout(CONNECTION_BOUND, async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let room = REPLY_CAP.saturating_sub(reply.len());
                        reply.extend_from_slice(&buf[..n.min(room)]);
                        // The proxy's event stream stays open by design (the scripted
                        // upstream never streams): its head is enough.
                        if contains(&reply, b"text/event-stream") && contains(&reply, b"\r\n\r\n") {
                            return;
                        }
                    }
                }
            }
        })
        .await
        .is_ok();
        (reply, ended)
    });
    assert!(
        !PANICKED.load(Ordering::SeqCst),
        "the proxy panicked on this input"
    );
    assert!(
        ended,
        "the proxy held a connection past its timeouts ({} bytes of reply)",
        reply.len()
    );
    assert!(
        state.analysis_held_bytes() <= SMALL_BUDGET || mode & 1 == 0,
        "held for the analysis past the budget: {}",
        state.analysis_held_bytes()
    );
    if mode & 1 == 1 && !contains(request, TOKEN.as_bytes()) {
        // Without the token, the routes give nothing of theirs (what the request itself
        // holds may come back: a 404 names the path it was asked).
        for leak in [
            &b"cacheline_proxy_"[..],
            b"\"sessions\"",
            b"<html",
            b"data: {",
        ] {
            assert!(
                contains(request, leak) || !contains(&reply, leak),
                "a route answered without the token: {}",
                String::from_utf8_lossy(&reply[..reply.len().min(400)])
            );
        }
    }
    reply
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../corpus/proxy_request")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn the_seeds_reach_the_proxy_and_its_upstream() {
        let status = |name: &str| {
            let reply = exchange(&seed(name));
            String::from_utf8_lossy(&reply[..reply.len().min(12)]).into_owned()
        };
        assert_eq!(status("anthropic_session"), "HTTP/1.1 200");
        assert_eq!(status("openai_chunked_trailers"), "HTTP/1.1 200");
        assert_eq!(status("state_loopback"), "HTTP/1.1 200");
        assert_eq!(status("state_rebinding"), "HTTP/1.1 403");
        assert_eq!(status("metrics_token_header"), "HTTP/1.1 200");
        assert_eq!(status("events_no_token"), "HTTP/1.1 401");
        assert_eq!(status("events_loopback"), "HTTP/1.1 200");
        assert_eq!(status("smuggle_double_cl"), "HTTP/1.1 400");
        assert_eq!(status("http10"), "HTTP/1.0 200");
    }
}
