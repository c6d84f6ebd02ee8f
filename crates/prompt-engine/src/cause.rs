//! The one closed list of reasons a request read less of a provider's cache than it could,
//! and where in the request each change is.

use std::fmt;

use prompt_core::divergence::Divergence;
use serde::Serialize;

use prompt_core::ApiKind;

use crate::body::shape::{serialize_shape, shape_name};
use crate::canon::{Block, Canonical};

/// How a tool changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChange {
    /// A tool the earlier request did not have.
    Added,
    /// A tool of the earlier request is gone.
    Removed,
    /// A tool's definition changed (its name kept).
    Edited,
    /// The same tools in another order.
    Reordered,
}

/// Why a request read less of the cache than its predecessor left there: one closed list,
/// a superset of the reasons Anthropic's cache diagnostics (`model_changed`,
/// `system_changed`, `tools_changed`, `messages_changed`) and OpenAI's Responses diagnostics
/// (model, `prompt_cache_key`, tools, text format, reasoning effort, verbosity, context
/// compacted, input, service tier) name. The documented meaning of each is in
/// `docs/measurements.md` ("The comparison engine").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum Cause {
    /// The first request of its session and model: nothing could be cached yet.
    ColdStart,
    /// Another model (or another endpoint): caches are per model.
    ModelChanged,
    /// Another `prompt_cache_key`: the request is routed to another cache.
    CacheKeyChanged,
    /// A header or a parameter that keys the cache changed (`anthropic-beta`,
    /// `tool_choice`, `thinking`, reasoning effort, verbosity, text format, service tier).
    HeaderOrParamChanged {
        /// The header (`header:anthropic-beta`) or parameter (`reasoning.effort`).
        name: String,
    },
    /// The tools changed.
    ToolsChanged {
        /// How.
        change: ToolChange,
        /// The tool (its name as sent, bounded).
        name: String,
    },
    /// The system field (or the leading system messages) was rewritten.
    SystemChanged,
    /// Content was put above part of the history: messages inserted before earlier ones, or
    /// text added to the system field that an append-only client appends as a message
    /// (hoisting).
    InsertAboveHistory {
        /// Messages inserted (0 for text hoisted into the system field).
        count: usize,
        /// The start of the text hoisted into the system field, if that is what happened.
        #[serde(skip_serializing_if = "Option::is_none")]
        hoisted: Option<String>,
    },
    /// A message the earlier request had was edited in place.
    EditInPlace,
    /// A message of the earlier request is gone; the ones after it moved up.
    Removed,
    /// The same messages (or tools) in another order.
    Reorder,
    /// The history was replaced by a shorter one (a summary, or a provider's compaction item).
    Compaction,
    /// Only the earlier request's end is not carried over: a per-request (ephemeral) tail.
    TailDropped,
    /// Different bytes, the same prompt as the provider caches it (a string content re-sent
    /// as its one text block, key order, whitespace, `cache_control` markers): no token is
    /// lost.
    SerializationOnly,
    /// Anthropic: the bytes extend the predecessor, but no breakpoint of this request reaches
    /// back to where the predecessor wrote the cache.
    BreakpointMoved,
    /// Anthropic: this request's breakpoints are more blocks past the predecessor's cache
    /// write than the provider looks back.
    LookbackExceeded,
    /// The unchanged prefix is shorter than the provider's minimum cacheable prefix.
    BelowMinimum,
    /// The gap since the predecessor is longer than the cache lifetime the request asked
    /// for (per provider profile).
    TtlExpired,
    /// Same prefix, within its lifetime, yet the provider read less than the prefix should
    /// have given ("floor pinned").
    ProviderSide,
    /// The provider read less than expected and nothing in the bytes or the timing says why.
    Unknown,
}

