//! What each provider caches: its minimum prefix, its granularity, how long an entry
//! lives, and Anthropic's breakpoints and lookback. The one table the engine's
//! expectations come from.

use serde::Serialize;

use super::canon::Canonical;
use crate::guard::Shape;

/// Whose cache a request is read against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI (Chat Completions, Responses).
    OpenAi,
    /// DeepSeek (Chat Completions with a `deepseek-*` model).
    DeepSeek,
    /// Google Gemini.
    Gemini,
}

impl Provider {
    /// The provider of a request of `shape` for `model`.
    pub fn of(shape: Shape, model: Option<&str>) -> Provider {
        match shape {
            Shape::Anthropic => Provider::Anthropic,
            Shape::Gemini => Provider::Gemini,
            Shape::ChatCompletions if model.is_some_and(|m| m.starts_with("deepseek")) => {
                Provider::DeepSeek
            }
            Shape::ChatCompletions | Shape::Responses => Provider::OpenAi,
        }
    }

    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
            Provider::DeepSeek => "deepseek",
            Provider::Gemini => "gemini",
        }
    }
}

/// A provider's caching rule, as its documentation states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Profile {
    /// The provider.
    pub provider: Provider,
    /// The shortest prefix cached, in tokens.
    pub minimum: u64,
    /// Past the minimum, cached prefixes grow by this many tokens (1: any length).
    pub increment: u64,
    /// How long an entry lives after its last use, in seconds, when the request asks for
    /// nothing else; `None` where the provider documents no lifetime to hold it to.
    pub lifetime: Option<u32>,
    /// Anthropic: the cache is read only at breakpoints, looking back this many blocks.
    pub lookback: Option<u32>,
}

impl Profile {
    /// The rule for `provider`.
    ///
    /// Sources: Anthropic's prompt-caching docs (1,024 tokens for most models, 2,048 for
    /// Haiku; 5-minute default lifetime, `"ttl": "1h"` for an hour; 20-block lookback);
    /// OpenAI's prompt-caching guide (1,024 tokens then 128-token increments; entries
    /// cleared after 5–10 minutes of inactivity, `prompt_cache_retention: "24h"` for
    /// extended retention); DeepSeek's context-caching docs (64-token units, entries kept
    /// for hours, no lifetime promised); Gemini's implicit caching (1,024 tokens on Flash,
    /// 2,048 on Pro models, no lifetime documented).
    pub fn of(provider: Provider, model: Option<&str>) -> Profile {
        let model = model.unwrap_or("");
        match provider {
            Provider::Anthropic => Profile {
                provider,
                minimum: if model.contains("haiku") { 2048 } else { 1024 },
                increment: 1,
                lifetime: Some(300),
                lookback: Some(20),
            },
            Provider::OpenAi => Profile {
                provider,
                minimum: 1024,
                increment: 128,
                lifetime: Some(300),
                lookback: None,
            },
            Provider::DeepSeek => Profile {
                provider,
                minimum: 64,
                increment: 64,
                lifetime: None,
                lookback: None,
            },
            Provider::Gemini => Profile {
                provider,
                minimum: if model.contains("pro") { 2048 } else { 1024 },
                increment: 1,
                lifetime: None,
                lookback: None,
            },
        }
    }

    /// The lifetime the predecessor's entry had: a `cache_control` marker's `ttl` for
    /// Anthropic, extended retention for OpenAI, else the default.
    pub fn lifetime_of(&self, predecessor: &Canonical<'_>) -> Option<u32> {
        match self.provider {
            Provider::Anthropic => predecessor.marker_ttl.or(self.lifetime),
            Provider::OpenAi
                if predecessor.keys.iter().any(|k| {
                    k.name.as_ref() == "prompt_cache_retention" && k.value.contains("24h")
                }) =>
            {
                Some(86_400)
            }
            _ => self.lifetime,
        }
    }

    /// The tokens of a shared prefix of `common` tokens this provider serves from cache:
    /// 0 below the minimum, else rounded down to its increment.
    pub fn servable(&self, common: u64) -> u64 {
        if common < self.minimum {
            return 0;
        }
        if self.increment <= 1 {
            return common;
        }
        self.minimum + (common - self.minimum) / self.increment * self.increment
    }
}
