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
//! **Hostile bodies.** Every count must be a JSON integer in `0..=2^64 − 1` (negative,
//! fractional and larger numbers are [`MeterError::NotANumber`]), and the counts of one body
//! must agree, or the body is [`MeterError::Inconsistent`], naming the provider and the
//! field, and nothing is summed:
//!
//! | provider | inconsistent when |
//! |---|---|
//! | every one | the counts of one body (input parts and output) add up past `2^64 − 1` |
//! | OpenAI | `cached_tokens` > the prompt count; `total_tokens`, when present, ≠ prompt + completion (output) count |
//! | Anthropic | `cache_creation.ephemeral_5m_input_tokens + ephemeral_1h_input_tokens` > `cache_creation_input_tokens` |
//! | DeepSeek | hit + miss ≠ `prompt_tokens` (when present); `total_tokens`, when present, ≠ `prompt_tokens` + `completion_tokens` |
//! | Gemini | `cachedContentTokenCount` > `promptTokenCount` |
//! | llama.cpp | (only the sum above) |
//!
//! Sums of records ([`Usage`]'s `+` and [`Sum`], [`Usage::input`]) saturate at
//! `2^64 − 1` instead of wrapping; [`SessionUsage::record`] sets aside, and counts, a record it
//! cannot add without overflowing.
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

use std::iter::Sum;
use std::ops::{Add, AddAssign};

use serde::Serialize;
use serde_json::Value;

use super::shorten;

/// A backend whose usage object the meter reads: the workspace's one provider identity
/// (`prompt_core::profile::Provider`; the meter reads the usage of OpenAI, Anthropic,
/// DeepSeek, Gemini and llama.cpp, and OpenAI-compatible servers as OpenAI's). Its cache
/// lifetime is its profile's (`Profile::for_provider(p, "", None).lifetime()`).
pub use prompt_core::profile::Provider;

/// Anthropic's cache writes split by lifetime (`usage.cache_creation`): a write at the
/// 1-hour TTL costs more than one at 5 minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct CacheWrites {
    /// `ephemeral_5m_input_tokens`.
    pub five_minutes: u64,
    /// `ephemeral_1h_input_tokens`.
    pub one_hour: u64,
    /// Written at a lifetime the split does not name (or with no split given).
    pub other: u64,
}