/// The kind of a [`Cause`], without its fields: what summaries and metrics count by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CauseKind {
    /// [`Cause::ColdStart`].
    ColdStart,
    /// [`Cause::ModelChanged`].
    ModelChanged,
    /// [`Cause::CacheKeyChanged`].
    CacheKeyChanged,
    /// [`Cause::HeaderOrParamChanged`].
    HeaderOrParamChanged,
    /// [`Cause::ToolsChanged`].
    ToolsChanged,
    /// [`Cause::SystemChanged`].
    SystemChanged,
    /// [`Cause::InsertAboveHistory`].
    InsertAboveHistory,
    /// [`Cause::EditInPlace`].
    EditInPlace,
    /// [`Cause::Removed`].
    Removed,
    /// [`Cause::Reorder`].
    Reorder,
    /// [`Cause::Compaction`].
    Compaction,
    /// [`Cause::TailDropped`].
    TailDropped,
    /// [`Cause::SerializationOnly`].
    SerializationOnly,
    /// [`Cause::BreakpointMoved`].
    BreakpointMoved,
    /// [`Cause::LookbackExceeded`].
    LookbackExceeded,
    /// [`Cause::BelowMinimum`].
    BelowMinimum,
    /// [`Cause::TtlExpired`].
    TtlExpired,
    /// [`Cause::ProviderSide`].
    ProviderSide,
    /// [`Cause::Unknown`].
    Unknown,
}

impl CauseKind {
    /// Every kind, in the order of the enum.
    pub const ALL: [CauseKind; 19] = [
        CauseKind::ColdStart,
        CauseKind::ModelChanged,
        CauseKind::CacheKeyChanged,
        CauseKind::HeaderOrParamChanged,
        CauseKind::ToolsChanged,
        CauseKind::SystemChanged,
        CauseKind::InsertAboveHistory,
        CauseKind::EditInPlace,
        CauseKind::Removed,
        CauseKind::Reorder,
        CauseKind::Compaction,
        CauseKind::TailDropped,
        CauseKind::SerializationOnly,
        CauseKind::BreakpointMoved,
        CauseKind::LookbackExceeded,
        CauseKind::BelowMinimum,
        CauseKind::TtlExpired,
        CauseKind::ProviderSide,
        CauseKind::Unknown,
    ];

    /// The JSON spelling (`tools_changed`).
    pub fn as_str(self) -> &'static str {
        match self {
            CauseKind::ColdStart => "cold_start",
            CauseKind::ModelChanged => "model_changed",
            CauseKind::CacheKeyChanged => "cache_key_changed",
            CauseKind::HeaderOrParamChanged => "header_or_param_changed",
            CauseKind::ToolsChanged => "tools_changed",
            CauseKind::SystemChanged => "system_changed",
            CauseKind::InsertAboveHistory => "insert_above_history",
            CauseKind::EditInPlace => "edit_in_place",
            CauseKind::Removed => "removed",
            CauseKind::Reorder => "reorder",
            CauseKind::Compaction => "compaction",
            CauseKind::TailDropped => "tail_dropped",
            CauseKind::SerializationOnly => "serialization_only",
            CauseKind::BreakpointMoved => "breakpoint_moved",
            CauseKind::LookbackExceeded => "lookback_exceeded",
            CauseKind::BelowMinimum => "below_minimum",
            CauseKind::TtlExpired => "ttl_expired",
            CauseKind::ProviderSide => "provider_side",
            CauseKind::Unknown => "unknown",
        }
    }

    /// Whether a change of this kind loses cached tokens when it is the first one. A
    /// serialization-only change loses none.
    pub fn loses_tokens(self) -> bool {
        !matches!(self, CauseKind::SerializationOnly)
    }
    /// Whether a change of this kind is in the prompt's text (its tools, system, messages or
    /// breakpoints), rather than in what keys the cache beside it (the model, the cache key,
    /// a header or parameter) or in what only timing and usage tell.
    pub fn in_the_prompt(self) -> bool {
        matches!(
            self,
            CauseKind::ToolsChanged
                | CauseKind::SystemChanged
                | CauseKind::InsertAboveHistory
                | CauseKind::EditInPlace
                | CauseKind::Removed
                | CauseKind::Reorder
                | CauseKind::Compaction
                | CauseKind::TailDropped
                | CauseKind::BreakpointMoved
                | CauseKind::LookbackExceeded
        )
    }
}

