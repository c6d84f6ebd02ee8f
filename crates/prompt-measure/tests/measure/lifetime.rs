//! Cache lifetime economics (`prompt_measure::lifetime`) over reconstructed sessions in the
//! audit log format: `fixtures/audit/lifetime_anthropic.jsonl` (gaps of 2 min, 7 min,
//! 40 min and 2 h), `lifetime_warm.jsonl` (no gap over the lifetime) and
//! `lifetime_openai.jsonl` (in-memory and `prompt_cache_retention: "24h"` sessions). The
//! replies follow the providers' documented shapes: Anthropic's Messages response
//! (<https://platform.claude.com/docs/en/api/messages>: `usage.input_tokens`,
//! `cache_creation_input_tokens`, `cache_read_input_tokens`) and OpenAI's chat completion
//! object (<https://platform.openai.com/docs/api-reference/chat/object>:
//! `usage.prompt_tokens_details.cached_tokens`).

use prompt_core::profile::Lifetime;
use prompt_measure::audit::{Cause, RequestAudit};
use prompt_measure::lifetime::{
    LifetimeCounts, LifetimePrices, LifetimeStats, break_even, summary_text,
};
use prompt_measure::{AuditConfig, PriceTable};
use proptest::prelude::*;

use super::audit::{Audited, audit, audit_bytes};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1.0)
}

/// Tokens lost per expired request, in log order (the engine's figures).
fn lost(a: &Audited) -> Vec<u64> {
    a.requests
        .iter()
        .filter(|r| r.verdict.cause == Some(Cause::TtlExpired))
        .map(|r| r.verdict.tokens_lost)
        .collect()
}

#[test]
fn anthropic_gaps_of_2_7_40_minutes_and_2_hours_price_expiry_the_1h_lifetime_and_keep_warm() {
    let a = audit("lifetime_anthropic.jsonl");
    let t = &a.summary.lifetime.total;
    // 5-minute lifetime: the 7 min, 40 min and 2 h gaps expire, the 2 min one does not.
    assert_eq!(t.expired, 3);
    assert_eq!(t.gaps.0, [1, 1, 1, 1, 0]);
    let p = lost(&a);
    // The engine's tokens lost: the prefix up to the last breakpoint each would have read,
    // counted in the request's own bytes (a history message no longer carries the
    // cache_control marker it had when it was the last one).
    assert_eq!(p, vec![3958, 3990, 4022]);
    assert_eq!(t.tokens_lost, 11_970);
    // By hand, at Anthropic's 5-minute write 1.25 and read 0.1:
    //   lost = 11,970 × (1.25 − 0.1) = 13,765.5 units; at claude-sonnet-4-5's $3/MTok,
    //   $0.0412965.
    assert!(close(t.lost_units, 13_765.5), "{}", t.lost_units);
    assert!(close(t.lost_usd, 13_765.5 * 3.0 / 1e6), "{}", t.lost_usd);
    assert_eq!(t.unpriced_expired, 0);
    // The 1-hour lifetime: the 7 and 40 min gaps are kept (3,958 + 3,990 = 7,948 tokens
    // read instead of written: 7,948 × 1.15 = 9,140.2 saved), the 2 h one is not. Every
    // other write is charged at 2 instead of 1.25: the reported writes 3,000 + 50 +
    // (3,100 − 3,958 → 0) + (3,150 − 3,990 → 0) + 3,200 = 6,250 tokens, × 0.75 =
    // 4,687.5. Net 4,687.5 − 9,140.2 = −4,452.7: the 1-hour lifetime saves.
    let c = &t.longer;
    assert_eq!((c.kept, c.still_expired, c.kept_tokens), (2, 1, 7_948));
    assert!(close(c.saved_units, 9_140.2), "{}", c.saved_units);
    assert_eq!(c.write_tokens, 6_250);
    assert!(close(c.extra_units, 4_687.5), "{}", c.extra_units);
    assert!(close(c.net_units, -4_452.7), "{}", c.net_units);
    // Keep-warm every 5 min: ⌊420/300⌋ + ⌊2400/300⌋ + ⌊7200/300⌋ = 1 + 8 + 24 = 33 pings,
    // 0.1 × (3,958 + 8 × 3,990 + 24 × 4,022) = 13,240.6 units < 13,765.5: it pays.
    let k = &t.keep_warm;
    assert_eq!((k.expiries, k.pings), (3, 33));
    assert!(close(k.cost_units, 13_240.6), "{}", k.cost_units);
    assert_eq!(k.pays_off(), Some(true));
    // One session, listed with the same figures.
    let s = &a.summary.lifetime.sessions;
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].session, "s-gaps");
    assert_eq!(&s[0].counts, t);
}