impl CacheWrites {
    /// Reads the split of an Anthropic `usage` (a whole response, or its usage object),
    /// checked as [`Usage::from_provider`] checks it.
    ///
    /// ```
    /// use prompt_measure::meter::CacheWrites;
    /// let body = serde_json::json!({"usage": {"input_tokens": 10, "cache_creation_input_tokens": 1500,
    ///     "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 1200}}});
    /// let writes = CacheWrites::from_anthropic(&body)?;
    /// assert_eq!((writes.five_minutes, writes.one_hour, writes.other), (300, 1200, 0));
    /// # Ok::<(), prompt_measure::MeterError>(())
    /// ```
    pub fn from_anthropic(body: &Value) -> Result<CacheWrites, MeterError> {
        let u = inner(object(body)?, "usage");
        let p = Provider::Anthropic;
        let total = optional(u, p, "cache_creation_input_tokens")?;
        anthropic_split(u, total)
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
        /// The top-level keys present (the first ones, when there are many).
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
    /// A count that is not an integer in `0..=2^64 − 1` (negative, fractional, larger, or
    /// not a number at all).
    #[error("{provider} usage: `{field}` is not an integer in 0..=2^64-1 (found {found})")]
    NotANumber {
        /// The provider.
        provider: Provider,
        /// The field.
        field: &'static str,
        /// The value found, shortened: at most a few dozen characters.
        found: String,
    },
    /// Counts that contradict each other, or add up past `2^64 − 1`: the body is not summed.
    #[error("{provider} usage: {detail}")]
    Inconsistent {
        /// The provider.
        provider: Provider,
        /// The field whose count contradicts the others (or overflowed their sum).
        field: &'static str,
        /// What does not add up, naming every field involved.
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
    /// All input tokens: `input_uncached + cache_read + cache_write`, saturating at
    /// `u64::MAX` (a record read from a provider never reaches it: its counts are checked).
    pub fn input(&self) -> u64 {
        self.input_uncached
            .saturating_add(self.cache_read)
            .saturating_add(self.cache_write)
    }

    /// The sum of two records, `None` when any count would pass `u64::MAX`.
    pub fn checked_add(self, rhs: Usage) -> Option<Usage> {
        Some(Usage {
            input_uncached: self.input_uncached.checked_add(rhs.input_uncached)?,
            cache_read: self.cache_read.checked_add(rhs.cache_read)?,
            cache_write: self.cache_write.checked_add(rhs.cache_write)?,
            output: self.output.checked_add(rhs.output)?,
        })
    }

    /// Whether the four counts together (input and output) stay within `u64::MAX`, so that
    /// [`Usage::input`] is exact.
    fn fits(&self) -> bool {
        [self.cache_read, self.cache_write, self.output]
            .into_iter()
            .try_fold(self.input_uncached, u64::checked_add)
            .is_some()
    }

    /// `cache_read / input` (output excluded); 0 without input. Within `0..=1`.
    pub fn hit_rate(&self) -> f64 {
        super::share(self.cache_read, self.input())
    }

    /// Reads `body` (a whole response, or its usage object) as `provider` shapes it.
    pub fn from_provider(provider: Provider, body: &Value) -> Result<Usage, MeterError> {
        let obj = object(body)?;
        match provider {
            // OpenAI-compatible servers report OpenAI's shape.
            Provider::OpenAi
            | Provider::AzureOpenAi
            | Provider::Vllm
            | Provider::Sglang
            | Provider::Ollama => openai(inner(obj, "usage")),
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
            keys: key_list(obj),
        })?;
        Ok((provider, Usage::from_provider(provider, body)?))
    }
}

/// Count by count, saturating at `u64::MAX` instead of wrapping (or panicking in a debug
/// build). [`Usage::checked_add`] tells an overflow apart; [`SessionUsage`] counts the records
/// it could not add.
impl Add for Usage {
    type Output = Usage;
    fn add(mut self, rhs: Usage) -> Usage {
        self += rhs;
        self
    }
}

/// Saturating, as [`Add`].
impl AddAssign for Usage {
    fn add_assign(&mut self, rhs: Usage) {
        self.input_uncached = self.input_uncached.saturating_add(rhs.input_uncached);
        self.cache_read = self.cache_read.saturating_add(rhs.cache_read);
        self.cache_write = self.cache_write.saturating_add(rhs.cache_write);
        self.output = self.output.saturating_add(rhs.output);
    }
}

/// Saturating, as [`Add`].
impl Sum for Usage {
    fn sum<I: Iterator<Item = Usage>>(iter: I) -> Usage {
        iter.fold(Usage::default(), Add::add)
    }
}

/// Usage summed over a session.
///
/// Never wraps: a record that would take any count of the total, or the total's input plus
/// output, past `u64::MAX` is not added; it is counted in [`SessionUsage::overflowed`]
/// instead, so the total and its hit rate stay exact for the records in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct SessionUsage {
    /// Requests summed into `total`.
    pub requests: u64,
    /// The sum.
    pub total: Usage,
    /// Requests set aside because adding them would have overflowed the total.
    pub overflowed: u64,
}

impl SessionUsage {
    /// An empty session.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one request's usage, and tells whether it was added: `false` (and
    /// [`SessionUsage::overflowed`] counts it) when the total would overflow.
    pub fn record(&mut self, usage: Usage) -> bool {
        match self.total.checked_add(usage).filter(Usage::fits) {
            Some(total) => {
                self.total = total;
                self.requests = self.requests.saturating_add(1);
                true
            }
            None => {
                self.overflowed = self.overflowed.saturating_add(1);
                false
            }
        }
    }

