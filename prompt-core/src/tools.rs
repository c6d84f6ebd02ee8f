//! The tool definitions a session sends in the request's `tools` field: a session-frozen
//! request field, in one canonical order, serialized once.
//!
//! Providers cache the tools before the messages (OpenAI hashes `tools` then messages;
//! Anthropic caches tools → system → messages), so a listing that comes back in another
//! order, or with its schema's keys in another order, costs the whole prompt. A [`ToolSet`]
//! sorts by source, then name, writes every schema canonically (keys sorted, compact), and
//! refuses a name that two sources both define.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::hash::{Digest128, Fingerprint};
use crate::json;

/// Where a tool comes from: `builtin`, or a run-time source such as `mcp:github`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ToolSource(String);

impl ToolSource {
    /// The agent's own tools.
    pub fn builtin() -> Self {
        Self("builtin".to_owned())
    }

    /// Tools listed by an MCP server, by the server's name (normalized like an MCP
    /// component id: `GitHub` → `mcp:github`).
    pub fn mcp(server: &str) -> Self {
        Self(format!(
            "mcp:{}",
            crate::id::normalize_name(server).unwrap_or_else(|| "unnamed".to_owned())
        ))
    }

    /// Any other label.
    pub fn other(label: impl Into<String>) -> Self {
        Self(label.into())
    }

    /// The label.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ToolSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One tool: what the model may call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The function name the model calls.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// Its parameters, as a JSON Schema, written canonically (keys sorted, compact).
    pub parameters: String,
    /// Where it comes from.
    pub source: ToolSource,
}

/// Why a tool set cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolSetError {
    /// Two sources define the same name: the model could not tell which one it calls.
    #[error("tool `{name}` is defined by both {first} and {second}; rename one of them")]
    DuplicateName {
        /// The name.
        name: String,
        /// The source met first in canonical order.
        first: ToolSource,
        /// The other source.
        second: ToolSource,
    },
    /// A definition that is not a tool.
    #[error("tool definition #{index} from {source_label}: {problem}")]
    Invalid {
        /// Its position in the input.
        index: usize,
        /// Its source.
        source_label: ToolSource,
        /// What is wrong.
        problem: String,
    },
}

/// The tools of a session, frozen: canonical order, canonical bytes, a fingerprint.
///
/// ```
/// use prompt_core::tools::{ToolSet, ToolSource};
/// use serde_json::json;
/// let listing = json!([
///     {"type": "function", "function": {"name": "search", "description": "Search issues.",
///      "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}},
/// ]);
/// let reordered = json!([
///     {"type": "function", "function": {"name": "search", "description": "Search issues.",
///      "parameters": {"properties": {"q": {"type": "string"}}, "type": "object"}}},
/// ]);
/// let a = ToolSet::from_openai(&[(ToolSource::mcp("GitHub"), &listing)]).unwrap();
/// let b = ToolSet::from_openai(&[(ToolSource::mcp("GitHub"), &reordered)]).unwrap();
/// assert_eq!(a.openai_json(), b.openai_json());
/// assert_eq!(a.fingerprint(), b.fingerprint());
/// assert_eq!(a.definitions()[0].source.as_str(), "mcp:github");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSet {
    definitions: Vec<ToolDefinition>,
    /// The OpenAI Chat Completions `tools` array, written once.
    openai: String,
    fingerprint: Fingerprint,
}

impl Default for ToolSet {
    fn default() -> Self {
        Self::empty()
    }
}

impl ToolSet {
    /// An empty tool set: no `tools` field.
    pub fn empty() -> Self {
        Self {
            definitions: Vec::new(),
            openai: "[]".to_owned(),
            fingerprint: Digest128::of(&[b"[]"]),
        }
    }

