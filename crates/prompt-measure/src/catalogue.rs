//! Who wrote a change: the agent a request came from ([`AgentId`], read from its headers),
//! and the **writer catalogue**, a versioned data file of the agents' own writers known to
//! change a cached prefix (a date reminder, an environment block, a skills listing, a tools
//! array an MCP server reconnects into), each with its signature (the engine's JSON path and
//! a text pattern), the upstream issue and the workaround.
//!
//! The built-in catalogue is `crates/prompt-measure/catalogue/writers.toml`, embedded and parsed
//! once ([`Catalogue::builtin`]); a user file in the same format extends it and overrides
//! its entries by id ([`Catalogue::extend`]). Its format and entries are in
//! `docs/catalogue.md`.
//!
//! Everything is bounded: at most [`MAX_ENTRIES`] entries, patterns of at most
//! [`MAX_PATTERN_BYTES`], texts of at most [`MAX_TEXT_BYTES`], and at most
//! [`MAX_ELEMENT_BYTES`] of an element read when a pattern is looked for.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::OnceLock;

use prompt_wire::engine::CauseKind;
use serde::{Deserialize, Serialize};

/// The most entries a catalogue holds (the built-in one and a user file together).
pub const MAX_ENTRIES: usize = 256;
/// The longest pattern, in bytes.
pub const MAX_PATTERN_BYTES: usize = 256;
/// The longest text field (name, varies, issue, workaround, source, path, versions), in bytes.
pub const MAX_TEXT_BYTES: usize = 512;
/// The most bytes of an element read when a pattern is looked for in it.
pub const MAX_ELEMENT_BYTES: usize = 256 << 10;
/// The largest user catalogue file read, in bytes.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// The most bytes of a `user-agent` (or `originator`) header read.
const MAX_HEADER_BYTES: usize = 256;
/// The longest agent name kept for an agent the catalogue does not know.
const MAX_NAME_BYTES: usize = 32;

/// A version as agents print it: `major.minor.patch` (a missing part is 0; anything after
/// the numbers, a pre-release or build tag, is ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Version {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
}

