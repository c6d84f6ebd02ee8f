//! The `usage` target: arbitrary bytes as a provider's usage body.

use prompt_measure::{MeterError, Provider, SessionUsage, Usage};
use serde_json::Value;

const PROVIDERS: [Provider; 5] = [
    Provider::OpenAi,
    Provider::Anthropic,
    Provider::DeepSeek,
    Provider::Gemini,
    Provider::LlamaCpp,
];

/// Parses `data` as JSON and reads it as every provider's usage, and by auto-detection.
/// Invariants: no panic; an accepted record's counts add up within `u64` (its input is exact),
/// its hit rate is within `0..=1`, detection agrees with reading as the detected provider;
/// an error's message stays short; a session of accepted records never wraps.
pub fn usage(data: &[u8]) {
    let Ok(body) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let mut session = SessionUsage::new();
    let mut accepted = 0u64;
    for provider in PROVIDERS {
        match Usage::from_provider(provider, &body) {
            Ok(u) => {
                check(&u);
                accepted += 1;
                let before = session;
                if session.record(u) {
                    assert_eq!(
                        session.total.checked_add(Usage::default()),
                        Some(session.total)
                    );
                    assert!(session.total.input() >= before.total.input());
                } else {
                    assert_eq!(session.total, before.total);
                }
            }
            Err(e) => check_error(&e),
        }
    }
    assert_eq!(session.requests + session.overflowed, accepted);
    assert!((0.0..=1.0).contains(&session.hit_rate()));
    match Usage::detect(&body) {
        Ok((provider, u)) => {
            check(&u);
            assert_eq!(Usage::from_provider(provider, &body).ok(), Some(u));
        }
        Err(e) => check_error(&e),
    }
}

fn check(u: &Usage) {
    let input = u
        .input_uncached
        .checked_add(u.cache_read)
        .and_then(|n| n.checked_add(u.cache_write));
    assert_eq!(input, Some(u.input()), "{u:?}: input overflows");
    assert!(
        u.input().checked_add(u.output).is_some(),
        "{u:?}: input + output overflows"
    );
    assert!(u.cache_read <= u.input(), "{u:?}");
    let rate = u.hit_rate();
    assert!((0.0..=1.0).contains(&rate), "{u:?}: hit rate {rate}");
}

fn check_error(e: &MeterError) {
    let message = e.to_string();
    assert!(
        message.len() <= 1024,
        "a {}-byte diagnostic: {message:.200}",
        message.len()
    );
}
