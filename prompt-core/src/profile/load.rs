//! Reading the `[provider]` section of an `agent.toml`: the operator's choice of provider,
//! model and delivery over the profile table. Strict, positioned and fail-closed, as the
//! `[prompt]` section is read (`crate::policy`): every problem is collected with its
//! `file:line:col`, errors return no section, warnings are the caller's to show or deny.
//!
//! ```toml
//! [provider]
//! name = "anthropic"            # openai, azure_openai, deepseek, anthropic, gemini, llama_cpp, vllm, sglang, ollama
//! model = "claude-opus-4-8"
//! base_url = "https://api.anthropic.com"
//! delivery = "system"           # system, user_reminder, merged_into_user (default: the profile's)
//! first_system = "system"       # system, first_user (default: the profile's)
//! ttl = "1h"                    # Anthropic: "5m" or "1h" on the prefix breakpoints
//! retention = "24h"             # OpenAI, Azure OpenAI: "in_memory" or "24h"
//! diagnostics = true            # Anthropic's cache diagnostics (Claude API)
//! ```

use std::fmt;
use std::ops::Range;
use std::path::Path;

use toml::Spanned;
use toml::de::DeValue;

use super::{CacheTtl, Extension, Profile, Provider, Retention};
use crate::config::{self, Diagnostic, Diagnostics, Loaded, distance_within, excerpt, nearest};
use crate::delivery::{ApiKind, PrefixRole, UpdateRole};
use crate::input::CONFIG_LIMIT;

/// The keys of `[provider]`.
const KEYS: [&str; 8] = [
    "name",
    "model",
    "base_url",
    "delivery",
    "first_system",
    "ttl",
    "retention",
    "diagnostics",
];

/// What is wrong (or worth a look) in a `[provider]` section.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderProblem {
    /// The TOML does not parse. Only the first syntax error is reported.
    #[error("{}", .0.message().trim())]
    Syntax(toml::de::Error),
    /// The text is longer than [`CONFIG_LIMIT`].
    #[error("the file is {len} bytes; an agent.toml is read up to {limit} bytes")]
    TooLarge {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        limit: u64,
    },
    /// `[[provider]]`: an array of tables.
    #[error(
        "`[[provider]]` is an array of tables; `[provider]` must be a single table: write `[provider]`"
    )]
    ArrayOfTables,
    /// A value of the wrong TOML type.
    #[error("invalid type: {found}, expected {expected}")]
    WrongType {
        /// What was found.
        found: String,
        /// What is expected there.
        expected: &'static str,
    },
    /// A key of `[provider]` that does not exist.
    #[error(
        "unknown field `{}` in [provider], expected one of `name`, `model`, `base_url`, `delivery`, `first_system`, `ttl`, `retention`, `diagnostics`{}",
        excerpt(.key),
        .suggestion.map(|s| format!("; did you mean `{s}`?")).unwrap_or_default()
    )]
    UnknownKey {
        /// The key.
        key: String,
        /// The nearest valid key, if one is close.
        suggestion: Option<&'static str>,
    },
    /// A value outside the key's choices.
    #[error("invalid value {:?} for `{key}`, expected {expected}", excerpt(.value))]
    InvalidValue {
        /// The key.
        key: &'static str,
        /// The value.
        value: String,
        /// The choices.
        expected: &'static str,
    },
    /// A provider the table does not know.
    #[error(
        "unknown provider {:?}, expected one of openai, azure_openai, deepseek, anthropic, gemini, llama_cpp, vllm, sglang, ollama{}",
        excerpt(.value),
        .suggestion.map(|s| format!("; did you mean `{s}`?")).unwrap_or_default()
    )]
    UnknownProvider {
        /// The name as written.
        value: String,
        /// The nearest known name, if one is close.
        suggestion: Option<&'static str>,
    },
    /// Warning: the model is not in the table; the safe default applies.
    #[error(
        "model `{}` is not in the profile table ({reason}): the safe default applies (updates as user reminders, no system message after the first){}",
        excerpt(.model),
        .suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default()
    )]
    UnknownModel {
        /// The model.
        model: String,
        /// Why the table has no row for it.
        reason: String,
        /// The nearest family of the table, if one is close.
        suggestion: Option<&'static str>,
    },
    /// Warning: the operator forces a delivery the profile knows to break the cache (or
    /// the request).
    #[error("delivery = \"{}\" on {provider} {}: {risk}", .delivery.as_str(), excerpt(.model))]
    DeliveryBreaksCache {
        /// The delivery forced.
        delivery: UpdateRole,
        /// The provider.
        provider: &'static str,
        /// The model.
        model: String,
        /// What happens.
        risk: super::DeliveryRisk,
    },
    /// Warning: a key the provider has no use for (`ttl` on OpenAI, `retention` on
    /// Anthropic); it is ignored.
    #[error("`{key}` does not apply to {provider} ({why}); it is ignored")]
    NotApplicable {
        /// The key.
        key: &'static str,
        /// The provider.
        provider: &'static str,
        /// What the provider has instead.
        why: &'static str,
    },
    /// Warning: cache diagnostics asked for where the provider has none.
    #[error(
        "diagnostics = true: {provider} has no cache diagnostics here (Anthropic's, on the Claude API only); nothing is sent"
    )]
    DiagnosticsUnavailable {
        /// The provider.
        provider: &'static str,
    },
    /// Warning: a top-level table whose name is close to `provider` (`[providers]`). It is
    /// ignored.
    #[error(
        "`{}` looks like a misspelled `provider`: it is ignored, so nothing in it applies; did you mean `[provider]`?",
        excerpt(.name)
    )]
    SectionNearMiss {
        /// The name as written.
        name: String,
    },
}

