//! The provider's own cache signal beside the guard's: Anthropic's cache diagnostics say
//! why a request missed (`cache_miss_reason.type`), the guard says it locally and more
//! finely (which tool, which message, which byte); both under the provider's reason names.
//!
//! ```
//! use prompt_wire::{CacheDiagnostics, MissReason, MissReport, compare};
//! let earlier = br#"{"model":"m","tools":[{"name":"a","input_schema":{}}],"system":"S","messages":[{"role":"user","content":"hi"}]}"#;
//! let later = br#"{"model":"m","tools":[{"name":"b","input_schema":{}}],"system":"S","messages":[{"role":"user","content":"hi"}]}"#;
//! let provider = CacheDiagnostics::parse(
//!     r#"{"cache_miss_reason":{"type":"tools_changed","cache_missed_input_tokens":1200}}"#)?;
//! let report = MissReport::new(Some(provider), &compare(earlier, later)?);
//! assert_eq!(report.guard.as_ref().map(|g| g.reason.clone()), Some(MissReason::ToolsChanged));
//! assert_eq!(report.agree(), Some(true));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use serde::Serialize;

use crate::engine::{Break, Cause, Place};
use crate::error::WireError;
use crate::guard::Verdict;
use crate::raw::{self, Object};
use prompt_core::input::{EXCERPT_BYTES, excerpt};

/// Why a request missed the cache, as Anthropic's cache diagnostics name it
/// (`cache_miss_reason.type`), with OpenAI's name for a changed `prompt_cache_key`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MissReason {
    /// `model_changed`.
    ModelChanged,
    /// `system_changed`.
    SystemChanged,
    /// `tools_changed`.
    ToolsChanged,
    /// `messages_changed`.
    MessagesChanged,
    /// `previous_message_not_found`: the previous reply is unknown to the provider (too
    /// old, another workspace); not evidence that the request changed.
    PreviousMessageNotFound,
    /// `unavailable`: no conclusive comparison (another prompt-affecting parameter such as
    /// `tool_choice` or `thinking` differs, or the divergence is beyond the horizon).
    Unavailable,
    /// `prompt_cache_key_changed` (OpenAI's prompt cache diagnostics).
    PromptCacheKeyChanged,
    /// A name this crate does not know (at most 256 bytes of it).
    Other(String),
}

impl MissReason {
    /// The provider's name for it.
    pub fn as_str(&self) -> &str {
        match self {
            MissReason::ModelChanged => "model_changed",
            MissReason::SystemChanged => "system_changed",
            MissReason::ToolsChanged => "tools_changed",
            MissReason::MessagesChanged => "messages_changed",
            MissReason::PreviousMessageNotFound => "previous_message_not_found",
            MissReason::Unavailable => "unavailable",
            MissReason::PromptCacheKeyChanged => "prompt_cache_key_changed",
            MissReason::Other(name) => name,
        }
    }

    /// The reason of that name.
    pub fn from_name(name: &str) -> MissReason {
        match name {
            "model_changed" => MissReason::ModelChanged,
            "system_changed" => MissReason::SystemChanged,
            "tools_changed" => MissReason::ToolsChanged,
            "messages_changed" => MissReason::MessagesChanged,
            "previous_message_not_found" => MissReason::PreviousMessageNotFound,
            "unavailable" => MissReason::Unavailable,
            "prompt_cache_key_changed" => MissReason::PromptCacheKeyChanged,
            other => MissReason::Other(excerpt(other, EXCERPT_BYTES).into_owned()),
        }
    }
}

impl fmt::Display for MissReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Cause {
    /// The provider's name for this cause: the engine's finer causes folded into Anthropic's
    /// six (an edited tool is `tools_changed`, text hoisted into the system field is
    /// `system_changed`, a message edited, inserted, removed or reordered, a compaction or a
    /// dropped tail is `messages_changed`; a changed header or parameter such as
    /// `tool_choice` or `thinking`, and the causes no byte shows, are what Anthropic answers
    /// `unavailable` to; a cold start is `previous_message_not_found`).
    pub fn miss_reason(&self) -> MissReason {
        match self {
            Cause::ModelChanged => MissReason::ModelChanged,
            Cause::CacheKeyChanged => MissReason::PromptCacheKeyChanged,
            Cause::ToolsChanged { .. } => MissReason::ToolsChanged,
            Cause::SystemChanged
            | Cause::InsertAboveHistory {
                hoisted: Some(_), ..
            } => MissReason::SystemChanged,
            Cause::InsertAboveHistory { .. }
            | Cause::EditInPlace
            | Cause::Removed
            | Cause::Reorder
            | Cause::Compaction
            | Cause::TailDropped => MissReason::MessagesChanged,
            Cause::ColdStart => MissReason::PreviousMessageNotFound,
            Cause::HeaderOrParamChanged { .. }
            | Cause::SerializationOnly
            | Cause::BreakpointMoved
            | Cause::LookbackExceeded
            | Cause::BelowMinimum
            | Cause::TtlExpired
            | Cause::ProviderSide
            | Cause::Unknown => MissReason::Unavailable,
        }
    }
}

