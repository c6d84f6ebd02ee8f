//! The verdict as one sentence: what `cacheline audit` prints in its divergence column, the
//! proxy on each verdict line and the page in each row.

use prompt_core::input::thousands;
use prompt_engine::provider::{Agreement, ProviderDiagnosis, ProviderVerdict};

use crate::audit::{Cause, RequestAudit};
use crate::catalogue::WriterFinding;

/// The verdict of one request, on one line: its cause, where, against which line, what it
/// cost, and the other changes beside it: what `cacheline audit` prints in its divergence
/// column and `cacheline proxy` on each verdict line (one analysis, one way of saying it).
/// A request `cacheline proxy --stabilize` repaired begins `repaired: <entry> — N tokens
/// kept;` (N: the tokens the provider's rule expects from its cache for the request as
/// sent: the cached prefix the repair kept, not a difference); one it refused to repair
/// ends `; not repaired (<entry>): <why>`.
pub fn verdict_text(r: &RequestAudit) -> String {
    let engine = engine_verdict_text(r);
    match &r.repair {
        Some(n) if n.outcome == crate::logged::RepairOutcome::Repaired => format!(
            "repaired: {} — {} tokens kept; {engine}",
            n.entry,
            thousands(r.verdict.expected_cached)
        ),
        Some(n) => format!("{engine}{}", refusal_clause(n)),
        None => engine,
    }
}

/// `; not repaired (<entry>): <why>`: the clause a request `--stabilize` forwarded
/// unchanged ends with (also after "could not be read" and the like).
pub fn refusal_clause(n: &crate::logged::RepairNote) -> String {
    format!(
        "; not repaired ({}): {}",
        n.entry,
        n.reason.as_deref().unwrap_or("no reason given")
    )
}

/// [`verdict_text`] without what `--stabilize` did.
fn engine_verdict_text(r: &RequestAudit) -> String {
    let v = &r.verdict;
    let Some(p) = &v.predecessor else {
        return if v.session_seen {
            format!(
                "cold_start: shares nothing with the earlier requests of its session, a new conversation ({})",
                v.lane
            )
        } else {
            format!("cold_start: the first request of its session ({})", v.lane)
        };
    };
    // A predecessor is named by its log line; one an earlier launch saw without this log,
    // by its time.
    let named = if p.logged {
        format!("line {}", p.tag)
    } else {
        format!(
            "the request of {} (an earlier launch)",
            p.ts.map_or_else(|| "an unknown time".to_owned(), utc)
        )
    };
    let lane = if p.same_lane {
        String::new()
    } else {
        " (another lane)".to_owned()
    };
    let mut s = match &v.cause {
        None => format!(
            "extends {named}{lane}: {} tokens expected from cache",
            thousands(v.expected_cached)
        ),
        Some(cause) => {
            let change = v.changes.iter().find(|c| c.cause == *cause);
            let at = change.map_or_else(
                || "the request".to_owned(),
                |c| format!("{}, byte {}", c.json_path, c.divergence.byte_offset),
            );
            let mut s = format!("{} at {at} vs {named}{lane}: {cause}", cause.kind());
            if let Some(c) = change {
                s.push_str(&format!(
                    "; {:?} → {:?}",
                    c.divergence.excerpt.earlier, c.divergence.excerpt.later
                ));
                if v.nothing_cached() {
                    s.push_str("; nothing lost: the provider caches no prefix this short");
                }
            }
            if let (Some(short), Some(read)) = (v.shortfall, v.reported) {
                // The provider's tokens and the audit's tokenizer's differ: compared as
                // shares of the input.
                s.push_str(&format!(
                    "; read {} of the input where {} was expected ({} of the provider's tokens short)",
                    pct(if read.input == 0 { 0.0 } else { read.cached as f64 / read.input as f64 }),
                    pct(if v.tokens == 0 { 0.0 } else { v.expected_cached as f64 / v.tokens as f64 }),
                    thousands(short)
                ));
            }
            if let Some(gap) = p.gap_secs
                && matches!(cause, Cause::TtlExpired | Cause::ProviderSide)
            {
                s.push_str(&format!("; {gap:.0} s after it"));
            }
            if v.tokens_lost > 0 {
                s.push_str(&format!("; {} tokens lost", thousands(v.tokens_lost)));
            }
            if v.new_conversation && *cause == Cause::ColdStart {
                s.push_str(" (a new conversation: nothing of it to blame)");
            }
            s
        }
    };
    let others: Vec<String> = v
        .changes
        .iter()
        .filter(|c| Some(&c.cause) != v.cause.as_ref())
        .take(3)
        .map(|c| format!("{} at {}", c.cause.kind(), c.json_path))
        .collect();
    if !others.is_empty() {
        let more = v.changes.len().saturating_sub(others.len() + 1);
        s.push_str(&format!("; also {}", others.join(", ")));
        if more > 0 {
            s.push_str(&format!(" and {more} more"));
        }
    }
    if let Some(p) = &r.provider_verdict {
        s.push_str(&provider_clause(p));
    }
    // Who wrote the change: one clause, last.
    if let Some(w) = &r.writer {
        s.push_str(&writer_clause(w));
    }
    s
}

/// A time in seconds since the Unix epoch as `2026-12-05 00:02:00 UTC`.
pub fn utc(ts: f64) -> String {
    let secs = ts.floor() as i64;
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = prompt_core::calendar::civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// A share as a percentage with one decimal: `12.5%`.
pub(crate) fn pct(share: f64) -> String {
    format!("{:.1}%", 100.0 * share)
}

/// The clause a verdict gains from the provider's own verdict:
/// `; provider: tools_changed (agrees)`.
pub fn provider_clause(p: &ProviderVerdict) -> String {
    let said = p
        .diagnosis
        .as_ref()
        .map_or_else(String::new, ToString::to_string);
    let missed = match &p.diagnosis {
        Some(ProviderDiagnosis::Miss {
            missed_tokens: Some(n),
            ..
        }) => format!(", ~{} tokens missed", thousands(*n)),
        _ => String::new(),
    };
    match &p.agreement {
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

/// The clause a verdict line ends with: ` — <writer> (<agent> <versions>) — <issue> — fix:
/// <workaround>` (for an agent newer than the entry's versions, ` — <writer> (<agent>
/// <version>) (checked up to <X>) — …`), or ` — a learned volatile block: changed in N
/// sessions, no catalogue entry`.
pub fn writer_clause(finding: &WriterFinding) -> String {
    match finding {
        WriterFinding::Catalogue(m) => {
            // An agent newer than the versions the entry was checked on: its own version,
            // and how far the entry was checked.
            let mut s = match &m.checked_up_to {
                Some(upto) => format!(" — {} ({}) (checked up to {upto})", m.name, m.agent),
                None if m.versions == "*" => format!(" — {} ({})", m.name, m.agent.name),
                None => format!(" — {} ({} {})", m.name, m.agent.name, m.versions),
            };
            if let Some(issue) = &m.issue {
                s.push_str(&format!(" — {issue}"));
            }
            s.push_str(&format!(
                " — fix: {}",
                m.workaround.as_deref().unwrap_or("none known")
            ));
            s
        }
        WriterFinding::Learned(b) => format!(
            " — a learned volatile block: changed in {} sessions, no catalogue entry",
            b.sessions
        ),
    }
}
