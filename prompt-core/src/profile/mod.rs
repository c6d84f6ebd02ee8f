//! Provider profiles: what the provider behind an API shape does with the bytes.
//!
//! The API shape says how a body is written; the provider behind it decides what happens
//! to an appended update. DeepSeek speaks OpenAI's Chat Completions but moves every
//! `role: "system"` message to the front; Anthropic's Messages API accepts a
//! `role: "system"` message inside `messages` on Claude Opus 4.8 and answers 400 on the
//! other models; cache entries live minutes on one provider and a day on another.
//!
//! One table ([`PROFILES`]) holds the facts, one row per provider or model family, each
//! citing its source; one lookup ([`Profile::lookup`]: API shape, model, base URL) picks
//! the row; a provider or model the table does not know gets the safe default (updates as
//! user reminders, no `role: "system"` message after the first), and says so
//! ([`Profile::is_fallback`]). The operator overrides the choice in `agent.toml`'s
//! `[provider]` section ([`ProviderSection`]).
//!
//! ```
//! use prompt_core::ApiKind;
//! use prompt_core::delivery::UpdateRole;
//! use prompt_core::profile::{LaterSystem, Profile, Provider};
//! let deepseek = Profile::lookup(ApiKind::OpenAi, "deepseek-chat", None);
//! assert_eq!(deepseek.provider(), Some(Provider::DeepSeek));
//! assert_eq!(deepseek.later_system(), LaterSystem::Hoisted);
//! assert_eq!(deepseek.delivery().role, UpdateRole::UserReminder);
//!
//! let opus = Profile::lookup(ApiKind::Anthropic, "claude-opus-4-8", None);
//! assert_eq!(opus.delivery().role, UpdateRole::System); // native mid-conversation system messages
//! let sonnet = Profile::lookup(ApiKind::Anthropic, "claude-sonnet-4-5-20250929", None);
//! assert_eq!(sonnet.delivery().role, UpdateRole::UserReminder);
//!
//! let unknown = Profile::lookup(ApiKind::OpenAi, "my-finetune", None);
//! assert!(unknown.is_fallback());
//! assert_eq!(unknown.delivery().role, UpdateRole::UserReminder);
//! ```

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::delivery::{ApiKind, DeliveryStyle, PrefixRole, UpdateRole};
use crate::input::excerpt;

mod load;
mod table;

pub use load::{
    LoadedProvider, ProviderDiagnostic, ProviderErrors, ProviderLoadError, ProviderProblem,
    ProviderSection,
};
pub use table::{PROFILES, SAFE_DEFAULT};

/// Anthropic looks for an earlier cache entry at most this many blocks before a breakpoint:
/// where the wire places its breakpoints, and how far back the engine lets a request read.
pub const ANTHROPIC_LOOKBACK_BLOCKS: usize = 20;

/// A provider or engine the profile table knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI (`api.openai.com`): Chat Completions and Responses.
    #[serde(rename = "openai")]
    OpenAi,
    /// Azure OpenAI (`*.openai.azure.com`).
    #[serde(rename = "azure_openai")]
    AzureOpenAi,
    /// DeepSeek (`api.deepseek.com`), OpenAI-compatible.
    #[serde(rename = "deepseek")]
    DeepSeek,
    /// Anthropic's Claude API (`api.anthropic.com`), and Claude elsewhere.
    Anthropic,
    /// Google's Gemini API.
    Gemini,
    /// llama.cpp's server.
    LlamaCpp,
    /// vLLM's OpenAI-compatible server.
    Vllm,
    /// SGLang's OpenAI-compatible server.
    Sglang,
    /// Ollama.
    Ollama,
}

impl Provider {
    /// Every provider, in table order.
    pub const ALL: [Provider; 9] = [
        Provider::OpenAi,
        Provider::AzureOpenAi,
        Provider::DeepSeek,
        Provider::Anthropic,
        Provider::Gemini,
        Provider::LlamaCpp,
        Provider::Vllm,
        Provider::Sglang,
        Provider::Ollama,
    ];

