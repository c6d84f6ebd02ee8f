//! The proxy's own routes, answered on its listener and never forwarded: `/metrics`
//! (Prometheus text), the live page `/_cacheline/`, its initial state `/_cacheline/state`
//! (JSON) and its server-sent events `/_cacheline/events` (one `RequestRow` as JSON per
//! analysed request). Answered only as [`crate::access`] allows.
//!
//! Off the forwarding path: the state (up to 200 sessions × 64 rows, megabytes of JSON) and
//! the metrics are built on tokio's blocking pool, never on the workers that forward, and
//! the state is built once per change however many readers poll it.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::{Either, Full};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;
use tokio::sync::{broadcast, mpsc, watch};

use crate::access;
use crate::counts::Totals;
use crate::forward::Shared;
use crate::state::{ProxyState, SessionView, StateCache};
use prompt_measure::report::RequestRow;

/// The page: one static file, no CDN, no build step.
/// The page as written, its shared stylesheet left out (a marker where it goes).
const PAGE_TEMPLATE: &str = include_str!("page.html");

/// The page served: the template with [`prompt_measure::report::REQUESTS_STYLE`] in place,
/// built once.
static PAGE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    PAGE_TEMPLATE.replacen(
        "/* cacheline:requests-style */\n",
        prompt_measure::report::REQUESTS_STYLE,
        1,
    )
});

/// Sessions sent in `/_cacheline/state` (the most recently active).
pub(crate) const STATE_SESSIONS: usize = 200;

/// The body of a local answer: a whole one, or the event stream.
pub(crate) type LocalBody = Either<Full<Bytes>, EventStream>;

/// Whether `path` is one of the proxy's own routes.
pub(crate) fn is_local(path: &str) -> bool {
    path == "/metrics" || path == "/_cacheline" || path.starts_with("/_cacheline/")
}

