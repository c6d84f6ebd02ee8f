//! The profile table: one row per provider or model family, each with its source. The
//! table in `docs/wire.md` is this one (`the_profile_table_in_docs_wire_md_is_the_table`).

use super::{
    CacheDiagnostics, Extension, Facts, Granularity, LaterSystem, Lifetime, OPENAI_IN_MEMORY,
    Provider,
};
use crate::delivery::{PrefixRole, UpdateRole};

const ANTHROPIC_LIFETIME: Lifetime = Lifetime::Idle { seconds: 300 };

/// A Claude model family without mid-conversation system messages: updates as user
/// reminders; `role: "system"` inside `messages` answers 400.
const fn claude(family: &'static str, min: u32, source: &'static str) -> Facts {
    Facts {
        provider: Some(Provider::Anthropic),
        family,
        later_system: LaterSystem::Rejected,
        updates: UpdateRole::UserReminder,
        first_system: PrefixRole::System,
        min_cache_tokens: Some(min),
        granularity: Granularity::Tokens,
        lifetime: ANTHROPIC_LIFETIME,
        extension: Extension::Ttl,
        signatures_required: false,
        cache_diagnostics: CacheDiagnostics::Every,
        source,
    }
}

/// A Gemini family: one `systemInstruction`, updates as user reminders.
const fn gemini(family: &'static str, min: Option<u32>, signatures: bool) -> Facts {
    Facts {
        provider: Some(Provider::Gemini),
        family,
        later_system: LaterSystem::SingleField,
        updates: UpdateRole::UserReminder,
        first_system: PrefixRole::System,
        min_cache_tokens: min,
        granularity: Granularity::Tokens,
        lifetime: Lifetime::Undocumented,
        extension: Extension::None,
        signatures_required: signatures,
        cache_diagnostics: CacheDiagnostics::None,
        source: if signatures {
            "https://ai.google.dev/gemini-api/docs/caching (minimum); https://ai.google.dev/gemini-api/docs/thinking#signatures (a function call replayed without its thoughtSignature: 400)"
        } else {
            "https://ai.google.dev/gemini-api/docs/caching (minimum; implicit caching, lifetime not stated)"
        },
    }
}

/// OpenAI's caching, on its own API or Azure's: a later system message kept in place, a
/// 1,024-token minimum, in memory for minutes unless `prompt_cache_retention` asks more.
const fn openai(
    provider: Provider,
    cache_diagnostics: CacheDiagnostics,
    source: &'static str,
) -> Facts {
    Facts {
        provider: Some(provider),
        family: "",
        later_system: LaterSystem::KeptInPlace,
        updates: UpdateRole::System,
        first_system: PrefixRole::System,
        min_cache_tokens: Some(1024),
        granularity: Granularity::Steps(128),
        lifetime: OPENAI_IN_MEMORY,
        extension: Extension::Retention,
        signatures_required: false,
        cache_diagnostics,
        source,
    }
}

/// A self-hosted engine speaking Chat Completions through a chat template.
const fn engine(provider: Provider, granularity: Granularity, source: &'static str) -> Facts {
    Facts {
        provider: Some(provider),
        family: "",
        later_system: LaterSystem::KeptInPlace,
        updates: UpdateRole::System,
        first_system: PrefixRole::System,
        min_cache_tokens: None,
        granularity,
        lifetime: Lifetime::UntilEvicted,
        extension: Extension::None,
        signatures_required: false,
        cache_diagnostics: CacheDiagnostics::None,
        source,
    }
}

