//! Why a request failed.

use prompt_wire::stream::StreamError;
use prompt_wire::{ConversationError, WireError};

/// Most bytes of an error response's body read for [`ClientError::Status`].
pub const MAX_ERROR_BODY_BYTES: usize = 4096;

/// Most bytes of that body quoted in the error.
pub const ERROR_EXCERPT_BYTES: usize = 512;

/// Why a request was not sent, not answered, or its reply not recorded. Nothing is recorded
/// into the conversation on any of them.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The body could not be composed.
    #[error(transparent)]
    Compose(#[from] ConversationError),
    /// The wire's `stream` parameter does not say what was asked: a streamed reply needs
    /// `"stream": true` among its parameters (but for Gemini, which streams by URL), a
    /// whole reply needs it absent or false.
    #[error(
        "{api:?}: a {} reply was asked for, but the wire's parameters {}",
        if *.streaming { "streamed" } else { "whole" },
        if *.streaming { "do not set \"stream\": true" } else { "set \"stream\": true" }
    )]
    StreamParameter {
        /// The API.
        api: prompt_core::ApiKind,
        /// Whether a streamed reply was asked for.
        streaming: bool,
    },
    /// A header name or value (the routing header, the key) is not a valid HTTP header.
    #[error("the {name:?} header cannot be sent: not a valid HTTP header name or value")]
    Header {
        /// The header's name (at most 64 bytes of it).
        name: String,
    },
    /// No response: the connection failed or timed out before the response's status came.
    /// The request may or may not have reached the server; nothing was shown and nothing
    /// recorded: send it again with [`Next::resend`](prompt_wire::Next::resend).
    #[error("{url}: no response after {attempts} attempt(s): {}", prompt_core::input::chain(.source))]
    Transport {
        /// The URL.
        url: String,
        /// Requests sent.
        attempts: u32,
        /// reqwest's error.
        #[source]
        source: reqwest::Error,
    },
    /// The response began (a success status came, and maybe events were shown) and its body
    /// broke off, or ended, before the reply's last event: the answer was cut. Nothing was
    /// recorded; what was shown of it is [`text`](ClientError::Cut::text). The server
    /// processed (and cached) the prompt: [`Next::resend`](prompt_wire::Next::resend) sends
    /// the same bytes again and costs little more than the generation; the partial text
    /// shown should be replaced by the new reply's.
    #[error(
        "{url}: the reply was cut off after {events} event(s) and {received} byte(s) of its body{}; nothing was recorded (send it again with Next::resend)",
        cut_detail(.missing, .source)
    )]
    Cut {
        /// The URL.
        url: String,
        /// Requests sent.
        attempts: u32,
        /// The server-sent events read before the cut (0 for a whole reply, which has none).
        events: u64,
        /// The bytes of the response's body received before the cut.
        received: u64,
        /// The reply's text shown before the cut (its
        /// [`TextDelta`](prompt_wire::stream::StreamEvent::TextDelta)s joined).
        text: String,
        /// The API's last event, which never came (`data: [DONE]`, `message_stop`,
        /// `response.completed`, a chunk with a `finishReason`); `None` for a whole reply.
        missing: Option<&'static str>,
        /// Why the body ended: the transport's error when the connection broke; `None` when
        /// the server closed it cleanly before the reply's end.
        #[source]
        source: Option<reqwest::Error>,
    },
    /// The server answered with an error status.
    #[error("{url}: HTTP {status} after {attempts} attempt(s): {excerpt}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
        /// Requests sent.
        attempts: u32,
        /// The start of the body ([`ERROR_EXCERPT_BYTES`] at most, lossily UTF-8).
        excerpt: String,
    },
    /// A whole reply longer than [`prompt_wire::MAX_REPLY_BYTES`].
    #[error("{url}: the reply goes over {max} bytes")]
    TooLarge {
        /// The URL.
        url: String,
        /// The limit.
        max: usize,
    },
    /// The streamed reply failed or was refused ([`StreamError`]: a provider's error event,
    /// malformed, over a limit, or a reply the session refuses; a reply cut off is
    /// [`ClientError::Cut`]).
    #[error(transparent)]
    Stream(#[from] StreamError),
    /// [`ReplyStream::finish`](crate::ReplyStream::finish) on a stream that has already
    /// given its error: nothing was recorded.
    #[error("the stream has already ended with an error; nothing was recorded")]
    Spent,
    /// The whole reply was refused or could not be recorded ([`WireError`]).
    #[error(transparent)]
    Record(#[from] WireError),
}

/// `, before message_stop: connection reset` — what never came and why the body ended.
fn cut_detail(missing: &Option<&'static str>, source: &Option<reqwest::Error>) -> String {
    let mut out = String::new();
    if let Some(missing) = missing {
        out.push_str(", before ");
        out.push_str(missing);
    }
    match source {
        Some(source) => {
            out.push_str(": ");
            out.push_str(&prompt_core::input::chain(source));
        }
        None => out.push_str(": the server closed the connection"),
    }
    out
}