    /// The name `agent.toml` uses: `openai`, `azure_openai`, `deepseek`, `anthropic`,
    /// `gemini`, `llama_cpp`, `vllm`, `sglang`, `ollama`.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::AzureOpenAi => "azure_openai",
            Provider::DeepSeek => "deepseek",
            Provider::Anthropic => "anthropic",
            Provider::Gemini => "gemini",
            Provider::LlamaCpp => "llama_cpp",
            Provider::Vllm => "vllm",
            Provider::Sglang => "sglang",
            Provider::Ollama => "ollama",
        }
    }

    /// The provider of that name.
    pub fn from_name(name: &str) -> Option<Provider> {
        Provider::ALL.into_iter().find(|p| p.as_str() == name)
    }

    /// The API shape one speaks to it in by default (Chat Completions for the
    /// OpenAI-compatible ones).
    pub fn default_api(self) -> ApiKind {
        match self {
            Provider::Anthropic => ApiKind::Anthropic,
            Provider::Gemini => ApiKind::Gemini,
            Provider::LlamaCpp => ApiKind::LlamaCpp,
            Provider::OpenAi
            | Provider::AzureOpenAi
            | Provider::DeepSeek
            | Provider::Vllm
            | Provider::Sglang
            | Provider::Ollama => ApiKind::OpenAi,
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a provider does with a `role: "system"` message after the first one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaterSystem {
    /// Kept where it was appended (OpenAI; vLLM, SGLang and llama.cpp with a template that
    /// renders it in place).
    KeptInPlace,
    /// Accepted inside `messages` and applied as a system instruction from there on, the
    /// cache before it kept (Anthropic: Claude Opus 4.8 on the Claude API).
    Native,
    /// Moved to the front of the prompt: every later message shifts and the cache misses
    /// from the insertion point (DeepSeek).
    Hoisted,
    /// Refused: the API answers 400 (Anthropic models other than Opus 4.8).
    Rejected,
    /// No system role after the first message: the API has one system field (Gemini).
    SingleField,
    /// Not known: an unknown provider, or a chat template nobody probed (Ollama).
    Unknown,
}

impl LaterSystem {
    /// Whether a later `role: "system"` message reaches the model in place, the cache before
    /// it kept.
    pub fn kept(self) -> bool {
        matches!(self, LaterSystem::KeptInPlace | LaterSystem::Native)
    }

    /// The serde name.
    pub fn as_str(self) -> &'static str {
        match self {
            LaterSystem::KeptInPlace => "kept_in_place",
            LaterSystem::Native => "native",
            LaterSystem::Hoisted => "hoisted",
            LaterSystem::Rejected => "rejected",
            LaterSystem::SingleField => "single_field",
            LaterSystem::Unknown => "unknown",
        }
    }
}

/// How long a cache entry lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Lifetime {
    /// Kept this many seconds after its last use (Anthropic: 300, or 3,600 with
    /// `"ttl": "1h"`; Ollama's default `keep_alive`).
    Idle {
        /// Seconds.
        seconds: u64,
    },
    /// Cleared after between `min` and `max` seconds without use, and always within
    /// `limit` (OpenAI's in-memory retention: 5 to 10 minutes, at most an hour).
    IdleBetween {
        /// The shortest.
        min_seconds: u64,
        /// The longest usual.
        max_seconds: u64,
        /// Never longer than this.
        limit_seconds: u64,
    },
    /// Kept up to this long (OpenAI's `prompt_cache_retention: "24h"`).
    UpTo {
        /// Seconds.
        seconds: u64,
    },
    /// No expiry by time: entries are evicted when memory is needed (llama.cpp, vLLM,
    /// SGLang).
    UntilEvicted,
    /// The provider documents no lifetime (DeepSeek's disk cache, Gemini's implicit
    /// cache).
    Undocumented,
}

/// What an idle gap does to a cache entry of some [`Lifetime`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GapFate {
    /// Still there.
    Kept,
    /// Gone: the next request starts cold.
    Expired,
    /// Past the shortest lifetime, within the longest: it may be gone.
    MaybeExpired,
    /// The provider does not say.
    Unknown,
}

impl Lifetime {
    /// What `gap_seconds` without a request does to an entry. An entry whose lifetime is
    /// reached exactly is gone.
    pub fn after_gap(self, gap_seconds: u64) -> GapFate {
        match self {
            Lifetime::Idle { seconds } | Lifetime::UpTo { seconds } => {
                if gap_seconds >= seconds {
                    GapFate::Expired
                } else {
                    GapFate::Kept
                }
            }
            Lifetime::IdleBetween {
                min_seconds,
                max_seconds,
                ..
            } => {
                if gap_seconds >= max_seconds {
                    GapFate::Expired
                } else if gap_seconds >= min_seconds {
                    GapFate::MaybeExpired
                } else {
                    GapFate::Kept
                }
            }
            Lifetime::UntilEvicted => GapFate::Kept,
            Lifetime::Undocumented => GapFate::Unknown,
        }
    }
}

impl fmt::Display for Lifetime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lifetime::Idle { seconds } => write!(f, "{} after the last use", duration(*seconds)),
            Lifetime::IdleBetween {
                min_seconds,
                max_seconds,
                limit_seconds,
            } => write!(
                f,
                "{}–{} after the last use, at most {}",
                duration(*min_seconds),
                duration(*max_seconds),
                duration(*limit_seconds)
            ),
            Lifetime::UpTo { seconds } => write!(f, "up to {}", duration(*seconds)),
            Lifetime::UntilEvicted => f.write_str("until evicted (no expiry by time)"),
            Lifetime::Undocumented => f.write_str("not documented"),
        }
    }
}

/// `300` → `5 min`, `3600` → `1 h`, `86400` → `24 h`, `90` → `90 s`.
pub fn duration(seconds: u64) -> String {
    if seconds >= 3600 && seconds.is_multiple_of(3600) {
        format!("{} h", seconds / 3600)
    } else if seconds >= 60 && seconds.is_multiple_of(60) {
        format!("{} min", seconds / 60)
    } else {
        format!("{seconds} s")
    }
}