    /// The session's hit rate: summed cache reads over summed input (within `0..=1`).
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

/// The keys of `obj`, listed up to about [`LISTED`] bytes: a diagnostic costs linear time
/// and stays short whatever the body.
fn key_list(obj: &Object) -> String {
    let mut out = String::new();
    for (i, key) in obj.keys().enumerate() {
        if out.len() >= LISTED {
            out.push_str(&format!("… ({} keys)", obj.len()));
            break;
        }
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(&shorten(key, 40));
    }
    out
}

/// How long a listing in a diagnostic grows before it is cut.
const LISTED: usize = 200;

/// A value for a diagnostic: numbers and short strings as they are, anything else by kind
/// and size. Constant size, whatever the value.
fn describe(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{}\"", shorten(s, 32)),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(o) => format!("an object of {} keys", o.len()),
        Value::Null | Value::Bool(_) | Value::Number(_) => shorten(&v.to_string(), 40),
    }
}

/// A count: absent or null → `None`.
fn count(obj: &Object, provider: Provider, field: &'static str) -> Result<Option<u64>, MeterError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| MeterError::NotANumber {
            provider,
            field,
            found: describe(v),
        }),
    }
}

fn required(obj: &Object, provider: Provider, field: &'static str) -> Result<u64, MeterError> {
    count(obj, provider, field)?.ok_or(MeterError::Missing { provider, field })
}

fn optional(obj: &Object, provider: Provider, field: &'static str) -> Result<u64, MeterError> {
    Ok(count(obj, provider, field)?.unwrap_or(0))
}