/// The facts, one row per provider (family `""`) or model family.
pub static PROFILES: &[Facts] = &[
    openai(
        Provider::OpenAi,
        CacheDiagnostics::FromVersion {
            prefix: "gpt-",
            major: 5,
            minor: 6,
        },
        "https://platform.openai.com/docs/guides/prompt-caching (1,024-token minimum; in memory 5–10 minutes, at most an hour; prompt_cache_retention \"24h\"); https://developers.openai.com/api/docs/guides/prompt-caching/diagnostics (prompt cache diagnostics, GPT-5.6 and later)",
    ),
    openai(
        Provider::AzureOpenAi,
        CacheDiagnostics::None,
        "https://learn.microsoft.com/azure/foundry/openai/how-to/prompt-caching (in-memory and extended retention, prompt_cache_retention)",
    ),
    Facts {
        provider: Some(Provider::DeepSeek),
        family: "",
        later_system: LaterSystem::Hoisted,
        updates: UpdateRole::UserReminder,
        first_system: PrefixRole::System,
        min_cache_tokens: Some(64),
        granularity: Granularity::Units(64),
        lifetime: Lifetime::Undocumented,
        extension: Extension::None,
        signatures_required: false,
        cache_diagnostics: CacheDiagnostics::None,
        source: "https://api-docs.deepseek.com/guides/kv_cache (whole cache prefix units, persisted at request boundaries; 64-token storage unit in its earlier version); system messages moved to the front: routatic/proxy PR #76, chatboxai/chatbox #3831, looplj/axonhub #2061",
    },
    Facts {
        provider: Some(Provider::Anthropic),
        family: "claude-opus-4-8",
        later_system: LaterSystem::Native,
        updates: UpdateRole::System,
        first_system: PrefixRole::System,
        min_cache_tokens: Some(1024),
        granularity: Granularity::Tokens,
        lifetime: ANTHROPIC_LIFETIME,
        extension: Extension::Ttl,
        signatures_required: false,
        cache_diagnostics: CacheDiagnostics::Every,
        source: "https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages (Opus 4.8 only, Claude API and Claude Platform on AWS, placement rules); no breakpoint on a trailing system message: anthropics/claude-code #96101; minimum: the prompt-caching guide as quoted in dev.to/creeta \"Claude's prompt cache fails silently below 1,024 tokens\"",
    },
    claude(
        "claude-opus-4-6",
        4096,
        "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum, as quoted in anthropics/anthropic-sdk-python #1194); 400 for role system in messages: the mid-conversation system messages page",
    ),
    claude(
        "claude-opus-4-5",
        4096,
        "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum, as quoted in anthropics/anthropic-sdk-python #1194); 400 for role system in messages: the mid-conversation system messages page",
    ),
    claude(
        "claude-opus-4-1",
        1024,
        "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum, as quoted in anthropics/anthropic-sdk-python #1194); 400 for role system in messages: the mid-conversation system messages page",
    ),
    claude(
        "claude-opus-4",
        1024,
        "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum, as quoted in anthropics/anthropic-sdk-python #1194); 400 for role system in messages: the mid-conversation system messages page",
    ),
    claude(
        "claude-sonnet-4-6",
        2048,
        "anthropics/anthropic-sdk-python #1194 (caching starts at 2,048 tokens in practice; the guide said 1,024); 400 for role system in messages: the mid-conversation system messages page",
    ),
    claude(
        "claude-sonnet-4-5",
        1024,
        "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum, as quoted in anthropics/anthropic-sdk-python #1194); 400 for role system in messages: the mid-conversation system messages page",
    ),
    claude(
        "claude-sonnet-4",
        1024,
        "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum, as quoted in anthropics/anthropic-sdk-python #1194); 400 for role system in messages: the mid-conversation system messages page",
    ),
    claude(
        "claude-haiku-4-5",
        4096,
        "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum, as quoted in anthropics/anthropic-sdk-python #1194); 400 for role system in messages: the mid-conversation system messages page",
    ),
    claude(
        "claude-3-7-sonnet",
        1024,
        "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum, as quoted in anthropics/anthropic-sdk-python #1194)",
    ),
    claude(
        "claude-3-5-haiku",
        2048,
        "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum, as quoted in anthropics/anthropic-sdk-python #1194)",
    ),
    claude(
        "claude-3-haiku",
        2048,
        "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (minimum, as quoted in anthropics/anthropic-sdk-python #1194)",
    ),
    Facts {
        provider: Some(Provider::Anthropic),
        family: "",
        later_system: LaterSystem::Rejected,
        updates: UpdateRole::UserReminder,
        first_system: PrefixRole::System,
        min_cache_tokens: None,
        granularity: Granularity::Tokens,
        lifetime: ANTHROPIC_LIFETIME,
        extension: Extension::Ttl,
        signatures_required: false,
        cache_diagnostics: CacheDiagnostics::Every,
        source: "https://platform.claude.com/docs/en/build-with-claude/prompt-caching (5-minute default, \"ttl\": \"1h\"); https://platform.claude.com/docs/en/build-with-claude/cache-diagnostics; a model not named here: no mid-conversation system messages (the mid-conversation system messages page)",
    },
    gemini("gemini-4", Some(4096), true),
    gemini("gemini-3", Some(4096), true),
    gemini("gemini-2.5", Some(2048), false),
    gemini("", None, false),
    engine(
        Provider::LlamaCpp,
        Granularity::Tokens,
        "https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md (cache_prompt: the slot's longest common prefix); a later system message per template: docs/templates.md (`cacheline probe-template`)",
    ),
    engine(
        Provider::Vllm,
        Granularity::Blocks(16),
        "https://docs.vllm.ai/en/latest/features/automatic_prefix_caching.html (16-token blocks, evicted by LRU); the chat template renders a later system message, no hoisting (issue 19)",
    ),
    engine(
        Provider::Sglang,
        Granularity::Tokens,
        "https://docs.sglang.ai/ (RadixAttention prefix cache, evicted by LRU); the chat template renders a later system message, no hoisting (issue 19)",
    ),
    Facts {
        provider: Some(Provider::Ollama),
        family: "",
        later_system: LaterSystem::Unknown,
        updates: UpdateRole::UserReminder,
        first_system: PrefixRole::System,
        min_cache_tokens: None,
        granularity: Granularity::Tokens,
        lifetime: Lifetime::Idle { seconds: 300 },
        extension: Extension::None,
        signatures_required: false,
        cache_diagnostics: CacheDiagnostics::None,
        source: "https://github.com/ollama/ollama/blob/main/docs/faq.md (a model, and its cache, stays loaded 5 minutes by default: keep_alive); its Go templates are not probed, so a later system message is not known to stay in place",
    },
];

