//! The proxy's own routes, answered on its listener and never forwarded: `/metrics`
//! (Prometheus text), the live page `/_cacheline/`, its initial state `/_cacheline/state`
//! (JSON) and its server-sent events `/_cacheline/events` (one `RequestRow` as JSON per
//! analysed request).

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

use crate::counts::Totals;
use crate::state::{ProxyState, SessionView};
use prompt_measure::report::RequestRow;

/// The page: one static file, no CDN, no build step.
const PAGE: &str = include_str!("page.html");

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

/// Answers one of the proxy's own routes.
pub(crate) fn serve<B>(
    state: &Arc<ProxyState>,
    stopped: &watch::Receiver<bool>,
    req: &Request<B>,
) -> Response<LocalBody> {
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
        "/metrics" => whole(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            state.metrics.render(&state.totals()),
        ),
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
            let mut r = whole(StatusCode::OK, "text/html; charset=utf-8", PAGE);
            // Text from traffic is shown as text; this forbids any other script or load.
            r.headers_mut().insert(
                hyper::header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(
                    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:",
                ),
            );
            r
        }
        "/_cacheline/state" => {
            let mut sessions = state.snapshot();
            let skip = sessions.len().saturating_sub(STATE_SESSIONS);
            sessions.drain(..skip);
            for s in &mut sessions {
                for row in &mut s.rows {
                    row.body = None;
                }
            }
            let json = serde_json::to_vec(&StateJson {
                sessions,
                totals: state.totals(),
                lifetime: state.lifetime(),
            });
            match json {
                Ok(j) => whole(StatusCode::OK, "application/json", j),
                Err(e) => whole(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    format!("cacheline proxy: the state could not be written as JSON: {e}\n"),
                ),
            }
        }
        "/_cacheline/events" => {
            let mut r = Response::new(Either::Right(EventStream::start(
                state.subscribe(),
                stopped.clone(),
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
