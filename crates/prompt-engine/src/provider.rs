//! The provider's verdict beside the engine's, in one place: what Anthropic's cache
//! diagnostics or OpenAI's prompt cache diagnostics said of a request, read from the reply
//! ([`ProviderDiagnosis::parse`], [`reply_id`]), the engine's causes under the provider's
//! names ([`MissReason`], [`Cause::miss_reason_in`]), and the two reconciled
//! ([`ProviderVerdict::reconcile`]).
//!
//! | the provider says | the engine says | [`Agreement`] |
//! |---|---|---|
//! | the reason the engine's cause folds into | | `agree` |
//! | a change of the model, system, tools, messages or input | another, or none | `disagree` |
//! | no change | a byte change | `disagree` |
//! | no change | no change, yet fewer tokens read than expected, no lapse of the lifetime to blame | `provider_side` |
//! | the header or parameter the engine saw change (`service_tier_changed` for `service_tier`) | | `agree` |
//! | another header or parameter | a header or parameter changed | `disagree` |
//! | a cause the bytes do not show (`prompt_cache_key_changed`, `service_tier_changed`, a name this crate does not know) | no header or parameter changed | `provider_only` |
//! | `unavailable` | a header or parameter changed | `agree` (what Anthropic answers to one) |
//! | pending | | `pending` |
//! | previous reply not found, `unavailable`; or the engine has no predecessor | | `not_comparable` |
//!
//! ```
//! use prompt_engine::provider::{Agreement, ProviderDiagnosis, ProviderVerdict};
//! use prompt_engine::{Engine, EngineConfig, Exchange};
//! use prompt_core::ApiKind;
//! let earlier = br#"{"model":"m","tools":[{"name":"a","input_schema":{}}],"system":"S","messages":[{"role":"user","content":"hi"}]}"#;
//! let later = br#"{"model":"m","tools":[{"name":"b","input_schema":{}}],"system":"S","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"more"}]}"#;
//! let mut engine = Engine::new(EngineConfig::default());
//! let count = &mut |_: &prompt_engine::Canonical<'_>, b: &prompt_engine::Block| b.len;
//! engine.analyze(&Exchange::body(earlier), 1, count)?;
//! let analysis = engine.analyze(&Exchange::body(later), 2, count)?;
//! let said = ProviderDiagnosis::parse(ApiKind::Anthropic,
//!     r#"{"cache_miss_reason":{"type":"tools_changed","cache_missed_input_tokens":1200}}"#)?;
//! let verdict = ProviderVerdict::reconcile(said, &analysis, ApiKind::Anthropic);
//! assert_eq!(verdict.agreement, Agreement::Agree);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::borrow::Cow;
use std::fmt;

use prompt_core::ApiKind;
use prompt_core::input::{EXCERPT_BYTES, excerpt};
use serde::Serialize;

use crate::cause::Cause;
use crate::engine::Analysis;
use crate::raw::{self, Object};

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
    /// `input_changed` (OpenAI's prompt cache diagnostics: the instructions or the input).
    InputChanged,
    /// `service_tier_changed` (OpenAI's prompt cache diagnostics).
    ServiceTierChanged,
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
            MissReason::InputChanged => "input_changed",
            MissReason::ServiceTierChanged => "service_tier_changed",
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
            "input_changed" => MissReason::InputChanged,
            "service_tier_changed" => MissReason::ServiceTierChanged,
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

/// Why a reply's cache diagnostics could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {api} reply is not a response: {problem} (at {at})")]
pub struct DiagnosisError {
    /// The API.
    pub api: &'static str,
    /// Where in the diagnostics object, as a path (`diagnostics.cache_miss_reason.type`).
    pub at: String,
    /// What is wrong.
    pub problem: String,
}

/// The key a whole reply of `api` carries the provider's cache diagnostics under:
/// Anthropic's `diagnostics`, OpenAI Responses' `prompt_cache_diagnostics`.
pub fn reply_key(api: ApiKind) -> &'static str {
    match api {
        ApiKind::OpenAiResponses => "prompt_cache_diagnostics",
        _ => "diagnostics",
    }
}

