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

/// The field an inconsistent body is blamed on.
fn inconsistent(provider: Provider, body: Value) -> &'static str {
    match Usage::from_provider(provider, &body) {
        Err(MeterError::Inconsistent {
            provider: p, field, ..
        }) if p == provider => field,
        other => panic!("{provider}: expected Inconsistent, got {other:?} for {body}"),
    }
}

const MAX: u64 = u64::MAX;

#[test]
fn usage_counters_that_overflow_are_inconsistent_not_summed() {
    // The issue's body: wrapped to 0 = hit + miss in a release build, a panic in debug.
    let body = json!({"usage": {"prompt_cache_hit_tokens": MAX, "prompt_cache_miss_tokens": 1}});
    assert_eq!(
        inconsistent(Provider::DeepSeek, body.clone()),
        "prompt_cache_miss_tokens"
    );
    let message = Usage::detect(&body)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert_eq!(
        message,
        "deepseek usage: `prompt_cache_hit_tokens` 18446744073709551615 + \
         `prompt_cache_miss_tokens` 1 add up past the largest count, 2^64-1"
    );
    // Wrapping would also have made a prompt_tokens of 0 look consistent.
    let wrapped = json!({"usage": {"prompt_cache_hit_tokens": MAX, "prompt_cache_miss_tokens": 1, "prompt_tokens": 0}});
    assert_eq!(
        inconsistent(Provider::DeepSeek, wrapped),
        "prompt_cache_miss_tokens"
    );
    let output = json!({"usage": {"prompt_cache_hit_tokens": MAX - 1, "prompt_cache_miss_tokens": 1, "completion_tokens": 1}});
    assert_eq!(
        inconsistent(Provider::DeepSeek, output),
        "completion_tokens"
    );
    let anthropic = json!({"usage": {"input_tokens": MAX, "cache_read_input_tokens": 1}});
    assert_eq!(
        inconsistent(Provider::Anthropic, anthropic),
        "cache_read_input_tokens"
    );
    let anthropic = json!({"usage": {"input_tokens": 1, "cache_creation_input_tokens": MAX}});
    assert_eq!(
        inconsistent(Provider::Anthropic, anthropic),
        "cache_creation_input_tokens"
    );
    let anthropic = json!({"usage": {"input_tokens": MAX, "output_tokens": 1}});
    assert_eq!(
        inconsistent(Provider::Anthropic, anthropic),
        "output_tokens"
    );
    let openai = json!({"usage": {"prompt_tokens": MAX, "completion_tokens": 1}});
    assert_eq!(inconsistent(Provider::OpenAi, openai), "completion_tokens");
    let gemini = json!({"usageMetadata": {"promptTokenCount": MAX, "toolUsePromptTokenCount": 1}});
    assert_eq!(
        inconsistent(Provider::Gemini, gemini),
        "toolUsePromptTokenCount"
    );
    let gemini = json!({"usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": MAX - 1, "thoughtsTokenCount": 1}});
    assert_eq!(inconsistent(Provider::Gemini, gemini), "thoughtsTokenCount");
    let llama = json!({"timings": {"prompt_n": 2, "cache_n": MAX - 1}});
    assert_eq!(inconsistent(Provider::LlamaCpp, llama), "cache_n");
    // At the edge, the counts still add up: accepted.
    let edge = json!({"timings": {"prompt_n": 1, "cache_n": MAX - 1}});
    let u = Usage::detect(&edge).map(|(_, u)| u);
    assert_eq!(u.map(|u| u.input()).ok(), Some(MAX));
}

#[test]
fn a_cache_hit_count_larger_than_its_total_is_inconsistent() {
    let openai =
        json!({"usage": {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}}});
    assert_eq!(inconsistent(Provider::OpenAi, openai), "cached_tokens");
    let responses =
        json!({"usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": MAX}}});
    assert_eq!(inconsistent(Provider::OpenAi, responses), "cached_tokens");
    let gemini = json!({"usageMetadata": {"promptTokenCount": 10, "cachedContentTokenCount": 11}});
    assert_eq!(
        inconsistent(Provider::Gemini, gemini),
        "cachedContentTokenCount"
    );
    let deepseek = json!({"usage": {"prompt_cache_hit_tokens": 11, "prompt_cache_miss_tokens": 0, "prompt_tokens": 10}});
    assert_eq!(inconsistent(Provider::DeepSeek, deepseek), "prompt_tokens");
}

