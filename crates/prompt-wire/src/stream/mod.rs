//! Streamed replies read as they come, sans-IO: the caller owns the connection and feeds the
//! bytes it receives, in whatever pieces; the reader yields events a UI can show at once and,
//! when the stream has ended, records the assistant message and returns the same [`Reply`]
//! that [`Wire::record_reply`] gives for the whole reply the stream amounts to.
//!
//! One server-sent-events decoder serves every API; one reader per API folds its events:
//! OpenAI Chat Completions chunks (also llama.cpp's, with `reasoning_content` and
//! `timings`), OpenAI Responses events, Anthropic Messages events and Gemini
//! `streamGenerateContent?alt=sse` chunks. The message recorded is written in the exact
//! serialization the provider uses for the whole reply, so **the recorded bytes of a stream
//! equal the recorded bytes of the whole reply it amounts to**; what that whole reply is, per
//! API, is in `docs/wire.md` ("Streaming").
//!
//! Nothing is recorded before the stream has ended, and nothing when it fails: a stream cut
//! off, a provider's error event, an event that is not JSON or not the API's shape, events
//! out of order, an index that jumps, or a stream over one of the limits is a
//! [`StreamError`] naming the event, and the session is as it was, so the same request can be
//! sent again.
//!
//! ```
//! use prompt_core::{ApiKind, Extensions, PromptPolicy, Session, SessionContext};
//! use prompt_wire::stream::StreamEvent;
//! use prompt_wire::{Wire, WireOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let api = ApiKind::OpenAi;
//! let options = prompt_wire::session_options(api, prompt_core::tools::ToolSet::empty());
//! let mut session = Session::start(vec![], &PromptPolicy::default(), SessionContext::default(), options)?;
//! let mut wire = Wire::new(api, WireOptions::new("gpt-4.1").param("stream", &serde_json::json!(true)))?;
//! let _body = wire.body(&session.turn(Extensions::new(), "Say hi")?)?.to_bytes();
//!
//! let mut reader = wire.stream_reader();
//! let mut shown = String::new();
//! for piece in [
//!     &b"data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hi"[..],
//!     b" th\"},\"finish_reason\":null}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ere\"},",
//!     b"\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
//! ] {
//!     reader.feed(piece)?;
//!     while let Some(event) = reader.next_event() {
//!         if let StreamEvent::TextDelta { text } = event {
//!             shown.push_str(&text);
//!         }
//!     }
//! }
//! let reply = reader.finish(&mut session)?;
//! assert_eq!((shown.as_str(), reply.text.as_str()), ("Hi there", "Hi there"));
//! assert_eq!(session.history().len(), 2);
//! # Ok(()) }
//! ```

mod anthropic;
mod chat;
mod gemini;
mod json;
mod responses;
mod sse;

use std::collections::VecDeque;
use std::fmt;

use prompt_core::{ApiKind, Session};
use serde::Serialize;

use crate::error::WireError;
use crate::raw::Object;
use crate::reply::{self, MAX_REPLY_BYTES, Reply, UsageReport};
use crate::wire::Wire;

/// The most bytes a stream may carry in all.
pub const MAX_STREAM_BYTES: usize = 64 << 20;

/// The most bytes one event (or one line) may carry: as many as a whole reply, since
/// Responses' `response.completed` carries the whole response.
pub const MAX_EVENT_BYTES: usize = MAX_REPLY_BYTES;

/// The most content blocks (Anthropic), output items (Responses) or parts (Gemini) a reply
/// may stream.
pub const MAX_STREAM_BLOCKS: usize = 16_384;

/// The most tool calls a reply may stream.
pub const MAX_STREAM_TOOL_CALLS: usize = 8_192;

/// Most bytes of an event's data or type quoted in an error.
const EXCERPT: usize = 48;

/// Which limit a stream went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// [`MAX_STREAM_BYTES`].
    StreamBytes,
    /// [`MAX_EVENT_BYTES`].
    EventBytes,
    /// [`MAX_STREAM_BLOCKS`].
    Blocks,
    /// [`MAX_STREAM_TOOL_CALLS`].
    ToolCalls,
}

impl Limit {
    /// The limit's value.
    pub fn max(self) -> usize {
        match self {
            Limit::StreamBytes => MAX_STREAM_BYTES,
            Limit::EventBytes => MAX_EVENT_BYTES,
            Limit::Blocks => MAX_STREAM_BLOCKS,
            Limit::ToolCalls => MAX_STREAM_TOOL_CALLS,
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::StreamBytes => "stream bytes",
            Limit::EventBytes => "bytes per event",
            Limit::Blocks => "blocks",
            Limit::ToolCalls => "tool calls",
        })
    }
}

