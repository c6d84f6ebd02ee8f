//! The component-id grammar: which strings are ids, which are reserved, and how a foreign
//! name (an MCP server's, a skill folder's) is normalized into one.
//!
//! This file depends on nothing but the standard library, because `prompt-macros` compiles
//! it too (`#[path]` module, as serde_derive shares code with serde): the attribute checks
//! ids at compile time without linking the runtime crate and its dependencies.

use std::fmt;

/// Namespaces reserved for components registered at run time.
///
/// A namespaced id is `<namespace>:<name>`, for example `skill:code_review` or
/// `mcp:github`. Built-in components use bare ids.
pub const NAMESPACES: [&str; 2] = ["skill", "mcp"];

/// Bare ids that name the library's own producers of history nodes and request fields.
///
/// A component cannot take one of them: its updates would read, to the model and to anyone
/// reading the history, as if the system prompt, the user or a tool had written them.
pub const RESERVED_IDS: [&str; 10] = [
    "assistant",
    "compaction",
    "developer",
    "foreign",
    "prefix",
    "system",
    "system_prompt",
    "tool",
    "tools",
    "user",
];

/// The longest id accepted, in bytes. Ids appear in every update wrapper and status row;
/// a bound keeps hostile registrations (an MCP server naming itself with a megabyte) out.
pub const MAX_ID_LEN: usize = 128;

/// Why a string is not a valid component id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdProblem {
    /// The id is empty.
    Empty,
    /// Longer than [`MAX_ID_LEN`] bytes.
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A character outside the allowed set.
    InvalidChar {
        /// The offending character.
        ch: char,
        /// Its byte offset in the id.
        at: usize,
    },
    /// A namespace other than `skill` or `mcp`.
    UnknownNamespace {
        /// The namespace found before the colon.
        namespace: String,
    },
    /// Nothing after the namespace colon.
    EmptyName,
    /// One of [`RESERVED_IDS`].
    Reserved,
}

/// A string that is not a valid component id, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdError {
    /// The id as given (cut to [`MAX_ID_LEN`] bytes when it is too long).
    pub id: String,
    /// What is wrong with it.
    pub problem: IdProblem,
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = &self.id;
        match &self.problem {
            IdProblem::Empty => f.write_str("component id is empty"),
            IdProblem::TooLong { len } => {
                let mut cut = id.len().min(24);
                while !id.is_char_boundary(cut) {
                    cut -= 1;
                }
                write!(
                    f,
                    "component id `{}…` is {len} bytes long; ids are at most {MAX_ID_LEN} bytes",
                    &id[..cut]
                )
            }
            IdProblem::InvalidChar { ch, at } => write!(
                f,
                "component id `{id}` has `{}` at byte {at}; ids are lowercase `[a-z0-9_]+`, optionally namespaced as `skill:<name>` or `mcp:<name>`",
                ch.escape_debug()
            ),
            IdProblem::UnknownNamespace { namespace } => write!(
                f,
                "component id `{id}` uses unknown namespace `{namespace}`; the namespaces are `skill:` and `mcp:`"
            ),
            IdProblem::EmptyName => {
                write!(
                    f,
                    "component id `{id}` has an empty name after its namespace"
                )
            }
            IdProblem::Reserved => write!(
                f,
                "component id `{id}` is reserved: it names one of the library's own producers ({}), whose updates a component must not be able to imitate",
                RESERVED_IDS.join(", ")
            ),
        }
    }
}

impl std::error::Error for IdError {}

/// Checks `id` against the grammar.
///
/// Bare ids are lowercase `[a-z0-9_]+` and not in [`RESERVED_IDS`]. Namespaced ids are
/// `skill:<name>` or `mcp:<name>` where `<name>` is lowercase `[a-z0-9_-]+` (hyphens are
/// allowed there because skill folders and MCP server names commonly use them).
pub fn check(id: &str) -> Result<(), IdError> {
    let error = |problem| IdError {
        id: id.to_owned(),
        problem,
    };
    if id.is_empty() {
        return Err(error(IdProblem::Empty));
    }
    if id.len() > MAX_ID_LEN {
        let mut cut = MAX_ID_LEN;
        while !id.is_char_boundary(cut) {
            cut -= 1;
        }
        return Err(IdError {
            id: id[..cut].to_owned(),
            problem: IdProblem::TooLong { len: id.len() },
        });
    }
    let (name, name_start, namespaced) = match id.split_once(':') {
        Some((namespace, name)) => {
            if !NAMESPACES.contains(&namespace) {
                return Err(error(IdProblem::UnknownNamespace {
                    namespace: namespace.to_owned(),
                }));
            }
            if name.is_empty() {
                return Err(error(IdProblem::EmptyName));
            }
            (name, namespace.len() + 1, true)
        }
        None => (id, 0, false),
    };
    for (at, ch) in name.char_indices() {
        let ok = ch.is_ascii_lowercase()
            || ch.is_ascii_digit()
            || ch == '_'
            || (namespaced && ch == '-');
        if !ok {
            return Err(error(IdProblem::InvalidChar {
                ch,
                at: name_start + at,
            }));
        }
    }
    if !namespaced && RESERVED_IDS.contains(&id) {
        return Err(error(IdProblem::Reserved));
    }
    Ok(())
}

/// The name part of a namespaced id for a foreign name, such as an MCP server's
/// (`GitHub`, `brave.search`, `My Server`) or a skill folder's.
///
/// ASCII letters are lowercased, ASCII digits, `_` and `-` are kept, every run of any other
/// characters becomes one `-`, and leading and trailing `-` are trimmed. `None` when nothing
/// is left. Work stops one byte past [`MAX_ID_LEN`], so a hostile name costs little and its
/// id is then refused as too long. Deterministic, so the same server gets the same id in
/// every session.
///
/// `GitHub` → `github`, `brave.search` → `brave-search`, `My  Server!` → `my-server`.
pub fn normalize_name(raw: &str) -> Option<String> {
    let mut name = String::with_capacity(raw.len().min(MAX_ID_LEN));
    for ch in raw.chars() {
        let ch = ch.to_ascii_lowercase();
        if ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_' || ch == '-' {
            name.push(ch);
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
        if name.len() > MAX_ID_LEN {
            break;
        }
    }
    let name = name.trim_matches('-');
    (!name.is_empty()).then(|| name.to_owned())
}
