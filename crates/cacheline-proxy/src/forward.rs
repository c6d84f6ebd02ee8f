//! The hot path: a request forwarded as it came, its reply returned as it arrives, and a
//! copy of both (the same frames, shared, bounded) handed to the analysis queue with
//! `try_send`: never waiting on it.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use prompt_engine::headers::{Forwarding, forwarding};

use crate::access::LocalRoutes;
use crate::analysis::{Job, Message};
use crate::conn::ConnState;
use crate::copy::BodyCopy;
use crate::diagnose::{self, Diagnose, DiagnoseJob};
use crate::error::ProxyError;
use crate::limits::Limits;
use crate::route::{Upstreams, route};
use crate::state::ProxyState;
use prompt_core::input::head;
use prompt_measure::report::Outcome;

/// The body the proxy answers with: the upstream's, teed, or its own short text.
pub(crate) type ProxyBody = Either<ResponseTee, Full<Bytes>>;

type HttpsConnector = hyper_rustls::HttpsConnector<HttpConnector>;

pub(crate) type HttpsClient = Client<HttpsConnector, RequestTee>;

/// What every connection shares.
pub(crate) struct Shared {
    /// The upstream client and its pool; replaced (its idle connections closed) when
    /// connections are shed.
    client: RwLock<HttpsClient>,
    connector: HttpsConnector,
    pub(crate) limits: Limits,
    pub(crate) upstreams: Upstreams,
    pub(crate) queue: SyncSender<Message>,
    pub(crate) state: Arc<ProxyState>,
    pub(crate) max_copy_bytes: usize,
    pub(crate) upstream_timeout: Duration,
    /// `--diagnose`: its state, when on.
    pub(crate) diagnose: Option<Arc<Diagnose>>,
    /// `--stabilize`: its entries and state, when on.
    pub(crate) stabilize: Option<Arc<crate::stabilize::Stabilizer>>,
    /// Who may read the proxy's own routes, and the address it listens on.
    pub(crate) routes: LocalRoutes,
    pub(crate) listen: SocketAddr,
    /// `/_cacheline/state`, as last built.
    pub(crate) state_json: crate::state::StateCache,
}

/// What forwarding takes of the proxy's configuration.
pub(crate) struct ForwardConfig {
    pub(crate) limits: Limits,
    pub(crate) upstreams: Upstreams,
    pub(crate) max_copy_bytes: usize,
    pub(crate) upstream_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) local_routes: LocalRoutes,
    pub(crate) stabilize: Option<Arc<crate::stabilize::Stabilizer>>,
}

impl Shared {
    /// What every connection of a proxy listening on `listen` with `config` shares.
    pub(crate) fn new(
        config: ForwardConfig,
        listen: SocketAddr,
        queue: SyncSender<Message>,
        state: Arc<ProxyState>,
        diagnose: Option<Arc<Diagnose>>,
    ) -> Result<Shared, ProxyError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(config.connect_timeout));
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_platform_verifier(rustls::crypto::ring::default_provider())
            .map_err(|e| ProxyError::Tls(e.to_string()))?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = client(&connector, &config.limits);
        Ok(Shared {
            client: RwLock::new(client),
            connector,
            limits: config.limits,
            upstreams: config.upstreams,
            queue,
            state,
            max_copy_bytes: config.max_copy_bytes,
            upstream_timeout: config.upstream_timeout,
            diagnose,
            stabilize: config.stabilize,
            routes: config.local_routes,
            listen,
            state_json: crate::state::StateCache::default(),
        })
    }

    fn client(&self) -> HttpsClient {
        self.client
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Closes the idle pooled upstream connections: the pool is replaced by an empty one
    /// (requests in flight keep their connections to the end).
    pub(crate) fn drop_idle_upstreams(&self) {
        let fresh = client(&self.connector, &self.limits);
        *self
            .client
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
    }
}

/// The upstream client: HTTP/1.1, header case kept, `Host` as given; a request its pooled
/// connection turned out closed before it was written is sent again on another (hyper's
/// `retry_canceled_requests`, as Go's transport does for a request nothing of which was
/// written); idle connections kept [`Limits::upstream_idle_timeout`], at most
/// [`Limits::upstream_max_idle`] per upstream.
fn client(connector: &HttpsConnector, limits: &Limits) -> HttpsClient {
    Client::builder(TokioExecutor::new())
        .http1_preserve_header_case(true)
        .set_host(false)
        .retry_canceled_requests(true)
        .http1_max_buf_size(crate::limits::CONNECTION_BUFFER_BYTES)
        .pool_idle_timeout(limits.upstream_idle_timeout)
        .pool_max_idle_per_host(limits.upstream_max_idle)
        .pool_timer(TokioTimer::new())
        .build(connector.clone())
}