/// Why a stream cannot be read or recorded. Events are numbered from 1 in the order the
/// stream carries them (server-sent events with data; comments are not events).
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The stream went over a limit; nothing more is read.
    #[error("the {api} stream goes over its limit of {max} {limit} at event {event}")]
    TooLarge {
        /// The API.
        api: &'static str,
        /// The event being read.
        event: u64,
        /// Which limit.
        limit: Limit,
        /// Its value.
        max: usize,
    },
    /// An event's bytes are not UTF-8.
    #[error("the {api} stream's event {event} is not UTF-8")]
    NotUtf8 {
        /// The API.
        api: &'static str,
        /// The event.
        event: u64,
    },
    /// An event's data is not JSON.
    #[error("the {api} stream's event {event} is not JSON ({problem}): {excerpt}")]
    NotJson {
        /// The API.
        api: &'static str,
        /// The event.
        event: u64,
        /// The parser's message.
        problem: String,
        /// The start of the data.
        excerpt: String,
    },
    /// An event is JSON but not the API's shape.
    #[error(
        "the {api} stream's event {event} ({kind}) is not the API's shape: {problem} (at {at})"
    )]
    Malformed {
        /// The API.
        api: &'static str,
        /// The event.
        event: u64,
        /// The event's type (the start of it).
        kind: String,
        /// Where in the event's data, as a path.
        at: String,
        /// What is wrong.
        problem: String,
    },
    /// An event comes where the API's protocol does not allow it (a delta for a block not
    /// started, an event after the end, …).
    #[error("the {api} stream's event {event} ({kind}) is out of order: {problem}")]
    OutOfOrder {
        /// The API.
        api: &'static str,
        /// The event.
        event: u64,
        /// The event's type.
        kind: String,
        /// What it contradicts.
        problem: String,
    },
    /// An index skips ahead of the next one expected.
    #[error(
        "the {api} stream's event {event} ({kind}) jumps to {what} {found}; the next one is {expected}"
    )]
    IndexJump {
        /// The API.
        api: &'static str,
        /// The event.
        event: u64,
        /// The event's type.
        kind: String,
        /// What is indexed (`tool call`, `content block`, `output item`).
        what: &'static str,
        /// The index expected.
        expected: usize,
        /// The index found.
        found: u64,
    },
    /// The provider reported an error in the stream (Anthropic `error`, Responses `error`
    /// or `response.failed`, a chunk holding an `error` object).
    #[error("the {api} stream reports an error at event {event}: {message}")]
    Provider {
        /// The API.
        api: &'static str,
        /// The event.
        event: u64,
        /// The provider's message (at most 512 bytes of it).
        message: String,
    },
    /// The stream ended before its last event.
    #[error("the {api} stream was cut off after {events} events, before {missing}")]
    CutOff {
        /// The API.
        api: &'static str,
        /// Events read.
        events: u64,
        /// What never came.
        missing: &'static str,
    },
    /// Bytes fed after the reader failed.
    #[error("the {api} stream already failed at event {event}")]
    Failed {
        /// The API.
        api: &'static str,
        /// The event it failed at.
        event: u64,
    },
    /// The reply the stream amounts to was refused: no message to record, a message that
    /// is not the API's shape, or a session that refuses it (its source says why).
    #[error("the {api} stream's reply (after {events} events) is refused: {}", prompt_core::input::chain(&**.source))]
    Reply {
        /// The API.
        api: &'static str,
        /// Events read.
        events: u64,
        /// Why.
        #[source]
        source: Box<WireError>,
    },
}

impl StreamError {
    /// The number of the event the error is about (for a stream cut off or a reply refused,
    /// the number of events read).
    pub fn event(&self) -> u64 {
        match self {
            StreamError::TooLarge { event, .. }
            | StreamError::NotUtf8 { event, .. }
            | StreamError::NotJson { event, .. }
            | StreamError::Malformed { event, .. }
            | StreamError::OutOfOrder { event, .. }
            | StreamError::IndexJump { event, .. }
            | StreamError::Provider { event, .. }
            | StreamError::Failed { event, .. } => *event,
            StreamError::CutOff { events, .. } | StreamError::Reply { events, .. } => *events,
        }
    }
}

