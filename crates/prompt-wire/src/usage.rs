//! What the engine reported doing for one reply, read from the usage of any API into one
//! typed value: prompt tokens re-processed, served from the cache, written to it, tokens
//! generated, and the engine's own clocks where it sends them (llama.cpp's `timings`).
//!
//! Beside the reply reader because it reads what the reader kept ([`UsageReport`]): the
//! facade re-exports it, and it needs neither an HTTP client nor a runtime.

use serde::{Deserialize, Serialize};

use prompt_core::profile::Provider;

use crate::reply::{Reply, UsageReport};

/// The engine's own figures for one reply, whatever the API: what it re-processed of the
/// prompt, what its cache served, what it generated.
///
/// | field | llama.cpp `timings` | OpenAI `usage` (Chat, Responses) | DeepSeek | Anthropic `usage` | Gemini `usageMetadata` |
/// |---|---|---|---|---|---|
/// | `prompt` | `prompt_n + cache_n` | `prompt_tokens` / `input_tokens` | `prompt_tokens` | `input_tokens + cache_read_input_tokens + cache_creation_input_tokens` | `promptTokenCount` |
/// | `reprocessed` | `prompt_n` | `prompt` − `cached` | `prompt_cache_miss_tokens` | `input_tokens + cache_creation_input_tokens` | `prompt` − `cached` |
/// | `cached` | `cache_n` | `prompt_tokens_details.cached_tokens` / `input_tokens_details.cached_tokens` (0 when absent) | `prompt_cache_hit_tokens` | `cache_read_input_tokens` | `cachedContentTokenCount` (0 when absent) |
/// | `cache_written` | 0 | 0 | 0 | `cache_creation_input_tokens` | 0 |
/// | `generated` | `predicted_n` | `completion_tokens` / `output_tokens` | `completion_tokens` | `output_tokens` | `candidatesTokenCount + thoughtsTokenCount` |
/// | `prompt_ms`, `generation_ms` | `prompt_ms`, `predicted_ms` | `None` | `None` | `None` | `None` |
///
/// ```
/// use prompt_wire::UsageFigures;
/// use prompt_core::profile::Provider;
///
/// let timings = r#"{"cache_n":1098,"prompt_n":196,"prompt_ms":1543.2,"predicted_n":4,"predicted_ms":61.0}"#;
/// let figures = UsageFigures::read(Provider::LlamaCpp, timings)?;
/// assert_eq!((figures.prompt, figures.reprocessed, figures.cached, figures.generated), (1294, 196, 1098, 4));
/// assert_eq!(figures.prompt_ms, Some(1543.2));
///
/// let anthropic = r#"{"input_tokens":40,"cache_read_input_tokens":1800,"cache_creation_input_tokens":255,"output_tokens":12}"#;
/// let figures = UsageFigures::read(Provider::Anthropic, anthropic)?;
/// assert_eq!((figures.prompt, figures.reprocessed, figures.cached, figures.cache_written), (2095, 295, 1800, 255));
/// # Ok::<(), prompt_wire::UsageError>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct UsageFigures {
    /// Whose usage it was read from.
    pub provider: Option<Provider>,
    /// Prompt tokens, all of them: re-processed plus cached.
    pub prompt: u64,
    /// Prompt tokens the engine processed for this request: everything its cache did not
    /// serve (Anthropic's cache writes included).
    pub reprocessed: u64,
    /// Prompt tokens its cache served.
    pub cached: u64,
    /// Of the re-processed tokens, those written to the cache for later requests
    /// (Anthropic's `cache_creation_input_tokens`; 0 elsewhere).
    pub cache_written: u64,
    /// Tokens generated (thinking included where the API counts it apart).
    pub generated: u64,
    /// The engine's own time on the prompt, in milliseconds (llama.cpp's `prompt_ms`): the
    /// engine's side of the time to first token.
    pub prompt_ms: Option<f64>,
    /// The engine's own time generating, in milliseconds (llama.cpp's `predicted_ms`).
    pub generation_ms: Option<f64>,
}

