//! Why a body cannot be read, and the largest one read.

use super::shape::{Which, shape_name};
use prompt_core::ApiKind;

/// The largest body the guard reads; a longer one is refused before parsing.
pub const MAX_AUDIT_BODY_BYTES: usize = 32 << 20;

/// Why two bodies cannot be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// A body over [`MAX_AUDIT_BODY_BYTES`]; nothing was read.
    #[error("the {body} body is {len} bytes, over the {max}-byte limit")]
    TooLarge {
        /// Which body.
        body: Which,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A body that is not one JSON object with unique keys.
    #[error("the {body} body is {problem}")]
    NotAnObject {
        /// Which body.
        body: Which,
        /// What it is instead.
        problem: String,
    },
    /// A body of none of the known shapes.
    #[error(
        "the {body} body has none of `messages`, `input`/`instructions`, `contents`/`systemInstruction` (keys: {keys})"
    )]
    UnknownShape {
        /// Which body.
        body: Which,
        /// Its top-level keys, comma-separated (at most 200 bytes).
        keys: String,
    },
    /// Two bodies of different APIs.
    #[error(
        "the earlier body is a {} body, the later one a {} body",
        shape_name(*.earlier),
        shape_name(*.later)
    )]
    ShapeMismatch {
        /// The earlier body's shape.
        earlier: ApiKind,
        /// The later body's shape.
        later: ApiKind,
    },
    /// A known shape with a field of the wrong type.
    #[error("the {body} body's {at} is {problem}")]
    Malformed {
        /// Which body.
        body: Which,
        /// Where (`messages[3].content`).
        at: String,
        /// What is wrong.
        problem: String,
    },
}
