//! One usage record for every backend's usage object.
//!
//! | provider | where | input counts |
//! |---|---|---|
//! | OpenAI | `usage.prompt_tokens`, `usage.prompt_tokens_details.cached_tokens` (Responses API: `input_tokens`, `input_tokens_details.cached_tokens`) | the prompt count *includes* the cached tokens |
//! | Anthropic | `usage.input_tokens`, `cache_read_input_tokens`, `cache_creation_input_tokens` | `input_tokens` *excludes* both cache counts |
//! | DeepSeek | `usage.prompt_cache_hit_tokens`, `prompt_cache_miss_tokens` | hit + miss = `prompt_tokens` |
//! | Gemini | `usageMetadata.promptTokenCount`, `cachedContentTokenCount` | the prompt count *includes* the cached tokens |
//! | llama.cpp | `timings.cache_n`, `timings.prompt_n` | `cache_n` reused, `prompt_n` re-processed |
//!
//! ```
//! use prompt_measure::{Provider, Usage};
//! let body = serde_json::json!({"usage": {"prompt_tokens": 2006, "completion_tokens": 300,
//!     "prompt_tokens_details": {"cached_tokens": 1920}}});
//! let usage = Usage::from_provider(Provider::OpenAi, &body)?;
//! assert_eq!((usage.input_uncached, usage.cache_read, usage.output), (86, 1920, 300));
//! assert!((usage.hit_rate() - 1920.0 / 2006.0).abs() < 1e-12);
//! # Ok::<(), prompt_measure::MeterError>(())
//! ```

use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign};

use serde::Serialize;
use serde_json::Value;

/// A backend whose usage object the meter reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI chat completions or Responses API (and OpenAI-compatible servers).
    OpenAi,
    /// Anthropic Messages API.
    Anthropic,
    /// DeepSeek.
    DeepSeek,
    /// Google Gemini (`usageMetadata`).
    Gemini,
    /// llama.cpp server (`timings`).
    LlamaCpp,
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::DeepSeek => "deepseek",
            Provider::Gemini => "gemini",
            Provider::LlamaCpp => "llama_cpp",
        })
    }
}

/// Why a usage object could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MeterError {
    /// The body is not a JSON object.
    #[error("usage: expected a JSON object, found {found}")]
    NotAnObject {
        /// What was found.
        found: &'static str,
    },
    /// No known usage shape.
    #[error(
        "no usage found: expected `usage`, `usageMetadata` or `timings` (keys present: {keys})"
    )]
    Unrecognized {
        /// The top-level keys present.
        keys: String,
    },
    /// A required field is absent.
    #[error("{provider} usage: missing `{field}`")]
    Missing {
        /// The provider.
        provider: Provider,
        /// The field.
        field: &'static str,
    },
    /// A count that is not a non-negative integer.
    #[error("{provider} usage: `{field}` is not a non-negative integer (found {found})")]
    NotANumber {
        /// The provider.
        provider: Provider,
        /// The field.
        field: &'static str,
        /// The value found.
        found: String,
    },
    /// Counts that contradict each other.
    #[error("{provider} usage: {detail}")]
    Inconsistent {
        /// The provider.
        provider: Provider,
        /// What does not add up.
        detail: String,
    },
}

/// Token usage of one request (or a sum), normalized across providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Usage {
    /// Input tokens neither read from nor written to cache.
    pub input_uncached: u64,
    /// Input tokens read from cache.
    pub cache_read: u64,
    /// Input tokens written to cache (Anthropic's cache creation).
    pub cache_write: u64,
    /// Output tokens (reasoning included).
    pub output: u64,
}

impl Usage {
    /// All input tokens: `input_uncached + cache_read + cache_write`.
    pub fn input(&self) -> u64 {
        self.input_uncached + self.cache_read + self.cache_write
    }

    /// `cache_read / input` (output excluded); 0 without input.
    pub fn hit_rate(&self) -> f64 {
        super::share(self.cache_read, self.input())
    }

