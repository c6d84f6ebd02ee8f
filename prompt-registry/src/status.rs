//! The status report: for every registered writer, where it lands and why.

use std::fmt;

use prompt_core::profile::{DeliveryRisk, LaterSystem, Lifetime, Profile, ProviderSection};
use prompt_core::tools::ToolSet;
use prompt_core::{
    Component, Persist, Placement, PromptPolicy, placement::Stability, policy::Reason,
};
use serde::Serialize;

/// The version of the `status --json` document ([`StatusReport`]'s JSON). It changes only
/// when a key is removed, renamed or changes meaning; added keys keep it. The schema is in
/// `docs/status-json.md`.
pub const STATUS_SCHEMA_VERSION: u32 = 1;

/// `{"schema_version": 1, "prompt": {...}}`: the policy in force and one row per component.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    /// [`STATUS_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The `[prompt]` section's resolved view.
    pub prompt: PromptStatus,
    /// The tools field, when the agent sends one (`null` otherwise).
    pub tools: Option<ToolsStatus>,
    /// The provider profile `agent.toml`'s `[provider]` section gives (`null` without the
    /// section: each session's profile follows the model the application names).
    pub provider: Option<ProviderStatus>,
}

/// The `provider` object: the profile that applies and what it decided.
#[derive(Debug, Clone, Serialize)]
pub struct ProviderStatus {
    /// The `[provider]` section as written, in one line.
    pub section: String,
    /// The provider (`null`: unknown).
    pub provider: Option<&'static str>,
    /// The model named.
    pub model: String,
    /// The row of the profile table: a model family, `""` for the provider's row.
    pub family: &'static str,
    /// Whether the safe default applies (the provider, or the model, is not in the table).
    pub fallback: bool,
    /// Why it does.
    pub fallback_reason: Option<String>,
    /// How updates are delivered: `system`, `user_reminder`, `merged_into_user`.
    pub updates: &'static str,
    /// Who chose it: `profile` or `agent.toml`.
    pub updates_from: &'static str,
    /// Where the first system prompt goes: `system`, `first_user`.
    pub first_system: &'static str,
    /// What the provider does with a later `role: "system"` message.
    pub later_system: LaterSystem,
    /// Whether a later `role: "system"` message is sent as one.
    pub sends_later_system: bool,
    /// When the delivery chosen in agent.toml breaks the cache (or the request), what
    /// happens (`null`: it does not).
    pub delivery_risk: Option<DeliveryRisk>,
    /// The shortest cached prefix, in tokens (`null`: not documented).
    pub min_cache_tokens: Option<u32>,
    /// How long the history's cache entries live.
    pub lifetime: Lifetime,
    /// How long the prefix's entries live (Anthropic's `ttl`).
    pub prefix_lifetime: Lifetime,
    /// Anthropic's `ttl` on the prefix breakpoints (`null`: the default).
    pub ttl: Option<&'static str>,
    /// OpenAI's `prompt_cache_retention` (`null`: not written).
    pub retention: Option<&'static str>,
    /// Whether the wire asks for the provider's cache diagnostics.
    pub cache_diagnostics: bool,
    /// Whether replies must be replayed with their signatures.
    pub signatures_required: bool,
    /// Why the base URL changes the row's facts, when it does.
    pub platform: Option<String>,
    /// Where the row's facts come from.
    pub source: &'static str,
    /// The profile in words, as `status` prints it.
    #[serde(skip)]
    pub text: String,
}

impl ProviderStatus {
    /// The row of `section`'s profile ([`ProviderSection::operator_profile`]).
    pub fn of(section: &ProviderSection) -> Self {
        Self::of_profile(section.to_string(), &section.operator_profile())
    }

    /// The row of a profile, under the section's one line.
    pub fn of_profile(section: String, profile: &Profile) -> Self {
        Self {
            section,
            provider: profile.provider().map(|p| p.as_str()),
            model: profile.model().to_owned(),
            family: profile.facts().family,
            fallback: profile.is_fallback(),
            fallback_reason: profile.fallback_reason().map(str::to_owned),
            updates: profile.update_role().as_str(),
            updates_from: if profile.updates_forced() {
                "agent.toml"
            } else {
                "profile"
            },
            first_system: profile.first_system().as_str(),
            later_system: profile.later_system(),
            sends_later_system: profile.sends_later_system(),
            delivery_risk: profile.delivery_risk(),
            min_cache_tokens: profile.min_cache_tokens(),
            lifetime: profile.lifetime(),
            prefix_lifetime: profile.prefix_lifetime(),
            ttl: profile.ttl().map(|t| t.as_str()),
            retention: profile.retention().map(|r| r.as_str()),
            cache_diagnostics: profile.cache_diagnostics(),
            signatures_required: profile.signatures_required(),
            platform: profile.platform_note().map(str::to_owned),
            source: profile.facts().source,
            text: profile.to_string(),
        }
    }
}

/// The `tools` request field: frozen for the session like the prefix, and cached before it.
#[derive(Debug, Clone, Serialize)]
pub struct ToolsStatus {
    /// `request field`: the tools travel beside the messages, not in them.
    pub lands: &'static str,
    /// `session`: frozen when the session starts; a change is a deliberate refresh.
    pub stability: &'static str,
    /// Number of tool definitions.
    pub definitions: usize,
    /// Their sources (`builtin`, `mcp:github`, …), sorted.
    pub sources: Vec<String>,
    /// Hash of the field as sent, hex.
    pub fingerprint: String,
}

impl ToolsStatus {
    /// The row of `tools`.
    pub fn of(tools: &ToolSet) -> Self {
        Self {
            lands: "request field",
            stability: "session",
            definitions: tools.len(),
            sources: tools.sources().iter().map(ToString::to_string).collect(),
            fingerprint: tools.fingerprint().to_string(),
        }
    }
}

