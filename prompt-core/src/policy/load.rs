//! Reading the `[prompt]` section of an `agent.toml`: strict, positioned, fail-closed.
//!
//! The document is parsed once into spanned TOML values and `[prompt]` is walked by hand,
//! so every problem of a file (unknown keys, wrong types, bad placement values, malformed
//! patterns, unknown ids, per-turn promotions) is collected, each with its position, and
//! reported in source order. Positions are computed in one pass over the file at the end,
//! whatever the number of diagnostics.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;
use std::path::Path;

use toml::Spanned;
use toml::de::DeValue;

use super::{IdPattern, PatternError, PromptPolicy};
use crate::component::Component;
use crate::config::{self, Diagnostic, Diagnostics, Loaded, distance_within, excerpt, nearest};
use crate::id::ComponentId;
use crate::id_grammar::{IdError, IdProblem, NAMESPACES, normalize_name};
use crate::input::CONFIG_LIMIT;
use crate::placement::{Placement, Stability};

/// A policy together with the warnings found while loading it.
///
/// The policy is reached only through a method that says what happens to the warnings, so
/// they cannot be lost by accident:
///
/// ```
/// use prompt_core::{Component, ComponentId, Placement, PromptPolicy};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let components = vec![Component::constant(ComponentId::new("house_rules")?, "Be terse.")
///     .placement(Placement::Prefix)];
/// let toml = "[prompt]\nprefix_allow = [\"house_rules\", \"mcp:*\"]";
/// let loaded = PromptPolicy::from_agent_toml(toml, "agent.toml", &components)?;
/// assert_eq!(loaded.warnings().len(), 1); // `mcp:*` matches no component
/// // Warnings are failures here (as `check --strict` has it):
/// assert!(loaded.clone().deny_warnings().is_err());
/// // Or the caller shows them itself:
/// let (policy, warnings) = loaded.into_parts();
/// for warning in &warnings {
///     eprintln!("{warning}");
/// }
/// # let _ = policy;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a loaded policy carries its warnings: take the policy with `into_parts`, `deny_warnings` or `ignore_warnings`"]
pub struct LoadedPolicy {
    loaded: Loaded<PromptPolicy, PolicyProblem>,
    unresolved: Vec<ComponentId>,
}

impl LoadedPolicy {
    /// Non-fatal findings, in source order: a glob that matches no component, a run-time
    /// id that names no registered component yet, a misspelled `[prompt]`.
    pub fn warnings(&self) -> &[PolicyDiagnostic] {
        self.loaded.warnings()
    }

    /// The exact `skill:`/`mcp:` ids the file names that no given component has (yet), in
    /// source order, each once. They are kept in the policy and apply when the component
    /// registers.
    pub fn unresolved(&self) -> &[ComponentId] {
        &self.unresolved
    }

    /// The policy and the warnings, for a caller that reports them itself.
    pub fn into_parts(self) -> (PromptPolicy, Vec<PolicyDiagnostic>) {
        self.loaded.into_parts()
    }

    /// The policy, or the warnings as errors when there are any (`check --strict`).
    pub fn deny_warnings(self) -> Result<PromptPolicy, PolicyErrors> {
        self.loaded.deny_warnings()
    }

    /// The policy; the warnings are dropped, as the caller's code says here.
    pub fn ignore_warnings(self) -> PromptPolicy {
        self.loaded.ignore_warnings()
    }
}

/// How configuration tried to promote a per-turn component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerTurnPromotion {
    /// `[prompt.placement] id = "prefix"`.
    Placement,
    /// An exact `prefix_allow` entry.
    ExactAllow,
    /// `default = "prefix"` for a component that declares nothing, with an exact allow entry.
    Default,
}

/// A namespaced id whose name is outside the id alphabet, and what it normalizes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized {
    /// The id as it should be written, e.g. `mcp:github`.
    pub id: ComponentId,
    /// The name as written, e.g. `GitHub`.
    pub name: String,
}

