//! The hot path: a request forwarded as it came, its reply returned as it arrives, and a
//! copy of both (the same frames, shared, bounded) handed to the analysis queue with
//! `try_send`: never waiting on it.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::analysis::{BodyCopy, Job, Message};
use crate::diagnose::{self, Diagnose, DiagnoseJob};
use crate::route::{Upstreams, route};
use crate::state::ProxyState;
use prompt_core::input::head;
use prompt_measure::report::Outcome;

/// The body the proxy answers with: the upstream's, teed, or its own short text.
pub(crate) type ProxyBody = Either<ResponseTee, Full<Bytes>>;

pub(crate) type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, RequestTee>;

/// What every connection shares.
pub(crate) struct Shared {
    pub(crate) client: HttpsClient,
    pub(crate) upstreams: Upstreams,
    pub(crate) queue: SyncSender<Message>,
    pub(crate) state: Arc<ProxyState>,
    pub(crate) max_copy_bytes: usize,
    pub(crate) upstream_timeout: Duration,
    /// `--diagnose`: its state, when on.
    pub(crate) diagnose: Option<Arc<Diagnose>>,
}

/// Headers that belong to one connection, never forwarded (as Go's
/// `httputil.ReverseProxy`), besides those `Connection` names and any `Proxy-*`.
const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The headers without the hop-by-hop ones, in their order (a `HeaderMap`'s `remove`
/// swaps the last entry into the hole: the map is rebuilt instead); `host`, when given,
/// replaces the `Host` header's value where it stands (or is added last).
fn without_hop_by_hop(headers: HeaderMap, host: Option<HeaderValue>) -> HeaderMap {
    let named: Vec<HeaderName> = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    let dropped = |n: &HeaderName| {
        HOP_BY_HOP.contains(&n.as_str()) || n.as_str().starts_with("proxy-") || named.contains(n)
    };
    let mut out = HeaderMap::with_capacity(headers.len());
    let mut host = host;
    let mut current: Option<HeaderName> = None;
    for (name, value) in headers {
        if let Some(n) = name {
            current = Some(n);
        }
        let Some(name) = &current else { continue };
        if dropped(name) {
            continue;
        }
        if name == hyper::header::HOST {
            if let Some(h) = host.take() {
                out.append(name.clone(), h);
            }
            continue;
        }
        out.append(name.clone(), value);
    }
    if let Some(h) = host {
        out.append(hyper::header::HOST, h);
    }
    out
}

/// The request body forwarded upstream, frame by frame, with its copy kept aside. Frames
/// already read (by `--diagnose`, and copied then) go first, then the rest of the body.
pub(crate) struct RequestTee {
    read: VecDeque<Frame<Bytes>>,
    inner: Option<Incoming>,
    copy: Arc<Mutex<BodyCopy>>,
    cap: usize,
}

impl Body for RequestTee {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(frame) = this.read.pop_front() {
            return Poll::Ready(Some(Ok(frame)));
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = Pin::new(inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
            && let Ok(mut copy) = this.copy.lock()
        {
            copy.push(data, this.cap);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.read.is_empty() && self.inner.as_ref().is_none_or(Incoming::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        let read: u64 = self
            .read
            .iter()
            .filter_map(|f| f.data_ref().map(|d| d.len() as u64))
            .sum();
        let Some(inner) = &self.inner else {
            return SizeHint::with_exact(read);
        };
        let h = inner.size_hint();
        let mut out = SizeHint::new();
        out.set_lower(h.lower().saturating_add(read));
        if let Some(upper) = h.upper() {
            out.set_upper(upper.saturating_add(read));
        }
        out
    }
}

/// Reads a request body whole for `--diagnose`, each frame copied for the analysis as it
/// comes: `Ok(frames, true)` when it ended within `cap` bytes and `wait`; `Ok(frames,
/// false)` when it did not (the rest is forwarded as it comes); `Err` when reading failed.
async fn read_whole(
    body: &mut Incoming,
    copy: &Mutex<BodyCopy>,
    cap: usize,
    wait: Duration,
) -> Result<(VecDeque<Frame<Bytes>>, bool), hyper::Error> {
    use http_body_util::BodyExt;
    let mut frames = VecDeque::new();
    let mut len = 0usize;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if body.is_end_stream() {
            return Ok((frames, true));
        }
        let next = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(next) => next,
            Err(_) => return Ok((frames, false)),
        };
        let Some(frame) = next.transpose()? else {
            return Ok((frames, true));
        };
        let Some(data) = frame.data_ref() else {
            // Trailers: forwarded as they are, the body left unchanged.
            frames.push_back(frame);
            return Ok((frames, false));
        };
        len = len.saturating_add(data.len());
        if let Ok(mut c) = copy.lock() {
            c.push(data, cap);
        }
        frames.push_back(frame);
        if len > cap {
            return Ok((frames, false));
        }
    }
}

/// How much of a streamed reply is looked at for its id (`prompt_wire::reply_id` reads its
/// first 64 KiB).
const REPLY_ID_WINDOW: usize = 64 << 10;

/// What is sent to the analysis when a reply ends.
struct Pending {
    job: Job,
    request: Arc<Mutex<BodyCopy>>,
    queue: SyncSender<Message>,
    state: Arc<ProxyState>,
    diagnose: Option<Arc<Diagnose>>,
}

impl Pending {
    fn send(mut self, response: BodyCopy, outcome: Outcome) {
        if let Ok(mut copy) = self.request.lock() {
            self.job.request = std::mem::take(&mut *copy);
        }
        // `--diagnose`: the reply's id, for the session's next request, read here so that
        // a next request sent at once finds it (a compressed reply's by the analysis).
        if let (Some(d), Some(job)) = (&self.diagnose, &self.job.diagnose)
            && outcome == Outcome::Complete
            && (200..300).contains(&self.job.status)
            && self.job.content_encoding.is_none()
            && !response.over
        {
            // A whole reply is read whole (its `id`); a stream's id is in its first event.
            let whole = response
                .chunks
                .iter()
                .flat_map(|c| c.iter())
                .find(|b| !b.is_ascii_whitespace())
                == Some(&b'{');
            let limit = if whole { usize::MAX } else { REPLY_ID_WINDOW };
            let mut head = Vec::new();
            for c in &response.chunks {
                if head.len() >= limit {
                    break;
                }
                head.extend_from_slice(&c[..c.len().min(limit - head.len())]);
            }
            d.remember_reply(job, &head);
        }
        self.job.response = response;
        self.job.outcome = outcome;
        let held = self
            .job
            .request
            .held()
            .saturating_add(self.job.response.held());
        if !self.state.reserve_queued(held) {
            self.state.dropped();
            return;
        }
        match self.queue.try_send(Message::Exchange(Box::new(self.job))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.state.release_queued(held);
                self.state.dropped();
            }
            // The analysis has stopped (the proxy is shutting down).
            Err(TrySendError::Disconnected(_)) => self.state.release_queued(held),
        }
    }
}

/// The reply returned to the client, frame by frame, with its copy kept aside; when it ends
/// (or breaks off, or the client drops it) the exchange goes to the analysis queue.
pub(crate) struct ResponseTee {
    inner: Incoming,
    /// The upstream's error, held for one poll: the server flushes what it has written
    /// (the head, earlier frames) before the body is aborted, so the client sees every
    /// byte that came before the cut.
    failed: Option<hyper::Error>,
    copy: BodyCopy,
    cap: usize,
    pending: Option<Pending>,
}

impl ResponseTee {
    fn finish(&mut self, outcome: Outcome) {
        if let Some(p) = self.pending.take() {
            p.send(std::mem::take(&mut self.copy), outcome);
        }
    }
}

impl Body for ResponseTee {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = &mut *self;
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Some(Err(e)));
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Err(_))) => {
                this.finish(Outcome::UpstreamAborted);
                if let Poll::Ready(Some(Err(e))) = polled {
                    this.failed = Some(e);
                }
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.copy.push(data, this.cap);
                }
                if this.inner.is_end_stream() {
                    this.finish(Outcome::Complete);
                }
            }
            Poll::Ready(None) => this.finish(Outcome::Complete),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.failed.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for ResponseTee {
    fn drop(&mut self) {
        let outcome = if self.inner.is_end_stream() {
            Outcome::Complete
        } else {
            Outcome::ClientGone
        };
        self.finish(outcome);
    }
}

