//! The `[prompt]` section of `agent.toml` and placement resolution.
//!
//! Resolution is deny-wins, like `[tools]` permissions: a component lands in the prefix only
//! if it requested the prefix, matches `prefix_allow`, and matches no `prefix_deny`.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::component::Component;
use crate::id::ComponentId;
use crate::id_grammar::IdError;
use crate::placement::Placement;

/// A `prefix_allow` / `prefix_deny` entry: an exact id or a glob.
///
/// Globs use `*` (any run of characters, including none) and `?` (one character) over the id
/// alphabet (`a-z 0-9 _ - :`). Anything else (brackets, braces, uppercase, spaces, an empty
/// pattern, `**`) is malformed and rejected, never silently dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdPattern {
    text: String,
    is_glob: bool,
}

/// Why a pattern is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    /// Empty string.
    #[error("empty pattern")]
    Empty,
    /// A character outside the pattern alphabet.
    #[error("`{ch}` is not allowed in a pattern; use ids (`a-z 0-9 _ - :`) with `*` and `?`")]
    BadChar {
        /// The character.
        ch: char,
    },
    /// `**` has no meaning here.
    #[error("`**` is not a pattern; a single `*` already matches any run of characters")]
    DoubleStar,
    /// A pattern without wildcards that is not a valid id.
    #[error("{0}")]
    BadId(IdError),
}

impl IdPattern {
    /// Parses a pattern.
    ///
    /// ```
    /// use prompt_core::{ComponentId, IdPattern};
    /// let skills = IdPattern::parse("skill:*").unwrap();
    /// assert!(skills.matches(&ComponentId::new("skill:pdf").unwrap()));
    /// assert!(!skills.matches(&ComponentId::new("mcp:pdf").unwrap()));
    /// assert!(IdPattern::parse("skill:[a-z]").is_err());
    /// ```
    pub fn parse(text: &str) -> Result<Self, PatternError> {
        if text.is_empty() {
            return Err(PatternError::Empty);
        }
        let is_glob = text.contains(['*', '?']);
        if !is_glob {
            ComponentId::new(text).map_err(PatternError::BadId)?;
        } else {
            if text.contains("**") {
                return Err(PatternError::DoubleStar);
            }
            if let Some(ch) = text
                .chars()
                .find(|&c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || "_-:*?".contains(c)))
            {
                return Err(PatternError::BadChar { ch });
            }
        }
        Ok(Self {
            text: text.to_owned(),
            is_glob,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it contains a wildcard.
    pub fn is_glob(&self) -> bool {
        self.is_glob
    }

    /// Whether the id matches.
    pub fn matches(&self, id: &ComponentId) -> bool {
        if self.is_glob {
            glob_match(self.text.as_bytes(), id.as_str().as_bytes())
        } else {
            self.text == id.as_str()
        }
    }
}

/// Iterative wildcard match with single-star backtracking: linear in practice, no recursion.
fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

impl fmt::Display for IdPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for IdPattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// The resolved `[prompt]` policy.
///
/// ```
/// use prompt_core::{Component, ComponentId, Placement, PromptPolicy};
/// let instructions = Component::constant(ComponentId::new("assistant_instructions").unwrap(), "Be brief.")
///     .placement(Placement::Prefix);
/// let toml = r#"
/// [tools]
/// allow = ["read_file"]        # other tables are ignored
///
/// [prompt]
/// prefix_allow = ["assistant_instructions"]
/// "#;
/// let loaded = PromptPolicy::from_agent_toml(toml, "agent.toml", [instructions.id()]).unwrap();
/// assert_eq!(loaded.policy.resolve(&instructions).placement, Placement::Prefix);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptPolicy {
    /// Placement for components that declare none and have no per-component entry.
    pub default: Placement,
    /// Who may land in the prefix.
    pub prefix_allow: Vec<IdPattern>,
    /// Who may never land in the prefix; wins over everything.
    pub prefix_deny: Vec<IdPattern>,
    /// Per-component placement requests, from `[prompt.placement]`.
    pub placement: BTreeMap<ComponentId, Placement>,
}

/// A policy together with the warnings found while loading it.
#[derive(Debug, Clone)]
pub struct LoadedPolicy {
    /// The policy.
    pub policy: PromptPolicy,
    /// Non-fatal findings, such as a glob that matches no component.
    pub warnings: Vec<PolicyDiagnostic>,
}

/// A position in a policy file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePosition {
    /// The file name or other origin given to the loader.
    pub origin: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl fmt::Display for SourcePosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.origin, self.line, self.column)
    }
}