impl fmt::Display for Normalized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "; did you mean `{}`, the normalization of `{}`?",
            self.id,
            excerpt(&self.name)
        )
    }
}

/// What is wrong (or suspicious) in a policy file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyProblem {
    /// The TOML does not parse (including nesting deeper than the parser's limit). Only the
    /// first syntax error is reported: what follows it cannot be read reliably.
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
    /// `[[prompt]]`: an array of tables where one table is expected.
    #[error(
        "`[[prompt]]` is an array of tables; `[prompt]` must be a single table: write `[prompt]`"
    )]
    ArrayOfTables,
    /// A value of the wrong TOML type (`prompt = "prefix"`, `default = 1`, …).
    #[error("invalid type: {found}, expected {expected}")]
    WrongType {
        /// What was found, e.g. ``integer `1` ``.
        found: String,
        /// What is expected there.
        expected: &'static str,
    },
    /// A key of `[prompt]` that does not exist.
    #[error(
        "unknown field `{}`, expected one of `default`, `prefix_allow`, `prefix_deny`, `placement`{}",
        excerpt(.key),
        .suggestion.map(|s| format!("; did you mean `{s}`?")).unwrap_or_default()
    )]
    UnknownKey {
        /// The key.
        key: String,
        /// The nearest valid key, if one is close.
        suggestion: Option<&'static str>,
    },
    /// A placement value other than `"prefix"` or `"tail"`.
    #[error("invalid value: string {:?}, expected \"prefix\" or \"tail\"", excerpt(.value))]
    InvalidPlacement {
        /// The value.
        value: String,
    },
    /// A pattern in `prefix_allow` / `prefix_deny` is malformed.
    #[error(
        "malformed pattern `{pattern}` in {list}: {reason}{}",
        .normalized.as_ref().map(ToString::to_string).unwrap_or_default()
    )]
    MalformedPattern {
        /// The list it is in.
        list: &'static str,
        /// The pattern.
        pattern: String,
        /// Why.
        reason: PatternError,
        /// For a namespaced id with a foreign name (`mcp:GitHub`), its normalized form.
        normalized: Option<Normalized>,
    },
    /// An exact built-in id that names no known component.
    #[error(
        "`{id}` in {list} names no known component{}",
        .suggestion.as_ref().map(|s| format!("; did you mean `{s}`?")).unwrap_or_default()
    )]
    UnknownComponent {
        /// The list or table it is in.
        list: &'static str,
        /// The id.
        id: ComponentId,
        /// The nearest known id, if one is close.
        suggestion: Option<ComponentId>,
    },
    /// A `[prompt.placement]` key that is not a valid id.
    #[error(
        "invalid component id in [prompt.placement]: {error}{}",
        .normalized.as_ref().map(ToString::to_string).unwrap_or_default()
    )]
    InvalidId {
        /// Why it is not an id.
        error: IdError,
        /// For a namespaced id with a foreign name (`mcp:GitHub`), its normalized form.
        normalized: Option<Normalized>,
    },
    /// Configuration promotes a component that renders every turn.
    #[error("{}: {}", per_turn_request(.id, *.by), per_turn_fix(.id, *.by))]
    PerTurnPromoted {
        /// The component.
        id: ComponentId,
        /// Which entry promotes it.
        by: PerTurnPromotion,
    },
    /// Warning: configuration asks to promote a component that renders every turn, but a
    /// `prefix_deny` entry keeps it in the tail (deny wins): nothing is promoted, the entry
    /// has no effect.
    #[error(
        "{}; prefix_deny entry `{pattern}` keeps it in the tail (deny wins), so the entry has no effect",
        per_turn_request(.id, *.by)
    )]
    PerTurnDenied {
        /// The component.
        id: ComponentId,
        /// Which entry asks to promote it.
        by: PerTurnPromotion,
        /// The `prefix_deny` entry that demotes it.
        pattern: String,
    },
    /// Warning: a glob that matches no known component.
    #[error("pattern `{pattern}` in {list} matches no known component")]
    GlobMatchesNothing {
        /// The list it is in.
        list: &'static str,
        /// The pattern.
        pattern: String,
    },
    /// Warning: an exact `skill:`/`mcp:` id naming no registered component (yet). The
    /// entry is kept.
    #[error(
        "`{id}` in {list} names no registered component yet: run-time entries are checked when the component registers"
    )]
    UnresolvedRuntime {
        /// The list or table it is in.
        list: &'static str,
        /// The id.
        id: ComponentId,
    },
    /// Warning: a top-level table whose name is close to `prompt` (`[promt]`, `[Prompt]`).
    /// It is ignored, like every table other than `[prompt]`.
    #[error(
        "`{}` looks like a misspelled `prompt`: it is ignored, so nothing in it applies; did you mean `[prompt]`?",
        excerpt(.name)
    )]
    SectionNearMiss {
        /// The name as written.
        name: String,
    },
}