impl Version {
    /// `2.1.197`, `0.61.0`, `1.0` (patch 0); `None` when it does not start with a number.
    pub fn parse(text: &str) -> Option<Version> {
        let text = text.trim().trim_start_matches('v');
        let end = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let mut parts = text[..end].split('.').filter(|p| !p.is_empty());
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next().map_or(Some(0), |p| p.parse().ok())?;
        let patch = parts.next().map_or(Some(0), |p| p.parse().ok())?;
        Some(Version {
            major,
            minor,
            patch,
        })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The agent that sent a request: its name (one spelling per agent: `claude-code`, `codex`,
/// `gemini-cli`, `qwen-code`, `opencode`, `goose`, `letta-code`, `oh-my-pi` (or `omp`); for another
/// agent the first token of its `user-agent`, lower-cased and bounded) and its version.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct AgentId {
    /// The agent's name.
    pub name: String,
    /// Its version, when the header carries one.
    pub version: Option<Version>,
}

/// Known agents: a lower-case product-token prefix and the agent's name.
const KNOWN: [(&str, &str); 11] = [
    ("claude-cli", "claude-code"),
    ("claude-code", "claude-code"),
    ("codex", "codex"),
    ("geminicli", "gemini-cli"),
    ("gemini-cli", "gemini-cli"),
    ("qwencode", "qwen-code"),
    ("qwen-code", "qwen-code"),
    ("opencode", "opencode"),
    ("goose", "goose"),
    ("letta-code", "letta-code"),
    ("oh-my-pi", "oh-my-pi"),
];

impl AgentId {
    /// The agent of a request's headers (lower-case names, as the audit keeps them):
    /// its `user-agent`, else Codex's `originator`.
    pub fn from_headers(headers: &[(String, String)]) -> Option<AgentId> {
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        };
        get("user-agent")
            .and_then(AgentId::from_user_agent)
            .or_else(|| get("originator").and_then(AgentId::from_user_agent))
    }

    /// The agent of a `user-agent` value: `claude-cli/2.1.197 (external, sdk-cli)`,
    /// `codex_exec/0.171.0 (…)`, `GeminiCLI-tui/0.61.0/gemini-2.5-flash (…)`,
    /// `QwenCode/0.15.10 (linux; x64)`, `opencode/1.18.33 ai-sdk/…`. `None` for an empty one.
    pub fn from_user_agent(ua: &str) -> Option<AgentId> {
        let ua = prompt_core::input::excerpt(ua.trim(), MAX_HEADER_BYTES);
        let token = ua.split([' ', '(']).next().filter(|t| !t.is_empty())?;
        let (product, version) = match token.split_once('/') {
            Some((p, rest)) => (p, Version::parse(rest.split('/').next().unwrap_or(rest))),
            None => (token, None),
        };
        let lower = product.to_ascii_lowercase();
        // oh-my-pi prints itself as `omp/<version>`.
        let name = KNOWN
            .iter()
            .find(|(prefix, _)| lower.starts_with(prefix))
            .map(|(_, name)| (*name).to_owned())
            .or_else(|| (lower == "omp").then(|| "oh-my-pi".to_owned()))
            .unwrap_or_else(|| {
                lower
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                    .take(MAX_NAME_BYTES)
                    .collect()
            });
        if name.is_empty() {
            return None;
        }
        Some(AgentId { name, version })
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.version {
            Some(v) => write!(f, "{} {v}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// One comparison of a version range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Ge,
    Gt,
    Le,
    Lt,
    Eq,
}

/// A version range: `*`, or comparisons joined by commas (`>=2.1.0, <2.2.0`, `=1.0.18`;
/// a bare version means `=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionRange {
    text: String,
    all: Vec<(Op, Version)>,
}

impl VersionRange {
    /// Parses a range; the error says which part is not a comparison.
    pub fn parse(text: &str) -> Result<VersionRange, String> {
        let trimmed = text.trim();
        let mut all = Vec::new();
        if trimmed != "*" {
            for part in trimmed.split(',') {
                let part = part.trim();
                let (op, rest) = [
                    (">=", Op::Ge),
                    ("<=", Op::Le),
                    (">", Op::Gt),
                    ("<", Op::Lt),
                    ("=", Op::Eq),
                ]
                .iter()
                .find_map(|(s, op)| part.strip_prefix(s).map(|r| (*op, r)))
                .unwrap_or((Op::Eq, part));
                let v = Version::parse(rest).ok_or_else(|| {
                    format!("{part:?} is not a comparison of a version (`>=2.1.0`, `<2.2.0`, `*`)")
                })?;
                all.push((op, v));
            }
        }
        Ok(VersionRange {
            text: trimmed.to_owned(),
            all,
        })
    }

    /// Whether `version` is in the range. An unknown version is only in `*`.
    pub fn contains(&self, version: Option<Version>) -> bool {
        if self.all.is_empty() {
            return true;
        }
        let Some(v) = version else {
            return false;
        };
        self.all.iter().all(|&(op, b)| match op {
            Op::Ge => v >= b,
            Op::Gt => v > b,
            Op::Le => v <= b,
            Op::Lt => v < b,
            Op::Eq => v == b,
        })
    }
}

impl VersionRange {
    /// The highest version the range was checked on: its upper bound (`<=X`, `<X` or `=X`;
    /// the lowest of several). `None` for a range open above (`*`, `>=1.16.0`).
    pub fn upper(&self) -> Option<Version> {
        self.all
            .iter()
            .filter(|(op, _)| matches!(op, Op::Le | Op::Lt | Op::Eq))
            .map(|&(_, v)| v)
            .min()
    }

    /// Whether `version` is newer than the range: past its upper bound ([`Self::upper`])
    /// and within its lower bounds. An agent ships weekly: a writer checked up to a version
    /// is still named on a newer one, saying so.
    pub fn is_newer(&self, version: Option<Version>) -> bool {
        let Some(v) = version else {
            return false;
        };
        let past = self.all.iter().any(|&(op, b)| match op {
            Op::Le | Op::Eq => v > b,
            Op::Lt => v >= b,
            Op::Ge | Op::Gt => false,
        });
        let above = self.all.iter().all(|&(op, b)| match op {
            Op::Ge | Op::Eq => v >= b,
            Op::Gt => v > b,
            Op::Le | Op::Lt => true,
        });
        past && above
    }
}

impl fmt::Display for VersionRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A JSON-path glob over the engine's [`prompt_wire::engine::Change::json_path`]:
/// `messages[0].content[*]`, `tools[*]`, `system[0]`; `[*]` matches any index, everything
/// else matches itself, and the whole path must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGlob(String);

impl PathGlob {
    /// Parses a glob: names and `[index]` or `[*]` selectors.
    pub fn parse(text: &str) -> Result<PathGlob, String> {
        let t = text.trim();
        let bad = || format!("{t:?} is not a JSON path of names and [index] or [*] selectors");
        if t.is_empty() {
            return Err(bad());
        }
        for segment in t.split('.') {
            let (name, rest) = segment.split_once('[').unwrap_or((segment, ""));
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
            {
                return Err(bad());
            }
            if !rest.is_empty() {
                let inner = rest.strip_suffix(']').ok_or_else(bad)?;
                for sel in inner.split("][") {
                    if sel != "*" && sel.parse::<u64>().is_err() {
                        return Err(bad());
                    }
                }
            }
        }
        Ok(PathGlob(t.to_owned()))
    }

    /// Whether the engine's JSON path `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        let mut g = self.0.as_bytes();
        let mut p = path.as_bytes();
        while let Some(&c) = g.first() {
            if g.starts_with(b"[*]") {
                let Some(rest) = p.strip_prefix(b"[") else {
                    return false;
                };
                let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
                if digits == 0 || rest.get(digits) != Some(&b']') {
                    return false;
                }
                g = &g[3..];
                p = &rest[digits + 1..];
            } else if p.first() == Some(&c) {
                g = &g[1..];
                p = &p[1..];
            } else {
                return false;
            }
        }
        p.is_empty()
    }
}

impl fmt::Display for PathGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A catalogue that cannot be read: what failed, in which entry and field.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    /// Not TOML, or a field of the wrong type, or one the format does not have.
    #[error("{origin}: not a writer catalogue: {message}")]
    Toml {
        /// Where it came from (the built-in catalogue, or a file).
        origin: String,
        /// The parser's message, bounded.
        message: String,
    },
    /// A format version this build does not read.
    #[error("{origin}: catalogue version {found}: this build reads version 1")]
    Version {
        /// Where it came from.
        origin: String,
        /// The version found.
        found: u64,
    },
    /// More entries than [`MAX_ENTRIES`].
    #[error("{origin}: {count} writer entries: at most {MAX_ENTRIES} are read")]
    TooMany {
        /// Where it came from.
        origin: String,
        /// Entries in it (with those it extends).
        count: usize,
    },
    /// A user's catalogue file that cannot be read, or is over [`MAX_FILE_BYTES`].
    #[error("{path}: cannot read the writer catalogue: {problem}")]
    File {
        /// The file.
        path: String,
        /// Why.
        problem: String,
    },
    /// An entry whose field is wrong.
    #[error("{origin}: writer {entry}: field `{field}`: {problem}")]
    Entry {
        /// Where it came from.
        origin: String,
        /// The entry: its id, or its position (`#3`) when the id is the problem.
        entry: String,
        /// The field.
        field: &'static str,
        /// What is wrong, bounded.
        problem: String,
    },
}

/// A field that is one value or a list of them (`cause`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCatalogue {
    version: u64,
    #[serde(default)]
    writer: Vec<RawWriter>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWriter {
    id: String,
    agent: String,
    versions: String,
    cause: OneOrMany,
    path: String,
    pattern: String,
    name: String,
    varies: String,
    issue: Option<String>,
    workaround: Option<String>,
    source: Option<String>,
    within: Option<u64>,
    when: Option<String>,
    gone: Option<String>,
    repair: Option<String>,
}

/// One known writer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Writer {
    /// Its id, unique in a catalogue.
    pub id: String,
    /// The agent's name ([`AgentId::name`]).
    pub agent: String,
    /// The agent's versions it is known in.
    pub versions: VersionRange,
    /// The causes the engine names its change by.
    pub causes: Vec<CauseKind>,
    /// Where the change is.
    pub path: PathGlob,
    /// Text that occurs in the changed element (of the later or the earlier request).
    pub pattern: String,
    /// The writer, as a verdict names it.
    pub name: String,
    /// How often it changes (per day, per turn, per MCP reconnect).
    pub varies: String,
    /// The upstream issue (`owner/repo#N`), if there is one.
    pub issue: Option<String>,
    /// The flag, variable or setting that avoids it, if one is known.
    pub workaround: Option<String>,
    /// Where the entry was derived from (a capture, a thread).
    pub source: Option<String>,
    /// When set, the change must fall at most this many bytes after the pattern's start in
    /// the later request's element: for an element that holds several writers' blocks (one
    /// system prompt with an environment block and a skills listing).
    pub within: Option<usize>,
    /// Which requests it is named on: every one, or resumed ones only ([`When`]).
    pub when: When,
    /// The first version checked without the writer: from it on the entry is not named (a
    /// retired entry), however new the agent.
    pub gone: Option<Version>,
    /// `cacheline proxy --stabilize` may repair the change: the element kept as the provider
    /// last saw it, the changed line (from the pattern, at most `within` bytes, to the end
    /// of its line) delivered as an appended update from this producer (`date`). Set only
    /// with `within`.
    pub repair: Option<prompt_core::ComponentId>,
}