config::file_problem!(ProviderProblem);

/// A problem with its position: `agent.toml:7:12: message`.
pub type ProviderDiagnostic = Diagnostic<ProviderProblem>;

/// Every error of a `[provider]` section, in source order: no section is returned.
pub type ProviderErrors = Diagnostics<ProviderProblem>;

/// Why [`ProviderSection::load_agent_toml`] failed: the file could not be read
/// ([`config::LoadError::Input`]), or its `[provider]` section is invalid
/// ([`config::LoadError::Invalid`]).
pub type ProviderLoadError = config::LoadError<ProviderProblem>;

/// The operator's `[provider]` section: which provider and model, and what to choose over
/// the profile table. Every key is optional; an absent section chooses nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderSection {
    present: bool,
    name: Option<Provider>,
    model: Option<String>,
    base_url: Option<String>,
    delivery: Option<UpdateRole>,
    first_system: Option<PrefixRole>,
    ttl: Option<CacheTtl>,
    retention: Option<Retention>,
    diagnostics: bool,
}

/// A section together with the warnings found while loading it; the section is reached
/// through a method that says what happens to them, as [`crate::policy::LoadedPolicy`].
pub type LoadedProvider = Loaded<ProviderSection, ProviderProblem>;

type Findings = config::Findings<ProviderProblem>;

/// Where each key's value was, for the warnings that follow from the whole section.
#[derive(Default)]
struct Spans {
    header: Range<usize>,
    model: Option<Range<usize>>,
    delivery: Option<Range<usize>>,
    ttl: Option<Range<usize>>,
    retention: Option<Range<usize>>,
    diagnostics: Option<Range<usize>>,
}

impl ProviderSection {
    /// Parses the `[provider]` section of a whole `agent.toml` (other tables are ignored; a
    /// missing section chooses nothing). Every error is reported, in source order, each
    /// with line and column; on any error no section is returned. A text longer than
    /// [`CONFIG_LIMIT`] is refused.
    ///
    /// ```
    /// use prompt_core::profile::{ProviderProblem, ProviderSection};
    /// let toml = "[provider]\nname = \"deepseek\"\nmodel = \"deepseek-chat\"\ndelivery = \"system\"\n";
    /// let loaded = ProviderSection::from_agent_toml(toml, "agent.toml")?;
    /// // DeepSeek moves system messages to the front: forcing them is a warning at 4:12.
    /// let warning = &loaded.warnings()[0];
    /// assert_eq!((warning.position.line, warning.position.column), (4, 12));
    /// assert!(matches!(warning.problem, ProviderProblem::DeliveryBreaksCache { .. }));
    /// let err = ProviderSection::from_agent_toml("[provider]\nname = \"deepseak\"\n", "agent.toml")
    ///     .unwrap_err();
    /// assert!(err.to_string().starts_with("agent.toml:2:8: unknown provider"));
    /// assert!(err.to_string().ends_with("did you mean `deepseek`?"));
    /// # Ok::<(), prompt_core::profile::ProviderErrors>(())
    /// ```
    pub fn from_agent_toml(src: &str, origin: &str) -> Result<LoadedProvider, ProviderErrors> {
        let doc = config::parse_toml(src, origin, CONFIG_LIMIT)?;
        let mut findings = Findings::default();
        let mut section = ProviderSection::default();
        let mut spans = Spans::default();
        for (key, value) in doc.get_ref() {
            let name: &str = key.get_ref();
            if name == "provider" {
                spans.header = key.span();
                read(key, value, &mut section, &mut spans, &mut findings);
            } else if name != "prompt"
                && distance_within(&name.to_lowercase(), "provider").is_some()
            {
                findings.warning(
                    key.span(),
                    ProviderProblem::SectionNearMiss {
                        name: name.to_owned(),
                    },
                );
            }
        }
        if !findings.errors.is_empty() {
            return Err(findings.into_errors(src, origin));
        }
        if section.present {
            section.warn(&spans, &mut findings);
        }
        let warnings = config::positioned(src, origin, findings.warnings);
        Ok(Loaded::new(section, warnings))
    }