fn text(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// An error and its causes on one line, bounded.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    let mut n = 0;
    while let Some(c) = source {
        if n >= 4 {
            break;
        }
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
        n += 1;
    }
    head(&s, 300).to_owned()
}

/// Forwards one request.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, std::convert::Infallible> {
    let start = Instant::now();
    let path = req.uri().path().to_owned();
    let Some(api) = route(&path) else {
        return Ok(text(
            StatusCode::NOT_FOUND,
            format!(
                "cacheline proxy: no API is routed at {} (routes: /v1/messages… → anthropic, other /v1/… → openai, /v1beta/… and /v1alpha/… → gemini)\n",
                head(&path, 200)
            ),
        ));
    };
    shared.state.forwarded();
    let upstream = shared.upstreams.of(api);
    let (mut parts, body) = req.into_parts();
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let uri = format!(
        "{}://{}{}{}",
        upstream.scheme, upstream.authority, upstream.prefix, path_and_query
    );
    match uri.parse::<Uri>() {
        Ok(u) => parts.uri = u,
        Err(e) => {
            return Ok(text(
                StatusCode::BAD_REQUEST,
                format!("cacheline proxy: the request's path cannot be forwarded: {e}\n"),
            ));
        }
    }
    parts.version = hyper::Version::HTTP_11;
    let host = HeaderValue::from_str(&upstream.authority).ok();
    parts.headers = without_hop_by_hop(std::mem::take(&mut parts.headers), host);
    // The one header filter: what the audit records of a request (session, agent, cache key).
    let headers = prompt_measure::logged::recorded_headers(
        parts
            .headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), Cow::Borrowed(v.to_str().ok()?)))),
    );
    let agent = parts
        .headers
        .get(hyper::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(|v| head(v, 128).to_owned());
    let copy = Arc::new(Mutex::new(BodyCopy::default()));
    let mut body = body;
    let mut read = VecDeque::new();
    let mut rest = Some(());
    let mut diagnose_job = None;
    if let Some(d) = &shared.diagnose
        && let Some(kind) = diagnose::diagnosable(api, &path)
    {
        match diagnose::session_key(kind, &parts.headers) {
            None => d.unnamed(),
            Some(key) => {
                let order = d.next_order();
                let previous = d.previous(&key);
                let (frames, whole) = match read_whole(
                    &mut body,
                    &copy,
                    shared.max_copy_bytes,
                    shared.upstream_timeout,
                )
                .await
                {
                    Ok(read) => read,
                    Err(e) => {
                        return Ok(text(
                            StatusCode::BAD_REQUEST,
                            format!(
                                "cacheline proxy: the request body could not be read: {}\n",
                                chain(&e)
                            ),
                        ));
                    }
                };
                read = frames;
                let loopback = upstream
                    .authority
                    .rsplit_once(':')
                    .map_or(upstream.authority.as_str(), |(h, _)| h)
                    .trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
                    || upstream.authority.starts_with("localhost");
                let rewritten = if whole {
                    rest = None;
                    let mut bytes = Vec::new();
                    for f in &read {
                        if let Some(data) = f.data_ref() {
                            bytes.extend_from_slice(data);
                        }
                    }
                    diagnose::rewrite(kind, &bytes, previous.as_deref(), &upstream.url(), loopback)
                } else {
                    Err(diagnose::Skip::Failed)
                };
                match rewritten {
                    Ok(bytes) if diagnose::fix_headers(kind, &mut parts.headers, bytes.len()) => {
                        d.added();
                        read = VecDeque::from([Frame::data(Bytes::from(bytes))]);
                        diagnose_job = Some(DiagnoseJob {
                            key,
                            kind,
                            order,
                            against: previous,
                        });
                    }
                    Ok(_) => {
                        d.skipped(diagnose::Skip::Failed);
                        diagnose_job = Some(DiagnoseJob {
                            key,
                            kind,
                            order,
                            against: None,
                        });
                    }
                    Err(why) => {
                        d.skipped(why);
                        diagnose_job = Some(DiagnoseJob {
                            key,
                            kind,
                            order,
                            against: None,
                        });
                    }
                }
            }
        }
    }
    let tee = RequestTee {
        read,
        inner: rest.map(|()| body),
        copy: copy.clone(),
        cap: shared.max_copy_bytes,
    };
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let upstream_url = upstream.url();
    let before = start.elapsed();
    let sent = tokio::time::timeout(
        shared.upstream_timeout,
        shared.client.request(Request::from_parts(parts, tee)),
    )
    .await;
    let head = Instant::now();
    let job = |status: u16, content_encoding: Option<String>, added: Duration| Job {
        api,
        path: path.clone(),
        headers: headers.clone(),
        agent: agent.clone(),
        ts,
        request: BodyCopy::default(),
        response: BodyCopy::default(),
        content_encoding,
        status,
        outcome: Outcome::Complete,
        added_latency: added,
        diagnose: diagnose_job.clone(),
    };
    let response = match sent {
        Ok(Ok(response)) => response,
        failed => {
            let p = Pending {
                job: job(502, None, before),
                request: copy,
                queue: shared.queue.clone(),
                state: shared.state.clone(),
                diagnose: shared.diagnose.clone(),
            };
            p.send(BodyCopy::default(), Outcome::Unreachable);
            let why = match failed {
                Ok(Err(e)) => format!("failed: {}", chain(&e)),
                _ => format!(
                    "did not answer within {} s",
                    shared.upstream_timeout.as_secs_f64()
                ),
            };
            return Ok(text(
                StatusCode::BAD_GATEWAY,
                format!("cacheline proxy: upstream {api} ({upstream_url}) {why}\n"),
            ));
        }
    };
    let (mut parts, body) = response.into_parts();
    parts.headers = without_hop_by_hop(std::mem::take(&mut parts.headers), None);
    let content_encoding = parts
        .headers
        .get(hyper::header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .map(|v| prompt_core::input::head(v, 64).to_ascii_lowercase());
    let added = before + head.elapsed();
    let pending = Pending {
        job: job(parts.status.as_u16(), content_encoding, added),
        request: copy,
        queue: shared.queue.clone(),
        state: shared.state.clone(),
        diagnose: shared.diagnose.clone(),
    };
    let tee = ResponseTee {
        inner: body,
        failed: None,
        copy: BodyCopy::default(),
        cap: shared.max_copy_bytes,
        pending: Some(pending),
    };
    Ok(Response::from_parts(parts, Either::Left(tee)))
}