/// Which requests an entry is named on (`when` in the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Any request (no `when`).
    #[default]
    Any,
    /// `when = "resume"`: only a resumed request, one whose predecessor another launch saw
    /// ([`prompt_engine::Predecessor::earlier_launch`]: an agent run again with `--continue`,
    /// `--resume`, `exec resume`). A log without launch ids has no resumed request.
    Resume,
}

impl When {
    /// Its name in the file (`resume`), `None` for [`When::Any`].
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            When::Any => None,
            When::Resume => Some("resume"),
        }
    }
}

impl Writer {
    /// Whether the entry is named for an agent of `version`: one in its range, or newer than
    /// the range ([`VersionRange::is_newer`]) and older than `gone`. An older version than the
    /// range, or an unknown one (unless the range is `*`), is not.
    pub fn applies_to(&self, version: Option<Version>) -> bool {
        if self.gone.is_some_and(|g| version.is_some_and(|v| v >= g)) {
            return false;
        }
        self.versions.contains(version) || self.versions.is_newer(version)
    }

    /// The version the entry was checked up to, when `version` is newer than its range:
    /// the verdict then says "(checked up to X)".
    pub fn checked_up_to(&self, version: Option<Version>) -> Option<Version> {
        self.versions
            .is_newer(version)
            .then(|| self.versions.upper())
            .flatten()
    }
}

