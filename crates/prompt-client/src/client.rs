//! The client: a request prepared once, sent (again only before its reply's first event),
//! its reply streamed through the sans-IO reader and recorded when it ends.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_core::Stream;
use prompt_core::ApiKind;
use prompt_wire::stream::{StreamError, StreamEvent, StreamReader};
use prompt_wire::{Conversation, MAX_REPLY_BYTES, Next, Reply};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::endpoint::Endpoint;
use crate::error::{ClientError, ERROR_EXCERPT_BYTES, MAX_ERROR_BODY_BYTES};
use crate::retry::{RetryPolicy, retriable_status};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the server may stay silent while a reply is read: a CPU engine on a long
/// prompt takes a while before its first token.
const READ_TIMEOUT: Duration = Duration::from_secs(300);

/// An async client for one [`Endpoint`]: it sends a conversation's next body, as the exact
/// bytes the wire wrote, and records the reply into the conversation.
///
/// The body is sent with `.body(bytes)`, never through `serde_json::Value`: reqwest's
/// `.json(&value)` writes the keys of a `Value` sorted (without serde_json's
/// `preserve_order`), which moves the tools, the system prompt and every message's keys, and
/// two consecutive bodies then share a few hundred bytes instead of their whole stable part.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    endpoint: Endpoint,
    retry: RetryPolicy,
}

/// A request ready to be sent, and sent again.
#[derive(Debug)]
struct Prepared {
    url: String,
    headers: HeaderMap,
    body: Bytes,
}

/// A response with a success status, and the requests it took.
struct Opened {
    response: reqwest::Response,
    attempts: u32,
}

type Opening = Pin<Box<dyn Future<Output = Result<Opened, ClientError>> + Send>>;
type Chunks = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