/// The headers a message is forwarded with, in their order (a `HeaderMap`'s `remove` swaps
/// the last entry into the hole: the map is rebuilt instead): the one header policy decides
/// each ([`prompt_engine::headers::forwarding`]: hop-by-hop headers go, but `TE: trailers`
/// and `Trailer`; a `Content-Length` beside a `Transfer-Encoding` goes). `host`, when
/// given, replaces the `Host` header's value where it stands (or is added last).
///
/// A header repeated with others between its lines comes out with its values together, at
/// the first one's place, in their order: a `HeaderMap` holds a name's values together
/// (RFC 9110 §5.3: the order of lines of different names is not significant; a name's own
/// values keep theirs).
fn forwarded_headers(headers: HeaderMap, host: Option<HeaderValue>) -> HeaderMap {
    let named: Vec<String> = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .filter(|n| !n.is_empty())
        .collect();
    let named: Vec<&str> = named.iter().map(String::as_str).collect();
    let coded = headers.contains_key(hyper::header::TRANSFER_ENCODING);
    let mut out = HeaderMap::with_capacity(headers.len());
    let mut host = host;
    let mut te_sent = false;
    let mut current: Option<HeaderName> = None;
    for (name, value) in headers {
        if let Some(n) = name {
            current = Some(n);
        }
        let Some(name) = &current else { continue };
        if name == hyper::header::HOST {
            if let Some(h) = host.take() {
                out.append(name.clone(), h);
            }
            continue;
        }
        match forwarding(
            name.as_str(),
            value.to_str().unwrap_or_default(),
            &named,
            coded,
        ) {
            Forwarding::Keep => {
                out.append(name.clone(), value);
            }
            Forwarding::Replace(v) => {
                if !std::mem::replace(&mut te_sent, true) {
                    out.append(name.clone(), HeaderValue::from_static(v));
                }
            }
            Forwarding::Drop => {}
        }
    }
    if let Some(h) = host {
        out.append(hyper::header::HOST, h);
    }
    out
}

/// Whether a request may be sent again after its connection failed before a reply: a
/// method that is safe to repeat with no body, as Go's transport replays it (GET, HEAD,
/// OPTIONS, TRACE).
fn replayable(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// Whether a request failed because its connection was closed under it before any reply
/// came (a pooled connection the upstream had just closed): not a connection refused, not
/// a malformed reply.
fn closed_before_reply(e: &hyper_util::client::legacy::Error) -> bool {
    if e.is_connect() {
        return false;
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h) = s.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message() || h.is_closed() || h.is_canceled())
        {
            return true;
        }
        if let Some(io) = s.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            )
        {
            return true;
        }
        source = s.source();
    }
    false
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