/// What an entry asks of a per-turn writer.
fn per_turn_request(id: &ComponentId, by: PerTurnPromotion) -> String {
    match by {
        PerTurnPromotion::Placement => format!(
            "`{id}` in [prompt.placement] requests the prefix, but `{id}` renders every turn (stability: turn)"
        ),
        PerTurnPromotion::ExactAllow => {
            format!("`{id}` in prefix_allow renders every turn (stability: turn)")
        }
        PerTurnPromotion::Default => format!(
            "default = \"prefix\" requests the prefix for `{id}`, which declares nothing and renders every turn (stability: turn), and prefix_allow names it"
        ),
    }
}

/// Why that cannot be, and what to do.
fn per_turn_fix(id: &ComponentId, by: PerTurnPromotion) -> String {
    match by {
        PerTurnPromotion::Placement => "a per-turn writer in the prefix would change it every turn; set it to \"tail\" or remove the entry".to_owned(),
        PerTurnPromotion::ExactAllow => {
            "a per-turn writer never lands in the prefix; remove it from prefix_allow".to_owned()
        }
        PerTurnPromotion::Default => {
            format!("a per-turn writer never lands in the prefix; remove `{id}` from prefix_allow")
        }
    }
}

config::file_problem!(PolicyProblem);

/// A problem with its position: `agent.toml:7:17: message`.
pub type PolicyDiagnostic = Diagnostic<PolicyProblem>;

/// Every error found in a policy file, in source order. Loading fails closed: no policy is
/// returned.
pub type PolicyErrors = Diagnostics<PolicyProblem>;

/// Why [`PromptPolicy::load_agent_toml`] failed: the file could not be read
/// ([`LoadError::Input`]), or its `[prompt]` section is invalid ([`LoadError::Invalid`]).
pub type LoadError = config::LoadError<PolicyProblem>;

/// The keys of `[prompt]`.
const PROMPT_KEYS: [&str; 4] = ["default", "prefix_allow", "prefix_deny", "placement"];

/// The diagnostics of one load.
type Findings = config::Findings<PolicyProblem>;

/// A pattern entry as written, before it is checked against the components.
struct RawEntry<'a> {
    text: &'a str,
    span: Range<usize>,
}

/// `[prompt]` as written, with spans; every type error already reported.
#[derive(Default)]
struct RawPrompt<'a> {
    default: Option<(Placement, Range<usize>)>,
    prefix_allow: Vec<RawEntry<'a>>,
    prefix_deny: Vec<RawEntry<'a>>,
    placement: Vec<(RawEntry<'a>, Placement, Range<usize>)>,
}