    /// Reads `path` (at most [`CONFIG_LIMIT`] bytes, a regular file, or `-` for standard
    /// input) and loads its `[provider]` section.
    pub fn load_agent_toml(path: &Path) -> Result<LoadedProvider, ProviderLoadError> {
        let (text, origin) = config::read_file(path, CONFIG_LIMIT)?;
        Ok(Self::from_agent_toml(&text, &origin)?)
    }

    /// Whether the file has a `[provider]` section.
    pub fn is_present(&self) -> bool {
        self.present
    }

    /// The provider named (`name`).
    pub fn name(&self) -> Option<Provider> {
        self.name
    }

    /// The model named (`model`).
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// The base URL given (`base_url`).
    pub fn base_url(&self) -> Option<&str> {
        self.base_url.as_deref()
    }

    /// The forced update delivery (`delivery`).
    pub fn delivery(&self) -> Option<UpdateRole> {
        self.delivery
    }

    /// The profile for a session the application opens to `model` at `base_url` in the
    /// `api` shape, with the operator's choices over it: the section's `name`, `model` and
    /// `base_url` win over the application's, then its `delivery`, `first_system`, `ttl`,
    /// `retention` and `diagnostics` apply.
    pub fn profile(&self, api: ApiKind, model: &str, base_url: Option<&str>) -> Profile {
        let model = self.model.as_deref().unwrap_or(model);
        let base_url = self.base_url.as_deref().or(base_url);
        let profile = match self.name {
            Some(provider) => Profile::for_provider(provider, model, base_url),
            None => Profile::lookup(api, model, base_url),
        };
        self.apply(profile)
    }

    /// The profile the section names on its own (what `status` and `check` show): its
    /// provider's default API shape, its model and base URL.
    pub fn operator_profile(&self) -> Profile {
        let api = self.name.map_or(ApiKind::OpenAi, Provider::default_api);
        self.profile(api, "", None)
    }

    fn apply(&self, mut profile: Profile) -> Profile {
        if let Some(role) = self.delivery {
            profile = profile.with_updates(role);
        }
        if let Some(prefix) = self.first_system {
            profile = profile.with_first_system(prefix);
        }
        if let Some(ttl) = self.ttl {
            profile = profile.with_ttl(ttl);
        }
        if let Some(retention) = self.retention {
            profile = profile.with_retention(retention);
        }
        if self.diagnostics {
            profile = profile.with_cache_diagnostics();
        }
        profile
    }

    /// The warnings that follow from the whole section: an unknown model, a delivery that
    /// breaks the cache, keys the provider has no use for.
    fn warn(&self, spans: &Spans, findings: &mut Findings) {
        let profile = self.operator_profile();
        let provider = profile.provider_name();
        if let (Some(model), Some(reason)) = (&self.model, profile.fallback_reason()) {
            let name = super::normalized(model);
            let families = super::PROFILES
                .iter()
                .filter(|f| f.provider == profile.provider() || profile.provider().is_none())
                .filter(|f| !f.family.is_empty())
                .map(|f| f.family);
            let suggestion = nearest(&name, families);
            findings.warning(
                spans.model.clone().unwrap_or(spans.header.clone()),
                ProviderProblem::UnknownModel {
                    model: model.clone(),
                    reason: reason.to_owned(),
                    suggestion,
                },
            );
        }
        if let (Some(risk), Some(delivery)) = (profile.delivery_risk(), self.delivery) {
            findings.warning(
                spans.delivery.clone().unwrap_or(spans.header.clone()),
                ProviderProblem::DeliveryBreaksCache {
                    delivery,
                    provider,
                    model: self.model.clone().unwrap_or_default(),
                    risk,
                },
            );
        }
        let extension = profile.facts().extension;
        if let Some(span) = spans.ttl.clone().filter(|_| extension != Extension::Ttl) {
            findings.warning(
                span,
                ProviderProblem::NotApplicable {
                    key: "ttl",
                    provider,
                    why: "Anthropic's cache_control.ttl; for OpenAI use `retention`",
                },
            );
        }
        if let Some(span) = spans
            .retention
            .clone()
            .filter(|_| extension != Extension::Retention)
        {
            findings.warning(
                span,
                ProviderProblem::NotApplicable {
                    key: "retention",
                    provider,
                    why: "OpenAI's prompt_cache_retention; for Anthropic use `ttl`",
                },
            );
        }
        if let Some(span) = spans
            .diagnostics
            .clone()
            .filter(|_| profile.cache_diagnostics_unavailable())
        {
            findings.warning(span, ProviderProblem::DiagnosticsUnavailable { provider });
        }
    }
}