#[test]
fn a_session_with_no_gap_over_the_lifetime_loses_nothing_and_the_1h_lifetime_only_costs() {
    let a = audit("lifetime_warm.jsonl");
    let t = &a.summary.lifetime.total;
    assert_eq!((t.expired, t.tokens_lost), (0, 0));
    assert_eq!(t.lost_units, 0.0);
    assert_eq!(t.keep_warm.pays_off(), None);
    // No expiry to keep; the writes 3,000 + 50 + 50 + 50 = 3,150 at 2 instead of 1.25.
    let c = &t.longer;
    assert_eq!((c.kept, c.saved_units), (0, 0.0));
    assert_eq!(c.write_tokens, 3_150);
    assert!(close(c.net_units, 3_150.0 * 0.75), "{}", c.net_units);
    assert!(c.net_units > 0.0);
    assert!(a.summary.lifetime.sessions.is_empty());
    let text = summary_text(&a.summary.lifetime, 5);
    assert!(
        text.contains("no request lost its cache to expiry"),
        "{text}"
    );
    assert!(text.contains("net costs 2,363 units"), "{text}");
}

#[test]
fn openai_in_memory_expiry_would_be_kept_by_24h_retention_and_a_retained_session_is_left_out() {
    let a = audit("lifetime_openai.jsonl");
    let l = &a.summary.lifetime;
    let by = |id: &str| {
        l.sessions
            .iter()
            .find(|s| s.session == id)
            .unwrap_or_else(|| panic!("{id} not listed: {l:?}"))
            .counts
            .clone()
    };
    // In memory (5–10 min): the 20-minute gap expires; 24 h retention would keep it, at
    // no extra write price (the same for both policies): net = −P × (1 − 0.1).
    let m = by("oa-memory");
    assert_eq!(
        (m.expired, m.longer.kept, m.longer.still_expired),
        (1, 1, 0)
    );
    assert!(close(m.lost_units, m.tokens_lost as f64 * 0.9));
    assert_eq!(m.longer.extra_units, 0.0);
    assert!(close(m.longer.net_units, -m.lost_units));
    // Keep-warm every 5 min (the shortest in-memory lifetime): ⌊1200/300⌋ = 4 pings.
    assert_eq!(m.keep_warm.pings, 4);
    // 24 h retention asked for: the 30-minute gap is kept, the 25-hour one expires; its
    // requests (the first among them: it asks for it) are already on the longer lifetime.
    let r = &by("oa-24h");
    assert_eq!(r.expired, 1);
    assert_eq!(r.gaps.0, [0, 0, 1, 0, 1]);
    assert_eq!((r.longer.already_longer, r.longer.requests), (3, 0));
    assert_eq!((r.longer.kept, r.longer.saved_units), (0, 0.0));
    // gpt-5 is priced ($1.25/MTok).
    assert!(close(l.total.lost_usd, l.total.lost_units * 1.25 / 1e6));
}