impl Client {
    /// A client for `endpoint` on a reqwest client of its own (30 s to connect, 300 s of
    /// silence at most while a reply is read) with the default [`RetryPolicy`].
    pub fn new(endpoint: Endpoint) -> Result<Self, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .build()
            .map_err(|source| ClientError::Transport {
                url: endpoint.base_url().to_owned(),
                attempts: 0,
                source,
            })?;
        Ok(Self::with_http(http, endpoint))
    }

    /// A client for `endpoint` on the application's reqwest client (its pool, proxy,
    /// timeouts, TLS).
    pub fn with_http(http: reqwest::Client, endpoint: Endpoint) -> Self {
        Self {
            http,
            endpoint,
            retry: RetryPolicy::default(),
        }
    }

    /// Retries as `policy` says.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Composes `next` and streams its reply (the wire's parameters carry `"stream": true`;
    /// Gemini's URL asks for the stream). Nothing is sent before the stream is first polled.
    ///
    /// After an error the turn stays in the history, unanswered: retry with
    /// [`Next::resend`], which sends the same bytes. A [`Next::turn`] is then refused
    /// ([`ComposeError::Unanswered`](prompt_core::ComposeError::Unanswered) inside
    /// [`ClientError::Compose`]) before anything is sent, so the question never goes twice.
    /// The turn is not rolled back on an error because the library cannot know whether the
    /// request reached the server (a connection that broke after the body went out was
    /// processed and cached); the history keeps what was sent, and the same refusal holds
    /// for an app's own transport.
    pub fn stream<'c>(
        &self,
        conversation: &'c mut Conversation,
        next: Next,
    ) -> Result<ReplyStream<'c>, ClientError> {
        let body = conversation.compose(next)?.to_bytes();
        self.stream_body(conversation, body)
    }

    /// Streams the reply to `body`, a body this conversation's wire has just composed (an
    /// agent that keeps the [`Body`](prompt_wire::Body) for its own checks composes it
    /// itself, takes its bytes, and hands them here).
    pub fn stream_body<'c>(
        &self,
        conversation: &'c mut Conversation,
        body: Vec<u8>,
    ) -> Result<ReplyStream<'c>, ClientError> {
        let request = Arc::new(self.prepare(conversation, body, true)?);
        let reader = conversation.wire().stream_reader();
        let opening = open(self.http.clone(), request.clone(), self.retry, 0, None);
        Ok(ReplyStream {
            conversation,
            http: self.http.clone(),
            request,
            retry: self.retry,
            reader,
            state: State::Opening(Box::pin(opening)),
            attempts: 0,
            reply: None,
            clock: Clock::default(),
            received: 0,
            text: String::new(),
        })
    }

    /// Composes `next`, sends it, reads the whole reply (at most
    /// [`MAX_REPLY_BYTES`](prompt_wire::MAX_REPLY_BYTES)) and records it
    /// ([`Conversation::record_reply`]). After an error, retry with [`Next::resend`] (see
    /// [`Client::stream`]).
    pub async fn send(
        &self,
        conversation: &mut Conversation,
        next: Next,
    ) -> Result<Reply, ClientError> {
        let body = conversation.compose(next)?.to_bytes();
        self.send_body(conversation, body).await
    }

    /// Sends `body`, a body this conversation's wire has just composed, and records the
    /// whole reply. The request is sent again while the reply has not been read whole.
    pub async fn send_body(
        &self,
        conversation: &mut Conversation,
        body: Vec<u8>,
    ) -> Result<Reply, ClientError> {
        let request = Arc::new(self.prepare(conversation, body, false)?);
        let mut attempts = 0;
        let mut wait = None;
        let bytes = loop {
            let opened = open(
                self.http.clone(),
                request.clone(),
                self.retry,
                attempts,
                wait,
            )
            .await?;
            attempts = opened.attempts;
            match read_capped(opened.response, MAX_REPLY_BYTES).await {
                Ok(Some(bytes)) => break bytes,
                Ok(None) => {
                    return Err(ClientError::TooLarge {
                        url: request.url.clone(),
                        max: MAX_REPLY_BYTES,
                    });
                }
                Err((_, source)) if self.retry.allows(attempts) && !source.is_builder() => {
                    wait = Some(self.retry.backoff(attempts, None));
                }
                Err((received, source)) => {
                    // The response began: its body broke off.
                    return Err(ClientError::Cut {
                        url: request.url.clone(),
                        attempts,
                        events: 0,
                        received,
                        text: String::new(),
                        missing: None,
                        source: Some(source),
                    });
                }
            }
        };
        Ok(conversation.record_reply(&bytes)?)
    }

    /// The URL, the headers and the body of the conversation's request.
    fn prepare(
        &self,
        conversation: &Conversation,
        body: Vec<u8>,
        streaming: bool,
    ) -> Result<Prepared, ClientError> {
        let wire = conversation.wire();
        let api = wire.api();
        let asks_stream = wire
            .options()
            .params()
            .any(|(key, value)| key == "stream" && value == "true");
        // Gemini streams by its URL; its body has no `stream`.
        if api != ApiKind::Gemini && asks_stream != streaming {
            return Err(ClientError::StreamParameter { api, streaming });
        }
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static(if streaming {
                "text/event-stream"
            } else {
                "application/json"
            }),
        );
        for (name, value) in self.endpoint.auth_headers(api) {
            let mut value = header_value(name, &value)?;
            value.set_sensitive(name != "anthropic-version");
            headers.insert(HeaderName::from_static(name), value);
        }
        if let Some((name, value)) = conversation.routing_header() {
            let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| header_error(name))?;
            headers.insert(header, header_value(name, &value)?);
        }
        Ok(Prepared {
            url: self.endpoint.url(api, wire.options().model(), streaming),
            headers,
            body: Bytes::from(body),
        })
    }
}

fn header_error(name: &str) -> ClientError {
    ClientError::Header {
        name: prompt_core::input::excerpt(name, 64).into_owned(),
    }
}

fn header_value(name: &str, value: &str) -> Result<HeaderValue, ClientError> {
    HeaderValue::from_str(value).map_err(|_| header_error(name))
}