    /// Reads `body` (a whole response, or its usage object) as `provider` shapes it.
    pub fn from_provider(provider: Provider, body: &Value) -> Result<Usage, MeterError> {
        let obj = object(body)?;
        match provider {
            Provider::OpenAi => openai(inner(obj, "usage")),
            Provider::Anthropic => anthropic(inner(obj, "usage")),
            Provider::DeepSeek => deepseek(inner(obj, "usage")),
            Provider::Gemini => gemini(inner(obj, "usageMetadata")),
            Provider::LlamaCpp => llama_cpp(inner(obj, "timings")),
        }
    }

    /// Recognizes the shape of `body` (a whole response, or its usage object) and reads it.
    /// llama.cpp's `timings` win over the OpenAI-compatible `usage` it also sends.
    pub fn detect(body: &Value) -> Result<(Provider, Usage), MeterError> {
        let obj = object(body)?;
        let provider = detect_provider(obj).ok_or_else(|| MeterError::Unrecognized {
            keys: obj
                .keys()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", "),
        })?;
        Ok((provider, Usage::from_provider(provider, body)?))
    }
}

impl Add for Usage {
    type Output = Usage;
    fn add(mut self, rhs: Usage) -> Usage {
        self += rhs;
        self
    }
}

impl AddAssign for Usage {
    fn add_assign(&mut self, rhs: Usage) {
        self.input_uncached += rhs.input_uncached;
        self.cache_read += rhs.cache_read;
        self.cache_write += rhs.cache_write;
        self.output += rhs.output;
    }
}

impl Sum for Usage {
    fn sum<I: Iterator<Item = Usage>>(iter: I) -> Usage {
        iter.fold(Usage::default(), Add::add)
    }
}

/// Usage summed over a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SessionUsage {
    /// Requests recorded.
    pub requests: u64,
    /// The sum.
    pub total: Usage,
}

impl SessionUsage {
    /// An empty session.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one request's usage.
    pub fn record(&mut self, usage: Usage) {
        self.requests += 1;
        self.total += usage;
    }

    /// The session's hit rate: summed cache reads over summed input.
    pub fn hit_rate(&self) -> f64 {
        self.total.hit_rate()
    }
}

impl FromIterator<Usage> for SessionUsage {
    fn from_iter<I: IntoIterator<Item = Usage>>(iter: I) -> Self {
        let mut s = SessionUsage::new();
        for u in iter {
            s.record(u);
        }
        s
    }
}

type Object = serde_json::Map<String, Value>;

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn object(v: &Value) -> Result<&Object, MeterError> {
    v.as_object()
        .ok_or(MeterError::NotAnObject { found: kind(v) })
}

/// The nested object `key` when present, else the object itself (a bare usage object).
fn inner<'a>(obj: &'a Object, key: &str) -> &'a Object {
    obj.get(key).and_then(Value::as_object).unwrap_or(obj)
}

fn detect_provider(obj: &Object) -> Option<Provider> {
    let has = |o: &Object, k: &str| o.contains_key(k);
    if inner(obj, "timings").contains_key("cache_n") {
        return Some(Provider::LlamaCpp);
    }
    if has(inner(obj, "usageMetadata"), "promptTokenCount") {
        return Some(Provider::Gemini);
    }
    let usage = inner(obj, "usage");
    if has(usage, "prompt_cache_hit_tokens") || has(usage, "prompt_cache_miss_tokens") {
        Some(Provider::DeepSeek)
    } else if has(usage, "input_tokens_details") || has(usage, "prompt_tokens") {
        Some(Provider::OpenAi)
    } else if has(usage, "input_tokens")
        || has(usage, "cache_read_input_tokens")
        || has(usage, "cache_creation_input_tokens")
    {
        Some(Provider::Anthropic)
    } else {
        None
    }
}