/// A writer catalogue: entries in file order, ids unique.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalogue {
    writers: Vec<Writer>,
}

/// The built-in catalogue's text.
pub const BUILTIN: &str = include_str!("../catalogue/writers.toml");

/// One element a pattern is looked for in: its text, and where the change falls in it
/// (bytes from its start), when known.
#[derive(Debug, Clone, Copy)]
pub struct Element<'a> {
    /// The element's bytes as sent (read at most [`MAX_ELEMENT_BYTES`] of).
    pub text: &'a str,
    /// The change's offset in it.
    pub change_at: Option<usize>,
}

fn bounded(text: &str) -> String {
    prompt_core::input::excerpt(text, MAX_TEXT_BYTES).into_owned()
}

fn cause_of(name: &str) -> Option<CauseKind> {
    CauseKind::ALL.into_iter().find(|k| k.as_str() == name)
}

impl Catalogue {
    /// The built-in catalogue, parsed once. An error here is a bug of the build (a test
    /// parses it), reported rather than panicked on.
    pub fn builtin() -> Result<&'static Catalogue, &'static CatalogueError> {
        static BUILT: OnceLock<Result<Catalogue, CatalogueError>> = OnceLock::new();
        BUILT
            .get_or_init(|| Catalogue::parse(BUILTIN, "the built-in writer catalogue"))
            .as_ref()
    }

