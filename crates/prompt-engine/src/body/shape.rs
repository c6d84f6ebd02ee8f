//! What a body is: its API (`prompt_core::ApiKind`, read from its keys, named as a shape by
//! [`shape_name`] and [`serialize_shape`]), and which body of a comparison an error names
//! ([`Which`]).

use std::fmt;

use prompt_core::ApiKind;
use serde::Serialize;

/// A body's API as messages name its shape: `Chat Completions`, `Responses`, `Anthropic
/// Messages`, `Gemini` (a llama.cpp server's body is read as Chat Completions').
pub fn shape_name(api: ApiKind) -> &'static str {
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => "Chat Completions",
        ApiKind::OpenAiResponses => "Responses",
        ApiKind::Anthropic => "Anthropic Messages",
        ApiKind::Gemini => "Gemini",
    }
}

/// A body's API as the audit's JSON names its shape: `chat_completions`, `responses`,
/// `anthropic`, `gemini` (`#[serde(serialize_with = "…")]` on a field of the engine's
/// values).
pub fn serialize_shape<S: serde::Serializer>(api: &ApiKind, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => "chat_completions",
        ApiKind::OpenAiResponses => "responses",
        ApiKind::Anthropic => "anthropic",
        ApiKind::Gemini => "gemini",
    })
}

/// Which of the two bodies (or the one body read by [`body_parts`](crate::body_parts)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Which {
    /// The earlier body.
    Earlier,
    /// The later body.
    Later,
    /// A body read alone ([`body_parts`](crate::body_parts)).
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

impl Evidence {
    /// Adds `other`'s evidence to this.
    pub(crate) fn add(&mut self, other: Evidence) {
        self.anthropic |= other.anthropic;
        self.chat |= other.chat;
    }
}

/// What a body is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// A comparison: every message is also read as compared, for its hash.
    Compare,
    /// Its parts alone ([`body_parts`](crate::body_parts)): as sent, in order.
    Parts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Messages,
    Responses,
    Gemini,
}