/// A usage object that does not hold the counts its API's usage holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {provider} usage cannot be read: {problem}; it starts {excerpt:?}")]
pub struct UsageError {
    /// The usage's shape (`llama_cpp`, `openai`, `anthropic`, `gemini`, `deepseek`).
    pub provider: &'static str,
    /// What is wrong: the field missing, or the parser's message.
    pub problem: String,
    /// The start of the object (at most 120 bytes).
    pub excerpt: String,
}

#[derive(Deserialize)]
struct Timings {
    prompt_n: Option<u64>,
    cache_n: Option<u64>,
    prompt_ms: Option<f64>,
    predicted_n: Option<u64>,
    predicted_ms: Option<f64>,
}

#[derive(Deserialize, Default)]
struct Details {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OpenAi {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<Details>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    input_tokens_details: Option<Details>,
    prompt_cache_hit_tokens: Option<u64>,
    prompt_cache_miss_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct Anthropic {
    input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Gemini {
    prompt_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
}

impl UsageFigures {
    /// Reads `json`, a usage object of `provider`'s shape (what [`UsageReport::json`]
    /// holds). A count the API always sends that is missing is an error naming it; a cache
    /// count the API leaves out when nothing was cached reads as 0.
    pub fn read(provider: Provider, json: &str) -> Result<Self, UsageError> {
        let error = |problem: String| UsageError {
            provider: provider.as_str(),
            problem,
            excerpt: prompt_core::input::excerpt(json, 120).into_owned(),
        };
        let parse_error = |e: serde_json::Error| error(format!("not the usage object ({e})"));
        let need =
            |value: Option<u64>, field: &str| value.ok_or_else(|| error(format!("no `{field}`")));
        let figures = match provider {
            Provider::LlamaCpp => {
                let t: Timings = serde_json::from_str(json).map_err(parse_error)?;
                let reprocessed = need(t.prompt_n, "prompt_n")?;
                let cached = t.cache_n.unwrap_or(0);
                Self {
                    prompt: reprocessed.saturating_add(cached),
                    reprocessed,
                    cached,
                    generated: t.predicted_n.unwrap_or(0),
                    prompt_ms: t.prompt_ms,
                    generation_ms: t.predicted_ms,
                    ..Self::default()
                }
            }
            // OpenAI's shape, and the OpenAI-compatible servers'.
            Provider::OpenAi
            | Provider::DeepSeek
            | Provider::AzureOpenAi
            | Provider::Vllm
            | Provider::Sglang
            | Provider::Ollama => {
                let u: OpenAi = serde_json::from_str(json).map_err(parse_error)?;
                // Chat Completions names its counts `prompt_tokens`, Responses `input_tokens`.
                let (prompt, generated, details) = match (u.prompt_tokens, u.input_tokens) {
                    (Some(prompt), _) => (prompt, u.completion_tokens, u.prompt_tokens_details),
                    (None, Some(input)) => (input, u.output_tokens, u.input_tokens_details),
                    (None, None) => {
                        return Err(error("no `prompt_tokens` or `input_tokens`".to_owned()));
                    }
                };
                let cached = u
                    .prompt_cache_hit_tokens
                    .or(details.and_then(|d| d.cached_tokens))
                    .unwrap_or(0);
                let reprocessed = u
                    .prompt_cache_miss_tokens
                    .unwrap_or_else(|| prompt.saturating_sub(cached));
                Self {
                    prompt,
                    reprocessed,
                    cached,
                    generated: generated.unwrap_or(0),
                    ..Self::default()
                }
            }
            Provider::Anthropic => {
                let u: Anthropic = serde_json::from_str(json).map_err(parse_error)?;
                let input = need(u.input_tokens, "input_tokens")?;
                let cached = u.cache_read_input_tokens.unwrap_or(0);
                let written = u.cache_creation_input_tokens.unwrap_or(0);
                Self {
                    prompt: input.saturating_add(cached).saturating_add(written),
                    reprocessed: input.saturating_add(written),
                    cached,
                    cache_written: written,
                    generated: u.output_tokens.unwrap_or(0),
                    ..Self::default()
                }
            }
            Provider::Gemini => {
                let u: Gemini = serde_json::from_str(json).map_err(parse_error)?;
                let prompt = need(u.prompt_token_count, "promptTokenCount")?;
                let cached = u.cached_content_token_count.unwrap_or(0);
                Self {
                    prompt,
                    reprocessed: prompt.saturating_sub(cached),
                    cached,
                    generated: u
                        .candidates_token_count
                        .unwrap_or(0)
                        .saturating_add(u.thoughts_token_count.unwrap_or(0)),
                    ..Self::default()
                }
            }
        };
        Ok(Self {
            provider: Some(provider),
            ..figures
        })
    }

    /// The figures of a reply's usage ([`UsageReport`]).
    pub fn of(report: &UsageReport) -> Result<Self, UsageError> {
        Self::read(report.provider, &report.json)
    }
}

impl UsageReport {
    /// The engine's figures in this usage ([`UsageFigures::read`]).
    pub fn figures(&self) -> Result<UsageFigures, UsageError> {
        UsageFigures::of(self)
    }
}

impl Reply {
    /// The engine's figures for this reply: `Ok(None)` when the reply carries no usage.
    pub fn figures(&self) -> Result<Option<UsageFigures>, UsageError> {
        self.usage.as_ref().map(UsageFigures::of).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_apis_usage_reads_into_the_same_figures() {
        let read = |p, json: &str| UsageFigures::read(p, json).unwrap();
        let f = read(
            Provider::LlamaCpp,
            r#"{"cache_n":64,"prompt_n":36,"prompt_ms":12.5,"predicted_n":10,"predicted_ms":80.25}"#,
        );
        assert_eq!(
            (f.prompt, f.reprocessed, f.cached, f.generated),
            (100, 36, 64, 10)
        );
        assert_eq!((f.prompt_ms, f.generation_ms), (Some(12.5), Some(80.25)));
        let chat = read(
            Provider::OpenAi,
            r#"{"prompt_tokens":100,"completion_tokens":10,"total_tokens":110,"prompt_tokens_details":{"cached_tokens":64}}"#,
        );
        let responses = read(
            Provider::OpenAi,
            r#"{"input_tokens":100,"input_tokens_details":{"cached_tokens":64},"output_tokens":10,"total_tokens":110}"#,
        );
        let deepseek = read(
            Provider::DeepSeek,
            r#"{"prompt_tokens":100,"completion_tokens":10,"prompt_cache_hit_tokens":64,"prompt_cache_miss_tokens":36}"#,
        );
        let gemini = read(
            Provider::Gemini,
            r#"{"promptTokenCount":100,"candidatesTokenCount":6,"thoughtsTokenCount":4,"cachedContentTokenCount":64}"#,
        );
        for g in [chat, responses, deepseek, gemini] {
            assert_eq!(
                (
                    g.prompt,
                    g.reprocessed,
                    g.cached,
                    g.cache_written,
                    g.generated
                ),
                (100, 36, 64, 0, 10),
                "{g:?}"
            );
            assert_eq!(g.prompt_ms, None);
        }
        let a = read(
            Provider::Anthropic,
            r#"{"input_tokens":20,"cache_read_input_tokens":64,"cache_creation_input_tokens":16,"output_tokens":10}"#,
        );
        assert_eq!(
            (
                a.prompt,
                a.reprocessed,
                a.cached,
                a.cache_written,
                a.generated
            ),
            (100, 36, 64, 16, 10)
        );
        // No cache field: nothing was cached.
        let uncached = read(
            Provider::OpenAi,
            r#"{"prompt_tokens":7,"completion_tokens":1}"#,
        );
        assert_eq!((uncached.reprocessed, uncached.cached), (7, 0));
    }

    #[test]
    fn a_usage_without_its_counts_is_an_error_naming_the_field() {
        let e = UsageFigures::read(Provider::LlamaCpp, r#"{"cache_n":3}"#).unwrap_err();
        assert_eq!(e.provider, "llama_cpp");
        assert!(e.to_string().contains("no `prompt_n`"), "{e}");
        let e = UsageFigures::read(Provider::Anthropic, "[1]").unwrap_err();
        assert!(e.to_string().contains("not the usage object"), "{e}");
        let e = UsageFigures::read(Provider::OpenAi, r#"{"total_tokens":3}"#).unwrap_err();
        assert!(e.to_string().contains("prompt_tokens"), "{e}");
    }
}