/// A count: absent or null → `None`.
fn count(obj: &Object, provider: Provider, field: &'static str) -> Result<Option<u64>, MeterError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| MeterError::NotANumber {
            provider,
            field,
            found: v.to_string(),
        }),
    }
}

fn required(obj: &Object, provider: Provider, field: &'static str) -> Result<u64, MeterError> {
    count(obj, provider, field)?.ok_or(MeterError::Missing { provider, field })
}

fn optional(obj: &Object, provider: Provider, field: &'static str) -> Result<u64, MeterError> {
    Ok(count(obj, provider, field)?.unwrap_or(0))
}

fn cached_within(
    provider: Provider,
    prompt_field: &str,
    prompt: u64,
    cached: u64,
) -> Result<u64, MeterError> {
    prompt
        .checked_sub(cached)
        .ok_or_else(|| MeterError::Inconsistent {
            provider,
            detail: format!("{cached} cached tokens exceed {prompt_field} = {prompt}"),
        })
}

fn openai(u: &Object) -> Result<Usage, MeterError> {
    let p = Provider::OpenAi;
    // Chat completions, unless the Responses API's `input_tokens` is there instead.
    let (prompt_field, details_field, output_field) =
        if u.contains_key("input_tokens") && !u.contains_key("prompt_tokens") {
            ("input_tokens", "input_tokens_details", "output_tokens")
        } else {
            (
                "prompt_tokens",
                "prompt_tokens_details",
                "completion_tokens",
            )
        };
    let prompt = required(u, p, prompt_field)?;
    let cached = match u.get(details_field).and_then(Value::as_object) {
        Some(details) => optional(details, p, "cached_tokens")?,
        None => 0,
    };
    Ok(Usage {
        input_uncached: cached_within(p, prompt_field, prompt, cached)?,
        cache_read: cached,
        cache_write: 0,
        output: optional(u, p, output_field)?,
    })
}

fn anthropic(u: &Object) -> Result<Usage, MeterError> {
    let p = Provider::Anthropic;
    Ok(Usage {
        input_uncached: required(u, p, "input_tokens")?,
        cache_read: optional(u, p, "cache_read_input_tokens")?,
        cache_write: optional(u, p, "cache_creation_input_tokens")?,
        output: optional(u, p, "output_tokens")?,
    })
}

fn deepseek(u: &Object) -> Result<Usage, MeterError> {
    let p = Provider::DeepSeek;
    let hit = required(u, p, "prompt_cache_hit_tokens")?;
    let miss = required(u, p, "prompt_cache_miss_tokens")?;
    if let Some(prompt) = count(u, p, "prompt_tokens")?
        && prompt != hit + miss
    {
        return Err(MeterError::Inconsistent {
            provider: p,
            detail: format!(
                "prompt_cache_hit_tokens {hit} + prompt_cache_miss_tokens {miss} != prompt_tokens {prompt}"
            ),
        });
    }
    Ok(Usage {
        input_uncached: miss,
        cache_read: hit,
        cache_write: 0,
        output: optional(u, p, "completion_tokens")?,
    })
}

fn gemini(u: &Object) -> Result<Usage, MeterError> {
    let p = Provider::Gemini;
    let prompt = required(u, p, "promptTokenCount")?;
    let cached = optional(u, p, "cachedContentTokenCount")?;
    let tool_prompt = optional(u, p, "toolUsePromptTokenCount")?;
    Ok(Usage {
        input_uncached: cached_within(p, "promptTokenCount", prompt, cached)? + tool_prompt,
        cache_read: cached,
        cache_write: 0,
        output: optional(u, p, "candidatesTokenCount")? + optional(u, p, "thoughtsTokenCount")?,
    })
}

fn llama_cpp(t: &Object) -> Result<Usage, MeterError> {
    let p = Provider::LlamaCpp;
    Ok(Usage {
        input_uncached: required(t, p, "prompt_n")?,
        cache_read: required(t, p, "cache_n")?,
        cache_write: 0,
        output: optional(t, p, "predicted_n")?,
    })
}