impl Cause {
    /// The name `api`'s provider would give this cause in its cache diagnostics: Anthropic's
    /// ([`Cause::miss_reason`]) for Messages; for OpenAI Responses the engine's causes
    /// folded into OpenAI's (`model_changed`, `prompt_cache_key_changed`, `tools_changed`,
    /// `service_tier_changed`, and `input_changed` for any change to the instructions or the
    /// input); `unavailable` for what no byte shows or no name covers.
    pub fn miss_reason_in(&self, api: ApiKind) -> MissReason {
        if api != ApiKind::OpenAiResponses {
            return self.miss_reason();
        }
        match self {
            Cause::HeaderOrParamChanged { name } if name == "service_tier" => {
                MissReason::ServiceTierChanged
            }
            other => match other.miss_reason() {
                MissReason::SystemChanged | MissReason::MessagesChanged => MissReason::InputChanged,
                reason => reason,
            },
        }
    }
}

/// What a provider's cache diagnostics answered, read from either provider's shape.
///
/// Anthropic ([cache diagnostics](https://platform.claude.com/docs/en/build-with-claude/cache-diagnostics),
/// beta `cache-diagnosis-2026-04-07`): a reply's `diagnostics` object, in a stream on
/// `message_start`'s message; `cache_miss_reason` is `null` while the comparison still runs;
/// the object is absent (or `null`) when the comparison found no divergence. OpenAI
/// Responses ([prompt cache diagnostics](https://developers.openai.com/api/docs/guides/prompt-caching/diagnostics),
/// GPT-5.6 and later): a response's `prompt_cache_diagnostics`, tagged by `type`
/// (`cache_miss` with `reason`, `cache_missed_tokens` and `comparison_reusable_tokens`;
/// `cache_hit`; `comparison_response_not_found`; `unavailable`), in a stream on the
/// response `response.completed` carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ProviderDiagnosis {
    /// The comparison was still running when the reply was written (check the next turn).
    Pending,
    /// The provider found no divergence from the request it compared with.
    NoChange,
    /// The provider does not know the reply it was asked to compare with (too old, another
    /// workspace): no verdict on this request.
    NotFound,
    /// The provider could not compare conclusively.
    Unavailable,
    /// The provider saw a change.
    Miss {
        /// Its reason.
        reason: MissReason,
        /// Its estimate of the input tokens after the divergence.
        missed_tokens: Option<u64>,
        /// OpenAI: the tokens of the compared response's prompt that could have been reused.
        reusable_tokens: Option<u64>,
    },
}

/// The longest diagnostics object read, in bytes: a provider's is a few dozen.
pub const MAX_DIAGNOSTICS_BYTES: usize = 4096;