/// Anthropic's cache lifetime on a breakpoint: `cache_control.ttl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CacheTtl {
    /// `"5m"`, the default (written as no `ttl` at all).
    #[serde(rename = "5m")]
    FiveMinutes,
    /// `"1h"`: written on the prefix breakpoints (tools and system), which come before
    /// every 5-minute one as Anthropic requires.
    #[serde(rename = "1h")]
    OneHour,
}

impl CacheTtl {
    /// `5m` or `1h`.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheTtl::FiveMinutes => "5m",
            CacheTtl::OneHour => "1h",
        }
    }

    /// The lifetime it gives an entry.
    pub fn lifetime(self) -> Lifetime {
        match self {
            CacheTtl::FiveMinutes => Lifetime::Idle { seconds: 300 },
            CacheTtl::OneHour => Lifetime::Idle { seconds: 3600 },
        }
    }
}

/// OpenAI's `prompt_cache_retention`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Retention {
    /// `"in_memory"`: 5 to 10 minutes without use, at most an hour.
    #[serde(rename = "in_memory")]
    InMemory,
    /// `"24h"`: extended retention, up to a day.
    #[serde(rename = "24h")]
    TwentyFourHours,
}

impl Retention {
    /// `in_memory` or `24h`.
    pub fn as_str(self) -> &'static str {
        match self {
            Retention::InMemory => "in_memory",
            Retention::TwentyFourHours => "24h",
        }
    }

    /// The lifetime it gives an entry.
    pub fn lifetime(self) -> Lifetime {
        match self {
            Retention::InMemory => OPENAI_IN_MEMORY,
            Retention::TwentyFourHours => Lifetime::UpTo { seconds: 86_400 },
        }
    }
}

/// OpenAI's in-memory retention: "typically clears caches within 5 to 10 minutes of
/// inactivity and always removes them within one hour".
pub(crate) const OPENAI_IN_MEMORY: Lifetime = Lifetime::IdleBetween {
    min_seconds: 300,
    max_seconds: 600,
    limit_seconds: 3600,
};

/// Which longer lifetime a provider lets the caller ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Extension {
    /// None.
    None,
    /// Anthropic's `cache_control.ttl` ([`CacheTtl`]).
    Ttl,
    /// OpenAI's `prompt_cache_retention` ([`Retention`]).
    Retention,
}

/// How finely a provider reads a cached prefix (above its minimum).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Granularity {
    /// Every token of the shared prefix (llama.cpp's slot, SGLang's radix tree, Gemini).
    Tokens,
    /// The minimum, then whole steps of this many tokens (OpenAI: 128 after 1,024).
    Steps(u32),
    /// Whole units of this many tokens (DeepSeek: 64).
    Units(u32),
    /// Whole blocks of this many tokens, the request's last token always recomputed (vLLM:
    /// 16).
    Blocks(u32),
}

/// Which models of a row the provider answers cache diagnostics for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheDiagnostics {
    /// None.
    None,
    /// Every model of the row.
    Every,
    /// Models named `{prefix}{major}.{minor}` or later (OpenAI: `gpt-` 5.6).
    FromVersion {
        /// The name's prefix before the version (`gpt-`).
        prefix: &'static str,
        /// The first major version that has them.
        major: u32,
        /// The first minor version of that major that has them.
        minor: u32,
    },
}

impl CacheDiagnostics {
    /// Whether `model` (its name as given) is one the provider answers them for.
    ///
    /// ```
    /// use prompt_core::profile::CacheDiagnostics;
    /// let openai = CacheDiagnostics::FromVersion { prefix: "gpt-", major: 5, minor: 6 };
    /// assert!(openai.covers("gpt-5.6") && openai.covers("gpt-6-mini") && openai.covers("gpt-5.10"));
    /// assert!(!openai.covers("gpt-5.5") && !openai.covers("gpt-5") && !openai.covers("o4-mini"));
    /// ```
    pub fn covers(self, model: &str) -> bool {
        match self {
            CacheDiagnostics::None => false,
            CacheDiagnostics::Every => true,
            CacheDiagnostics::FromVersion {
                prefix,
                major,
                minor,
            } => {
                let Some(rest) = model.strip_prefix(prefix) else {
                    return false;
                };
                let version: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                let mut parts = version.split('.');
                let have_major = parts.next().and_then(|p| p.parse::<u32>().ok());
                let have_minor = parts
                    .next()
                    .and_then(|p| p.parse::<u32>().ok())
                    .unwrap_or(0);
                have_major.is_some_and(|m| m > major || (m == major && have_minor >= minor))
            }
        }
    }

    /// How the profile table in `docs/wire.md` says it (`None`: nothing to say).
    pub fn describe(self) -> Option<String> {
        match self {
            CacheDiagnostics::None => None,
            CacheDiagnostics::Every => Some("cache diagnostics".to_owned()),
            CacheDiagnostics::FromVersion {
                prefix,
                major,
                minor,
            } => Some(format!(
                "cache diagnostics ({prefix}{major}.{minor} and later)"
            )),
        }
    }
}