impl PromptPolicy {
    /// Parses the `[prompt]` section of a whole `agent.toml`, checking every id and pattern
    /// against the components (their ids and stabilities). Other tables are ignored. A
    /// missing `[prompt]` gives the default policy (tail default, empty allow list).
    ///
    /// Every error of the file is reported, in source order, each with line and column;
    /// on any error no policy is returned. A text longer than [`CONFIG_LIMIT`] is refused.
    pub fn from_agent_toml<'a>(
        src: &str,
        origin: &str,
        components: impl IntoIterator<Item = &'a Component>,
    ) -> Result<LoadedPolicy, PolicyErrors> {
        let doc = config::parse_toml(src, origin, CONFIG_LIMIT)?;
        let mut findings = Findings::default();
        let mut raw = None;
        for (key, value) in doc.get_ref() {
            let name: &str = key.get_ref();
            if name == "prompt" {
                raw = read_prompt(key, value, &mut findings);
            } else if is_near_miss(name) {
                findings.warning(
                    key.span(),
                    PolicyProblem::SectionNearMiss {
                        name: name.to_owned(),
                    },
                );
            }
        }
        let known: BTreeMap<&ComponentId, &Component> =
            components.into_iter().map(|c| (c.id(), c)).collect();
        let mut unresolved = Vec::new();
        let policy = match raw {
            Some(raw) => check_prompt(&raw, &known, &mut findings, &mut unresolved),
            None => PromptPolicy::default(),
        };
        if !findings.errors.is_empty() {
            return Err(findings.into_errors(src, origin));
        }
        // In source order (the lists are checked deny first), each once.
        unresolved.sort_by_key(|(offset, _)| *offset);
        let mut seen = std::collections::BTreeSet::new();
        let unresolved: Vec<ComponentId> = unresolved
            .into_iter()
            .map(|(_, id)| id)
            .filter(|id| seen.insert(id.clone()))
            .collect();
        let warnings = config::positioned(src, origin, findings.warnings);
        Ok(LoadedPolicy {
            loaded: Loaded::new(policy, warnings),
            unresolved,
        })
    }

    /// Reads `path` (at most [`CONFIG_LIMIT`] bytes, a regular file, or `-` for standard
    /// input) and loads its `[prompt]` section as [`PromptPolicy::from_agent_toml`] does.
    ///
    /// ```
    /// use prompt_core::{Component, ComponentId, PromptPolicy, policy::LoadError};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dir = std::env::temp_dir().join(format!("prompt-core-policy-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let file = dir.join("agent.toml");
    /// std::fs::write(&file, "[prompt]\nprefix_allow = [\"rules\"]\n")?;
    /// let rules = Component::constant(ComponentId::new("rules")?, "Be brief.");
    /// let loaded = PromptPolicy::load_agent_toml(&file, [&rules])?;
    /// assert_eq!(loaded.deny_warnings()?.prefix_allow.len(), 1);
    /// assert!(matches!(PromptPolicy::load_agent_toml(&dir, [&rules]), Err(LoadError::Input(_))));
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok(()) }
    /// ```
    pub fn load_agent_toml<'a>(
        path: &Path,
        components: impl IntoIterator<Item = &'a Component>,
    ) -> Result<LoadedPolicy, LoadError> {
        let (text, origin) = config::read_file(path, CONFIG_LIMIT)?;
        Ok(Self::from_agent_toml(&text, &origin, components)?)
    }
}

/// `[promt]`, `[Prompt]`, `[prompts]`: a top-level name that is not `prompt` but close to it.
fn is_near_miss(name: &str) -> bool {
    name != "prompt" && distance_within(&name.to_lowercase(), "prompt").is_some()
}