impl ProviderDiagnosis {
    /// Reads the raw cache diagnostics object of a reply of `api` (as
    /// `prompt_wire`'s `Reply::diagnostics` holds it; `null` reads as no
    /// divergence). A malformed or oversized object is an error naming what is wrong.
    pub fn parse(api: ApiKind, json: &str) -> Result<ProviderDiagnosis, DiagnosisError> {
        let bad = |at: &str, problem: String| DiagnosisError {
            api: api.name(),
            at: at.to_owned(),
            problem,
        };
        let key = reply_key(api);
        if json.len() > MAX_DIAGNOSTICS_BYTES {
            return Err(bad(
                key,
                format!(
                    "{} bytes, over the {MAX_DIAGNOSTICS_BYTES}-byte limit",
                    json.len()
                ),
            ));
        }
        if json.trim() == "null" {
            return Ok(ProviderDiagnosis::NoChange);
        }
        if api != ApiKind::OpenAiResponses {
            return parse_anthropic(json, &bad);
        }
        let top = Object::parse(json).map_err(|p| bad(key, p.to_string()))?;
        let kind = top.str("type").ok_or_else(|| {
            bad(
                "prompt_cache_diagnostics.type",
                "missing or not a string".to_owned(),
            )
        })?;
        let count = |name: &str| -> Result<Option<u64>, DiagnosisError> {
            match top.get(name) {
                None => Ok(None),
                Some(raw) if raw::is_null(raw) => Ok(None),
                Some(raw) => raw.get().parse::<u64>().map(Some).map_err(|_| {
                    bad(
                        &format!("prompt_cache_diagnostics.{name}"),
                        format!("{}, not an integer in 0..=2^64-1", excerpt(raw.get(), 64)),
                    )
                }),
            }
        };
        Ok(match kind.as_ref() {
            "cache_hit" => ProviderDiagnosis::NoChange,
            "comparison_response_not_found" => ProviderDiagnosis::NotFound,
            "unavailable" => ProviderDiagnosis::Unavailable,
            "cache_miss" => {
                let reason = top.str("reason").ok_or_else(|| {
                    bad(
                        "prompt_cache_diagnostics.reason",
                        "missing or not a string".to_owned(),
                    )
                })?;
                ProviderDiagnosis::Miss {
                    reason: MissReason::from_name(&reason),
                    missed_tokens: count("cache_missed_tokens")?,
                    reusable_tokens: count("comparison_reusable_tokens")?,
                }
            }
            other => {
                return Err(bad(
                    "prompt_cache_diagnostics.type",
                    format!("`{}`, not a type this reader knows", excerpt(other, 64)),
                ));
            }
        })
    }
}

impl fmt::Display for ProviderDiagnosis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderDiagnosis::Pending => f.write_str("comparison pending"),
            ProviderDiagnosis::NoChange => f.write_str("no change"),
            ProviderDiagnosis::NotFound => f.write_str("previous reply not found"),
            ProviderDiagnosis::Unavailable => f.write_str("unavailable"),
            ProviderDiagnosis::Miss { reason, .. } => write!(f, "{reason}"),
        }
    }
}

/// The longest reply id read ([`reply_id`]); a longer one is not a provider's id.
pub const MAX_REPLY_ID: usize = 256;

/// How far into a stream [`reply_id`] looks for the event naming the reply.
const REPLY_ID_WINDOW: usize = 64 << 10;

/// The id of a reply of `api` (Anthropic Messages, OpenAI Responses), whole or streamed: a
/// whole reply's `id`; a stream's `message_start` `message.id` (Anthropic) or
/// `response.created` `response.id` (OpenAI), within its first 64 KiB. `None` when there is
/// none, it is not a string, or it is longer than [`MAX_REPLY_ID`]. What the next request
/// names in `diagnostics.previous_message_id` or `prompt_cache_options.comparison_response_id`.
pub fn reply_id(api: ApiKind, body: &[u8]) -> Option<String> {
    let bounded = |id: Cow<'_, str>| {
        (!id.is_empty() && id.len() <= MAX_REPLY_ID && !id.contains(['"', '\\']))
            .then(|| id.into_owned())
    };
    let start = body.iter().position(|b| !b.is_ascii_whitespace())?;
    if body[start] == b'{' {
        let text = std::str::from_utf8(body).ok()?;
        return Object::parse(text).ok()?.str("id").and_then(bounded);
    }
    let window = &body[..body.len().min(REPLY_ID_WINDOW)];
    let (event, holder) = match api {
        ApiKind::OpenAiResponses => ("response.created", "response"),
        _ => ("message_start", "message"),
    };
    for line in window.split(|&b| b == b'\n') {
        let Some(data) = line.strip_prefix(b"data:") else {
            continue;
        };
        let Ok(text) = std::str::from_utf8(data) else {
            continue;
        };
        let Ok(top) = Object::parse(text.trim()) else {
            continue;
        };
        if top.str("type").as_deref() != Some(event) {
            continue;
        }
        let inner = Object::of(top.get(holder)?).ok()?;
        return inner.str("id").and_then(bounded);
    }
    None
}