/// One row of the profile table: the facts of one provider, or of one model family of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[non_exhaustive]
pub struct Facts {
    /// The provider; `None` for the safe default of the unknown.
    pub provider: Option<Provider>,
    /// The model family the row is for (`claude-opus-4-8`, `gemini-2.5`): a model whose
    /// name starts with it, then ends or goes on with a date or a tag. Empty: the
    /// provider's row for every model no other row names.
    pub family: &'static str,
    /// What the provider does with a later `role: "system"` message.
    pub later_system: LaterSystem,
    /// How updates are delivered.
    pub updates: UpdateRole,
    /// Where the first system prompt (the frozen prefix) goes.
    pub first_system: PrefixRole,
    /// The shortest prefix the provider caches, in tokens (`None`: not documented).
    pub min_cache_tokens: Option<u32>,
    /// How finely a cached prefix is read: token by token, or in steps, units or blocks.
    pub granularity: Granularity,
    /// How long an entry lives by default.
    pub lifetime: Lifetime,
    /// The longer lifetime one may ask for.
    pub extension: Extension,
    /// Whether a reply must be replayed with its signatures (Gemini 3's
    /// `thoughtSignature` on function calls: without it the API answers 400).
    pub signatures_required: bool,
    /// Whether the provider answers why a request missed its cache, and for which models:
    /// Anthropic's cache diagnostics (every model, on the Claude API), OpenAI's prompt cache
    /// diagnostics (GPT-5.6 and later, on the Responses API).
    pub cache_diagnostics: CacheDiagnostics,
    /// Where the facts come from: a documentation page, or a named issue or pull request.
    pub source: &'static str,
}

/// How a profile was found.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "matched", rename_all = "snake_case")]
pub enum Matched {
    /// A row for the model's family.
    Model,
    /// The provider's row (the provider has no per-model rows).
    Provider,
    /// The provider's row for models the table does not name: the safe choice.
    ProviderDefault {
        /// Why.
        reason: String,
    },
    /// No provider known: the safe default of the unknown.
    Unknown {
        /// Why.
        reason: String,
    },
}

/// The Claude API's host: the only one with mid-conversation system messages and cache
/// diagnostics.
const CLAUDE_API_HOST: &str = "api.anthropic.com";

/// A model name as the table matches it: lower case, without a router's `vendor/` or a
/// cloud's `…anthropic.` prefix; Claude versions with dashes (`claude-opus-4.8` is
/// `claude-opus-4-8`). At most 256 bytes of it are read.
fn normalized(model: &str) -> String {
    let lower = excerpt(model.trim(), 256).to_ascii_lowercase();
    let tail = lower.rsplit('/').next().unwrap_or(&lower);
    let tail = match tail.find("anthropic.") {
        Some(at) => &tail[at + "anthropic.".len()..],
        None => tail,
    };
    if tail.starts_with("claude") {
        tail.replace('.', "-")
    } else {
        tail.to_owned()
    }
}

/// Whether `model` (normalized) is of `family`: it is the family, or goes on with a
/// minor version written with a dot (`gemini-3.1-pro` is of `gemini-3`), a date, a tag or a
/// platform suffix (`-20250514`, `-latest`, `@20250514`, `:0`) — but not with another
/// version number (`claude-opus-4-8` is not of `claude-opus-4`).
fn of_family(model: &str, family: &str) -> bool {
    let Some(rest) = model.strip_prefix(family) else {
        return false;
    };
    match rest.as_bytes().first() {
        None | Some(b'.' | b'@' | b':') => true,
        Some(b'-') => {
            let segment = rest[1..].split(['-', '@', ':', '.']).next().unwrap_or("");
            let version =
                (1..=2).contains(&segment.len()) && segment.bytes().all(|b| b.is_ascii_digit());
            !version
        }
        Some(_) => false,
    }
}

/// The host of a base URL, lower case, without scheme, credentials, port or path.
fn host_of(base_url: &str) -> (String, Option<u16>) {
    let url = excerpt(base_url.trim(), 512).to_ascii_lowercase();
    let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    match authority.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (host.to_owned(), port.parse().ok())
        }
        _ => (authority.to_owned(), None),
    }
}

/// The provider a base URL names, when its host is one the table knows.
fn provider_of_host(host: &str, port: Option<u16>) -> Option<Provider> {
    let ends = |suffix: &str| host == &suffix[1..] || host.ends_with(suffix);
    if host == "api.openai.com" {
        Some(Provider::OpenAi)
    } else if ends(".openai.azure.com") || ends(".cognitiveservices.azure.com") {
        Some(Provider::AzureOpenAi)
    } else if host == "api.deepseek.com" {
        Some(Provider::DeepSeek)
    } else if host == CLAUDE_API_HOST {
        Some(Provider::Anthropic)
    } else if host == "generativelanguage.googleapis.com" {
        Some(Provider::Gemini)
    } else if port == Some(11434) {
        // Ollama's default port.
        Some(Provider::Ollama)
    } else {
        None
    }
}