impl fmt::Display for CauseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Cause {
    /// Its kind.
    pub fn kind(&self) -> CauseKind {
        match self {
            Cause::ColdStart => CauseKind::ColdStart,
            Cause::ModelChanged => CauseKind::ModelChanged,
            Cause::CacheKeyChanged => CauseKind::CacheKeyChanged,
            Cause::HeaderOrParamChanged { .. } => CauseKind::HeaderOrParamChanged,
            Cause::ToolsChanged { .. } => CauseKind::ToolsChanged,
            Cause::SystemChanged => CauseKind::SystemChanged,
            Cause::InsertAboveHistory { .. } => CauseKind::InsertAboveHistory,
            Cause::EditInPlace => CauseKind::EditInPlace,
            Cause::Removed => CauseKind::Removed,
            Cause::Reorder => CauseKind::Reorder,
            Cause::Compaction => CauseKind::Compaction,
            Cause::TailDropped => CauseKind::TailDropped,
            Cause::SerializationOnly => CauseKind::SerializationOnly,
            Cause::BreakpointMoved => CauseKind::BreakpointMoved,
            Cause::LookbackExceeded => CauseKind::LookbackExceeded,
            Cause::BelowMinimum => CauseKind::BelowMinimum,
            Cause::TtlExpired => CauseKind::TtlExpired,
            Cause::ProviderSide => CauseKind::ProviderSide,
            Cause::Unknown => CauseKind::Unknown,
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::ColdStart => f.write_str("the first request of its session and model"),
            Cause::ModelChanged => f.write_str("the model changed"),
            Cause::CacheKeyChanged => f.write_str("the prompt_cache_key changed"),
            Cause::HeaderOrParamChanged { name } => write!(f, "`{name}` changed"),
            Cause::ToolsChanged { change, name } => match change {
                ToolChange::Added => write!(f, "tool `{name}` was added"),
                ToolChange::Removed => write!(f, "tool `{name}` was removed"),
                ToolChange::Edited => write!(f, "tool `{name}` was edited"),
                ToolChange::Reordered => write!(f, "the tools were reordered (`{name}` moved)"),
            },
            Cause::SystemChanged => f.write_str("the system field was rewritten"),
            Cause::InsertAboveHistory {
                hoisted: Some(hoisted),
                ..
            } => write!(
                f,
                "hoisting: text was added to the system field instead of appended as a message ({hoisted:?})"
            ),
            Cause::InsertAboveHistory { count, .. } => {
                write!(f, "{count} message(s) were inserted above the history")
            }
            Cause::EditInPlace => f.write_str("a message was edited in place"),
            Cause::Removed => f.write_str("a message was removed"),
            Cause::Reorder => f.write_str("the messages were reordered"),
            Cause::Compaction => f.write_str("the history was compacted"),
            Cause::TailDropped => f.write_str("the earlier request's end is not carried over"),
            Cause::SerializationOnly => {
                f.write_str("the same prompt, serialized differently (no token lost)")
            }
            Cause::BreakpointMoved => {
                f.write_str("no breakpoint reaches back to the predecessor's cache write")
            }
            Cause::LookbackExceeded => {
                f.write_str("the breakpoints are past the provider's lookback window")
            }
            Cause::BelowMinimum => {
                f.write_str("the unchanged prefix is below the provider's minimum")
            }
            Cause::TtlExpired => f.write_str("the cache lifetime lapsed between the requests"),
            Cause::ProviderSide => {
                f.write_str("the provider read less than the unchanged prefix within its lifetime")
            }
            Cause::Unknown => f.write_str("the provider read less than expected, cause unknown"),
        }
    }
}