/// What a streamed reply shows as it comes. Tool calls are numbered by their place among the
/// reply's tool calls ([`Reply::tool_calls`]), whatever the API indexes them by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// More of the reply's text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// More reasoning (`reasoning_content`, Anthropic `thinking`, Responses reasoning text,
    /// Gemini thought parts).
    ReasoningDelta {
        /// The text.
        text: String,
    },
    /// A tool call begins.
    ToolCallStarted {
        /// Its place among the reply's tool calls.
        index: usize,
        /// The provider's call id, when it gave one (Gemini calls without one get theirs
        /// when recorded: see [`Reply::tool_calls`]).
        id: Option<String>,
        /// The function's name.
        name: String,
    },
    /// More of a tool call's arguments, as the model writes them.
    ToolCallArgumentsDelta {
        /// Its place among the reply's tool calls.
        index: usize,
        /// The fragment.
        delta: String,
    },
    /// A tool call is complete.
    ToolCallFinished {
        /// Its place among the reply's tool calls.
        index: usize,
        /// The function's name.
        name: String,
        /// The arguments, as the reply records them.
        arguments: String,
    },
    /// The usage so far (the last one is the reply's).
    Usage(UsageReport),
}

impl StreamEvent {
    /// The text the [`StreamEvent::TextDelta`]s of `events` show, in order: what a client
    /// printed of the reply as it came.
    pub fn shown_text(events: &[StreamEvent]) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Where an event is, for the errors about it.
pub(crate) struct At<'a> {
    api: &'static str,
    event: u64,
    kind: &'a str,
}

/// `at.key`, or `key` at the top.
fn path(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

impl At<'_> {
    fn kind(&self) -> String {
        prompt_core::input::excerpt(self.kind, EXCERPT).into_owned()
    }

    pub(crate) fn malformed(
        &self,
        at: impl Into<String>,
        problem: impl Into<String>,
    ) -> StreamError {
        StreamError::Malformed {
            api: self.api,
            event: self.event,
            kind: self.kind(),
            at: at.into(),
            problem: problem.into(),
        }
    }

    pub(crate) fn out_of_order(&self, problem: impl Into<String>) -> StreamError {
        StreamError::OutOfOrder {
            api: self.api,
            event: self.event,
            kind: self.kind(),
            problem: problem.into(),
        }
    }

    pub(crate) fn jump(&self, what: &'static str, expected: usize, found: u64) -> StreamError {
        StreamError::IndexJump {
            api: self.api,
            event: self.event,
            kind: self.kind(),
            what,
            expected,
            found,
        }
    }

    pub(crate) fn provider(&self, message: String) -> StreamError {
        StreamError::Provider {
            api: self.api,
            event: self.event,
            message,
        }
    }

    pub(crate) fn too_many(&self, limit: Limit) -> StreamError {
        StreamError::TooLarge {
            api: self.api,
            event: self.event,
            limit,
            max: limit.max(),
        }
    }

    /// Refuses an event that holds an `error` object (how llama.cpp's server and Gemini
    /// report an error mid-stream).
    pub(crate) fn refuse_error(&self, o: &Object<'_>) -> Result<(), StreamError> {
        match o.get("error").filter(|e| !crate::raw::is_null(e)) {
            Some(error) => Err(self.provider(reply::provider_message(error))),
            None => Ok(()),
        }
    }

    /// `data` read as one JSON object.
    pub(crate) fn object<'d>(&self, data: &'d str) -> Result<Object<'d>, StreamError> {
        Object::parse(data).map_err(|problem| match problem {
            prompt_core::raw_json::Problem::Syntax(e) => StreamError::NotJson {
                api: self.api,
                event: self.event,
                problem: e.to_string(),
                excerpt: prompt_core::input::excerpt(data, EXCERPT).into_owned(),
            },
            other => self.malformed("data", other.to_string()),
        })
    }

    /// `o[key]` as an object; `None` when absent or null.
    pub(crate) fn child<'d>(
        &self,
        o: &Object<'d>,
        key: &str,
        at: &str,
    ) -> Result<Option<Object<'d>>, StreamError> {
        match o.get(key).filter(|v| !crate::raw::is_null(v)) {
            None => Ok(None),
            Some(v) => Object::of(v)
                .map(Some)
                .map_err(|p| self.malformed(path(at, key), p.to_string())),
        }
    }

    /// `o[key]` as an array's raw elements; empty when absent or null.
    pub(crate) fn elements<'d>(
        &self,
        o: &Object<'d>,
        key: &str,
        at: &str,
    ) -> Result<Vec<&'d serde_json::value::RawValue>, StreamError> {
        match o.get(key).filter(|v| !crate::raw::is_null(v)) {
            None => Ok(Vec::new()),
            Some(v) => crate::raw::array_of(v).ok_or_else(|| {
                self.malformed(
                    path(at, key),
                    format!("{}, not an array", crate::raw::kind_of(v)),
                )
            }),
        }
    }

    /// `o[key]` as a string; `None` when absent or null, an error when another type.
    pub(crate) fn text<'d>(
        &self,
        o: &Object<'d>,
        key: &str,
        at: &str,
    ) -> Result<Option<std::borrow::Cow<'d, str>>, StreamError> {
        match o.get(key).filter(|v| !crate::raw::is_null(v)) {
            None => Ok(None),
            Some(v) => crate::raw::string_of(v).map(Some).ok_or_else(|| {
                self.malformed(
                    path(at, key),
                    format!("{}, not a string", crate::raw::kind_of(v)),
                )
            }),
        }
    }

    /// `o[key]` as an index; `None` when absent.
    pub(crate) fn index(
        &self,
        o: &Object<'_>,
        key: &str,
        at: &str,
    ) -> Result<Option<u64>, StreamError> {
        match o.get(key) {
            None => Ok(None),
            Some(v) => v
                .get()
                .parse::<u64>()
                .map(Some)
                .map_err(|_| self.malformed(path(at, key), "not an index")),
        }
    }
}

