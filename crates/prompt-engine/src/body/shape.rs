//! What a body is: its API ([`Shape`]), read from its keys, and which body of a comparison
//! an error names ([`Which`]).

use std::fmt;

use serde::Serialize;

/// The shape of a body, recognised from its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Shape {
    /// OpenAI Chat Completions (and llama.cpp's server): `messages` with system messages.
    ChatCompletions,
    /// OpenAI Responses: `instructions` and `input`.
    Responses,
    /// Anthropic Messages: `system` and `messages` of content blocks.
    Anthropic,
    /// Gemini `generateContent`: `systemInstruction` and `contents`.
    Gemini,
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Shape::ChatCompletions => "Chat Completions",
            Shape::Responses => "Responses",
            Shape::Anthropic => "Anthropic Messages",
            Shape::Gemini => "Gemini",
        })
    }
}

/// Which of the two bodies (or the one body read by [`body_parts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Which {
    /// The earlier body.
    Earlier,
    /// The later body.
    Later,
    /// A body read alone ([`body_parts`]).
    Request,
}

impl fmt::Display for Which {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Which::Earlier => "earlier",
            Which::Later => "later",
            Which::Request => "request",
        })
    }
}

/// Evidence of the API a `messages` body is for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Evidence {
    pub(crate) anthropic: bool,
    pub(crate) chat: bool,
}

/// What a body is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// A comparison: every message is also read as compared, for its hash.
    Compare,
    /// Its parts alone ([`body_parts`]): as sent, in order.
    Parts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Messages,
    Responses,
    Gemini,
}