/// The policy and the rows.
#[derive(Debug, Clone, Serialize)]
pub struct PromptStatus {
    /// Placement for components that declare none.
    pub default: Placement,
    /// Allow patterns, as written.
    pub prefix_allow: Vec<String>,
    /// Deny patterns, as written.
    pub prefix_deny: Vec<String>,
    /// One row per component, by id.
    pub components: Vec<ComponentStatus>,
}

/// One component's row.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentStatus {
    /// The id.
    pub id: String,
    /// Where it lands.
    pub placement: Placement,
    /// What it declared (`null` when it declares nothing).
    pub declared: Option<Placement>,
    /// What it requested after `[prompt.placement]` and the default applied.
    pub requested: Placement,
    /// `constant`, `session` or `turn`.
    pub stability: &'static str,
    /// Whether its text is a compile-time constant.
    pub constant: bool,
    /// For tail components, whether updates persist in history; `null` in the prefix.
    pub persist: Option<Persist>,
    /// The text a tail writer delivers once when it returns `None` after having had text
    /// (its `cleared`); `null` when it declares none (its last text then stands).
    pub cleared: Option<String>,
    /// Why it landed there, in words.
    pub reason: String,
    /// Which rule decided, machine-readable.
    pub rule: Reason,
    /// `file:line` of its definition.
    pub source: String,
    /// Its one-line description.
    pub what: String,
}

impl StatusReport {
    /// Resolves every component against the policy.
    pub fn new<'a>(components: impl Iterator<Item = &'a Component>, policy: &PromptPolicy) -> Self {
        let rows = components
            .map(|c| {
                let r = policy.resolve(c);
                ComponentStatus {
                    id: c.id().to_string(),
                    placement: r.placement,
                    declared: c.declared(),
                    requested: r.requested,
                    stability: c.stability().as_str(),
                    constant: c.stability() == Stability::Static,
                    persist: (r.placement == Placement::Tail).then(|| c.persist_mode()),
                    cleared: c.cleared_text().map(str::to_owned),
                    reason: r.reason.to_string(),
                    rule: r.reason,
                    source: c.source().to_string(),
                    what: c.description().to_owned(),
                }
            })
            .collect();
        Self {
            schema_version: STATUS_SCHEMA_VERSION,
            tools: None,
            provider: None,
            prompt: PromptStatus {
                default: policy.default,
                prefix_allow: policy
                    .prefix_allow
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                prefix_deny: policy.prefix_deny.iter().map(ToString::to_string).collect(),
                components: rows,
            },
        }
    }

    /// The same report with the tools field's row.
    pub fn with_tools(mut self, tools: &ToolSet) -> Self {
        self.tools = (!tools.is_empty()).then(|| ToolsStatus::of(tools));
        self
    }

    /// The same report with the profile of `agent.toml`'s `[provider]` section (none when
    /// the file has no such section).
    pub fn with_provider(mut self, section: &ProviderSection) -> Self {
        self.provider = section.is_present().then(|| ProviderStatus::of(section));
        self
    }

    /// The row of a component.
    pub fn component(&self, id: &str) -> Option<&ComponentStatus> {
        self.prompt.components.iter().find(|c| c.id == id)
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain strings, enums and vectors cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

impl fmt::Display for StatusReport {
    /// An aligned table, prefix rows first.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.prompt;
        writeln!(
            f,
            "[prompt] default = {}, prefix_allow = [{}], prefix_deny = [{}]",
            p.default,
            p.prefix_allow.join(", "),
            p.prefix_deny.join(", ")
        )?;
        let header = [
            "ID",
            "LANDS",
            "DECLARED",
            "STABILITY",
            "PERSIST",
            "CLEARED",
            "SOURCE",
            "WHY",
        ];
        let mut rows: Vec<[String; 8]> = Vec::new();
        let mut sorted: Vec<&ComponentStatus> = p.components.iter().collect();
        sorted.sort_by_key(|c| (c.placement == Placement::Tail, c.id.clone()));
        for c in sorted {
            rows.push([
                c.id.clone(),
                c.placement.to_string(),
                c.declared.map_or_else(|| "-".to_owned(), |d| d.to_string()),
                c.stability.to_owned(),
                c.persist.map_or_else(|| "-".to_owned(), |d| d.to_string()),
                c.cleared
                    .as_deref()
                    .map_or_else(|| "-".to_owned(), |t| format!("{t:?}")),
                c.source.clone(),
                c.reason.clone(),
            ]);
        }
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |f: &mut fmt::Formatter<'_>, cells: &[&str]| -> fmt::Result {
            let last = cells.len() - 1;
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                if i == last {
                    writeln!(f, "{cell}")?;
                } else {
                    write!(f, "{cell:<w$}  ")?;
                }
            }
            Ok(())
        };
        line(f, &header)?;
        for row in &rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            line(f, &cells)?;
        }
        let prefix = p
            .components
            .iter()
            .filter(|c| c.placement == Placement::Prefix)
            .count();
        if let Some(tools) = &self.tools {
            writeln!(
                f,
                "tools: {}, {} definitions ({}), frozen for the session",
                tools.lands,
                tools.definitions,
                tools.sources.join(", ")
            )?;
        }
        match &self.provider {
            Some(provider) => writeln!(f, "provider: {}", provider.text)?,
            None => writeln!(
                f,
                "provider: no [provider] section: each session's profile follows the model the application names"
            )?,
        }
        write!(
            f,
            "{} components: {prefix} in the prefix, {} in the tail",
            p.components.len(),
            p.components.len() - prefix
        )
    }
}