/// Anthropic's `diagnostics` object: `cache_miss_reason` (`null` while the comparison runs)
/// with its `type` and `cache_missed_input_tokens`.
fn parse_anthropic(
    json: &str,
    bad: &dyn Fn(&str, String) -> DiagnosisError,
) -> Result<ProviderDiagnosis, DiagnosisError> {
    let top = Object::parse(json).map_err(|p| bad("diagnostics", p.to_string()))?;
    let Some(reason) = top.get("cache_miss_reason").filter(|r| !raw::is_null(r)) else {
        return Ok(ProviderDiagnosis::Pending);
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
    Ok(match MissReason::from_name(&kind) {
        MissReason::PreviousMessageNotFound => ProviderDiagnosis::NotFound,
        MissReason::Unavailable => ProviderDiagnosis::Unavailable,
        reason => ProviderDiagnosis::Miss {
            reason,
            missed_tokens: missed,
            reusable_tokens: None,
        },
    })
}

/// How the provider's verdict stands to the engine's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "agreement", rename_all = "snake_case")]
pub enum Agreement {
    /// Both name the same reason (or both saw no change).
    Agree,
    /// They name different reasons.
    Disagree {
        /// The engine's, under the provider's name (`no change` when it saw none).
        ours: String,
        /// The provider's (`no change` when it saw none).
        theirs: String,
    },
    /// The provider saw no change and the engine none in the bytes, yet fewer tokens were
    /// read than the engine expected, and no lapse of the cache lifetime explains it.
    ProviderSide {
        /// The provider's tokens read short of the expectation, when usage was reported.
        short: Option<u64>,
    },
    /// The provider names a cause the request's bytes do not show (a header or parameter).
    ProviderOnly {
        /// The provider's name for it.
        name: String,
    },
    /// The provider's comparison was still running when it replied.
    Pending,
    /// No comparison: the provider did not find the previous reply, could not compare, or
    /// the engine has no predecessor to compare with.
    NotComparable {
        /// Why.
        why: &'static str,
    },
    /// The reply's diagnostics could not be read.
    Unreadable {
        /// What is wrong, bounded.
        problem: String,
    },
}

/// The provider's verdict on one request and how it stands to the engine's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProviderVerdict {
    /// What the provider answered (`None` when its diagnostics could not be read).
    pub diagnosis: Option<ProviderDiagnosis>,
    /// How it stands to the engine's verdict.
    pub agreement: Agreement,
}

/// The API whose diagnostics a request of `shape` gets back, if it has any.
pub fn diagnostics_api(shape: ApiKind) -> Option<ApiKind> {
    match shape {
        ApiKind::Anthropic => Some(ApiKind::Anthropic),
        ApiKind::OpenAiResponses => Some(ApiKind::OpenAiResponses),
        ApiKind::OpenAi | ApiKind::Gemini | ApiKind::LlamaCpp => None,
    }
}

/// The engine's verdict as a change the provider's diagnostics would name: `None` when the
/// engine saw no change in the request (the causes it finds in timing, usage or
/// serialization alone).
fn ours(v: &Analysis, api: ApiKind) -> Option<MissReason> {
    match v.cause.as_ref()? {
        Cause::SerializationOnly
        | Cause::BreakpointMoved
        | Cause::LookbackExceeded
        | Cause::BelowMinimum
        | Cause::TtlExpired
        | Cause::ProviderSide
        | Cause::Unknown
        | Cause::ColdStart => None,
        cause => Some(cause.miss_reason_in(api)),
    }
}

/// Whether a provider's reason is a change of the prompt's bytes the engine sees (model,
/// system, tools, messages, input), rather than a header or parameter.
fn in_the_bytes(reason: &MissReason) -> bool {
    matches!(
        reason,
        MissReason::ModelChanged
            | MissReason::SystemChanged
            | MissReason::ToolsChanged
            | MissReason::MessagesChanged
            | MissReason::InputChanged
    )
}