/// Sends `request` until a response with a success status comes, waiting `wait` first, as
/// `retry` allows: after a connection error, or a `429` or `5xx` status. `attempts`: the
/// requests already sent.
async fn open(
    http: reqwest::Client,
    request: Arc<Prepared>,
    retry: RetryPolicy,
    mut attempts: u32,
    wait: Option<Duration>,
) -> Result<Opened, ClientError> {
    if let Some(wait) = wait {
        tokio::time::sleep(wait).await;
    }
    loop {
        attempts = attempts.saturating_add(1);
        let sent = http
            .post(&request.url)
            .headers(request.headers.clone())
            .body(request.body.clone())
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            // A request that cannot be built never will be.
            Err(source) if retry.allows(attempts) && !source.is_builder() => {
                tokio::time::sleep(retry.backoff(attempts, None)).await;
                continue;
            }
            Err(source) => {
                return Err(ClientError::Transport {
                    url: request.url.clone(),
                    attempts,
                    source,
                });
            }
        };
        let status = response.status().as_u16();
        if response.status().is_success() {
            return Ok(Opened { response, attempts });
        }
        if retriable_status(status) && retry.allows(attempts) {
            let after = retry_after(response.headers());
            drop(response);
            tokio::time::sleep(retry.backoff(attempts, after)).await;
            continue;
        }
        let excerpt = excerpt_of(&read_start(response, MAX_ERROR_BODY_BYTES).await);
        return Err(ClientError::Status {
            url: request.url.clone(),
            status,
            attempts,
            excerpt,
        });
    }
}

/// `Retry-After` in seconds (the HTTP-date form is not read).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

/// The body, or `None` when it goes over `max` bytes (then read no further); on an error,
/// the bytes received before it.
async fn read_capped(
    mut response: reqwest::Response,
    max: usize,
) -> Result<Option<Vec<u8>>, (u64, reqwest::Error)> {
    if response
        .content_length()
        .is_some_and(|len| len > max as u64)
    {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| (body.len() as u64, e))? {
        if body.len().saturating_add(chunk.len()) > max {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

/// The first `max` bytes of the body, or fewer when it ends or fails sooner: what an error
/// message quotes.
async fn read_start(mut response: reqwest::Response, max: usize) -> Vec<u8> {
    let mut body = Vec::new();
    while body.len() < max {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = max - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    body
}

fn excerpt_of(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    prompt_core::input::excerpt(text.trim(), ERROR_EXCERPT_BYTES).into_owned()
}

enum State {
    /// Sending the request (again).
    Opening(Opening),
    /// Reading the body.
    Reading(Chunks),
    /// The reader failed: its error comes after the events it read before.
    Failed(Option<ClientError>),
    /// The last event has come: the reply is recorded after the events queued.
    Ending,
    /// Ended: recorded, failed, or refused.
    Done,
}

/// A streamed reply, read as it comes: a [`Stream`] of [`StreamEvent`]s (or
/// [`ReplyStream::next_event`], without a stream trait in scope). When the body ends, the
/// reply is recorded into the conversation and the stream ends; [`ReplyStream::reply`] then
/// gives it. An error ends the stream too, with nothing recorded; so does dropping it, at
/// any point before its end.
///
/// The request is sent when the stream is first polled, and sent again (as its
/// [`RetryPolicy`] allows) while no event has come.
pub struct ReplyStream<'c> {
    conversation: &'c mut Conversation,
    http: reqwest::Client,
    request: Arc<Prepared>,
    retry: RetryPolicy,
    reader: StreamReader,
    state: State,
    attempts: u32,
    reply: Option<Reply>,
    clock: Clock,
    /// Bytes of the current attempt's body read so far.
    received: u64,
    /// The text shown so far (the current attempt's text deltas).
    text: String,
}

/// When the stream's milestones came, from the first poll.
#[derive(Debug, Default, Clone, Copy)]
struct Clock {
    started: Option<Instant>,
    response: Option<Duration>,
    first_token: Option<Duration>,
    ended: Option<Duration>,
}

impl Clock {
    fn since_start(&self) -> Option<Duration> {
        self.started.map(|s| s.elapsed())
    }
}

/// What the client measured of a streamed reply, each from the moment the request was first
/// sent (the stream's first poll; retries included, as the user waits through them).
///
/// `first_token` is the time to first token as a caller sees it: the engine's prompt
/// processing, its first decode step and the network. The engine's own share is
/// [`UsageFigures::prompt_ms`](prompt_wire::UsageFigures::prompt_ms) where the engine
/// reports it (llama.cpp).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StreamTiming {
    /// Until the response's success status came.
    pub response: Option<Duration>,
    /// Until the first event carrying the reply's content: text, reasoning, or a tool
    /// call's start (an empty delta does not count).
    pub first_token: Option<Duration>,
    /// Until the stream ended (recorded, failed or cut).
    pub total: Option<Duration>,
}

impl std::fmt::Debug for ReplyStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyStream")
            .field("url", &self.request.url)
            .field("attempts", &self.attempts)
            .field("events", &self.reader.events_read())
            .field("recorded", &self.reply.is_some())
            .finish_non_exhaustive()
    }
}