fn whole(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<LocalBody> {
    let mut r = Response::new(Either::Left(Full::new(body.into())));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[derive(Serialize)]
struct StateJson {
    sessions: Vec<SessionView>,
    totals: Totals,
    /// The audit's cache lifetime counters.
    lifetime: prompt_measure::lifetime::LifetimeCounts,
}

/// A row as the page gets it: never the kept body.
fn for_page(mut row: RequestRow) -> RequestRow {
    row.body = None;
    row
}

/// The state's JSON: the cached one while the state has not changed; else built again on the
/// blocking pool (readers meanwhile wait for it without holding a worker).
async fn state_json(state: &Arc<ProxyState>, cache: &StateCache) -> Result<Bytes, String> {
    let mut built = cache.built.lock().await;
    let version = state.version();
    if let Some((v, json)) = &*built
        && *v == version
    {
        return Ok(json.clone());
    }
    let state = state.clone();
    let json = tokio::task::spawn_blocking(move || build_state(&state))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    *built = Some((version, json.clone()));
    Ok(json)
}

/// The state's JSON: the rows are taken under the state's lock without copying, and copied
/// (without bodies) and written once it is released.
fn build_state(state: &ProxyState) -> Result<Bytes, serde_json::Error> {
    let (sessions, totals) = state.page_snapshot(STATE_SESSIONS);
    let sessions = sessions
        .into_iter()
        .map(|(mut view, rows)| {
            view.rows = rows
                .iter()
                .map(|r| for_page(RequestRow::clone(r)))
                .collect();
            view
        })
        .collect();
    serde_json::to_vec(&StateJson {
        sessions,
        totals,
        lifetime: state.lifetime(),
    })
    .map(Bytes::from)
}

/// Answers one of the proxy's own routes, as [`crate::access`] allows.
pub(crate) async fn serve<B>(
    shared: Arc<Shared>,
    stopped: watch::Receiver<bool>,
    req: Request<B>,
) -> Response<LocalBody> {
    if let Err(why) = access::check(&shared.routes, shared.listen, &req) {
        let (status, text) = why.answer();
        let mut r = whole(status, "text/plain; charset=utf-8", text);
        if why == access::Refused::Token {
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
        }
        return r;
    }
    let state = &shared.state;
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = whole(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "cacheline proxy: its own routes answer GET only\n",
        );
        r.headers_mut()
            .insert(hyper::header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match req.uri().path() {
        "/metrics" => {
            let state = state.clone();
            let text = tokio::task::spawn_blocking(move || {
                state
                    .metrics
                    .render(&state.totals(), state.analysis_held_bytes())
            })
            .await;
            match text {
                Ok(text) => whole(
                    StatusCode::OK,
                    "text/plain; version=0.0.4; charset=utf-8",
                    text,
                ),
                Err(e) => whole(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    format!("cacheline proxy: the metrics could not be written: {e}\n"),
                ),
            }
        }
        "/_cacheline" => {
            let mut r = whole(
                StatusCode::PERMANENT_REDIRECT,
                "text/plain; charset=utf-8",
                "",
            );
            r.headers_mut().insert(
                hyper::header::LOCATION,
                HeaderValue::from_static("/_cacheline/"),
            );
            r
        }
        "/_cacheline/" => {
            let mut r = whole(StatusCode::OK, "text/html; charset=utf-8", PAGE.as_str());
            // Text from traffic is shown as text; this forbids any other script or load.
            r.headers_mut().insert(
                hyper::header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:",
                ),
            );
            r
        }
        "/_cacheline/state" => match state_json(state, &shared.state_json).await {
            Ok(j) => whole(StatusCode::OK, "application/json", j),
            Err(e) => whole(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                format!("cacheline proxy: the state could not be written as JSON: {e}\n"),
            ),
        },
        "/_cacheline/events" => {
            let mut r = Response::new(Either::Right(EventStream::start(
                state.subscribe(),
                stopped,
            )));
            let h = r.headers_mut();
            h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
            h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
        _ => whole(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "cacheline proxy: its own routes are /metrics, /_cacheline/, /_cacheline/state and /_cacheline/events\n",
        ),
    }
}

/// Server-sent events: each analysed request's row as `data: {json}`; `event: lagged` when
/// this stream fell behind and missed rows; a comment every 15 s to notice a gone client.
/// Ends when the client goes or the proxy stops.
pub(crate) struct EventStream {
    rx: mpsc::Receiver<Bytes>,
}

impl EventStream {
    fn start(
        mut events: broadcast::Receiver<RequestRow>,
        mut stopped: watch::Receiver<bool>,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Bytes>(64);
        tokio::spawn(async move {
            if tx
                .send(Bytes::from_static(b": cacheline\n\n"))
                .await
                .is_err()
            {
                return;
            }
            loop {
                let text = tokio::select! {
                    r = events.recv() => match r {
                        Ok(row) => match serde_json::to_string(&for_page(row)) {
                            Ok(json) => format!("data: {json}\n\n"),
                            Err(_) => continue,
                        },
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            format!("event: lagged\ndata: {n}\n\n")
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    _ = tokio::time::sleep(Duration::from_secs(15)) => ": keep-alive\n\n".to_owned(),
                    _ = stopped.changed() => return,
                    _ = tx.closed() => return,
                };
                if tx.send(Bytes::from(text)).await.is_err() {
                    return;
                }
            }
        });
        EventStream { rx }
    }
}

impl Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use prompt_measure::report::Outcome;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::{Proxy, ProxyConfig, Upstreams};

    fn row(session: usize, request: u64) -> RequestRow {
        RequestRow {
            request,
            line: Some(request),
            session: format!("session-{session}"),
            api: prompt_core::profile::Provider::Anthropic,
            agent: Some("claude-cli/2.1.0 (external, cli)".to_owned()),
            model: Some("claude-sonnet-4-5".to_owned()),
            status: 200,
            outcome: Outcome::Complete,
            input: 40_000,
            cached: Some(39_000),
            reprocessed: 0,
            new: 1_000,
            expected_cached: 39_000,
            cause: None,
            place: Some("system[0]".to_owned()),
            excerpt: Some(("x".repeat(200), "y".repeat(200))),
            verdict: "extends line 1: 39,000 tokens expected from cache".repeat(8),
            added_latency: Duration::from_micros(80),
            body: None,
        }
    }

    async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> Vec<u8> {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(request).await.unwrap();
        let mut out = Vec::new();
        s.read_to_end(&mut out).await.unwrap();
        out
    }

    /// Readers of the state wait on the state's lock (held here, as a long snapshot would
    /// hold it) on the blocking pool, never on the workers that forward: every forwarded
    /// request is answered while 4 readers are still waiting, on a runtime of 2 workers.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn forwarding_is_never_blocked_by_readers_of_the_state() {
        let reply = cacheline_upstream::whole("200 OK", &[], b"{}");
        let up = cacheline_upstream::Upstream::start(cacheline_upstream::always(reply))
            .await
            .unwrap();
        let listener = crate::bind("127.0.0.1:0".parse().unwrap(), false)
            .await
            .unwrap();
        let config = ProxyConfig::default().with_upstreams(Upstreams::all(&up.url()).unwrap());
        let proxy = Proxy::start(listener, config).await.unwrap();
        let addr = proxy.addr();
        let state = proxy.state();
        // 200 sessions × 64 rows: megabytes of JSON.
        let mut n = 0;
        for s in 0..200 {
            for _ in 0..ProxyState::ROWS_PER_SESSION {
                n += 1;
                state.record(row(s, n));
            }
        }
        let (held_tx, held) = std::sync::mpsc::channel();
        let (release, release_rx) = std::sync::mpsc::channel();
        let holder = {
            let state = state.clone();
            std::thread::spawn(move || state.hold_lock(held_tx, release_rx))
        };
        held.recv().unwrap();
        // A runtime whose workers all wait on the lock drives no timer either: a thread of
        // its own lets go after a while, and the assertions below then fail, not hang.
        let watchdog = release.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(60));
            let _ = watchdog.send(());
        });
        let readers: Vec<_> = (0..4)
            .map(|_| {
                tokio::spawn(exchange(
                    addr,
                    b"GET /_cacheline/state HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
                ))
            })
            .collect();
        // The readers reach the lock (a stalled runtime would stall here too).
        tokio::time::sleep(Duration::from_millis(300)).await;
        let body = br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#;
        let post = [
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            )
            .into_bytes(),
            body.to_vec(),
        ]
        .concat();
        for i in 0..20 {
            let got = tokio::time::timeout(Duration::from_secs(30), exchange(addr, &post))
                .await
                .unwrap_or_else(|_| {
                    panic!("request {i} was not forwarded while readers held the state")
                });
            assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
        }
        assert!(
            readers.iter().all(|r| !r.is_finished()),
            "the readers were still waiting for the state"
        );
        let _ = release.send(());
        holder.join().unwrap();
        for r in readers {
            let got = tokio::time::timeout(Duration::from_secs(60), r)
                .await
                .unwrap()
                .unwrap();
            let at = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
            let json: serde_json::Value = serde_json::from_slice(&got[at + 4..]).unwrap();
            assert_eq!(json["sessions"].as_array().unwrap().len(), STATE_SESSIONS);
        }
        proxy.shutdown().await;
    }
}