/// A reply's `diagnostics` object, read: Anthropic's answer to
/// `diagnostics.previous_message_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheDiagnostics {
    /// Why the request missed; `None` when `cache_miss_reason` is `null`: the comparison was
    /// still running when the reply was written (check the next turn).
    pub reason: Option<MissReason>,
    /// The provider's estimate of the input tokens that missed (on the four `*_changed`
    /// reasons), from byte lengths: a magnitude, not a bill.
    pub missed_input_tokens: Option<u64>,
}

impl CacheDiagnostics {
    /// Reads a `diagnostics` object (as [`Reply::diagnostics`](crate::Reply::diagnostics)
    /// holds it).
    pub fn parse(json: &str) -> Result<CacheDiagnostics, WireError> {
        let bad = |at: &str, problem: String| WireError::Reply {
            api: crate::api_name(prompt_core::ApiKind::Anthropic),
            at: at.to_owned(),
            problem,
        };
        let top = Object::parse(json).map_err(|p| bad("diagnostics", p.to_string()))?;
        let Some(reason) = top.get("cache_miss_reason").filter(|r| !raw::is_null(r)) else {
            return Ok(CacheDiagnostics {
                reason: None,
                missed_input_tokens: None,
            });
        };
        let reason =
            Object::of(reason).map_err(|p| bad("diagnostics.cache_miss_reason", p.to_string()))?;
        let kind = reason.str("type").ok_or_else(|| {
            bad(
                "diagnostics.cache_miss_reason.type",
                "missing or not a string".to_owned(),
            )
        })?;
        let missed = match reason.get("cache_missed_input_tokens") {
            None => None,
            Some(raw) if raw::is_null(raw) => None,
            Some(raw) => Some(raw.get().parse::<u64>().map_err(|_| {
                bad(
                    "diagnostics.cache_miss_reason.cache_missed_input_tokens",
                    format!("{}, not an integer in 0..=2^64-1", excerpt(raw.get(), 64)),
                )
            })?),
        };
        Ok(CacheDiagnostics {
            reason: Some(MissReason::from_name(&kind)),
            missed_input_tokens: missed,
        })
    }
}

/// What the guard found for the same pair of bodies, under the provider's reason name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GuardReason {
    /// The provider's name for the guard's cause.
    pub reason: MissReason,
    /// The guard's break: where (`tools[1]`, `message 4, block 2`) and why, finer.
    pub at: Break,
}

/// The provider's diagnosis and the guard's, side by side.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissReport {
    /// What the provider answered (`None`: the reply had no `diagnostics`, which Anthropic
    /// omits when nothing diverged or nothing was asked).
    pub provider: Option<CacheDiagnostics>,
    /// What the guard says of the two bodies (`None`: the later body extends the earlier).
    pub guard: Option<GuardReason>,
}

impl MissReport {
    /// The provider's diagnosis beside the guard's `verdict` on the same two bodies.
    pub fn new(provider: Option<CacheDiagnostics>, verdict: &Verdict) -> MissReport {
        let guard = match verdict {
            Verdict::Extends { .. } => None,
            Verdict::Breaks(b) => Some(GuardReason {
                reason: b.cause.miss_reason(),
                at: b.clone(),
            }),
        };
        MissReport { provider, guard }
    }

    /// Whether the two name the same reason: `Some(true)` when both found the same one, or
    /// the guard found nothing and the provider reported no reason; `Some(false)` when
    /// they differ; `None` when the provider's answer is no verdict on the request
    /// (pending, `previous_message_not_found`, `unavailable` for a reason the guard does not
    /// see).
    pub fn agree(&self) -> Option<bool> {
        let provider = self.provider.as_ref().and_then(|p| p.reason.as_ref());
        let guard = self.guard.as_ref().map(|g| &g.reason);
        match (provider, guard) {
            (Some(MissReason::PreviousMessageNotFound), _) => None,
            (Some(MissReason::Unavailable), Some(MissReason::Unavailable)) => Some(true),
            (Some(MissReason::Unavailable), _) => None,
            (None, _) if self.provider.is_some() => None,
            (p, g) => Some(p == g),
        }
    }

    /// The place the guard names, if it found a break.
    pub fn place(&self) -> Option<&Place> {
        self.guard.as_ref().map(|g| &g.at.place)
    }
}

impl fmt::Display for MissReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.provider {
            None => f.write_str("provider: no diagnostics")?,
            Some(CacheDiagnostics { reason: None, .. }) => {
                f.write_str("provider: comparison pending")?;
            }
            Some(CacheDiagnostics {
                reason: Some(reason),
                missed_input_tokens,
            }) => {
                write!(f, "provider: {reason}")?;
                if let Some(n) = missed_input_tokens {
                    write!(f, " (~{n} input tokens missed)")?;
                }
            }
        }
        match &self.guard {
            None => f.write_str("; guard: extends"),
            Some(g) => write!(f, "; guard: {} — {}", g.reason, g.at),
        }
    }
}