    /// Freezes `definitions`: sorted by source, then name; a name defined twice is an error
    /// naming both sources.
    pub fn new(mut definitions: Vec<ToolDefinition>) -> Result<Self, ToolSetError> {
        definitions.sort_by(|a, b| (&a.source, &a.name).cmp(&(&b.source, &b.name)));
        let mut names: Vec<(&str, &ToolSource)> = definitions
            .iter()
            .map(|d| (d.name.as_str(), &d.source))
            .collect();
        names.sort();
        for pair in names.windows(2) {
            if pair[0].0 == pair[1].0 {
                return Err(ToolSetError::DuplicateName {
                    name: pair[0].0.to_owned(),
                    first: pair[0].1.clone(),
                    second: pair[1].1.clone(),
                });
            }
        }
        let openai = format!(
            "[{}]",
            definitions
                .iter()
                .map(|d| {
                    format!(
                        r#"{{"type":"function","function":{{"name":{},"description":{},"parameters":{}}}}}"#,
                        json::quote(&d.name),
                        json::quote(&d.description),
                        d.parameters
                    )
                })
                .collect::<Vec<_>>()
                .join(",")
        );
        let fingerprint = Digest128::of(&[openai.as_bytes()]);
        Ok(Self {
            definitions,
            openai,
            fingerprint,
        })
    }

    /// Reads OpenAI-style listings (`[{"type":"function","function":{...}}]`, or bare
    /// `{"name","description","parameters"}` objects), each with its source.
    pub fn from_openai(listings: &[(ToolSource, &Value)]) -> Result<Self, ToolSetError> {
        let mut definitions = Vec::new();
        for (source, listing) in listings {
            let tools = listing.as_array().map(Vec::as_slice).unwrap_or_default();
            for (index, tool) in tools.iter().enumerate() {
                let invalid = |problem: &str| ToolSetError::Invalid {
                    index,
                    source_label: source.clone(),
                    problem: problem.to_owned(),
                };
                let function = tool.get("function").unwrap_or(tool);
                let name = function
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| invalid("no \"name\""))?;
                let description = function
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let parameters = function
                    .get("parameters")
                    .or_else(|| function.get("input_schema"))
                    .cloned()
                    .unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
                if !parameters.is_object() {
                    return Err(invalid("\"parameters\" is not a JSON Schema object"));
                }
                definitions.push(ToolDefinition {
                    name: name.to_owned(),
                    description: description.to_owned(),
                    parameters: json::canonical(&parameters),
                    source: source.clone(),
                });
            }
        }
        Self::new(definitions)
    }

    /// The definitions, in canonical order.
    pub fn definitions(&self) -> &[ToolDefinition] {
        &self.definitions
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.definitions.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.definitions.is_empty()
    }

    /// The OpenAI Chat Completions `tools` array, exactly as sent: written once.
    pub fn openai_json(&self) -> &str {
        &self.openai
    }

    /// Hash of [`ToolSet::openai_json`]; part of the session's prefix fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// The sources, sorted, without repeats.
    pub fn sources(&self) -> Vec<&ToolSource> {
        let mut sources: Vec<&ToolSource> = self.definitions.iter().map(|d| &d.source).collect();
        sources.dedup();
        sources
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, source: ToolSource) -> ToolDefinition {
        ToolDefinition {
            name: name.to_owned(),
            description: String::new(),
            parameters: "{}".to_owned(),
            source,
        }
    }

    #[test]
    fn canonical_order_is_by_source_then_name_whatever_the_input_order() {
        let a = ToolSet::new(vec![
            tool("write", ToolSource::builtin()),
            tool("search", ToolSource::mcp("github")),
            tool("read", ToolSource::builtin()),
        ])
        .unwrap();
        let b = ToolSet::new(vec![
            tool("search", ToolSource::mcp("github")),
            tool("read", ToolSource::builtin()),
            tool("write", ToolSource::builtin()),
        ])
        .unwrap();
        assert_eq!(a, b);
        let names: Vec<&str> = a.definitions().iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["read", "write", "search"]);
    }

    #[test]
    fn a_name_defined_by_two_sources_is_an_error_naming_both() {
        let err = ToolSet::new(vec![
            tool("search", ToolSource::mcp("github")),
            tool("search", ToolSource::mcp("brave.search")),
        ])
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "tool `search` is defined by both mcp:brave-search and mcp:github; rename one of them"
        );
    }
}
