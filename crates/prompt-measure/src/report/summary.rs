//! Summary lines `cacheline audit` and the proxy's exit summary both print.

use std::collections::BTreeMap;

use prompt_engine::provider::ProviderTally;

use crate::audit::CauseKind;

/// `tools_changed 2, ttl_expired 1`: counts by cause, `None` when there are none.
pub fn causes_text(causes: &BTreeMap<CauseKind, u64>) -> Option<String> {
    (!causes.is_empty()).then(|| {
        causes
            .iter()
            .map(|(c, n)| format!("{} {n}", c.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// `provider verdicts: 3 agree, …`: how the providers' own verdicts stood to the engine's,
/// `None` when no reply carried one.
pub fn provider_verdicts_text(p: &ProviderTally) -> Option<String> {
    (p.agree + p.disagree + p.provider_side + p.provider_only + p.other > 0).then(|| {
        format!(
            "provider verdicts: {} agree, {} disagree, {} provider_side, {} provider_only, {} other",
            p.agree, p.disagree, p.provider_side, p.provider_only, p.other
        )
    })
}