    /// Parses a catalogue's text; `origin` names it in errors (a path).
    pub fn parse(text: &str, origin: &str) -> Result<Catalogue, CatalogueError> {
        let origin = bounded(origin);
        let raw: RawCatalogue = toml::from_str(text).map_err(|e| CatalogueError::Toml {
            origin: origin.clone(),
            message: bounded(&e.to_string()),
        })?;
        if raw.version != 1 {
            return Err(CatalogueError::Version {
                origin,
                found: raw.version,
            });
        }
        if raw.writer.len() > MAX_ENTRIES {
            return Err(CatalogueError::TooMany {
                origin,
                count: raw.writer.len(),
            });
        }
        let mut writers = Vec::with_capacity(raw.writer.len());
        let mut ids = HashSet::new();
        for (i, w) in raw.writer.into_iter().enumerate() {
            let entry = if w.id.trim().is_empty() || w.id.len() > 64 {
                format!("#{}", i + 1)
            } else {
                w.id.clone()
            };
            let err = |field: &'static str, problem: String| CatalogueError::Entry {
                origin: origin.clone(),
                entry: entry.clone(),
                field,
                problem: bounded(&problem),
            };
            if w.id.trim().is_empty() || w.id.len() > 64 {
                return Err(err("id", "an id of 1 to 64 bytes is needed".to_owned()));
            }
            if !ids.insert(w.id.clone()) {
                return Err(err("id", "the same id is used twice".to_owned()));
            }
            for (field, value) in [
                ("agent", &w.agent),
                ("versions", &w.versions),
                ("path", &w.path),
                ("name", &w.name),
                ("varies", &w.varies),
            ] {
                if value.trim().is_empty() {
                    return Err(err(field, "empty".to_owned()));
                }
                if value.len() > MAX_TEXT_BYTES {
                    return Err(err(field, format!("longer than {MAX_TEXT_BYTES} bytes")));
                }
            }
            for (field, value) in [
                ("issue", &w.issue),
                ("workaround", &w.workaround),
                ("source", &w.source),
            ] {
                if value.as_ref().is_some_and(|v| v.len() > MAX_TEXT_BYTES) {
                    return Err(err(field, format!("longer than {MAX_TEXT_BYTES} bytes")));
                }
            }
            if w.pattern.is_empty() || w.pattern.len() > MAX_PATTERN_BYTES {
                return Err(err(
                    "pattern",
                    format!("a pattern of 1 to {MAX_PATTERN_BYTES} bytes is needed"),
                ));
            }
            let versions = VersionRange::parse(&w.versions).map_err(|e| err("versions", e))?;
            let path = PathGlob::parse(&w.path).map_err(|e| err("path", e))?;
            let names = match w.cause {
                OneOrMany::One(c) => vec![c],
                OneOrMany::Many(cs) => cs,
            };
            if names.is_empty() {
                return Err(err("cause", "no cause".to_owned()));
            }
            let mut causes = Vec::with_capacity(names.len());
            for n in names.iter().take(CauseKind::ALL.len()) {
                causes.push(cause_of(n).ok_or_else(|| {
                    err(
                        "cause",
                        format!("{n:?} is not a cause the engine names (`edit_in_place`, `tools_changed`, …)"),
                    )
                })?);
            }
            let when = match w.when.as_deref().map(str::trim) {
                None => When::Any,
                Some("resume") => When::Resume,
                Some(other) => {
                    return Err(err(
                        "when",
                        format!("{other:?} is not when an entry applies (`resume`)"),
                    ));
                }
            };
            let gone = match w.gone.as_deref() {
                None => None,
                Some(text) => Some(Version::parse(text).ok_or_else(|| {
                    err("gone", format!("{text:?} is not a version (`2.1.332`)"))
                })?),
            };
            if let (Some(g), Some(u)) = (gone, versions.upper())
                && g <= u
            {
                return Err(err(
                    "gone",
                    format!("{g} is not past the versions checked (up to {u})"),
                ));
            }
            let repair = match w.repair.as_deref() {
                None => None,
                Some(_) if w.within.is_none() => {
                    return Err(err(
                        "repair",
                        "a repair needs `within`: the bytes after the pattern it may change"
                            .to_owned(),
                    ));
                }
                Some(text) => Some(prompt_core::ComponentId::new(text.trim()).map_err(|e| {
                    err(
                        "repair",
                        format!("{text:?} is not the name of an update's producer: {e}"),
                    )
                })?),
            };
            writers.push(Writer {
                id: w.id,
                agent: w.agent.trim().to_ascii_lowercase(),
                versions,
                causes,
                path,
                pattern: w.pattern,
                name: w.name,
                varies: w.varies,
                issue: w.issue.filter(|s| !s.trim().is_empty()),
                workaround: w.workaround.filter(|s| !s.trim().is_empty()),
                source: w.source.filter(|s| !s.trim().is_empty()),
                within: match w.within {
                    None => None,
                    Some(n) if n > 0 && n <= MAX_ELEMENT_BYTES as u64 => Some(n as usize),
                    Some(_) => {
                        return Err(err(
                            "within",
                            format!("a number of bytes from 1 to {MAX_ELEMENT_BYTES} is needed"),
                        ));
                    }
                },
                when,
                gone,
                repair,
            });
        }
        Ok(Catalogue { writers })
    }

    /// The same, with `other`'s entries: one of the same id replaces this one's (in its
    /// place), the others are added after. At most [`MAX_ENTRIES`] in all.
    pub fn extend(&mut self, other: Catalogue) -> Result<(), CatalogueError> {
        let at: HashMap<String, usize> = self
            .writers
            .iter()
            .enumerate()
            .map(|(i, w)| (w.id.clone(), i))
            .collect();
        let mut added = Vec::new();
        for w in other.writers {
            match at.get(&w.id) {
                Some(&i) => self.writers[i] = w,
                None => added.push(w),
            }
        }
        let count = self.writers.len() + added.len();
        if count > MAX_ENTRIES {
            return Err(CatalogueError::TooMany {
                origin: "the extended writer catalogue".to_owned(),
                count,
            });
        }
        self.writers.extend(added);
        Ok(())
    }

    /// The built-in catalogue extended by the user's file at `path` (its entries override
    /// the built-in ones of the same id): what `cacheline audit --catalogue FILE` and
    /// `cacheline proxy --catalogue FILE` name writers by.
    pub fn builtin_with_file(path: &std::path::Path) -> Result<Catalogue, CatalogueError> {
        use std::io::Read;
        let shown = bounded(&path.display().to_string());
        let file_error = |problem: String| CatalogueError::File {
            path: shown.clone(),
            problem: bounded(&problem),
        };
        let file = std::fs::File::open(path).map_err(|e| file_error(e.to_string()))?;
        let mut text = String::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| file_error(e.to_string()))?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(file_error(format!("over {MAX_FILE_BYTES} bytes")));
        }
        let user = Catalogue::parse(&text, &shown)?;
        let mut all = Catalogue::builtin()
            .map_err(|e| file_error(e.to_string()))?
            .clone();
        all.extend(user)?;
        Ok(all)
    }

    /// Its entries, in order.
    pub fn writers(&self) -> &[Writer] {
        &self.writers
    }

    /// The writer of a change: entries of `agent`'s name and version (in the entry's range,
    /// or newer than it and not past its `gone`), of `cause`, whose path matches `json_path`,
    /// whose pattern occurs in one of `elements` (the changed element of the later request,
    /// then of the earlier one), and, for an entry about resumes, on a `resumed` request
    /// (its predecessor seen by another launch). When several match, the one whose pattern
    /// occurs last at or before the change (the section the change falls in) wins, then the
    /// first in file order.
    pub fn find(
        &self,
        agent: &AgentId,
        cause: CauseKind,
        json_path: &str,
        elements: &[Element<'_>],
        resumed: bool,
    ) -> Option<&Writer> {
        let mut best: Option<(usize, &Writer)> = None;
        for w in &self.writers {
            if w.agent != agent.name
                || !w.causes.contains(&cause)
                || !w.applies_to(agent.version)
                || (w.when == When::Resume && !resumed)
                || !w.path.matches(json_path)
            {
                continue;
            }
            let Some(distance) = elements
                .iter()
                .filter_map(|e| pattern_distance(e, &w.pattern, w.within))
                .min()
            else {
                continue;
            };
            if best.is_none_or(|(d, _)| distance < d) {
                best = Some((distance, w));
            }
        }
        best.map(|(_, w)| w)
    }
}