/// [`read_whole`] for a change to the request (`--diagnose`, `--stabilize`): the frames
/// read, and the body's bytes when it ended within the cap and the wait (`None`: the rest is
/// forwarded as it comes, unchanged); a body that cannot be read is answered `400`.
async fn read_for_change(
    body: &mut Incoming,
    copy: &Mutex<BodyCopy>,
    shared: &Shared,
) -> Result<(VecDeque<Frame<Bytes>>, Option<Vec<u8>>), Response<ProxyBody>> {
    match read_whole(body, copy, shared.max_copy_bytes, shared.upstream_timeout).await {
        Ok((frames, true)) => {
            let mut bytes = Vec::new();
            for f in &frames {
                if let Some(data) = f.data_ref() {
                    bytes.extend_from_slice(data);
                }
            }
            Ok((frames, Some(bytes)))
        }
        Ok((frames, false)) => Ok((frames, None)),
        Err(e) => Err(text(
            StatusCode::BAD_REQUEST,
            format!(
                "cacheline proxy: the request body could not be read: {}\n",
                chain(&e)
            ),
        )),
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
        if self.job.request.is_dropped() || response.is_dropped() {
            // The memory budget was full: what the copies held is given back as they go.
            self.state.dropped_over_budget();
            return;
        }
        // `--diagnose`: the reply's id, for the session's next request, read here so that
        // a next request sent at once finds it (a compressed reply's by the analysis).
        if let (Some(d), Some(job)) = (&self.diagnose, &self.job.diagnose)
            && outcome == Outcome::Complete
            && (200..300).contains(&self.job.status)
            && self.job.content_encoding.is_none()
            && response.is_whole()
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
        // The copies go with the job, held under the budget until it is analysed; a job
        // not sent gives them back as it is dropped.
        match self.queue.try_send(Message::Exchange(Box::new(self.job))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self.state.dropped(),
            // The analysis has stopped (the proxy is shutting down).
            Err(TrySendError::Disconnected(_)) => {}
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
    /// The client's connection: reset when the reply breaks off.
    conn: Arc<ConnState>,
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
                // The client must not take what it got for the whole reply: a
                // close-delimited reply (an HTTP/1.0 client's) would otherwise end cleanly.
                this.conn.abort();
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
    conn: Arc<ConnState>,
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
    // A body of unknown length (the client's was chunked) is sent chunked whatever the
    // method: hyper would send a GET's as no body at all.
    let chunked =
        parts.headers.contains_key(hyper::header::TRANSFER_ENCODING) && !body.is_end_stream();
    let host = HeaderValue::from_str(&upstream.authority).ok();
    parts.headers = forwarded_headers(std::mem::take(&mut parts.headers), host);
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
    let mut copy = Arc::new(Mutex::new(BodyCopy::new(
        &shared.state.budget,
        body.size_hint().exact(),
        shared.max_copy_bytes,
    )));
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
                let (frames, whole) = match read_for_change(&mut body, &copy, &shared).await {
                    Ok(read) => read,
                    Err(answer) => return Ok(answer),
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
                let rewritten = if let Some(bytes) = whole {
                    rest = None;
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
    // `--stabilize`: a request an entry may apply to is read whole and, when the entry's
    // change is there and the repair is sure, sent repaired (the analysis then judges what
    // was sent; the agent's own body goes to the log beside it).
    let mut repair = None;
    let mut agent_request = None;
    if let Some(st) = &shared.stabilize
        && diagnose_job.is_none()
        && let Some(kind) = prompt_engine::shape_of_path(&path)
    {
        let agent_id = prompt_measure::catalogue::AgentId::from_headers(&headers);
        if let Some(entry) = st.watches(agent_id.as_ref()) {
            let entry = entry.to_owned();
            if parts.headers.contains_key(hyper::header::CONTENT_ENCODING) {
                repair = Some(st.refuse(&entry, "a compressed request body is not repaired"));
            } else {
                let (frames, whole) = match read_for_change(&mut body, &copy, &shared).await {
                    Ok(read) => read,
                    Err(answer) => return Ok(answer),
                };
                read = frames;
                if let Some(bytes) = whole {
                    rest = None;
                    let decision = st.decide(kind, agent_id.as_ref(), &bytes);
                    let saver = st.clone();
                    tokio::task::spawn_blocking(move || saver.save_if_due());
                    match decision {
                        crate::stabilize::Decision::Untouched => {}
                        crate::stabilize::Decision::Refused(note) => repair = Some(note),
                        crate::stabilize::Decision::Repaired { body: sent, note } => {
                            parts.headers.remove(hyper::header::TRANSFER_ENCODING);
                            parts.headers.insert(
                                hyper::header::CONTENT_LENGTH,
                                HeaderValue::from(sent.len()),
                            );
                            let sent = Bytes::from(sent);
                            let mut sent_copy = BodyCopy::new(
                                &shared.state.budget,
                                Some(sent.len() as u64),
                                shared.max_copy_bytes,
                            );
                            sent_copy.push(&sent, shared.max_copy_bytes);
                            agent_request = Some(std::mem::replace(
                                &mut copy,
                                Arc::new(Mutex::new(sent_copy)),
                            ));
                            read = VecDeque::from([Frame::data(sent)]);
                            repair = Some(note);
                        }
                    }
                } else {
                    repair = Some(st.refuse(
                        &entry,
                        "the body is over the copy cap or did not end in time",
                    ));
                }
            }
        }
    }
    if chunked && !parts.headers.contains_key(hyper::header::CONTENT_LENGTH) {
        parts.headers.insert(
            hyper::header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
    }
    // A request that may be sent again (no body, a safe method), should its connection
    // turn out closed before a reply.
    let again = (replayable(&parts.method) && read.is_empty() && body.is_end_stream()).then(|| {
        let mut r = Request::new(RequestTee {
            read: VecDeque::new(),
            inner: None,
            copy: copy.clone(),
            cap: shared.max_copy_bytes,
        });
        *r.method_mut() = parts.method.clone();
        *r.uri_mut() = parts.uri.clone();
        *r.version_mut() = parts.version;
        *r.headers_mut() = parts.headers.clone();
        *r.extensions_mut() = parts.extensions.clone();
        r
    });
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
    let client = shared.client();
    let sent = tokio::time::timeout(shared.upstream_timeout, async {
        match (client.request(Request::from_parts(parts, tee)).await, again) {
            // Once, as Go's transport does.
            (Err(e), Some(again)) if closed_before_reply(&e) => client.request(again).await,
            (sent, _) => sent,
        }
    })
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
        repair: repair.clone(),
        agent_request: agent_request.clone(),
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
    parts.headers = forwarded_headers(std::mem::take(&mut parts.headers), None);
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
    // The reply is copied only when the request's copy is whole: otherwise the exchange
    // is not analysed, and its reply would hold the budget for nothing.
    let request_whole = pending.request.lock().is_ok_and(|c| c.is_whole());
    let expected = body.size_hint().exact();
    let tee = ResponseTee {
        inner: body,
        failed: None,
        copy: if request_whole {
            BodyCopy::new(&shared.state.budget, expected, shared.max_copy_bytes)
        } else {
            BodyCopy::skipped()
        },
        cap: shared.max_copy_bytes,
        pending: Some(pending),
        conn,
    };
    Ok(Response::from_parts(parts, Either::Left(tee)))
}