impl ReplyStream<'_> {
    /// The next event, `None` once the stream has ended.
    pub async fn next_event(&mut self) -> Option<Result<StreamEvent, ClientError>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// Reads the rest of the stream (its events unseen) and returns the recorded reply.
    pub async fn finish(mut self) -> Result<Reply, ClientError> {
        while let Some(event) = self.next_event().await {
            event?;
        }
        // The stream ends without an error only once it has recorded; a stream that
        // has already given its error has nothing to give.
        self.reply.ok_or(ClientError::Spent)
    }

    /// The reply recorded, once the stream has ended without an error.
    pub fn reply(&self) -> Option<&Reply> {
        self.reply.as_ref()
    }

    /// The requests sent so far (1 unless retried).
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// What the client has measured so far: the time to the response, to the first token,
    /// and (once ended) to the end.
    pub fn timing(&self) -> StreamTiming {
        StreamTiming {
            response: self.clock.response,
            first_token: self.clock.first_token,
            total: self.clock.ended,
        }
    }

    /// [`ReplyStream::finish`], with what the client measured ([`StreamTiming`]).
    pub async fn finish_timed(mut self) -> Result<(Reply, StreamTiming), ClientError> {
        while let Some(event) = self.next_event().await {
            event?;
        }
        let timing = self.timing();
        self.reply
            .ok_or(ClientError::Spent)
            .map(|reply| (reply, timing))
    }

    /// Bytes of the response's body received so far (of the last attempt).
    pub fn received(&self) -> u64 {
        self.received
    }

    /// The reply's text shown so far (its text deltas joined).
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether nothing has been shown yet, so the request may be sent again.
    fn may_retry(&self) -> bool {
        self.reader.events_read() == 0 && self.retry.allows(self.attempts)
    }

    /// Sends the request again, on a fresh reader.
    fn reopen(&mut self) {
        self.reader = self.conversation.wire().stream_reader();
        self.received = 0;
        self.text.clear();
        let wait = Some(self.retry.backoff(self.attempts, None));
        let opening = open(
            self.http.clone(),
            self.request.clone(),
            self.retry,
            self.attempts,
            wait,
        );
        self.state = State::Opening(Box::pin(opening));
    }

    /// Ends the stream: records the reply, or gives the error (a body that ended before
    /// the reply's last event: [`ClientError::Cut`]).
    fn end(&mut self) -> Option<Result<StreamEvent, ClientError>> {
        self.state = State::Done;
        self.clock.ended = self.clock.since_start();
        let api = self.reader.api();
        let reader = std::mem::replace(&mut self.reader, StreamReader::new(api));
        match self.conversation.finish_stream(reader) {
            Ok(reply) => {
                self.reply = Some(reply);
                None
            }
            Err(StreamError::CutOff {
                events, missing, ..
            }) => Some(Err(self.cut(events, Some(missing), None))),
            Err(e) => Some(Err(e.into())),
        }
    }

    /// The body broke off (`source`) after `events` events, before `missing`.
    fn cut(
        &mut self,
        events: u64,
        missing: Option<&'static str>,
        source: Option<reqwest::Error>,
    ) -> ClientError {
        ClientError::Cut {
            url: self.request.url.clone(),
            attempts: self.attempts,
            events,
            received: self.received,
            text: std::mem::take(&mut self.text),
            missing,
            source,
        }
    }

    /// The connection broke while the body was read: the reply is cut where the reader is.
    fn broke(&mut self, source: reqwest::Error) -> ClientError {
        let api = self.reader.api();
        let reader = std::mem::replace(&mut self.reader, StreamReader::new(api));
        let events = reader.events_read();
        let missing = match reader.into_reply() {
            Err(StreamError::CutOff { missing, .. }) => Some(missing),
            _ => None,
        };
        self.cut(events, missing, Some(source))
    }

    fn fail(&mut self, error: ClientError) -> Poll<Option<Result<StreamEvent, ClientError>>> {
        self.state = State::Done;
        self.clock.ended = self.clock.since_start();
        Poll::Ready(Some(Err(error)))
    }

    /// Notes what an event shows before it is handed out.
    fn shown(&mut self, event: &StreamEvent) {
        let content = match event {
            StreamEvent::TextDelta { text } => {
                self.text.push_str(text);
                !text.is_empty()
            }
            StreamEvent::ReasoningDelta { text } => !text.is_empty(),
            StreamEvent::ToolCallStarted { .. } => true,
            _ => false,
        };
        if content && self.clock.first_token.is_none() {
            self.clock.first_token = self.clock.since_start();
        }
    }
}