/// The provider a model name implies, as the common adapter tables infer it.
fn provider_of_model(model: &str) -> Option<Provider> {
    let openai = ["gpt-", "chatgpt-", "codex-"]
        .iter()
        .any(|p| model.starts_with(p))
        || ["o1", "o3", "o4"]
            .iter()
            .any(|p| model == *p || model.starts_with(&format!("{p}-")));
    if model.starts_with("claude") {
        Some(Provider::Anthropic)
    } else if model.starts_with("gemini") {
        Some(Provider::Gemini)
    } else if model.starts_with("deepseek") {
        Some(Provider::DeepSeek)
    } else if openai {
        Some(Provider::OpenAi)
    } else {
        None
    }
}

/// The provider profile that applies to a session: the table's facts for its provider and
/// model, and what the operator chose over them (`[provider]` in `agent.toml`).
///
/// It decides how updates and the first system prompt are delivered
/// ([`Profile::delivery`]), whether a `role: "system"` message may come after the first
/// ([`Profile::sends_later_system`]), the cache lifetime fields the wire writes
/// ([`Profile::ttl`], [`Profile::retention`]), whether the wire asks for the provider's
/// cache diagnostics, and whether replies must be replayed with their signatures.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Profile {
    model: String,
    base_url: Option<String>,
    facts: &'static Facts,
    matched: Matched,
    later_system: LaterSystem,
    updates: UpdateRole,
    platform: Option<String>,
    cache_diagnostics_available: bool,
    forced_updates: Option<UpdateRole>,
    forced_first_system: Option<PrefixRole>,
    ttl: Option<CacheTtl>,
    retention: Option<Retention>,
    diagnostics: bool,
}

impl Profile {
    /// The profile for `model` spoken to in the `api` shape at `base_url` (none: the
    /// provider's public endpoint). The provider is the one the base URL's host names,
    /// else llama.cpp for its own API, else the one the model's name implies (`gpt-`,
    /// `claude`, `gemini`, `deepseek`), else the API's own provider (Anthropic, Gemini);
    /// for an OpenAI-shaped API with none of these it is unknown, and the safe default
    /// applies.
    pub fn lookup(api: ApiKind, model: &str, base_url: Option<&str>) -> Profile {
        let name = normalized(model);
        let host = base_url.map(host_of);
        let provider = host
            .as_ref()
            .and_then(|(h, port)| provider_of_host(h, *port))
            .or_else(|| (api == ApiKind::LlamaCpp).then_some(Provider::LlamaCpp))
            .or_else(|| provider_of_model(&name))
            .or(match api {
                ApiKind::Anthropic => Some(Provider::Anthropic),
                ApiKind::Gemini => Some(Provider::Gemini),
                ApiKind::LlamaCpp => Some(Provider::LlamaCpp),
                ApiKind::OpenAi | ApiKind::OpenAiResponses => None,
            });
        Self::resolve(provider, model, &name, base_url)
    }

    /// The profile of `model` at `provider` (the operator named it), at `base_url`.
    pub fn for_provider(provider: Provider, model: &str, base_url: Option<&str>) -> Profile {
        Self::resolve(Some(provider), model, &normalized(model), base_url)
    }

    fn resolve(
        provider: Option<Provider>,
        model: &str,
        name: &str,
        base_url: Option<&str>,
    ) -> Profile {
        let shown = excerpt(model, 64);
        let (facts, matched) = match provider {
            None => (
                table::fallback(),
                Matched::Unknown {
                    reason: if model.is_empty() {
                        "no provider, model or base URL given".to_owned()
                    } else {
                        format!("no provider known for model `{shown}`")
                    },
                },
            ),
            Some(p) => {
                let rows = PROFILES.iter().filter(|f| f.provider == Some(p));
                let best = rows
                    .clone()
                    .filter(|f| !f.family.is_empty() && of_family(name, f.family))
                    .max_by_key(|f| f.family.len());
                let has_model_rows = rows.clone().any(|f| !f.family.is_empty());
                match best {
                    Some(row) => (row, Matched::Model),
                    None => {
                        let row = rows
                            .clone()
                            .find(|f| f.family.is_empty())
                            .unwrap_or_else(|| table::fallback());
                        let matched = if has_model_rows {
                            Matched::ProviderDefault {
                                reason: if model.is_empty() {
                                    format!("no model given for {p}")
                                } else {
                                    format!("model `{shown}` is not in the {p} rows of the table")
                                },
                            }
                        } else {
                            Matched::Provider
                        };
                        (row, matched)
                    }
                }
            }
        };
        let mut profile = Profile {
            model: model.to_owned(),
            base_url: base_url.map(str::to_owned),
            facts,
            matched,
            later_system: facts.later_system,
            updates: facts.updates,
            platform: None,
            // What the wire can ask for: Anthropic's, on every model of its rows.
            cache_diagnostics_available: facts.cache_diagnostics == CacheDiagnostics::Every,
            forced_updates: None,
            forced_first_system: None,
            ttl: None,
            retention: None,
            diagnostics: false,
        };
        // Mid-conversation system messages and cache diagnostics are the Claude API's;
        // Bedrock, Vertex AI and Foundry have neither.
        if provider == Some(Provider::Anthropic)
            && let Some(url) = base_url
        {
            let (host, _) = host_of(url);
            if host != CLAUDE_API_HOST {
                if profile.later_system == LaterSystem::Native {
                    profile.later_system = LaterSystem::Rejected;
                    profile.updates = UpdateRole::UserReminder;
                }
                profile.cache_diagnostics_available = false;
                profile.platform = Some(format!(
                    "{}: not the Claude API, so no mid-conversation system messages and no cache diagnostics",
                    excerpt(&host, 64)
                ));
            }
        }
        profile
    }