#[test]
fn a_model_without_a_known_price_gives_units_only_and_an_override_prices_it() {
    let path = super::audit::fixture("lifetime_anthropic.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let renamed = text.replace("claude-sonnet-4-5", "claude-unreleased-9");
    let a = audit_bytes("renamed", renamed.as_bytes(), AuditConfig::default());
    let t = &a.summary.lifetime.total;
    assert_eq!((t.expired, t.unpriced_expired, t.lost_usd), (3, 3, 0.0));
    assert!(summary_text(&a.summary.lifetime, 5).contains("price unknown for 3"));
    let mut prices = LifetimePrices::default();
    prices
        .input_usd_per_mtok
        .insert("claude-unreleased".to_owned(), 10.0);
    assert_eq!(prices.input_price("claude-unreleased-9"), Some(10.0));
    assert_eq!(prices.input_price("claude-sonnet-4-5-20250929"), Some(3.0));
    assert_eq!(prices.input_price("claude-opus-4-1"), Some(15.0));
    assert_eq!(prices.input_price("claude-opus-4-8"), Some(5.0));
    assert_eq!(prices.input_price("gpt-5.9"), None);
}

#[test]
fn keep_warm_break_even_is_the_lifetime_times_the_ceiling_of_write_minus_read_over_read() {
    // Anthropic 5 min: (1.25 − 0.1) / 0.1 = 11.5 → 12 pings' worth: 60 min.
    let (t, pings, gap) = break_even(Lifetime::Idle { seconds: 300 }, 1.25, 0.1)
        .unwrap_or_else(|| panic!("no break-even"));
    assert_eq!(t, 300);
    assert!(close(pings, 11.5));
    assert_eq!(gap, Some(3600));
    // Anthropic 1 h: (2 − 0.1) / 0.1 = 19 → 19 h.
    let (_, _, gap) = break_even(Lifetime::Idle { seconds: 3600 }, 2.0, 0.1)
        .unwrap_or_else(|| panic!("no break-even"));
    assert_eq!(gap, Some(19 * 3600));
    // OpenAI in memory, every 5 min (its shortest): (1 − 0.1) / 0.1 = 9 → 45 min.
    let mem = prompt_core::profile::Retention::InMemory.lifetime();
    let (t, _, gap) = break_even(mem, 1.0, 0.1).unwrap_or_else(|| panic!("no break-even"));
    assert_eq!((t, gap), (300, Some(2700)));
    // Free reads: keeping warm always pays; no lifetime, or no write surcharge: none.
    assert_eq!(
        break_even(Lifetime::Idle { seconds: 300 }, 1.25, 0.0),
        Some((300, f64::INFINITY, None))
    );
    assert_eq!(break_even(Lifetime::Undocumented, 1.25, 0.1), None);
    assert_eq!(break_even(Lifetime::Idle { seconds: 300 }, 0.1, 0.1), None);
    // The summary's table uses the audit's prices.
    let a = audit("lifetime_warm.jsonl");
    let gaps: Vec<Option<u64>> = a
        .summary
        .lifetime
        .break_even
        .iter()
        .map(|b| b.gap_secs)
        .collect();
    assert_eq!(
        gaps,
        vec![Some(3600), Some(19 * 3600), Some(2700), Some(9 * 86_400)]
    );
}

#[test]
fn a_session_on_the_1h_ttl_expires_only_past_an_hour_and_is_priced_at_the_1h_write() {
    let path = super::audit::fixture("lifetime_anthropic.jsonl");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let one_hour = text.replace(
        r#""cache_control": {"type": "ephemeral"}"#,
        r#""cache_control": {"type": "ephemeral", "ttl": "1h"}"#,
    );
    assert_ne!(one_hour, text);
    let a = audit_bytes("one_hour", one_hour.as_bytes(), AuditConfig::default());
    let t = &a.summary.lifetime.total;
    // Only the 2 h gap outlives the hour: 4,022 tokens, re-written at 2 instead of read at
    // 0.1: 4,022 × 1.9 = 7,641.8 units.
    assert_eq!((t.expired, t.tokens_lost), (1, 4_022));
    assert!(close(t.lost_units, 7_641.8), "{}", t.lost_units);
    // Every request asks for the hour: none is priced again at it.
    assert_eq!((t.longer.already_longer, t.longer.requests), (5, 0));
    // Keep-warm every hour: ⌊7200/3600⌋ = 2 pings, 2 × 4,022 × 0.1 = 804.4 units.
    assert_eq!(t.keep_warm.pings, 2);
    assert!(close(t.keep_warm.cost_units, 804.4));
    assert_eq!(t.keep_warm.pays_off(), Some(true));
}

fn sum_sessions(stats: &LifetimeStats) -> (u64, u64, u64, f64, f64) {
    stats.sessions().fold((0, 0, 0, 0.0, 0.0), |acc, (_, c)| {
        (
            acc.0 + c.requests,
            acc.1 + c.expired,
            acc.2 + c.tokens_lost,
            acc.3 + c.lost_units,
            acc.4 + c.longer.net_units,
        )
    })
}

fn finite(c: &LifetimeCounts) -> bool {
    [
        c.lost_units,
        c.lost_usd,
        c.longer.saved_units,
        c.longer.extra_units,
        c.longer.net_units,
        c.longer.net_usd,
        c.keep_warm.cost_units,
        c.keep_warm.rewrite_units,
    ]
    .iter()
    .all(|x| x.is_finite())
}

/// A log line of session `session` at `ts` (any JSON), its history `turns` long, with
/// Anthropic usage `(uncached, write, read)`.
fn line(session: u8, ts: &str, turns: usize, usage: (u64, u64, u64)) -> String {
    let system = "Rule: keep the build green. ".repeat(200);
    let mut messages = Vec::new();
    for i in 0..turns {
        messages.push(serde_json::json!({"role": "user", "content": format!("turn {i}")}));
        messages.push(serde_json::json!({"role": "assistant", "content": format!("answer {i}")}));
    }
    messages.push(serde_json::json!({"role": "user", "content": "next"}));
    let body = serde_json::json!({
        "model": "claude-sonnet-4-5", "max_tokens": 8,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
    });
    let response = serde_json::json!({"type": "message", "role": "assistant", "content": [],
        "usage": {"input_tokens": usage.0, "cache_creation_input_tokens": usage.1,
                  "cache_read_input_tokens": usage.2, "output_tokens": 1}});
    format!(r#"{{"ts":{ts},"session":"s{session}","request":{body},"response":{response}}}"#)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Totals are the sum over sessions (those tracked and those folded past the bound),
    /// and hostile timestamps (negative, huge, strings) and usage (up to `u64::MAX`) give
    /// finite figures and no panic.
    #[test]
    fn totals_are_the_sum_over_sessions_and_hostile_input_stays_finite(
        steps in proptest::collection::vec(
            (0u8..5, prop_oneof![
                Just("-1e300".to_owned()), Just("1e300".to_owned()), Just("-5".to_owned()),
                Just("\"NaN\"".to_owned()), Just("\"not a date\"".to_owned()),
                Just("18446744073709551615".to_owned()),
                (0u64..200_000).prop_map(|t| t.to_string()),
            ], 0usize..4,
             (prop_oneof![Just(u64::MAX), 0u64..5000], prop_oneof![Just(u64::MAX / 3), 0u64..5000], 0u64..5000)),
            1..14),
        max_sessions in 1usize..4,
    ) {
        let log: String = steps
            .iter()
            .map(|(s, ts, turns, usage)| line(*s, ts, *turns, *usage) + "\n")
            .collect();
        let a = audit_bytes("hostile", log.as_bytes(), AuditConfig::default());
        let total = &a.summary.lifetime.total;
        prop_assert!(finite(total));
        prop_assert_eq!(total.requests, a.requests.len() as u64);
        // The same requests through a tracker of at most `max_sessions` sessions.
        let mut stats = LifetimeStats::with_max_sessions(LifetimePrices::default(), max_sessions);
        let table = PriceTable::default();
        for r in &a.requests {
            stats.record(r, &table);
        }
        prop_assert!(stats.sessions().count() <= max_sessions);
        let summary = stats.summary(&table);
        prop_assert_eq!(&summary.total, total);
        let (requests, expired, tokens, units, net) = sum_sessions(&stats);
        let e = &summary.evicted;
        prop_assert_eq!(requests + e.requests, total.requests);
        prop_assert_eq!(expired + e.expired, total.expired);
        prop_assert_eq!(tokens + e.tokens_lost, total.tokens_lost);
        prop_assert!(close(units + e.lost_units, total.lost_units));
        prop_assert!(close(net + e.longer.net_units, total.longer.net_units));
        let text = summary_text(&summary, 3);
        prop_assert!(!text.contains("NaN") && !text.contains("inf"), "{}", text);
    }
}

/// Every expiry's figures come from the engine's verdict: a request whose cause is not
/// `ttl_expired` adds nothing lost.
#[test]
fn only_ttl_expired_verdicts_count_as_lost_to_expiry() {
    let a = audit("lifetime_anthropic.jsonl");
    let mut stats = LifetimeStats::new(LifetimePrices::default());
    let table = PriceTable::default();
    let others: Vec<&RequestAudit> = a
        .requests
        .iter()
        .filter(|r| r.verdict.cause != Some(Cause::TtlExpired))
        .collect();
    for r in &others {
        stats.record(r, &table);
    }
    let s = stats.summary(&table);
    assert_eq!(s.total.requests, 2);
    assert_eq!((s.total.expired, s.total.tokens_lost), (0, 0));
}