/// `parts` summed, or [`MeterError::Inconsistent`] naming the field at which the sum passes
/// `u64::MAX`, and every part.
fn checked_sum(provider: Provider, parts: &[(&'static str, u64)]) -> Result<u64, MeterError> {
    let mut total = 0u64;
    for &(field, n) in parts {
        total = total
            .checked_add(n)
            .ok_or_else(|| MeterError::Inconsistent {
                provider,
                field,
                detail: format!(
                    "{} add up past the largest count, 2^64-1",
                    parts
                        .iter()
                        .map(|(f, n)| format!("`{f}` {n}"))
                        .collect::<Vec<_>>()
                        .join(" + ")
                ),
            })?;
    }
    Ok(total)
}

/// `total - part`, or [`MeterError::Inconsistent`] when the part is the larger.
fn within(
    provider: Provider,
    (part_field, part): (&'static str, u64),
    (total_field, total): (&'static str, u64),
) -> Result<u64, MeterError> {
    total
        .checked_sub(part)
        .ok_or_else(|| MeterError::Inconsistent {
            provider,
            field: part_field,
            detail: format!("`{part_field}` {part} exceeds `{total_field}` {total}"),
        })
}

/// A reported total, when present, must be the sum of its parts.
fn total_is(
    obj: &Object,
    provider: Provider,
    total_field: &'static str,
    parts: &[(&'static str, u64)],
) -> Result<(), MeterError> {
    let sum = checked_sum(provider, parts)?;
    match count(obj, provider, total_field)? {
        Some(total) if total != sum => Err(MeterError::Inconsistent {
            provider,
            field: total_field,
            detail: format!(
                "`{total_field}` {total} != {} = {sum}",
                parts
                    .iter()
                    .map(|(f, n)| format!("`{f}` {n}"))
                    .collect::<Vec<_>>()
                    .join(" + ")
            ),
        }),
        _ => Ok(()),
    }
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
    let output = optional(u, p, output_field)?;
    let uncached = within(p, ("cached_tokens", cached), (prompt_field, prompt))?;
    total_is(
        u,
        p,
        "total_tokens",
        &[(prompt_field, prompt), (output_field, output)],
    )?;
    Ok(Usage {
        input_uncached: uncached,
        cache_read: cached,
        cache_write: 0,
        output,
    })
}

fn anthropic(u: &Object) -> Result<Usage, MeterError> {
    let p = Provider::Anthropic;
    let usage = Usage {
        input_uncached: required(u, p, "input_tokens")?,
        cache_read: optional(u, p, "cache_read_input_tokens")?,
        cache_write: optional(u, p, "cache_creation_input_tokens")?,
        output: optional(u, p, "output_tokens")?,
    };
    checked_sum(
        p,
        &[
            ("input_tokens", usage.input_uncached),
            ("cache_read_input_tokens", usage.cache_read),
            ("cache_creation_input_tokens", usage.cache_write),
            ("output_tokens", usage.output),
        ],
    )?;
    anthropic_split(u, usage.cache_write)?;
    Ok(usage)
}

/// The writes split by lifetime; other lifetimes may come, so the known ones must only not
/// exceed the whole.
fn anthropic_split(u: &Object, total: u64) -> Result<CacheWrites, MeterError> {
    let p = Provider::Anthropic;
    let Some(split) = u.get("cache_creation").and_then(Value::as_object) else {
        return Ok(CacheWrites {
            other: total,
            ..CacheWrites::default()
        });
    };
    let parts = [
        (
            "cache_creation.ephemeral_5m_input_tokens",
            optional(split, p, "ephemeral_5m_input_tokens")?,
        ),
        (
            "cache_creation.ephemeral_1h_input_tokens",
            optional(split, p, "ephemeral_1h_input_tokens")?,
        ),
    ];
    let known = checked_sum(p, &parts)?;
    let other = total
        .checked_sub(known)
        .ok_or_else(|| MeterError::Inconsistent {
            provider: p,
            field: "cache_creation",
            detail: format!(
                "`cache_creation` {} + {} = {known} exceeds `cache_creation_input_tokens` {total}",
                parts[0].1, parts[1].1
            ),
        })?;
    Ok(CacheWrites {
        five_minutes: parts[0].1,
        one_hour: parts[1].1,
        other,
    })
}

fn deepseek(u: &Object) -> Result<Usage, MeterError> {
    let p = Provider::DeepSeek;
    let hit = required(u, p, "prompt_cache_hit_tokens")?;
    let miss = required(u, p, "prompt_cache_miss_tokens")?;
    let output = optional(u, p, "completion_tokens")?;
    let parts = [
        ("prompt_cache_hit_tokens", hit),
        ("prompt_cache_miss_tokens", miss),
    ];
    total_is(u, p, "prompt_tokens", &parts)?;
    let prompt = checked_sum(p, &parts)?;
    total_is(
        u,
        p,
        "total_tokens",
        &[("prompt_tokens", prompt), ("completion_tokens", output)],
    )?;
    Ok(Usage {
        input_uncached: miss,
        cache_read: hit,
        cache_write: 0,
        output,
    })
}

fn gemini(u: &Object) -> Result<Usage, MeterError> {
    let p = Provider::Gemini;
    let prompt = required(u, p, "promptTokenCount")?;
    let cached = optional(u, p, "cachedContentTokenCount")?;
    let tool_prompt = optional(u, p, "toolUsePromptTokenCount")?;
    let candidates = optional(u, p, "candidatesTokenCount")?;
    let thoughts = optional(u, p, "thoughtsTokenCount")?;
    let uncached = within(
        p,
        ("cachedContentTokenCount", cached),
        ("promptTokenCount", prompt),
    )?;
    checked_sum(
        p,
        &[
            ("promptTokenCount", prompt),
            ("toolUsePromptTokenCount", tool_prompt),
            ("candidatesTokenCount", candidates),
            ("thoughtsTokenCount", thoughts),
        ],
    )?;
    // The sum above bounds every partial sum: none of these can overflow.
    Ok(Usage {
        input_uncached: uncached.saturating_add(tool_prompt),
        cache_read: cached,
        cache_write: 0,
        output: candidates.saturating_add(thoughts),
    })
}

fn llama_cpp(t: &Object) -> Result<Usage, MeterError> {
    let p = Provider::LlamaCpp;
    let usage = Usage {
        input_uncached: required(t, p, "prompt_n")?,
        cache_read: required(t, p, "cache_n")?,
        cache_write: 0,
        output: optional(t, p, "predicted_n")?,
    };
    checked_sum(
        p,
        &[
            ("prompt_n", usage.input_uncached),
            ("cache_n", usage.cache_read),
            ("predicted_n", usage.output),
        ],
    )?;
    Ok(usage)
}