    /// The same profile with updates delivered as `role` whatever the table says (the
    /// operator's `delivery`). [`Profile::delivery_risk`] says when that breaks the cache.
    pub fn with_updates(mut self, role: UpdateRole) -> Self {
        self.forced_updates = Some(role);
        self
    }

    /// The same profile with the first system prompt placed as `prefix`.
    pub fn with_first_system(mut self, prefix: PrefixRole) -> Self {
        self.forced_first_system = Some(prefix);
        self
    }

    /// The same profile asking for Anthropic's cache lifetime `ttl` on the prefix
    /// breakpoints. Ignored by a provider without it ([`Facts::extension`]).
    pub fn with_ttl(mut self, ttl: CacheTtl) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The same profile asking for OpenAI's `prompt_cache_retention`. Ignored by a
    /// provider without it.
    pub fn with_retention(mut self, retention: Retention) -> Self {
        self.retention = Some(retention);
        self
    }

    /// The same profile asking for the provider's cache diagnostics (Anthropic, on the
    /// Claude API): the wire sends the beta header and `diagnostics.previous_message_id`.
    pub fn with_cache_diagnostics(mut self) -> Self {
        self.diagnostics = true;
        self
    }

    /// The provider; `None` for the unknown.
    pub fn provider(&self) -> Option<Provider> {
        self.facts.provider
    }

    /// The model given.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The base URL given.
    pub fn base_url(&self) -> Option<&str> {
        self.base_url.as_deref()
    }