/// The `prompt` entry of the document: a table, else an error.
fn read_prompt<'d>(
    key: &Spanned<std::borrow::Cow<'_, str>>,
    value: &'d Spanned<DeValue<'_>>,
    findings: &mut Findings,
) -> Option<RawPrompt<'d>> {
    let table =
        findings.section_table(key, value, PolicyProblem::ArrayOfTables, "a [prompt] table")?;
    let mut raw = RawPrompt::default();
    for (key, value) in table {
        let name: &str = key.get_ref();
        match name {
            "default" => {
                if let Some(placement) = read_placement(value, findings) {
                    raw.default = Some((placement, value.span()));
                }
            }
            "prefix_allow" => raw.prefix_allow = read_patterns(value, findings),
            "prefix_deny" => raw.prefix_deny = read_patterns(value, findings),
            "placement" => match value.get_ref() {
                DeValue::Table(entries) => {
                    for (id, value) in entries {
                        if let Some(placement) = read_placement(value, findings) {
                            let entry = RawEntry {
                                text: id.get_ref(),
                                span: id.span(),
                            };
                            raw.placement.push((entry, placement, value.span()));
                        }
                    }
                }
                _ => findings.wrong_type(
                    value,
                    "a [prompt.placement] table of id = \"prefix\" or \"tail\"",
                ),
            },
            _ => findings.error(
                key.span(),
                PolicyProblem::UnknownKey {
                    key: name.to_owned(),
                    suggestion: nearest(name, PROMPT_KEYS),
                },
            ),
        }
    }
    Some(raw)
}

fn read_placement(value: &Spanned<DeValue<'_>>, findings: &mut Findings) -> Option<Placement> {
    match value.get_ref() {
        DeValue::String(s) if s == "prefix" => Some(Placement::Prefix),
        DeValue::String(s) if s == "tail" => Some(Placement::Tail),
        DeValue::String(s) => {
            findings.error(
                value.span(),
                PolicyProblem::InvalidPlacement {
                    value: s.to_string(),
                },
            );
            None
        }
        _ => {
            findings.wrong_type(value, "\"prefix\" or \"tail\"");
            None
        }
    }
}

fn read_patterns<'d>(
    value: &'d Spanned<DeValue<'_>>,
    findings: &mut Findings,
) -> Vec<RawEntry<'d>> {
    let DeValue::Array(items) = value.get_ref() else {
        findings.wrong_type(value, "an array of id patterns");
        return Vec::new();
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items.iter() {
        match item.get_ref() {
            DeValue::String(text) => out.push(RawEntry {
                text,
                span: item.span(),
            }),
            _ => findings.wrong_type(item, "an id pattern string"),
        }
    }
    out
}