#[test]
fn a_reported_total_that_is_not_the_sum_of_its_parts_is_inconsistent() {
    let mut openai = fixture("openai_chat.json");
    openai["usage"]["total_tokens"] = json!(2305);
    assert_eq!(inconsistent(Provider::OpenAi, openai), "total_tokens");
    let mut responses = fixture("openai_responses.json");
    responses["usage"]["total_tokens"] = json!(1);
    assert_eq!(inconsistent(Provider::OpenAi, responses), "total_tokens");
    let mut deepseek = fixture("deepseek.json");
    deepseek["usage"]["total_tokens"] = json!(1886);
    assert_eq!(inconsistent(Provider::DeepSeek, deepseek), "total_tokens");
    // Anthropic splits the writes by lifetime: the parts may not exceed the whole.
    let mut anthropic = fixture("anthropic_read.json");
    anthropic["usage"]["cache_creation"]["ephemeral_1h_input_tokens"] = json!(1);
    assert_eq!(
        inconsistent(Provider::Anthropic, anthropic),
        "cache_creation"
    );
    let mut anthropic = fixture("anthropic_read.json");
    anthropic["usage"]["cache_creation"]["ephemeral_5m_input_tokens"] = json!(MAX);
    anthropic["usage"]["cache_creation"]["ephemeral_1h_input_tokens"] = json!(1);
    assert_eq!(
        inconsistent(Provider::Anthropic, anthropic),
        "cache_creation.ephemeral_1h_input_tokens"
    );
}

#[test]
fn counts_that_are_negative_fractional_or_past_u64_are_not_numbers() {
    for found in [
        "-1",
        "1.5",
        "1.0",
        "1e3",
        "18446744073709551616",
        "1e400",
        "\"12\"",
        "true",
        "[1]",
        "{}",
    ] {
        let text = format!(r#"{{"usage": {{"input_tokens": {found}}}}}"#);
        let Ok(body) = serde_json::from_str::<Value>(&text) else {
            // 1e400 is not even JSON serde_json accepts; nothing to meter.
            continue;
        };
        assert!(
            matches!(
                Usage::from_provider(Provider::Anthropic, &body),
                Err(MeterError::NotANumber {
                    provider: Provider::Anthropic,
                    field: "input_tokens",
                    ..
                })
            ),
            "{text}"
        );
    }
}

#[test]
fn diagnostics_stay_short_whatever_the_body() {
    let long = "x".repeat(1 << 20);
    let body = json!({"usage": {"input_tokens": long}});
    let message = Usage::detect(&body)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(message.contains("`input_tokens`"), "{message}");
    assert!(message.len() < 200, "{} bytes", message.len());
    let array = json!({"usage": {"input_tokens": vec![0; 100_000]}});
    let message = Usage::detect(&array)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(message.contains("an array of 100000 items"), "{message}");
    let keys: serde_json::Map<String, Value> = (0..100_000)
        .map(|i| (format!("key{i}-{long:.100}"), Value::Null))
        .collect();
    let message = Usage::detect(&Value::Object(keys))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(message.starts_with("no usage found"), "{message:.300}");
    assert!(message.len() < 600, "{} bytes", message.len());
    assert!(message.contains("(100000 keys)"), "{message}");
}

#[test]
fn session_totals_saturate_instead_of_wrapping() {
    let huge = Usage {
        input_uncached: MAX - 1,
        cache_read: 0,
        cache_write: 0,
        output: MAX,
    };
    let small = Usage {
        input_uncached: 5,
        cache_read: 7,
        cache_write: 0,
        output: 1,
    };
    // `+`, `+=` and `Sum` stop at u64::MAX.
    let sum = huge + small;
    assert_eq!(
        (sum.input_uncached, sum.cache_read, sum.output),
        (MAX, 7, MAX)
    );
    assert_eq!([huge, small, small].into_iter().sum::<Usage>().output, MAX);
    let mut acc = huge;
    acc += huge;
    assert_eq!(acc.input_uncached, MAX);
    // So does the input of a hand-made record; the hit rate stays within 0..=1.
    let lopsided = Usage {
        input_uncached: MAX,
        cache_read: MAX,
        cache_write: MAX,
        output: 0,
    };
    assert_eq!(lopsided.input(), MAX);
    assert!((0.0..=1.0).contains(&lopsided.hit_rate()));
    assert_eq!(huge.checked_add(small), None);
    assert_eq!(small.checked_add(small).map(|u| u.input()), Some(24));
}

#[test]
fn a_session_sets_aside_a_request_it_cannot_add() {
    let mut session = SessionUsage::new();
    let big = Usage {
        input_uncached: 0,
        cache_read: MAX - 10,
        cache_write: 0,
        output: 0,
    };
    let one = Usage {
        input_uncached: 4,
        cache_read: 6,
        cache_write: 0,
        output: 0,
    };
    assert!(session.record(big));
    assert!(session.record(one)); // exactly u64::MAX of input
    assert_eq!(session.total.input(), MAX);
    // Another token of input, or of output, would pass u64::MAX: set aside, not wrapped.
    let output = Usage {
        output: 1,
        ..Usage::default()
    };
    assert!(!session.record(output));
    assert!(!session.record(one));
    assert_eq!(
        (session.requests, session.overflowed, session.total.input()),
        (2, 2, MAX)
    );
    assert_eq!(session.total.output, 0);
    assert!((session.hit_rate() - (MAX - 4) as f64 / MAX as f64).abs() < 1e-12);
    let collected: SessionUsage = [big, big, one].into_iter().collect();
    assert_eq!((collected.requests, collected.overflowed), (2, 1));
}