/// Where the events of the current piece go.
pub(crate) struct Out<'q> {
    queue: &'q mut VecDeque<StreamEvent>,
}

impl Out<'_> {
    pub(crate) fn push(&mut self, event: StreamEvent) {
        self.queue.push_back(event);
    }

    pub(crate) fn text(&mut self, text: &str) {
        if !text.is_empty() {
            self.push(StreamEvent::TextDelta {
                text: text.to_owned(),
            });
        }
    }

    pub(crate) fn reasoning(&mut self, text: &str) {
        if !text.is_empty() {
            self.push(StreamEvent::ReasoningDelta {
                text: text.to_owned(),
            });
        }
    }
}

/// The reader of one API's events: each API's module folds its events into the whole reply.
trait Fold: std::fmt::Debug + Send + Sync {
    /// Reads one event's data, handing what a UI can show to `out`.
    fn on_event(&mut self, at: &At<'_>, data: &str, out: &mut Out<'_>) -> Result<(), StreamError>;

    /// Whether the stream's last event has come.
    fn is_done(&self) -> bool;

    /// The end of the stream: what never came, or the reply it amounts to (`salt` makes the
    /// ids made up for calls without one unique).
    fn finish(self: Box<Self>, ctx: &reply::Ctx, salt: u64) -> End;
}

/// The end of a stream, as each API's reader sees it: what never came, or the reply.
pub(crate) enum End {
    /// The last event never came.
    CutOff(&'static str),
    /// The reply, or why the message cannot be recorded.
    Reply(Result<Reply, WireError>),
}

/// A streamed reply of one API, read as its bytes come. An owned value that borrows neither
/// the wire nor the session: an async client keeps it across awaits beside them.
///
/// Feed it every piece of the response body ([`StreamReader::feed`]), take the events of
/// each piece ([`StreamReader::next_event`]), and when the body has ended call
/// [`StreamReader::finish`] to record the reply. Dropping it records nothing.
#[derive(Debug)]
pub struct StreamReader {
    api: ApiKind,
    decoder: sse::Decoder,
    fold: Box<dyn Fold>,
    events: VecDeque<StreamEvent>,
    /// The event the reader failed at.
    failed: Option<u64>,
}

impl Wire {
    /// A reader for a streamed reply of this wire's API (`"stream": true` among the
    /// parameters).
    pub fn stream_reader(&self) -> StreamReader {
        StreamReader::new(self.api())
    }

    /// Ends a streamed reply of this wire: [`StreamReader::finish`], and the wire keeps the
    /// reply's id as [`Wire::record_reply`] does (the next body's cache diagnostics name it).
    pub fn finish_stream(
        &self,
        reader: StreamReader,
        session: &mut Session,
    ) -> Result<Reply, StreamError> {
        let reply = reader.finish(session)?;
        self.remember_reply(reply.id.as_deref());
        Ok(reply)
    }
}

impl StreamReader {
    /// A reader for a streamed reply of `api`.
    pub fn new(api: ApiKind) -> Self {
        let fold: Box<dyn Fold> = match api {
            ApiKind::OpenAi | ApiKind::LlamaCpp => Box::new(chat::Chat::new(api)),
            ApiKind::OpenAiResponses => Box::<responses::Responses>::default(),
            ApiKind::Anthropic => Box::<anthropic::Anthropic>::default(),
            ApiKind::Gemini => Box::<gemini::Gemini>::default(),
        };
        Self {
            api,
            decoder: sse::Decoder::new(crate::api_name(api)),
            fold,
            events: VecDeque::new(),
            failed: None,
        }
    }

