//! The provider's verdict beside the engine's: what Anthropic's cache diagnostics or OpenAI's
//! prompt cache diagnostics said of a request ([`ProviderDiagnosis`]), reconciled with the
//! engine's [`Analysis`] of the same request. One place, used by `cacheline audit` and
//! `cacheline proxy` alike.
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

use prompt_core::ApiKind;
use prompt_wire::{MissReason, ProviderDiagnosis, Shape};
use serde::Serialize;

use super::audit::{Analysis, Cause, thousands};

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
pub(crate) fn diagnostics_api(shape: Shape) -> Option<ApiKind> {
    match shape {
        Shape::Anthropic => Some(ApiKind::Anthropic),
        Shape::Responses => Some(ApiKind::OpenAiResponses),
        Shape::ChatCompletions | Shape::Gemini => None,
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
                problem: super::shorten(&problem, 200),
            },
        }
    }

    /// The clause the verdict line gains: `; provider: tools_changed (agrees)`.
    pub fn clause(&self) -> String {
        let said = self
            .diagnosis
            .as_ref()
            .map_or_else(String::new, ToString::to_string);
        let missed = match &self.diagnosis {
            Some(ProviderDiagnosis::Miss {
                missed_tokens: Some(n),
                ..
            }) => format!(", ~{} tokens missed", thousands(*n)),
            _ => String::new(),
        };
        match &self.agreement {
            Agreement::Agree => format!("; provider: {said}{missed} (agrees)"),
            Agreement::Disagree { ours, .. } => {
                format!("; provider: {said}{missed} — we say {ours} (disagrees)")
            }
            Agreement::ProviderSide { short } => format!(
                "; provider: no change, yet {} read than expected (provider_side)",
                short.map_or_else(
                    || "less was".to_owned(),
                    |n| format!("{} fewer tokens", thousands(n))
                )
            ),
            Agreement::ProviderOnly { name } => format!(
                "; provider: {name}{missed} — a cause the request's bytes do not show (provider_only)"
            ),
            Agreement::Pending => "; provider: comparison pending".to_owned(),
            Agreement::NotComparable { why } => {
                format!("; provider: {said} (not comparable: {why})")
            }
            Agreement::Unreadable { problem } => {
                format!("; provider: diagnostics unreadable ({problem})")
            }
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