/// What is wrong (or suspicious) in a policy file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyProblem {
    /// The TOML does not parse, or does not fit the `[prompt]` schema (unknown key, unknown
    /// placement value, wrong type).
    #[error("{0}")]
    Invalid(String),
    /// A pattern in `prefix_allow` / `prefix_deny` is malformed.
    #[error("malformed pattern `{pattern}` in {list}: {reason}")]
    MalformedPattern {
        /// The list it is in.
        list: &'static str,
        /// The pattern.
        pattern: String,
        /// Why.
        reason: PatternError,
    },
    /// An exact id that names no known component.
    #[error("`{id}` in {list} names no known component{hint}")]
    UnknownComponent {
        /// The list or table it is in.
        list: &'static str,
        /// The id.
        id: String,
        /// A "did you mean" suffix, possibly empty.
        hint: String,
    },
    /// A `[prompt.placement]` key that is not a valid id.
    #[error("invalid component id in [prompt.placement]: {0}")]
    InvalidId(IdError),
    /// Warning: a glob that matches no known component.
    #[error("pattern `{pattern}` in {list} matches no known component")]
    GlobMatchesNothing {
        /// The list it is in.
        list: &'static str,
        /// The pattern.
        pattern: String,
    },
}

/// A problem with its position: `agent.toml:7:17: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{position}: {problem}")]
pub struct PolicyDiagnostic {
    /// Where.
    pub position: SourcePosition,
    /// What.
    pub problem: PolicyProblem,
}

/// Every error found in a policy file. Loading fails closed: no policy is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", display_lines(.0))]
pub struct PolicyErrors(pub Vec<PolicyDiagnostic>);

fn display_lines(diags: &[PolicyDiagnostic]) -> String {
    diags
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

#[derive(Deserialize)]
struct AgentToml {
    #[serde(default)]
    prompt: Option<RawPrompt>,
}

/// A placement value in agent.toml, with an error message that names the two valid values
/// whatever the wrong input is (toml's own message for an enum is "wanted string or table").
#[derive(Clone, Copy)]
struct PlacementField(Placement);

impl<'de> Deserialize<'de> for PlacementField {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = PlacementField;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"prefix\" or \"tail\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                match v {
                    "prefix" => Ok(PlacementField(Placement::Prefix)),
                    "tail" => Ok(PlacementField(Placement::Tail)),
                    other => Err(E::invalid_value(serde::de::Unexpected::Str(other), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a [prompt] table")]
struct RawPrompt {
    #[serde(default)]
    default: Option<Spanned<PlacementField>>,
    #[serde(default)]
    prefix_allow: Vec<Spanned<String>>,
    #[serde(default)]
    prefix_deny: Vec<Spanned<String>>,
    #[serde(default)]
    placement: BTreeMap<Spanned<String>, Spanned<PlacementField>>,
}

/// Converts byte offsets to 1-based line and character column.
struct LineIndex<'a> {
    src: &'a str,
    origin: &'a str,
}

impl LineIndex<'_> {
    fn position(&self, offset: usize) -> SourcePosition {
        let offset = offset.min(self.src.len());
        let before = self.src.get(..offset).unwrap_or(self.src);
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        SourcePosition {
            origin: self.origin.to_owned(),
            line,
            column,
        }
    }

    fn diag(&self, span: Range<usize>, problem: PolicyProblem) -> PolicyDiagnostic {
        PolicyDiagnostic {
            position: self.position(span.start),
            problem,
        }
    }
}

impl PromptPolicy {
    /// Parses the `[prompt]` section of a whole `agent.toml`, checking every id and pattern
    /// against the known components. Other tables are ignored. A missing `[prompt]` gives
    /// the default policy (tail default, empty allow list).
    ///
    /// Errors carry line and column; all of them are reported together.
    pub fn from_agent_toml<'a>(
        src: &str,
        origin: &str,
        known: impl IntoIterator<Item = &'a ComponentId>,
    ) -> Result<LoadedPolicy, PolicyErrors> {
        let index = LineIndex { src, origin };
        let doc: AgentToml = toml::from_str(src).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            PolicyErrors(vec![
                index.diag(span, PolicyProblem::Invalid(e.message().trim().to_owned())),
            ])
        })?;
        let Some(raw) = doc.prompt else {
            return Ok(LoadedPolicy {
                policy: PromptPolicy::default(),
                warnings: Vec::new(),
            });
        };
        let known: Vec<&ComponentId> = known.into_iter().collect();
        let mut errors = Vec::new();
        let mut warnings = Vec::new();

        let mut patterns = |list: &'static str, raw: &[Spanned<String>]| -> Vec<IdPattern> {
            let mut out = Vec::new();
            for entry in raw {
                match IdPattern::parse(entry.get_ref()) {
                    Err(reason) => errors.push(index.diag(
                        entry.span(),
                        PolicyProblem::MalformedPattern {
                            list,
                            pattern: entry.get_ref().clone(),
                            reason,
                        },
                    )),
                    Ok(p) if !known.iter().any(|id| p.matches(id)) => {
                        if p.is_glob() {
                            warnings.push(index.diag(
                                entry.span(),
                                PolicyProblem::GlobMatchesNothing {
                                    list,
                                    pattern: p.text.clone(),
                                },
                            ));
                            out.push(p);
                        } else {
                            errors.push(index.diag(
                                entry.span(),
                                PolicyProblem::UnknownComponent {
                                    list,
                                    hint: did_you_mean(&p.text, &known),
                                    id: p.text,
                                },
                            ));
                        }
                    }
                    Ok(p) => out.push(p),
                }
            }
            out
        };
        let prefix_allow = patterns("prefix_allow", &raw.prefix_allow);
        let prefix_deny = patterns("prefix_deny", &raw.prefix_deny);

        let mut placement = BTreeMap::new();
        for (key, value) in &raw.placement {
            match ComponentId::new(key.get_ref()) {
                Err(e) => errors.push(index.diag(key.span(), PolicyProblem::InvalidId(e))),
                Ok(id) if !known.contains(&&id) => errors.push(index.diag(
                    key.span(),
                    PolicyProblem::UnknownComponent {
                        list: "[prompt.placement]",
                        hint: did_you_mean(id.as_str(), &known),
                        id: id.to_string(),
                    },
                )),
                Ok(id) => {
                    placement.insert(id, value.get_ref().0);
                }
            }
        }

        if !errors.is_empty() {
            return Err(PolicyErrors(errors));
        }
        Ok(LoadedPolicy {
            policy: PromptPolicy {
                default: raw.default.map(|d| d.get_ref().0).unwrap_or_default(),
                prefix_allow,
                prefix_deny,
                placement,
            },
            warnings,
        })
    }

    /// Resolves where a component lands, and why.
    pub fn resolve(&self, component: &Component) -> Resolution {
        let id = component.id();
        let (requested, source) = match (self.placement.get(id), component.declared()) {
            (Some(&p), _) => (p, RequestSource::Config),
            (None, Some(p)) => (p, RequestSource::Declaration),
            (None, None) => (self.default, RequestSource::Default),
        };
        let reason = if requested == Placement::Tail {
            Reason::TailRequested { source }
        } else if let Some(deny) = self.prefix_deny.iter().find(|p| p.matches(id)) {
            Reason::Denied {
                source,
                pattern: deny.text.clone(),
            }
        } else if let Some(allow) = self.prefix_allow.iter().find(|p| p.matches(id)) {
            Reason::Allowed {
                source,
                pattern: allow.text.clone(),
            }
        } else {
            Reason::NotAllowed { source }
        };
        Resolution {
            placement: match reason {
                Reason::Allowed { .. } => Placement::Prefix,
                _ => Placement::Tail,
            },
            requested,
            reason,
        }
    }
}