impl Stream for ReplyStream<'_> {
    type Item = Result<StreamEvent, ClientError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.clock.started.is_none() {
            this.clock.started = Some(Instant::now());
        }
        loop {
            if let Some(event) = this.reader.next_event() {
                this.shown(&event);
                return Poll::Ready(Some(Ok(event)));
            }
            match &mut this.state {
                State::Done => return Poll::Ready(None),
                State::Opening(opening) => match opening.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => return this.fail(e),
                    Poll::Ready(Ok(opened)) => {
                        this.attempts = opened.attempts;
                        this.clock.response = this.clock.since_start();
                        this.state = State::Reading(Box::pin(opened.response.bytes_stream()));
                    }
                },
                State::Failed(error) => {
                    let error = error.take();
                    this.state = State::Done;
                    this.clock.ended = this.clock.since_start();
                    if let Some(error) = error {
                        return Poll::Ready(Some(Err(error)));
                    }
                }
                State::Ending => return Poll::Ready(this.end()),
                State::Reading(chunks) => match chunks.as_mut().poll_next(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Some(Ok(bytes))) => {
                        this.received = this.received.saturating_add(bytes.len() as u64);
                        if let Err(e) = this.reader.feed(&bytes) {
                            // The events read before the error are shown first.
                            this.state = State::Failed(Some(e.into()));
                        } else if this.reader.is_done() {
                            // The last event has come: the reply is recorded once its
                            // events are shown, without waiting for the server to close.
                            this.state = State::Ending;
                        }
                    }
                    Poll::Ready(Some(Err(source))) => {
                        if this.may_retry() {
                            this.reopen();
                            continue;
                        }
                        // The response began: its body broke off.
                        let error = this.broke(source);
                        return this.fail(error);
                    }
                    Poll::Ready(None) => {
                        if this.may_retry() {
                            this.reopen();
                            continue;
                        }
                        return Poll::Ready(this.end());
                    }
                },
            }
        }
    }
}