/// How far before the change the pattern last occurs in the element (0 at the change);
/// an occurrence only after it, or an element without a known change, counts as far. With
/// `within`, only an occurrence at most that far before a known change counts.
fn pattern_distance(e: &Element<'_>, pattern: &str, within: Option<usize>) -> Option<usize> {
    let text = prompt_core::input::head(e.text, MAX_ELEMENT_BYTES);
    const FAR: usize = usize::MAX / 2;
    match e.change_at {
        Some(at) => {
            let before = prompt_core::input::head(text, at.saturating_add(pattern.len()));
            match (before.rfind(pattern), within) {
                (Some(i), Some(w)) => (at.saturating_sub(i) <= w).then(|| at.saturating_sub(i)),
                (Some(i), None) => Some(at.saturating_sub(i)),
                (None, Some(_)) => None,
                (None, None) => text.contains(pattern).then_some(FAR),
            }
        }
        None if within.is_some() => None,
        None => text.contains(pattern).then_some(FAR),
    }
}

/// The writer a verdict names: a catalogue entry, as [`RequestAudit`](crate::audit::RequestAudit)
/// carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WriterMatch {
    /// The entry's id.
    pub id: String,
    /// The writer.
    pub name: String,
    /// The agent, as the request named it.
    pub agent: AgentId,
    /// The entry's version range.
    pub versions: String,
    /// How often it changes.
    pub varies: String,
    /// The upstream issue.
    pub issue: Option<String>,
    /// The workaround.
    pub workaround: Option<String>,
    /// The highest version the entry was checked on, when the agent is newer than its range
    /// (agents ship weekly: the writer is still named, saying so).
    pub checked_up_to: Option<Version>,
}

