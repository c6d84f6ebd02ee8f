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
    /// No response: the connection failed, timed out, or the body broke off.
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
    /// The streamed reply failed or was refused ([`StreamError`]: cut off, a provider's
    /// error event, malformed, over a limit, or a reply the session refuses).
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
