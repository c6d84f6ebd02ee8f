//! Reading the `[prompt]` section of an `agent.toml`: strict, positioned, fail-closed.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use super::{IdPattern, PatternError, PromptPolicy};
use crate::id::ComponentId;
use crate::id_grammar::IdError;
use crate::placement::Placement;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("tool_schema", "tool_schemas"), 1);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }
}
