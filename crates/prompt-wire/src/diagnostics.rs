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
use prompt_core::ApiKind;
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

/// The key a whole reply of `api` carries the provider's cache diagnostics under:
/// Anthropic's `diagnostics`, OpenAI Responses' `prompt_cache_diagnostics`.
pub(crate) fn reply_key(api: ApiKind) -> &'static str {
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
    /// [`Reply::diagnostics`](crate::Reply::diagnostics) holds it; `null` reads as no
    /// divergence). A malformed or oversized object is an error naming what is wrong.
    pub fn parse(api: ApiKind, json: &str) -> Result<ProviderDiagnosis, WireError> {
        let bad = |at: &str, problem: String| WireError::Reply {
            api: crate::api_name(api),
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
            let read = CacheDiagnostics::parse(json)?;
            return Ok(match read.reason {
                None => ProviderDiagnosis::Pending,
                Some(MissReason::PreviousMessageNotFound) => ProviderDiagnosis::NotFound,
                Some(MissReason::Unavailable) => ProviderDiagnosis::Unavailable,
                Some(reason) => ProviderDiagnosis::Miss {
                    reason,
                    missed_tokens: read.missed_input_tokens,
                    reusable_tokens: None,
                },
            });
        }
        let top = Object::parse(json).map_err(|p| bad(key, p.to_string()))?;
        let kind = top.str("type").ok_or_else(|| {
            bad(
                "prompt_cache_diagnostics.type",
                "missing or not a string".to_owned(),
            )
        })?;
        let count = |name: &str| -> Result<Option<u64>, WireError> {
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
    let bounded = |id: std::borrow::Cow<'_, str>| {
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

#[cfg(test)]
mod provider_tests {
    use super::*;
    use crate::stream::StreamReader;

    // Shapes from the providers' documents: Anthropic's cache diagnostics
    // (https://platform.claude.com/docs/en/build-with-claude/cache-diagnostics: `diagnostics`
    // with `cache_miss_reason.type` and `cache_missed_input_tokens`; in a stream on
    // `message_start`'s message, as the Anthropic SDKs' `AnthropicDiagnostics` documents);
    // OpenAI's prompt cache diagnostics
    // (https://developers.openai.com/api/docs/guides/prompt-caching/diagnostics:
    // `prompt_cache_diagnostics` on the response, `type` `cache_miss` with `reason`,
    // `cache_missed_tokens`, `comparison_reusable_tokens`; a stream's `response.completed`
    // carries the whole response).
    const ANTHROPIC_WHOLE: &str = r#"{"id":"msg_02","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":12,"cache_read_input_tokens":0,"cache_creation_input_tokens":4000,"output_tokens":2},"diagnostics":{"cache_miss_reason":{"type":"tools_changed","cache_missed_input_tokens":3900}}}"#;

    fn anthropic_stream(diagnostics: &str) -> String {
        format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_02\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{{\"input_tokens\":12,\"cache_read_input_tokens\":0,\"cache_creation_input_tokens\":4000,\"output_tokens\":1}},\"diagnostics\":{diagnostics}}}}}\n\n\
event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"ok\"}}}}\n\n\
event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{{\"output_tokens\":2}}}}\n\n\
event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        )
    }

    fn responses_whole(diagnostics: &str) -> String {
        format!(
            r#"{{"id":"resp_02","object":"response","status":"completed","model":"gpt-5.6","output":[{{"type":"message","id":"m1","role":"assistant","status":"completed","content":[{{"type":"output_text","text":"OK","annotations":[]}}]}}],"usage":{{"input_tokens":2000,"input_tokens_details":{{"cached_tokens":0}},"output_tokens":1,"total_tokens":2001}},"prompt_cache_diagnostics":{diagnostics}}}"#
        )
    }

    fn responses_stream(diagnostics: &str) -> String {
        let completed = responses_whole(diagnostics);
        format!(
            "event: response.created\ndata: {{\"type\":\"response.created\",\"sequence_number\":0,\"response\":{{\"id\":\"resp_02\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"gpt-5.6\",\"output\":[]}}}}\n\n\
event: response.completed\ndata: {{\"type\":\"response.completed\",\"sequence_number\":1,\"response\":{completed}}}\n\n"
        )
    }

    fn streamed(api: ApiKind, sse: &str) -> crate::Reply {
        let mut reader = StreamReader::new(api);
        reader.feed(sse.as_bytes()).unwrap();
        while reader.next_event().is_some() {}
        reader.into_reply().unwrap()
    }

    #[test]
    fn anthropic_diagnostics_are_read_from_whole_and_streamed_replies() {
        let whole = crate::reply::parse(ApiKind::Anthropic, ANTHROPIC_WHOLE.as_bytes(), 0).unwrap();
        let expected = ProviderDiagnosis::Miss {
            reason: MissReason::ToolsChanged,
            missed_tokens: Some(3900),
            reusable_tokens: None,
        };
        let raw = whole.diagnostics.unwrap();
        assert_eq!(
            ProviderDiagnosis::parse(ApiKind::Anthropic, &raw).unwrap(),
            expected
        );
        let sse = anthropic_stream(
            r#"{"cache_miss_reason":{"type":"tools_changed","cache_missed_input_tokens":3900}}"#,
        );
        let raw = streamed(ApiKind::Anthropic, &sse).diagnostics.unwrap();
        assert_eq!(
            ProviderDiagnosis::parse(ApiKind::Anthropic, &raw).unwrap(),
            expected
        );
        let pending = anthropic_stream(r#"{"cache_miss_reason":null}"#);
        let raw = streamed(ApiKind::Anthropic, &pending).diagnostics.unwrap();
        assert_eq!(
            ProviderDiagnosis::parse(ApiKind::Anthropic, &raw).unwrap(),
            ProviderDiagnosis::Pending
        );
        assert_eq!(
            reply_id(ApiKind::Anthropic, sse.as_bytes()).as_deref(),
            Some("msg_02")
        );
        assert_eq!(
            reply_id(ApiKind::Anthropic, ANTHROPIC_WHOLE.as_bytes()).as_deref(),
            Some("msg_02")
        );
    }

    #[test]
    fn openai_prompt_cache_diagnostics_are_read_from_whole_and_streamed_replies() {
        let miss = r#"{"type":"cache_miss","reason":"tools_changed","cache_missed_tokens":1800,"comparison_reusable_tokens":2000}"#;
        let expected = ProviderDiagnosis::Miss {
            reason: MissReason::ToolsChanged,
            missed_tokens: Some(1800),
            reusable_tokens: Some(2000),
        };
        let whole = responses_whole(miss);
        let reply = crate::reply::parse(ApiKind::OpenAiResponses, whole.as_bytes(), 0).unwrap();
        let raw = reply.diagnostics.unwrap();
        assert_eq!(
            ProviderDiagnosis::parse(ApiKind::OpenAiResponses, &raw).unwrap(),
            expected
        );
        let sse = responses_stream(miss);
        let raw = streamed(ApiKind::OpenAiResponses, &sse)
            .diagnostics
            .unwrap();
        assert_eq!(
            ProviderDiagnosis::parse(ApiKind::OpenAiResponses, &raw).unwrap(),
            expected
        );
        let hit = responses_stream(r#"{"type":"cache_hit"}"#);
        let raw = streamed(ApiKind::OpenAiResponses, &hit)
            .diagnostics
            .unwrap();
        assert_eq!(
            ProviderDiagnosis::parse(ApiKind::OpenAiResponses, &raw).unwrap(),
            ProviderDiagnosis::NoChange
        );
        for (json, want) in [
            (
                r#"{"type":"comparison_response_not_found"}"#,
                ProviderDiagnosis::NotFound,
            ),
            (r#"{"type":"unavailable"}"#, ProviderDiagnosis::Unavailable),
        ] {
            assert_eq!(
                ProviderDiagnosis::parse(ApiKind::OpenAiResponses, json).unwrap(),
                want
            );
        }
        assert_eq!(
            reply_id(ApiKind::OpenAiResponses, sse.as_bytes()).as_deref(),
            Some("resp_02")
        );
    }

    #[test]
    fn a_hostile_diagnostics_object_is_an_error_never_a_panic() {
        for (api, json, says) in [
            (
                ApiKind::OpenAiResponses,
                r#"{"type":"cache_miss"}"#,
                "reason",
            ),
            (
                ApiKind::OpenAiResponses,
                r#"{"type":"cache_miss","reason":"x","cache_missed_tokens":-1}"#,
                "cache_missed_tokens",
            ),
            (ApiKind::OpenAiResponses, r#"{"type":"teapot"}"#, "teapot"),
            (ApiKind::OpenAiResponses, "[1]", "prompt_cache_diagnostics"),
            (
                ApiKind::Anthropic,
                r#"{"cache_miss_reason":{"cache_missed_input_tokens":1}}"#,
                "type",
            ),
            (
                ApiKind::Anthropic,
                r#"{"cache_miss_reason":"#,
                "diagnostics",
            ),
        ] {
            let e = ProviderDiagnosis::parse(api, json).unwrap_err().to_string();
            assert!(e.contains(says), "{json}: {e}");
        }
        let huge = format!(
            r#"{{"type":"cache_miss","reason":"{}"}}"#,
            "x".repeat(10_000)
        );
        let e = ProviderDiagnosis::parse(ApiKind::OpenAiResponses, &huge).unwrap_err();
        assert!(e.to_string().contains("4096-byte limit"), "{e}");
        let odd = r#"{"type":"cache_miss","reason":"reasoning_changed"}"#;
        assert_eq!(
            ProviderDiagnosis::parse(ApiKind::OpenAiResponses, odd).unwrap(),
            ProviderDiagnosis::Miss {
                reason: MissReason::Other("reasoning_changed".to_owned()),
                missed_tokens: None,
                reusable_tokens: None
            }
        );
        assert_eq!(
            reply_id(ApiKind::Anthropic, b"data: {\"type\":\"message_start\"}\n"),
            None
        );
        assert_eq!(reply_id(ApiKind::Anthropic, b"{\"id\":12}"), None);
    }

    #[test]
    fn causes_take_openai_names_for_responses() {
        assert_eq!(
            Cause::SystemChanged.miss_reason_in(ApiKind::OpenAiResponses),
            MissReason::InputChanged
        );
        assert_eq!(
            Cause::EditInPlace.miss_reason_in(ApiKind::OpenAiResponses),
            MissReason::InputChanged
        );
        assert_eq!(
            Cause::HeaderOrParamChanged {
                name: "service_tier".to_owned()
            }
            .miss_reason_in(ApiKind::OpenAiResponses),
            MissReason::ServiceTierChanged
        );
        assert_eq!(
            Cause::SystemChanged.miss_reason_in(ApiKind::Anthropic),
            MissReason::SystemChanged
        );
    }
}