impl WriterMatch {
    /// The match of `writer` for `agent`.
    pub fn of(writer: &Writer, agent: &AgentId) -> WriterMatch {
        WriterMatch {
            id: writer.id.clone(),
            name: writer.name.clone(),
            agent: agent.clone(),
            versions: writer.versions.to_string(),
            varies: writer.varies.clone(),
            issue: writer.issue.clone(),
            workaround: writer.workaround.clone(),
            checked_up_to: writer.checked_up_to(agent.version),
        }
    }
}

/// A block that changed, without a catalogue entry, in this many distinct sessions of one
/// agent: a **learned volatile block**.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LearnedBlock {
    /// The agent's name (`?` when the request named none).
    pub agent: String,
    /// The block's normalised JSON path ([`normalised_path`]).
    pub path: String,
    /// Distinct sessions it changed in (counted up to [`MAX_SESSIONS_COUNTED`]).
    pub sessions: u64,
}

/// Sessions it takes to call a block a learned volatile block.
pub const LEARNED_SESSIONS: u64 = 3;
/// Distinct sessions counted per block (a capped set).
pub const MAX_SESSIONS_COUNTED: usize = 64;
/// Blocks tracked (new ones are not tracked past it).
pub const MAX_TRACKED_BLOCKS: usize = 1024;
/// Learned volatile blocks listed in the summary.
pub const MAX_LEARNED_LISTED: usize = 32;