/// Reads the `provider` entry of the document into `section`.
fn read(
    key: &Spanned<std::borrow::Cow<'_, str>>,
    value: &Spanned<DeValue<'_>>,
    section: &mut ProviderSection,
    spans: &mut Spans,
    findings: &mut Findings,
) {
    let Some(table) = findings.section_table(
        key,
        value,
        ProviderProblem::ArrayOfTables,
        "a [provider] table",
    ) else {
        return;
    };
    section.present = true;
    for (key, value) in table {
        let name: &str = key.get_ref();
        match name {
            "name" => {
                if let Some(text) = string(value, "a provider name", findings) {
                    match Provider::from_name(text) {
                        Some(provider) => section.name = Some(provider),
                        None => findings.error(
                            value.span(),
                            ProviderProblem::UnknownProvider {
                                value: text.to_owned(),
                                suggestion: nearest(
                                    &text.to_lowercase(),
                                    Provider::ALL.map(Provider::as_str),
                                ),
                            },
                        ),
                    }
                }
            }
            "model" => {
                if let Some(text) = string(value, "a model name", findings) {
                    section.model = Some(text.to_owned());
                    spans.model = Some(value.span());
                }
            }
            "base_url" => {
                if let Some(text) = string(value, "a URL", findings) {
                    section.base_url = Some(text.to_owned());
                }
            }
            "delivery" => {
                section.delivery = choice(value, &DELIVERY, findings);
                spans.delivery = Some(value.span());
            }
            "first_system" => section.first_system = choice(value, &FIRST_SYSTEM, findings),
            "ttl" => {
                section.ttl = choice(value, &TTL, findings);
                spans.ttl = Some(value.span());
            }
            "retention" => {
                section.retention = choice(value, &RETENTION, findings);
                spans.retention = Some(value.span());
            }
            "diagnostics" => match value.get_ref() {
                DeValue::Boolean(b) => {
                    section.diagnostics = *b;
                    if *b {
                        spans.diagnostics = Some(value.span());
                    }
                }
                _ => findings.wrong_type(value, "a boolean"),
            },
            _ => findings.error(
                key.span(),
                ProviderProblem::UnknownKey {
                    key: name.to_owned(),
                    suggestion: nearest(name, KEYS),
                },
            ),
        }
    }
}

fn string<'v>(
    value: &'v Spanned<DeValue<'_>>,
    expected: &'static str,
    findings: &mut Findings,
) -> Option<&'v str> {
    match value.get_ref() {
        DeValue::String(s) => Some(s),
        _ => {
            findings.wrong_type(value, expected);
            None
        }
    }
}

/// A key whose value is one of a few words.
struct Choices<T: 'static> {
    key: &'static str,
    /// The words, as a message names them.
    expected: &'static str,
    words: &'static [(&'static str, T)],
}

// One table per key with a choice of words; `choice` reads any of them.
const DELIVERY: Choices<UpdateRole> = Choices {
    key: "delivery",
    expected: "\"system\", \"user_reminder\" or \"merged_into_user\"",
    words: &[
        ("system", UpdateRole::System),
        ("user_reminder", UpdateRole::UserReminder),
        ("merged_into_user", UpdateRole::MergedIntoUser),
    ],
};
const FIRST_SYSTEM: Choices<PrefixRole> = Choices {
    key: "first_system",
    expected: "\"system\" or \"first_user\"",
    words: &[
        ("system", PrefixRole::System),
        ("first_user", PrefixRole::FirstUser),
    ],
};
const TTL: Choices<CacheTtl> = Choices {
    key: "ttl",
    expected: "\"5m\" or \"1h\"",
    words: &[("5m", CacheTtl::FiveMinutes), ("1h", CacheTtl::OneHour)],
};
const RETENTION: Choices<Retention> = Choices {
    key: "retention",
    expected: "\"in_memory\" or \"24h\"",
    words: &[
        ("in_memory", Retention::InMemory),
        ("24h", Retention::TwentyFourHours),
    ],
};