fn did_you_mean(id: &str, known: &[&ComponentId]) -> String {
    known
        .iter()
        .map(|k| (edit_distance(id, k.as_str()), k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| format!("; did you mean `{k}`?"))
        .unwrap_or_default()
}

fn edit_distance(a: &str, b: &str) -> usize {
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

/// Which rule supplied the requested placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestSource {
    /// `[prompt.placement]` in agent.toml.
    Config,
    /// The component's own declaration.
    Declaration,
    /// `[prompt] default`.
    Default,
}

impl fmt::Display for RequestSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RequestSource::Config => "[prompt.placement]",
            RequestSource::Declaration => "its declaration",
            RequestSource::Default => "[prompt] default",
        })
    }
}

/// Why a component landed where it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum Reason {
    /// It asked for the tail.
    TailRequested {
        /// Who asked.
        source: RequestSource,
    },
    /// It asked for the prefix and an allow pattern matched (and no deny pattern).
    Allowed {
        /// Who asked.
        source: RequestSource,
        /// The matching `prefix_allow` entry.
        pattern: String,
    },
    /// It asked for the prefix but a deny pattern matched: demoted to tail.
    Denied {
        /// Who asked.
        source: RequestSource,
        /// The matching `prefix_deny` entry.
        pattern: String,
    },
    /// It asked for the prefix but no allow pattern matched: demoted to tail.
    NotAllowed {
        /// Who asked.
        source: RequestSource,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::TailRequested { source } => write!(f, "tail requested by {source}"),
            Reason::Allowed { source, pattern } => write!(
                f,
                "prefix requested by {source}; allowed by prefix_allow `{pattern}`"
            ),
            Reason::Denied { source, pattern } => write!(
                f,
                "prefix requested by {source}; demoted to tail: denied by prefix_deny `{pattern}` (deny wins)"
            ),
            Reason::NotAllowed { source } => write!(
                f,
                "prefix requested by {source}; demoted to tail: no prefix_allow entry matches"
            ),
        }
    }
}

/// The outcome of resolving one component against a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolution {
    /// Where it lands.
    pub placement: Placement,
    /// Where it asked to land.
    pub requested: Placement,
    /// Which rule decided.
    pub reason: Reason,
}

impl Resolution {
    /// Whether it asked for the prefix but was put in the tail.
    pub fn demoted(&self) -> bool {
        self.requested == Placement::Prefix && self.placement == Placement::Tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matching() {
        let m = |p: &str, t: &str| glob_match(p.as_bytes(), t.as_bytes());
        assert!(m("skill:*", "skill:pdf"));
        assert!(m("*", "anything"));
        assert!(m("*_addendum", "todo_addendum"));
        assert!(m("t?do", "todo"));
        assert!(!m("skill:*", "mcp:x"));
        assert!(!m("a*b", "acbd"));
        assert!(m("a*b*c", "aXbYbZc"));
    }

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("tool_schema", "tool_schemas"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }
}