/// What a verdict names as the change's writer: a catalogue entry, or a learned volatile
/// block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WriterFinding {
    /// A catalogue entry matched.
    Catalogue(WriterMatch),
    /// No entry matched, and the block changed in this many sessions.
    Learned(LearnedBlock),
}

pub use crate::report::writer_clause;

/// A change's JSON path as learned volatile blocks are keyed: tools, system blocks and the
/// first message keep their indices; a later message's index is `*` (it grows with the
/// history).
pub fn normalised_path(json_path: &str) -> String {
    for key in ["messages[", "contents[", "input["] {
        if let Some(rest) = json_path.strip_prefix(key) {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if rest[..digits] != *"0" && digits > 0 {
                return format!("{key}*{}", &rest[digits..]);
            }
        }
    }
    json_path.to_owned()
}

/// Counts, per agent and normalised path, the distinct sessions a block changed in without a
/// catalogue entry. Bounded: [`MAX_TRACKED_BLOCKS`] blocks, [`MAX_SESSIONS_COUNTED`]
/// sessions each.
#[derive(Debug, Default)]
pub struct VolatileBlocks {
    blocks: HashMap<(String, String), HashSet<u64>>,
}

impl VolatileBlocks {
    /// Records a change at `json_path` in `session` of `agent`; the block's learned entry
    /// once it changed in [`LEARNED_SESSIONS`] sessions.
    pub fn record(&mut self, agent: &str, json_path: &str, session: u64) -> Option<LearnedBlock> {
        let key = (
            prompt_core::input::excerpt(agent, MAX_NAME_BYTES).into_owned(),
            prompt_core::input::excerpt(&normalised_path(json_path), 128).into_owned(),
        );
        if !self.blocks.contains_key(&key) && self.blocks.len() >= MAX_TRACKED_BLOCKS {
            return None;
        }
        let sessions = self.blocks.entry(key.clone()).or_default();
        if sessions.len() < MAX_SESSIONS_COUNTED {
            sessions.insert(session);
        }
        let n = sessions.len() as u64;
        (n >= LEARNED_SESSIONS).then_some(LearnedBlock {
            agent: key.0,
            path: key.1,
            sessions: n,
        })
    }

    /// The learned volatile blocks, most sessions first, at most [`MAX_LEARNED_LISTED`].
    pub fn learned(&self) -> Vec<LearnedBlock> {
        let mut all: Vec<LearnedBlock> = self
            .blocks
            .iter()
            .filter(|(_, s)| s.len() as u64 >= LEARNED_SESSIONS)
            .map(|((agent, path), s)| LearnedBlock {
                agent: agent.clone(),
                path: path.clone(),
                sessions: s.len() as u64,
            })
            .collect();
        all.sort_by(|a, b| {
            b.sessions
                .cmp(&a.sessions)
                .then_with(|| a.agent.cmp(&b.agent))
                .then_with(|| a.path.cmp(&b.path))
        });
        all.truncate(MAX_LEARNED_LISTED);
        all
    }
}