    /// The table's row.
    pub fn facts(&self) -> &'static Facts {
        self.facts
    }

    /// How the row was found.
    pub fn matched(&self) -> &Matched {
        &self.matched
    }

    /// Whether the safe default applies: the provider, or the model of a provider with
    /// per-model rows, is not in the table.
    pub fn is_fallback(&self) -> bool {
        matches!(
            self.matched,
            Matched::ProviderDefault { .. } | Matched::Unknown { .. }
        )
    }

    /// Why the safe default applies, when it does.
    pub fn fallback_reason(&self) -> Option<&str> {
        match &self.matched {
            Matched::ProviderDefault { reason } | Matched::Unknown { reason } => Some(reason),
            Matched::Model | Matched::Provider => None,
        }
    }

    /// What the provider does with a later `role: "system"` message, at this base URL.
    pub fn later_system(&self) -> LaterSystem {
        self.later_system
    }

    /// Why the base URL changes the row's facts (Claude on another platform), if it does.
    pub fn platform_note(&self) -> Option<&str> {
        self.platform.as_deref()
    }

    /// How updates are delivered: the operator's choice, else the table's.
    pub fn update_role(&self) -> UpdateRole {
        self.forced_updates.unwrap_or(self.updates)
    }

    /// Whether the operator chose the update delivery.
    pub fn updates_forced(&self) -> bool {
        self.forced_updates.is_some()
    }

    /// Where the first system prompt goes: the operator's choice, else the table's.
    pub fn first_system(&self) -> PrefixRole {
        self.forced_first_system.unwrap_or(self.facts.first_system)
    }

    /// The session's delivery style: updates as system messages (`system-update` tag) or
    /// as user messages (`system-reminder` tag), the prefix where [`Profile::first_system`]
    /// says.
    pub fn delivery(&self) -> DeliveryStyle {
        let style = match self.update_role() {
            UpdateRole::System => DeliveryStyle::system(),
            UpdateRole::UserReminder => DeliveryStyle::user_reminder(DeliveryStyle::REMINDER_TAG),
            UpdateRole::MergedIntoUser => {
                DeliveryStyle::merged_into_user(DeliveryStyle::REMINDER_TAG)
            }
        };
        style.with_prefix(self.first_system())
    }

    /// Whether a `role: "system"` message after the first is sent as one: the provider
    /// keeps it in place (or, for Anthropic, accepts it inside `messages`), or the
    /// operator asked for system updates. Otherwise the wire sends it as a user message
    /// wrapped in `<system-reminder>` (Chat Completions, Responses) or a user text block
    /// (Anthropic, Gemini).
    pub fn sends_later_system(&self) -> bool {
        self.later_system.kept() || self.forced_updates == Some(UpdateRole::System)
    }

    /// When the operator forced a delivery the profile knows to break the cache (or the
    /// request), what happens.
    pub fn delivery_risk(&self) -> Option<DeliveryRisk> {
        if self.forced_updates != Some(UpdateRole::System) {
            return None;
        }
        match self.later_system {
            LaterSystem::KeptInPlace | LaterSystem::Native => None,
            LaterSystem::Hoisted => Some(DeliveryRisk::Hoisted),
            LaterSystem::Rejected => Some(DeliveryRisk::Rejected),
            LaterSystem::SingleField => Some(DeliveryRisk::SingleField),
            LaterSystem::Unknown => Some(DeliveryRisk::Unknown),
        }
    }

    /// The shortest prefix the provider caches, in tokens.
    pub fn min_cache_tokens(&self) -> Option<u32> {
        self.facts.min_cache_tokens
    }

    /// How finely the provider reads a cached prefix.
    pub fn granularity(&self) -> Granularity {
        self.facts.granularity
    }

    /// Of a prefix of `shared` tokens a request of `total` tokens shares with what is cached,
    /// the tokens the provider reads: none below its minimum, then as finely as it reads
    /// ([`Granularity`]). Anthropic's breakpoints are the engine's to apply, not this.
    ///
    /// ```
    /// use prompt_core::ApiKind;
    /// use prompt_core::profile::Profile;
    /// let openai = Profile::lookup(ApiKind::OpenAi, "gpt-4.1", None);
    /// assert_eq!(openai.readable(1000, 5000), 0);
    /// assert_eq!(openai.readable(1300, 5000), 1280);
    /// let llama = Profile::lookup(ApiKind::LlamaCpp, "", None);
    /// assert_eq!(llama.readable(1300, 5000), 1300);
    /// ```
    pub fn readable(&self, shared: u64, total: u64) -> u64 {
        let minimum = u64::from(self.facts.min_cache_tokens.unwrap_or(0));
        if shared == 0 || shared < minimum {
            return 0;
        }
        match self.facts.granularity {
            Granularity::Tokens => shared,
            Granularity::Steps(step) => {
                let step = u64::from(step.max(1));
                minimum + (shared - minimum) / step * step
            }
            Granularity::Units(unit) => {
                let unit = u64::from(unit.max(1));
                shared / unit * unit
            }
            Granularity::Blocks(block) => {
                let block = u64::from(block.max(1));
                shared.min(total.saturating_sub(1)) / block * block
            }
        }
    }

    /// How many blocks before a breakpoint the provider looks for an earlier cache entry
    /// ([`ANTHROPIC_LOOKBACK_BLOCKS`] for Anthropic); `None` where its cache reads any
    /// prefix, however far back it was written.
    pub fn lookback_blocks(&self) -> Option<usize> {
        (self.provider() == Some(Provider::Anthropic)).then_some(ANTHROPIC_LOOKBACK_BLOCKS)
    }

    /// Anthropic's `cache_control.ttl` on the prefix breakpoints, when asked for and the
    /// provider has it.
    pub fn ttl(&self) -> Option<CacheTtl> {
        self.ttl.filter(|_| self.facts.extension == Extension::Ttl)
    }

    /// OpenAI's `prompt_cache_retention`, when asked for and the provider has it.
    pub fn retention(&self) -> Option<Retention> {
        self.retention
            .filter(|_| self.facts.extension == Extension::Retention)
    }

    /// The lifetime of the history's cache entries (Anthropic's rolling breakpoints, the
    /// whole prompt elsewhere).
    pub fn lifetime(&self) -> Lifetime {
        match self.retention() {
            Some(retention) => retention.lifetime(),
            None => self.facts.lifetime,
        }
    }

    /// The lifetime of the prefix's entries (Anthropic's tools and system breakpoints,
    /// which carry the TTL asked for).
    pub fn prefix_lifetime(&self) -> Lifetime {
        match self.ttl() {
            Some(ttl) => ttl.lifetime(),
            None => self.lifetime(),
        }
    }

    /// Whether the wire asks for the provider's cache diagnostics: asked for, and the
    /// provider (at this base URL) has them.
    pub fn cache_diagnostics(&self) -> bool {
        self.diagnostics && self.cache_diagnostics_available
    }

    /// Whether the provider answers why a request of this model missed its cache, when asked
    /// (Anthropic's cache diagnostics on the Claude API; OpenAI's prompt cache diagnostics on
    /// GPT-5.6 and later): what a proxy asks for on an agent's behalf (`--diagnose`).
    pub fn answers_cache_diagnostics(&self) -> bool {
        let platform_has_them =
            self.provider() != Some(Provider::Anthropic) || self.cache_diagnostics_available;
        platform_has_them && self.facts.cache_diagnostics.covers(&self.model)
    }

    /// Whether cache diagnostics were asked for, whatever the provider has.
    pub fn cache_diagnostics_requested(&self) -> bool {
        self.diagnostics
    }

    /// Whether cache diagnostics were asked for but the provider does not have them.
    pub fn cache_diagnostics_unavailable(&self) -> bool {
        self.diagnostics && !self.cache_diagnostics_available
    }

    /// Whether replies must be replayed with their signatures.
    pub fn signatures_required(&self) -> bool {
        self.facts.signatures_required
    }

    /// The provider's name, or `unknown`.
    pub fn provider_name(&self) -> &'static str {
        self.provider().map_or("unknown", Provider::as_str)
    }
}