/// The safe default of the unknown: nothing is known, so updates are user reminders and no
/// `role: "system"` message comes after the first.
pub static SAFE_DEFAULT: Facts = Facts {
    provider: None,
    family: "",
    later_system: LaterSystem::Unknown,
    updates: UpdateRole::UserReminder,
    first_system: PrefixRole::System,
    min_cache_tokens: None,
    granularity: Granularity::Tokens,
    lifetime: Lifetime::Undocumented,
    extension: Extension::None,
    signatures_required: false,
    cache_diagnostics: CacheDiagnostics::None,
    source: "the safe default (docs/wire.md, Provider profiles): updates as user reminders, no system message after the first",
};

/// The row of the unknown.
pub(super) fn fallback() -> &'static Facts {
    &SAFE_DEFAULT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_row_is_unique_and_cites_a_source() {
        let mut seen = std::collections::BTreeSet::new();
        for row in PROFILES {
            assert!(
                seen.insert((row.provider, row.family)),
                "{row:?} is in the table twice"
            );
            assert!(!row.source.is_empty(), "{row:?} cites no source");
        }
        // Every provider has a row for the models its other rows do not name.
        for provider in Provider::ALL {
            assert!(
                PROFILES
                    .iter()
                    .any(|r| r.provider == Some(provider) && r.family.is_empty()),
                "{provider} has no provider row"
            );
        }
    }
}