/// Whether the provider's reason names the header or parameter the engine saw change
/// (`service_tier_changed` for `service_tier`, a `reasoning…_changed` for `reasoning.effort`).
fn names_param(reason: &MissReason, param: &str) -> bool {
    let theirs = reason.as_str().trim_end_matches("_changed");
    let ours = param.trim_start_matches("header:").replace(['.', '-'], "_");
    !theirs.is_empty() && (ours.starts_with(theirs) || theirs.starts_with(&ours))
}

const NO_CHANGE: &str = "no change";

impl ProviderVerdict {
    /// The provider's `diagnosis` of a request of `api`, reconciled with the engine's
    /// analysis `v` of the same request.
    pub fn reconcile(diagnosis: ProviderDiagnosis, v: &Analysis, api: ApiKind) -> Self {
        let name = |r: Option<&MissReason>| r.map_or(NO_CHANGE.to_owned(), |r| r.to_string());
        let ours = ours(v, api);
        let agreement = match &diagnosis {
            ProviderDiagnosis::Pending => Agreement::Pending,
            ProviderDiagnosis::NotFound => Agreement::NotComparable {
                why: "the provider does not know the previous reply",
            },
            _ if v.predecessor.is_none() => Agreement::NotComparable {
                why: "the engine has no earlier request to compare with",
            },
            ProviderDiagnosis::Unavailable => match v.cause {
                Some(Cause::HeaderOrParamChanged { .. }) => Agreement::Agree,
                _ => Agreement::NotComparable {
                    why: "the provider could not compare",
                },
            },
            ProviderDiagnosis::NoChange => match (&ours, &v.cause) {
                (Some(r), _) => Agreement::Disagree {
                    ours: r.to_string(),
                    theirs: NO_CHANGE.to_owned(),
                },
                (None, Some(Cause::ProviderSide | Cause::Unknown)) => {
                    Agreement::ProviderSide { short: v.shortfall }
                }
                (None, _) => Agreement::Agree,
            },
            ProviderDiagnosis::Miss { reason, .. } => {
                let param = match &v.cause {
                    Some(Cause::HeaderOrParamChanged { name }) => Some(name.as_str()),
                    _ => None,
                };
                if ours.as_ref() == Some(reason) || param.is_some_and(|p| names_param(reason, p)) {
                    Agreement::Agree
                } else if in_the_bytes(reason) || param.is_some() {
                    Agreement::Disagree {
                        ours: param.map_or_else(|| name(ours.as_ref()), |p| format!("{p} changed")),
                        theirs: reason.to_string(),
                    }
                } else {
                    Agreement::ProviderOnly {
                        name: reason.to_string(),
                    }
                }
            }
        };
        Self {
            diagnosis: Some(diagnosis),
            agreement,
        }
    }

    /// A reply whose diagnostics could not be read.
    pub fn unreadable(problem: String) -> Self {
        Self {
            diagnosis: None,
            agreement: Agreement::Unreadable {
                problem: excerpt(&problem, 200).into_owned(),
            },
        }
    }
}

/// Requests with a provider's verdict, by how it stood to the engine's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProviderTally {
    /// Both named the same reason.
    pub agree: u64,
    /// They named different reasons.
    pub disagree: u64,
    /// The provider saw no change, yet less was read ([`Agreement::ProviderSide`]).
    pub provider_side: u64,
    /// The provider named a cause the bytes do not show.
    pub provider_only: u64,
    /// Pending, not comparable, or unreadable.
    pub other: u64,
}

impl ProviderTally {
    /// Counts one verdict.
    pub fn count(&mut self, v: &ProviderVerdict) {
        let n = match v.agreement {
            Agreement::Agree => &mut self.agree,
            Agreement::Disagree { .. } => &mut self.disagree,
            Agreement::ProviderSide { .. } => &mut self.provider_side,
            Agreement::ProviderOnly { .. } => &mut self.provider_only,
            _ => &mut self.other,
        };
        *n = n.saturating_add(1);
    }
}