/// Checks the entries against the components and builds the policy. Unresolved run-time
/// ids are kept (and reported as warnings); every other problem is an error.
fn check_prompt(
    raw: &RawPrompt<'_>,
    known: &BTreeMap<&ComponentId, &Component>,
    findings: &mut Findings,
    unresolved: &mut Vec<(usize, ComponentId)>,
) -> PromptPolicy {
    let mut suggestions = Suggestions::new(known);
    let mut patterns = |list: &'static str,
                        entries: &[RawEntry<'_>],
                        deny: &[IdPattern],
                        findings: &mut Findings| {
        let mut out = Vec::with_capacity(entries.len());
        for entry in entries {
            let pattern = match IdPattern::parse(entry.text) {
                Ok(pattern) => pattern,
                Err(reason) => {
                    findings.error(
                        entry.span.clone(),
                        PolicyProblem::MalformedPattern {
                            list,
                            pattern: entry.text.to_owned(),
                            normalized: match &reason {
                                PatternError::BadId(e) => normalized(entry.text, e),
                                _ => None,
                            },
                            reason,
                        },
                    );
                    continue;
                }
            };
            if pattern.is_glob() {
                // A deny glob over a run-time namespace (`mcp:*`, `skill:web-*`) is written for
                // writers that register later, and denying costs nothing when none does: an
                // app without MCP servers must not fail `deny_warnings` for guarding against
                // them. Any other glob that matches nothing is likely a typo.
                let ahead_of_registration = list == "prefix_deny"
                    && NAMESPACES.iter().any(|ns| {
                        pattern
                            .text
                            .strip_prefix(ns)
                            .is_some_and(|rest| rest.starts_with(':'))
                    });
                if !ahead_of_registration && !known.keys().any(|id| pattern.matches(id)) {
                    findings.warning(
                        entry.span.clone(),
                        PolicyProblem::GlobMatchesNothing {
                            list,
                            pattern: pattern.text.clone(),
                        },
                    );
                }
                out.push(pattern);
                continue;
            }
            // An exact pattern is a valid id (`IdPattern::parse` checked it).
            let Ok(id) = ComponentId::new(entry.text) else {
                continue;
            };
            match known.get(&id) {
                Some(c) if list == "prefix_allow" && c.stability() == Stability::Turn => {
                    let span = entry.span.clone();
                    if per_turn(findings, span, id, PerTurnPromotion::ExactAllow, deny) {
                        out.push(pattern);
                    }
                }
                Some(_) => out.push(pattern),
                None if id.namespace().is_some() => {
                    findings.warning(
                        entry.span.clone(),
                        PolicyProblem::UnresolvedRuntime {
                            list,
                            id: id.clone(),
                        },
                    );
                    unresolved.push((entry.span.start, id));
                    out.push(pattern);
                }
                None => findings.error(
                    entry.span.clone(),
                    PolicyProblem::UnknownComponent {
                        list,
                        suggestion: suggestions.nearest(&id),
                        id,
                    },
                ),
            }
        }
        out
    };
    let prefix_deny = patterns("prefix_deny", &raw.prefix_deny, &[], findings);
    let prefix_allow = patterns("prefix_allow", &raw.prefix_allow, &prefix_deny, findings);

    let mut placement = BTreeMap::new();
    for (entry, value, _) in &raw.placement {
        let id = match ComponentId::new(entry.text) {
            Ok(id) => id,
            Err(error) => {
                findings.error(
                    entry.span.clone(),
                    PolicyProblem::InvalidId {
                        normalized: normalized(entry.text, &error),
                        error,
                    },
                );
                continue;
            }
        };
        match known.get(&id) {
            Some(c) if *value == Placement::Prefix && c.stability() == Stability::Turn => {
                let span = entry.span.clone();
                if per_turn(
                    findings,
                    span,
                    id.clone(),
                    PerTurnPromotion::Placement,
                    &prefix_deny,
                ) {
                    placement.insert(id, *value);
                }
            }
            Some(_) => {
                placement.insert(id, *value);
            }
            None if id.namespace().is_some() => {
                findings.warning(
                    entry.span.clone(),
                    PolicyProblem::UnresolvedRuntime {
                        list: "[prompt.placement]",
                        id: id.clone(),
                    },
                );
                unresolved.push((entry.span.start, id.clone()));
                placement.insert(id, *value);
            }
            None => findings.error(
                entry.span.clone(),
                PolicyProblem::UnknownComponent {
                    list: "[prompt.placement]",
                    suggestion: suggestions.nearest(&id),
                    id,
                },
            ),
        }
    }

    let default = raw.default.as_ref().map_or(Placement::Tail, |(p, _)| *p);
    if let Some((Placement::Prefix, span)) = &raw.default {
        // Components `default` applies to: built-in, declaring nothing, no placement entry.
        // A per-turn one named by an exact allow entry would be promoted by `default`.
        let exact: std::collections::BTreeSet<&str> = raw
            .prefix_allow
            .iter()
            .map(|e| e.text)
            .filter(|t| !t.contains(['*', '?']))
            .collect();
        let named_in_placement: std::collections::BTreeSet<&str> =
            raw.placement.iter().map(|(e, _, _)| e.text).collect();
        for (id, c) in known {
            if id.namespace().is_none()
                && c.declared().is_none()
                && c.stability() == Stability::Turn
                && exact.contains(id.as_str())
                && !named_in_placement.contains(id.as_str())
            {
                let by = PerTurnPromotion::Default;
                per_turn(findings, span.clone(), (*id).clone(), by, &prefix_deny);
            }
        }
    }

    PromptPolicy {
        default,
        prefix_allow,
        prefix_deny,
        placement,
    }
}

/// Configuration that would promote the per-turn writer `id`: an error, unless a `deny`
/// entry keeps it in the tail anyway (deny wins), which is a warning naming that entry.
/// Returns whether the entry stays in the policy (it does when denied: it has no effect,
/// and `status` says the deny demoted it).
fn per_turn(
    findings: &mut Findings,
    span: Range<usize>,
    id: ComponentId,
    by: PerTurnPromotion,
    deny: &[IdPattern],
) -> bool {
    match deny.iter().find(|p| p.matches(&id)) {
        Some(pattern) => {
            let pattern = pattern.text.clone();
            findings.warning(span, PolicyProblem::PerTurnDenied { id, by, pattern });
            true
        }
        None => {
            findings.error(span, PolicyProblem::PerTurnPromoted { id, by });
            false
        }
    }
}

/// `mcp:GitHub` → `mcp:github`: for a namespaced id whose name is not in the id alphabet.
fn normalized(text: &str, error: &IdError) -> Option<Normalized> {
    if !matches!(
        error.problem,
        IdProblem::InvalidChar { .. } | IdProblem::TooLong { .. }
    ) {
        return None;
    }
    let (namespace, name) = text.split_once(':')?;
    if !NAMESPACES.contains(&namespace) {
        return None;
    }
    let fixed = normalize_name(name)?;
    let id = ComponentId::new(format!("{namespace}:{fixed}")).ok()?;
    (id.as_str() != text).then(|| Normalized {
        id,
        name: name.to_owned(),
    })
}

/// "Did you mean" for unknown ids: the nearest known id within edit distance 2, memoized
/// per distinct id, so a file repeating one typo costs one search.
struct Suggestions<'k> {
    known: Vec<&'k ComponentId>,
    memo: HashMap<ComponentId, Option<ComponentId>>,
}