/// Where a change is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "place", rename_all = "snake_case")]
pub enum Place {
    /// The request as a whole (its timing, the provider's reading of it).
    Request,
    /// The `model` (in the body, or Gemini's in the URL).
    Model,
    /// The `prompt_cache_key`.
    CacheKey,
    /// A parameter that keys the provider's cache.
    Parameter {
        /// Its name (`tool_choice`, `reasoning.effort`).
        name: String,
    },
    /// A header that keys the provider's cache.
    Header {
        /// Its lower-case name.
        name: String,
    },
    /// The tools field, at this tool (in the later request's order; a removed tool at its
    /// earlier index).
    Tools {
        /// The tool's index.
        index: usize,
    },
    /// The system field (Anthropic `system`, Gemini `systemInstruction`, Responses
    /// `instructions`, or the leading system messages), at this block.
    System {
        /// The block's index.
        block: usize,
    },
    /// A message (Responses: an input item; Gemini: a content).
    Message {
        /// Its index in the body's messages array.
        index: usize,
        /// The content block, for APIs of content blocks.
        block: Option<usize>,
    },
}

impl Place {
    /// The element at this place in `request`: a tool, a system block, a message (found by
    /// its index in the body's array) or one of its content blocks; `None` for a place that
    /// names no element or one `request` lacks (content blocks are read from the body, so
    /// none once it is let go).
    pub fn element_in(&self, request: &Canonical<'_>) -> Option<Block> {
        match self {
            Place::Tools { index } => request.tools.get(*index).map(|t| t.block),
            Place::System { block } => request.system.get(*block).copied(),
            Place::Message { index, block } => {
                let m = request
                    .messages
                    .iter()
                    .find(|m| m.index as usize == *index)?;
                match block {
                    None => Some(m.block),
                    Some(j) => request.content_of(m).get(*j).copied(),
                }
            }
            _ => None,
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Place::Request => f.write_str("the request"),
            Place::Model => f.write_str("model"),
            Place::CacheKey => f.write_str("prompt_cache_key"),
            Place::Parameter { name } => write!(f, "parameter {name}"),
            Place::Header { name } => write!(f, "header {name}"),
            Place::Tools { index } => write!(f, "tools[{index}]"),
            Place::System { block } => write!(f, "system block {block}"),
            Place::Message {
                index,
                block: Some(block),
            } => write!(f, "message {index}, block {block}"),
            Place::Message { index, block: None } => write!(f, "message {index}"),
        }
    }
}

/// One change between a request and its predecessor: why, where, and the bytes around it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Why.
    #[serde(flatten)]
    pub cause: Cause,
    /// Where (flattened: `"place"` and its fields).
    #[serde(flatten)]
    pub place: Place,
    /// The JSON path in the later body (`tools[3]`, `messages[5].content[1]`, `model`,
    /// `headers.anthropic-beta`).
    pub json_path: String,
    /// The byte offset in the later body, and both sides' bytes around it (bounded).
    pub divergence: Divergence,
}

/// The first place where a later body stops extending an earlier one (the guard's view of
/// the engine's first change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Break {
    /// The bodies' API (in JSON, its shape: `chat_completions`, `anthropic`…).
    #[serde(serialize_with = "serialize_shape")]
    pub shape: ApiKind,
    /// Where (flattened into the break's JSON: `"place"` and its fields).
    #[serde(flatten)]
    pub place: Place,
    /// Why (flattened into the break's JSON: `"cause"` and its fields).
    #[serde(flatten)]
    pub cause: Cause,
    /// The position in the later body, with both sides' bytes around it (for Anthropic,
    /// without `cache_control`). `message_index` is set for a message.
    pub divergence: Divergence,
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} at {} (byte {} of the later body)",
            shape_name(self.shape),
            self.cause,
            self.place,
            self.divergence.byte_offset
        )
    }
}
