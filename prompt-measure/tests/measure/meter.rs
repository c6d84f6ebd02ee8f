//! The usage meter: one record per provider shape, from real-shaped response bodies in
//! `tests/fixtures/usage/`, and the session aggregate.

use prompt_measure::{MeterError, Provider, SessionUsage, Usage};
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/usage/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn read(provider: Provider, name: &str) -> Usage {
    let body = fixture(name);
    let usage = Usage::from_provider(provider, &body).unwrap_or_else(|e| panic!("{name}: {e}"));
    // Recognizing the shape gives the same provider and the same record.
    assert_eq!(Usage::detect(&body).ok(), Some((provider, usage)), "{name}");
    usage
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn openai_prompt_tokens_include_cached_tokens() {
    let u = read(Provider::OpenAi, "openai_chat.json");
    assert_eq!(
        u,
        Usage {
            input_uncached: 2006 - 1920,
            cache_read: 1920,
            cache_write: 0,
            output: 300
        }
    );
    assert_eq!(u.input(), 2006);
    assert!(close(u.hit_rate(), 1920.0 / 2006.0));
}

#[test]
fn openai_responses_api_input_tokens_include_cached_tokens() {
    let u = read(Provider::OpenAi, "openai_responses.json");
    assert_eq!((u.input_uncached, u.cache_read, u.output), (1024, 4096, 87));
    assert!(close(u.hit_rate(), 0.8));
}

#[test]
fn anthropic_input_tokens_exclude_cache_reads_and_writes() {
    let write = read(Provider::Anthropic, "anthropic_write.json");
    assert_eq!(
        write,
        Usage {
            input_uncached: 21,
            cache_read: 0,
            cache_write: 188_086,
            output: 393
        }
    );
    assert!(close(write.hit_rate(), 0.0));
    let hit = read(Provider::Anthropic, "anthropic_read.json");
    assert_eq!(
        (hit.input_uncached, hit.cache_read, hit.cache_write),
        (50, 188_086, 248)
    );
    // The denominator adds the three input counts: Anthropic's input_tokens alone is not it.
    assert_eq!(hit.input(), 50 + 188_086 + 248);
    assert!(close(hit.hit_rate(), 188_086.0 / 188_384.0));
}

#[test]
fn deepseek_hit_plus_miss_is_prompt_tokens() {
    let u = read(Provider::DeepSeek, "deepseek.json");
    assert_eq!((u.input_uncached, u.cache_read, u.output), (51, 1792, 42));
    assert_eq!(u.input(), 1843);
    let mut wrong = fixture("deepseek.json");
    wrong["usage"]["prompt_tokens"] = json!(1900);
    assert!(matches!(
        Usage::from_provider(Provider::DeepSeek, &wrong),
        Err(MeterError::Inconsistent {
            provider: Provider::DeepSeek,
            ..
        })
    ));
}

#[test]
fn gemini_cached_content_is_within_prompt_token_count() {
    let u = read(Provider::Gemini, "gemini.json");
    assert_eq!(
        u,
        Usage {
            input_uncached: 12_580 - 10_240,
            cache_read: 10_240,
            cache_write: 0,
            // Thinking tokens are billed as output.
            output: 412 + 255
        }
    );
}

#[test]
fn llama_cpp_cache_n_is_reused_and_prompt_n_reprocessed() {
    let u = read(Provider::LlamaCpp, "llama_cpp.json");
    assert_eq!((u.input_uncached, u.cache_read, u.output), (115, 4096, 128));
    // The same body also carries an OpenAI-compatible usage object; timings win.
    let as_openai = Usage::from_provider(Provider::OpenAi, &fixture("llama_cpp.json"));
    assert_eq!(as_openai.map(|u| u.cache_read).ok(), Some(4096));
}

#[test]
fn a_bare_usage_object_reads_like_the_whole_body() {
    let body = fixture("anthropic_read.json");
    let bare = &body["usage"];
    assert_eq!(
        Usage::from_provider(Provider::Anthropic, bare).ok(),
        Usage::from_provider(Provider::Anthropic, &body).ok()
    );
}

#[test]
fn session_aggregate_sums_counts_and_excludes_output_from_the_hit_rate() {
    let turns = [
        read(Provider::Anthropic, "anthropic_write.json"),
        read(Provider::Anthropic, "anthropic_read.json"),
    ];
    let session: SessionUsage = turns.iter().copied().collect();
    assert_eq!(session.requests, 2);
    assert_eq!(session.total.cache_read, 188_086);
    assert_eq!(session.total.cache_write, 188_086 + 248);
    assert_eq!(session.total.output, 393 + 61);
    let input = (21 + 188_086) + (50 + 188_086 + 248);
    assert!(close(session.hit_rate(), 188_086.0 / f64::from(input)));
    assert_eq!(turns.iter().copied().sum::<Usage>(), session.total);
}

#[test]
fn malformed_usage_is_a_typed_error_never_a_panic() {
    assert!(matches!(
        Usage::detect(&json!([1, 2])),
        Err(MeterError::NotAnObject { found: "an array" })
    ));
    assert!(matches!(
        Usage::detect(&json!({"choices": []})),
        Err(MeterError::Unrecognized { .. })
    ));
    assert!(matches!(
        Usage::from_provider(
            Provider::OpenAi,
            &json!({"usage": {"completion_tokens": 3}})
        ),
        Err(MeterError::Missing {
            field: "prompt_tokens",
            ..
        })
    ));
    assert!(matches!(
        Usage::from_provider(
            Provider::Anthropic,
            &json!({"usage": {"input_tokens": "12"}})
        ),
        Err(MeterError::NotANumber {
            field: "input_tokens",
            ..
        })
    ));
    assert!(matches!(
        Usage::from_provider(
            Provider::OpenAi,
            &json!({"usage": {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}}})
        ),
        Err(MeterError::Inconsistent { .. })
    ));
    // Anthropic sends null for a cache count it has nothing for: that is zero.
    let null =
        json!({"usage": {"input_tokens": 7, "cache_read_input_tokens": null, "output_tokens": 1}});
    assert_eq!(
        Usage::detect(&null).ok().map(|(p, u)| (p, u.cache_read)),
        Some((Provider::Anthropic, 0))
    );
}