impl<'k> Suggestions<'k> {
    fn new(known: &BTreeMap<&'k ComponentId, &'k Component>) -> Self {
        Self {
            known: known.keys().copied().collect(),
            memo: HashMap::new(),
        }
    }

    fn nearest(&mut self, id: &ComponentId) -> Option<ComponentId> {
        if let Some(hit) = self.memo.get(id) {
            return hit.clone();
        }
        let best = nearest(id.as_str(), self.known.iter().copied()).cloned();
        self.memo.insert(id.clone(), best.clone());
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn banded_edit_distance() {
        assert_eq!(distance_within("tool_schema", "tool_schemas"), Some(1));
        assert_eq!(distance_within("abc", "abc"), Some(0));
        assert_eq!(distance_within("promt", "prompt"), Some(1));
        assert_eq!(distance_within("prompt", "Prompt"), Some(1));
        assert_eq!(distance_within("ab", "ba"), Some(2));
        assert_eq!(distance_within("kitten", "sitting"), None);
        assert_eq!(distance_within("project", "prompt"), None);
        assert_eq!(distance_within("", "ab"), Some(2));
        assert_eq!(distance_within("ab", ""), Some(2));
        assert_eq!(distance_within("", "abc"), None);
        assert_eq!(distance_within("é", "e"), Some(1));
    }

    #[test]
    fn banded_distance_agrees_with_the_full_table() {
        fn full(a: &str, b: &str) -> usize {
            let b: Vec<char> = b.chars().collect();
            let mut row: Vec<usize> = (0..=b.len()).collect();
            for (i, ca) in a.chars().enumerate() {
                let mut prev = row[0];
                row[0] = i + 1;
                for (j, &cb) in b.iter().enumerate() {
                    let cur = row[j + 1];
                    row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
                    prev = cur;
                }
            }
            row[b.len()]
        }
        let words = [
            "",
            "a",
            "ab",
            "abc",
            "abcd",
            "acbd",
            "bacd",
            "abdc",
            "xabc",
            "abcx",
            "axc",
            "date",
            "data",
            "todo",
            "tod",
            "todo_addendum",
            "todo_adendum",
            "plan_addendum",
        ];
        for a in words {
            for b in words {
                let d = full(a, b);
                assert_eq!(distance_within(a, b), (d <= 2).then_some(d), "{a:?} {b:?}");
            }
        }
    }
}