/// One line per decision, as `status` and `check` print it.
impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let model = if self.model.is_empty() {
            "(no model)".to_owned()
        } else {
            excerpt(&self.model, 64).into_owned()
        };
        write!(f, "{} {model}", self.provider_name())?;
        match &self.matched {
            Matched::Model => write!(f, " (row {})", self.facts.family)?,
            Matched::Provider => write!(f, " (the {} row)", self.provider_name())?,
            Matched::ProviderDefault { reason } | Matched::Unknown { reason } => {
                write!(f, " (fallback: {reason}; the safe default applies)")?;
            }
        }
        let updates = match self.update_role() {
            UpdateRole::System if self.sends_later_system() => "system messages",
            UpdateRole::System => "system messages, sent as user reminders",
            UpdateRole::UserReminder => "user reminders",
            UpdateRole::MergedIntoUser => "merged into the next user message",
        };
        let chosen = if self.updates_forced() {
            "agent.toml"
        } else {
            "profile"
        };
        write!(
            f,
            "\n  updates: {updates} ({chosen}); first system prompt: {}; later role:\"system\": {}",
            self.first_system().as_str(),
            self.later_system.as_str()
        )?;
        if let Some(note) = &self.platform {
            write!(f, " ({note})")?;
        }
        let min = self
            .min_cache_tokens()
            .map_or_else(|| "not documented".to_owned(), |m| format!("{m} tokens"));
        write!(f, "\n  cache: {}; minimum {min}", self.lifetime())?;
        if let Some(ttl) = self.ttl() {
            write!(f, "; ttl {} on the prefix breakpoints", ttl.as_str())?;
        }
        if let Some(retention) = self.retention() {
            write!(f, "; prompt_cache_retention {}", retention.as_str())?;
        }
        if self.cache_diagnostics() {
            f.write_str("; cache diagnostics on")?;
        }
        if self.signatures_required() {
            f.write_str("; replies replayed with their signatures")?;
        }
        write!(f, "\n  source: {}", self.facts.source)
    }
}

/// What a forced `delivery = "system"` does on a provider that does not keep a later
/// system message in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryRisk {
    /// The provider moves it to the front: the cache misses from where it was appended.
    Hoisted,
    /// The provider answers 400.
    Rejected,
    /// The API has no system role after the first message: updates go as user text anyway.
    SingleField,
    /// Not known to be kept in place.
    Unknown,
}

impl fmt::Display for DeliveryRisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeliveryRisk::Hoisted => {
                "the provider moves every `role: \"system\"` message to the front of the prompt: an appended system update shifts every later message and misses the cache from where it was appended; use `user_reminder`"
            }
            DeliveryRisk::Rejected => {
                "the model refuses a `role: \"system\"` message inside `messages` (only Claude Opus 4.8 on the Claude API accepts one): the request fails with 400; use `user_reminder`"
            }
            DeliveryRisk::SingleField => {
                "the API has no system role after the first message: updates are sent as user text anyway"
            }
            DeliveryRisk::Unknown => {
                "the provider is not known to keep a later system message in place: it may be moved to the front (a cache miss) or refused"
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_take_dates_tags_and_minor_versions_but_not_other_versions() {
        assert!(of_family("claude-opus-4-20250514", "claude-opus-4"));
        assert!(of_family("claude-opus-4", "claude-opus-4"));
        assert!(of_family("claude-opus-4-8@20260528", "claude-opus-4-8"));
        assert!(!of_family("claude-opus-4-8", "claude-opus-4"));
        assert!(!of_family("claude-opus-40", "claude-opus-4"));
        assert!(of_family("gemini-3.1-pro-preview", "gemini-3"));
        assert!(of_family("gemini-2.5-flash", "gemini-2.5"));
        assert!(of_family("claude-sonnet-4-5-latest", "claude-sonnet-4-5"));
    }

    #[test]
    fn model_names_are_normalized_across_routers_and_clouds() {
        assert_eq!(normalized("anthropic/claude-opus-4.8"), "claude-opus-4-8");
        assert_eq!(
            normalized("us.anthropic.claude-opus-4-8-20260528-v1:0"),
            "claude-opus-4-8-20260528-v1:0"
        );
        assert_eq!(normalized("models/Gemini-2.5-Flash"), "gemini-2.5-flash");
    }

    #[test]
    fn hosts_are_read_without_scheme_credentials_port_or_path() {
        assert_eq!(
            host_of("https://user:pw@API.DeepSeek.com:443/v1?x=1"),
            ("api.deepseek.com".to_owned(), Some(443))
        );
        assert_eq!(
            host_of("http://localhost:11434"),
            ("localhost".to_owned(), Some(11434))
        );
        assert_eq!(
            host_of("api.openai.com/v1"),
            ("api.openai.com".to_owned(), None)
        );
    }
}