fn choice<T: Copy>(
    value: &Spanned<DeValue<'_>>,
    choices: &Choices<T>,
    findings: &mut Findings,
) -> Option<T> {
    let text = string(value, choices.expected, findings)?;
    match choices.words.iter().find(|(word, _)| *word == text) {
        Some((_, v)) => Some(*v),
        None => {
            findings.error(
                value.span(),
                ProviderProblem::InvalidValue {
                    key: choices.key,
                    value: text.to_owned(),
                    expected: choices.expected,
                },
            );
            None
        }
    }
}

impl fmt::Display for ProviderSection {
    /// The section as `status` shows it when present: `name = …, model = …`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(name) = self.name {
            parts.push(format!("name = {name}"));
        }
        if let Some(model) = &self.model {
            parts.push(format!("model = {}", excerpt(model)));
        }
        if let Some(url) = &self.base_url {
            parts.push(format!("base_url = {}", excerpt(url)));
        }
        if let Some(d) = self.delivery {
            parts.push(format!("delivery = {}", d.as_str()));
        }
        if let Some(p) = self.first_system {
            parts.push(format!("first_system = {}", p.as_str()));
        }
        if let Some(t) = self.ttl {
            parts.push(format!("ttl = {}", t.as_str()));
        }
        if let Some(r) = self.retention {
            parts.push(format!("retention = {}", r.as_str()));
        }
        if self.diagnostics {
            parts.push("diagnostics = true".to_owned());
        }
        write!(f, "[provider] {}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(toml: &str) -> Vec<String> {
        match ProviderSection::from_agent_toml(toml, "a.toml") {
            Ok(loaded) => loaded.warnings().iter().map(ToString::to_string).collect(),
            Err(e) => e.0.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn provider_section_errors_are_positioned_and_every_one_is_reported() {
        let got = problems(
            "[provider]\nnmae = \"x\"\ndelivery = \"loud\"\nttl = 3\ndiagnostics = \"yes\"\n",
        );
        assert_eq!(got.len(), 4, "{got:#?}");
        assert!(
            got[0].starts_with("a.toml:2:1: unknown field `nmae`"),
            "{got:#?}"
        );
        assert!(got[0].ends_with("did you mean `name`?"), "{got:#?}");
        assert!(got[1].starts_with("a.toml:3:12: invalid value \"loud\" for `delivery`"));
        assert!(got[2].starts_with("a.toml:4:7: invalid type: integer `3`"));
        assert!(got[3].starts_with("a.toml:5:15: invalid type: string \"yes\""));
        assert!(problems("[[provider]]\nname = \"openai\"\n")[0].contains("array of tables"),);
        assert!(problems("provider = 1\n")[0].contains("expected a [provider] table"));
    }

    #[test]
    fn provider_section_absent_or_empty_chooses_nothing() {
        let loaded = ProviderSection::from_agent_toml("[prompt]\n", "a.toml").unwrap();
        assert!(loaded.warnings().is_empty());
        let section = loaded.ignore_warnings();
        assert!(!section.is_present());
        let profile = section.profile(ApiKind::OpenAi, "gpt-4.1", None);
        assert_eq!(profile.provider(), Some(Provider::OpenAi));
        assert!(!profile.updates_forced());
        // A near miss is a warning, as `[promt]` is for `[prompt]`.
        let got = problems("[providers]\nname = \"openai\"\n");
        assert!(got[0].contains("misspelled `provider`"), "{got:#?}");
    }

    #[test]
    fn provider_section_warns_on_keys_its_provider_has_no_use_for() {
        let got = problems(
            "[provider]\nname = \"openai\"\nttl = \"1h\"\nretention = \"24h\"\ndiagnostics = true\n",
        );
        assert_eq!(got.len(), 2, "{got:#?}");
        assert!(got[0].starts_with("a.toml:3:7: `ttl` does not apply to openai"));
        assert!(
            got[1].starts_with("a.toml:5:15: diagnostics = true: openai has no cache diagnostics")
        );
        let got = problems("[provider]\nname = \"anthropic\"\nmodel = \"claude-sonet-4-5\"\n");
        assert!(got[0].contains("not in the profile table"), "{got:#?}");
        assert!(
            got[0].ends_with("did you mean `claude-sonnet-4-5`?"),
            "{got:#?}"
        );
    }

    #[test]
    fn an_oversized_provider_file_is_refused_unread() {
        let big = "#".repeat(CONFIG_LIMIT as usize + 1);
        let err = ProviderSection::from_agent_toml(&big, "a.toml").unwrap_err();
        assert!(matches!(err.0[0].problem, ProviderProblem::TooLarge { .. }));
    }
}