    /// The API.
    pub fn api(&self) -> ApiKind {
        self.api
    }

    /// Reads the next piece of the response body. The events it completes wait in
    /// [`StreamReader::next_event`]; a piece that ends inside a line (a character, a JSON
    /// string) is kept until the rest comes.
    ///
    /// On an error the reader is spent: every later piece gets [`StreamError::Failed`],
    /// and [`StreamReader::finish`] the same. The events read before the error can still
    /// be taken.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<(), StreamError> {
        let api = crate::api_name(self.api);
        if let Some(event) = self.failed {
            return Err(StreamError::Failed { api, event });
        }
        let Self {
            decoder,
            fold,
            events,
            ..
        } = self;
        let mut out = Out { queue: events };
        let result = decoder.feed(bytes, &mut |event| {
            let at = At {
                api,
                event: event.number,
                // The standard's name for an event without an `event` field.
                kind: if event.kind.is_empty() {
                    "message"
                } else {
                    event.kind
                },
            };
            fold.on_event(&at, event.data, &mut out)
        });
        if let Err(e) = &result {
            self.failed = Some(e.event());
        }
        result
    }

    /// The next event read and not yet taken.
    pub fn next_event(&mut self) -> Option<StreamEvent> {
        self.events.pop_front()
    }

    /// Events (server-sent events with data) read so far: 0 until the first one, which is
    /// when a client may still retry the request.
    pub fn events_read(&self) -> u64 {
        self.decoder.events()
    }

    /// Whether the stream's last event has come (`[DONE]`, `message_stop`,
    /// `response.completed`, a Gemini chunk with a `finishReason`).
    pub fn is_done(&self) -> bool {
        self.failed.is_none() && self.fold.is_done()
    }

    /// Ends the stream: records the assistant message into `session` through the same step
    /// as [`Wire::record_reply`], and returns the reply. Nothing is recorded on any error
    /// (the stream cut off or failed, the reply refused).
    pub fn finish(self, session: &mut Session) -> Result<Reply, StreamError> {
        let api = crate::api_name(self.api);
        let events = self.events_read();
        let reply = self.end(reply::salt(session))?;
        reply::record(session, reply).map_err(|source| StreamError::Reply {
            api,
            events,
            source: Box::new(source),
        })
    }

    /// Ends the stream without recording it: the reply (ids made up for Gemini calls
    /// without one are unique only when recorded through [`StreamReader::finish`]).
    pub fn into_reply(self) -> Result<Reply, StreamError> {
        self.end(0)
    }

    fn end(self, salt: u64) -> Result<Reply, StreamError> {
        let api = crate::api_name(self.api);
        let events = self.events_read();
        if let Some(event) = self.failed {
            return Err(StreamError::Failed { api, event });
        }
        let ctx = reply::Ctx::of(self.api);
        match self.fold.finish(&ctx, salt) {
            End::CutOff(missing) => Err(StreamError::CutOff {
                api,
                events,
                missing,
            }),
            End::Reply(reply) => reply.map_err(|source| StreamError::Reply {
                api,
                events,
                source: Box::new(source),
            }),
        }
    }
}

/// Reads a whole streamed reply of `api` (the response body's bytes) without recording it:
/// the stream counterpart of [`read_reply`](crate::read_reply).
pub fn read_stream(api: ApiKind, bytes: &[u8]) -> Result<Reply, StreamError> {
    let mut reader = StreamReader::new(api);
    reader.feed(bytes)?;
    reader.into_reply()
}

/// The part of the reply a stream amounts to, refused over the whole reply's limit
/// ([`MAX_REPLY_BYTES`]).
pub(crate) fn capped(ctx: &reply::Ctx, text: String) -> Result<String, WireError> {
    if text.len() > MAX_REPLY_BYTES {
        return Err(WireError::ReplyTooLarge {
            api: ctx.api,
            len: text.len(),
            max: MAX_REPLY_BYTES,
        });
    }
    Ok(text)
}
