//! What can go wrong composing a body or recording a reply.

use prompt_core::ComposeError;
use prompt_core::node::Producer;

/// Why a body cannot be composed, or a reply cannot be read or recorded.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// A `prompt_cache_key` to keep ([`Wire::keep_cache_key`](crate::Wire::keep_cache_key))
    /// over the limit.
    #[error("the prompt_cache_key to keep is {len} bytes, over the limit of {max}")]
    CacheKeyTooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A parameter would overwrite a key the library writes itself.
    #[error(
        "parameter \"{key}\" is written by the library for {api} bodies; it cannot be set as an extra parameter"
    )]
    ReservedParameter {
        /// The parameter.
        key: String,
        /// The API.
        api: &'static str,
    },
    /// A parameter the API requires is not set.
    #[error("{api} requires the parameter \"{key}\"; set it with WireOptions::param")]
    MissingParameter {
        /// The parameter.
        key: &'static str,
        /// The API.
        api: &'static str,
    },
    /// A parameter given as JSON text is not JSON.
    #[error("parameter \"{key}\" is not valid JSON: {}", prompt_core::input::chain(.source))]
    InvalidParameter {
        /// The parameter.
        key: String,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A request of another session than the one this wire serves (the session id of its
    /// first body). A branch has a session id of its own: give it a wire of its own
    /// (`Wire::fork_for`), or use a `Conversation`, which does.
    #[error(
        "the request belongs to session {found:?}; this wire serves session {expected:?}: use one Wire per session"
    )]
    OtherSession {
        /// The session this wire serves (at most 64 bytes of its id).
        expected: String,
        /// The request's session (at most 64 bytes of its id).
        found: String,
    },
    /// A history node that cannot be written in the API's shape.
    #[error("history node {index} (from {producer}) cannot be sent to {api}: {problem}")]
    Node {
        /// Its index in the history.
        index: usize,
        /// Who wrote it.
        producer: Producer,
        /// The API.
        api: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// A reply body over the size limit; nothing was read.
    #[error("the {api} reply is {len} bytes, over the {max}-byte limit")]
    ReplyTooLarge {
        /// The API.
        api: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A reply body that is not the API's response shape.
    #[error("the {api} reply is not a response: {problem} (at {at})")]
    Reply {
        /// The API.
        api: &'static str,
        /// Where in the body, as a path (`choices[0].message`).
        at: String,
        /// What is wrong.
        problem: String,
    },
    /// The provider answered with an error object.
    #[error("the {api} reply is an error: {message}")]
    ProviderError {
        /// The API.
        api: &'static str,
        /// The provider's message (at most 512 bytes of it).
        message: String,
    },
    /// The provider answered without a message to record (a blocked prompt, an empty
    /// candidate list).
    #[error("the {api} reply holds no message to record: {reason}")]
    NoMessage {
        /// The API.
        api: &'static str,
        /// The provider's reason, when it gave one.
        reason: String,
    },
    /// A function call of the current turn built from an OpenAI-shaped message, so without
    /// the `thoughtSignature` the provider's profile requires (Gemini 3 answers 400).
    #[error(
        "history node {index} holds a function call without its thoughtSignature, which {api} model `{model}` requires (it answers 400): record the model's replies through Wire::record_reply, which keeps their parts as sent"
    )]
    UnsignedCalls {
        /// The node's index in the history.
        index: usize,
        /// The API.
        api: &'static str,
        /// The model (at most 64 bytes of its name).
        model: String,
    },
    /// The session refused the reply's message (its tool calls wait for results, …).
    #[error("the session refused the reply's message: {}", prompt_core::input::chain(.0))]
    Record(#[source] ComposeError),
}
