//! The prefix lock: the prompt writers that can reach the cached prefix, written down in a
//! file that lives in the agent's repository, so that a change to them is a reviewed change.
//!
//! A writer *can reach the prefix* when it asks for it (its declaration, or the agent.toml's
//! `[prompt.placement]` or `default`) and does not render every turn (a per-turn writer never
//! lands there). For each, the lock records its id, the file it is declared in, its
//! stability (`constant` or `session`), where the agent.toml it was checked against puts it
//! (`lands`), and for a constant a fingerprint of its text: the first 128 bits of the
//! SHA-256 of the text, in hex (`printf '%s' "$TEXT" | sha256sum | cut -c1-32`).
//!
//! ```
//! use prompt_core::component::SourceLocation;
//! use prompt_core::lock::PrefixLock;
//! use prompt_core::{Component, ComponentId, Placement, PromptPolicy};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let rules = Component::constant(ComponentId::new("house_rules")?, "No force pushes.")
//!     .placement(Placement::Prefix)
//!     .located_at(SourceLocation::new("src/prompt.rs", 12));
//! let toml = "[prompt]\nprefix_allow = [\"house_rules\"]\n";
//! let policy = PromptPolicy::from_agent_toml(toml, "agent.toml", [&rules])?.deny_warnings()?;
//! let text = PrefixLock::of([&rules], &policy).render("What this file is; how to regenerate it.");
//! assert_eq!(text, r#"# What this file is; how to regenerate it.
//!
//! version = 1
//!
//! [writer.house_rules]
//! file = "src/prompt.rs"
//! stability = "constant"
//! lands = "prefix"
//! fingerprint = "b624cb805ab495d5da60e6a3cf9aa2bc"
//! "#);
//! // Read back, it matches the program it was written from.
//! let loaded = PrefixLock::parse(&text, "prefix.lock")?;
//! assert!(loaded.compare([&rules], &policy).is_empty());
//! # Ok(()) }
//! ```
//!
//! The text is stable across builds and platforms: writers are ordered by id, paths are
//! relative and `/`-separated ([`portable_path`]), nothing records a time or a machine, and
//! each writer's lines depend on that writer alone, so rewriting the lock changes only the
//! lines of the writers that changed. Line numbers are not recorded (an edit above a
//! declaration would move them); [`LoadedLock::compare`] names each difference at the
//! declaration's current `file:line`.
//!
//! Reading is as strict as reading an agent.toml: at most [`LOCK_LIMIT`] bytes, every
//! problem with its `line:col`, in source order, and no lock at all on any error.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

use toml::Spanned;
use toml::de::DeValue;

use crate::component::{Component, Content};
use crate::config::SourcePosition;
use crate::config::{self, Diagnostic, Diagnostics, FileProblem, Found, Unreadable, excerpt};
use crate::hash::{Digest128, Fingerprint};
use crate::id::{ComponentId, IdError};
use crate::placement::{Placement, Stability};
use crate::policy::{PromptPolicy, RequestSource};

/// The version of the lock file format this library reads and writes. It changes only when
/// a key is removed, renamed or changes meaning.
pub const LOCK_FORMAT_VERSION: u32 = 1;

/// The most a lock file may hold: 1 MiB. A writer's entry is about 150 bytes.
pub const LOCK_LIMIT: u64 = 1 << 20;

/// The keys of a writer's table.
const WRITER_KEYS: &str = "`file`, `stability`, `lands`, `fingerprint`";

/// One writer that can reach the prefix, as the lock records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedWriter {
    id: ComponentId,
    file: String,
    stability: Stability,
    lands: Placement,
    fingerprint: Option<Fingerprint>,
}

impl LockedWriter {
    /// The entry of `component` under `policy`, if it can reach the prefix.
    pub fn of(component: &Component, policy: &PromptPolicy) -> Option<Self> {
        if component.stability() == Stability::Turn {
            return None;
        }
        let resolution = policy.resolve(component);
        if component.declared() != Some(Placement::Prefix)
            && resolution.requested != Placement::Prefix
        {
            return None;
        }
        Some(Self {
            id: component.id().clone(),
            file: portable_path(&component.source().file),
            stability: component.stability(),
            lands: resolution.placement,
            fingerprint: match component.content() {
                Content::Static(text) => Some(text_fingerprint(text)),
                Content::Session(_) | Content::Turn(_) => None,
            },
        })
    }

    /// The id.
    pub fn id(&self) -> &ComponentId {
        &self.id
    }

    /// The file it is declared in, relative and `/`-separated.
    pub fn file(&self) -> &str {
        &self.file
    }

    /// `constant` or `session`.
    pub fn stability(&self) -> Stability {
        self.stability
    }

    /// Where the agent.toml puts it.
    pub fn lands(&self) -> Placement {
        self.lands
    }

    /// For a constant, the fingerprint of its text.
    pub fn fingerprint(&self) -> Option<Fingerprint> {
        self.fingerprint
    }
}

/// The fingerprint of a constant's text: the first 128 bits of its SHA-256.
pub fn text_fingerprint(text: &str) -> Fingerprint {
    Digest128::of(&[text.as_bytes()])
}

/// A declaration file as the lock records it: `/`-separated and relative, whatever the
/// build machine. `file!()` is already relative for the crates of a workspace; for a crate
/// built from outside it (crates.io, git, a path elsewhere) it is absolute, and the lock
/// keeps it from the crate's directory on: the segment before the last `src`, or else the
/// file name.
///
/// ```
/// use prompt_core::lock::portable_path;
/// assert_eq!(portable_path("agent/src/prompt.rs"), "agent/src/prompt.rs");
/// assert_eq!(portable_path(r"agent\src\prompt.rs"), "agent/src/prompt.rs");
/// assert_eq!(
///     portable_path("/home/ci/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/skills-1.2.0/src/lib.rs"),
///     "skills-1.2.0/src/lib.rs"
/// );
/// assert_eq!(portable_path(r"C:\Users\ci\skills\src\lib.rs"), "skills/src/lib.rs");
/// ```
pub fn portable_path(file: &str) -> String {
    let unified = file.replace('\\', "/");
    let bytes = unified.as_bytes();
    let absolute = unified.starts_with('/') || (bytes.len() > 1 && bytes[1] == b':');
    let segments: Vec<&str> = unified
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if !absolute {
        return segments.join("/");
    }
    let segments = match segments.first() {
        Some(first) if first.ends_with(':') => &segments[1..],
        _ => &segments[..],
    };
    let start = segments
        .iter()
        .rposition(|s| *s == "src")
        .filter(|&i| i > 0)
        .map_or(segments.len().saturating_sub(1), |i| i - 1);
    segments[start..].join("/")
}

/// The writers that can reach the prefix, by id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrefixLock {
    writers: BTreeMap<ComponentId, LockedWriter>,
}

impl PrefixLock {
    /// The lock of `components` under `policy`: every one that can reach the prefix.
    pub fn of<'a>(
        components: impl IntoIterator<Item = &'a Component>,
        policy: &PromptPolicy,
    ) -> Self {
        Self {
            writers: components
                .into_iter()
                .filter_map(|c| LockedWriter::of(c, policy))
                .map(|w| (w.id.clone(), w))
                .collect(),
        }
    }

    /// The writers, by id.
    pub fn writers(&self) -> impl ExactSizeIterator<Item = &LockedWriter> + Clone {
        self.writers.values()
    }

    /// The writer with this id.
    pub fn get(&self, id: &str) -> Option<&LockedWriter> {
        self.writers.values().find(|w| w.id.as_str() == id)
    }

    /// Number of writers.
    pub fn len(&self) -> usize {
        self.writers.len()
    }

    /// Whether no writer can reach the prefix.
    pub fn is_empty(&self) -> bool {
        self.writers.is_empty()
    }

    /// The lock file's text: `header` as comment lines (a line not starting with `#` gets
    /// `# `) and a blank line, the format version, then one table per writer, by id.
    pub fn render(&self, header: &str) -> String {
        let mut out = String::new();
        for line in header.lines() {
            let line: String = line
                .chars()
                .map(|c| {
                    // TOML comments may hold no control character but tab.
                    if c.is_control() && c != '\t' {
                        char::REPLACEMENT_CHARACTER
                    } else {
                        c
                    }
                })
                .collect();
            match line.as_str() {
                "" => out.push_str("#\n"),
                l if l.starts_with('#') => out.push_str(l.trim_end()),
                l => {
                    out.push_str("# ");
                    out.push_str(l.trim_end());
                }
            }
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
        if !out.is_empty() {
            out.push('\n');
        }
        // Writing to a String cannot fail.
        let _ = writeln!(out, "version = {LOCK_FORMAT_VERSION}");
        for w in self.writers.values() {
            let _ = writeln!(out, "\n[writer.{}]", toml_key(w.id.as_str()));
            let _ = writeln!(out, "file = {}", toml_string(&w.file));
            let _ = writeln!(out, "stability = \"{}\"", w.stability);
            let _ = writeln!(out, "lands = \"{}\"", w.lands);
            if let Some(fingerprint) = w.fingerprint {
                let _ = writeln!(out, "fingerprint = \"{fingerprint}\"");
            }
        }
        out
    }

    /// Reads a lock file's text. Every problem is reported, in source order, each with its
    /// line and column; on any, no lock is returned. A text longer than [`LOCK_LIMIT`] is
    /// refused unparsed.
    pub fn parse(src: &str, origin: &str) -> Result<LoadedLock, LockFileErrors> {
        let doc = match config::parse_toml_at(src, LOCK_LIMIT) {
            Ok(doc) => doc,
            Err((span, why)) => {
                // A span-less syntax error (toml's "recursion limit") is put at the start of
                // a lock, as it always has been; an agent.toml's names the key that crosses it.
                let span = match &why {
                    Unreadable::Syntax(e) if e.span().is_none() => 0..0,
                    _ => span,
                };
                let mut findings = Findings::default();
                findings.error(span, LockProblem::unreadable(why));
                return Err(findings.into_errors(src, origin));
            }
        };
        let mut findings = Findings::default();
        let mut version_seen = false;
        let mut writers = BTreeMap::new();
        let mut at: Vec<Found<ComponentId>> = Vec::new();
        for (key, value) in doc.get_ref() {
            match key.get_ref().as_ref() {
                "version" => {
                    version_seen = true;
                    read_version(value, &mut findings);
                }
                "writer" => {
                    let DeValue::Table(table) = value.get_ref() else {
                        findings.wrong_type(value, "a table of writers, `[writer.<id>]`");
                        continue;
                    };
                    for (id, entry) in table {
                        if let Some(writer) = read_writer(id, entry, &mut findings) {
                            at.push(Found {
                                offset: id.span().start,
                                problem: writer.id.clone(),
                            });
                            writers.insert(writer.id.clone(), writer);
                        }
                    }
                }
                other => findings.error(
                    key.span(),
                    LockProblem::UnknownKey {
                        key: other.to_owned(),
                        expected: "`version`, `writer`",
                    },
                ),
            }
        }
        if !version_seen {
            findings.error(0..0, LockProblem::MissingVersion);
        }
        if !findings.errors.is_empty() {
            return Err(findings.into_errors(src, origin));
        }
        let positions = config::positioned(src, origin, at)
            .into_iter()
            .map(|Diagnostic { position, problem }| (problem, position))
            .collect();
        Ok(LoadedLock {
            lock: PrefixLock { writers },
            origin: origin.to_owned(),
            positions,
        })
    }
}

/// The header a new lock file gets: what it is, and the one command that regenerates it.
pub fn default_header(regenerate: &str) -> String {
    format!(
        "Prefix lock (cacheline): every prompt writer of this program that can reach the\n\
         cached prefix, the stability of its text, where the agent.toml it was checked\n\
         against puts it, and a fingerprint of each constant's text. A change here changes\n\
         what is sent above the cache line: review it. After review, regenerate with:\n  {}\n",
        regenerate.replace(['\n', '\r'], " ")
    )
}

/// The leading comment block of a lock file's text, if it has one: what rewriting the lock
/// keeps, so a header edited by hand (or written by another command) survives.
pub fn header_of(text: &str) -> Option<&str> {
    let mut end = 0;
    for line in text.split_inclusive('\n') {
        if !line.starts_with('#') {
            break;
        }
        end += line.len();
    }
    (end > 0).then(|| &text[..end])
}

/// `[writer.<id>]`: a bare key when the id allows it (every built-in id), else quoted.
fn toml_key(id: &str) -> String {
    if !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        id.to_owned()
    } else {
        toml_string(id)
    }
}

/// A TOML string literal, escaped by the toml crate.
fn toml_string(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

fn read_version(value: &Spanned<DeValue<'_>>, findings: &mut Findings) {
    match value.get_ref() {
        DeValue::Integer(i)
            if i.radix() == 10
                && i.as_str().parse::<u64>().ok() == Some(u64::from(LOCK_FORMAT_VERSION)) => {}
        DeValue::Integer(i) => {
            let radix = match i.radix() {
                16 => "0x",
                8 => "0o",
                2 => "0b",
                _ => "",
            };
            findings.error(
                value.span(),
                LockProblem::UnsupportedVersion {
                    found: format!("{radix}{}", excerpt(i.as_str())),
                },
            );
        }
        _ => findings.wrong_type(value, "the format version, an integer"),
    }
}

/// One `[writer.<id>]` table; `None` (with its errors reported) when it is malformed.
fn read_writer(
    key: &Spanned<std::borrow::Cow<'_, str>>,
    value: &Spanned<DeValue<'_>>,
    findings: &mut Findings,
) -> Option<LockedWriter> {
    let id = ComponentId::new(key.get_ref().as_ref())
        .map_err(|e| {
            findings.error(
                key.span(),
                LockProblem::InvalidId {
                    key: key.get_ref().to_string(),
                    error: e,
                },
            );
        })
        .ok();
    let DeValue::Table(table) = value.get_ref() else {
        findings.wrong_type(value, "a writer's table");
        return None;
    };
    let (mut file, mut stability, mut lands, mut fingerprint) = (None, None, None, None);
    let mut written: BTreeSet<&str> = BTreeSet::new();
    let mut ok = true;
    for (field, value) in table {
        let name: &str = field.get_ref().as_ref();
        written.insert(name);
        let text = match value.get_ref() {
            DeValue::String(text) => text.as_ref(),
            _ => {
                findings.wrong_type(value, "a string");
                ok = false;
                continue;
            }
        };
        let mut invalid = |field: &'static str, expected: &'static str| {
            findings.error(
                value.span(),
                LockProblem::InvalidValue {
                    field,
                    value: excerpt(text).into_owned(),
                    expected,
                },
            );
            false
        };
        ok &= match name {
            "file" => set(&mut file, text.to_owned()),
            "stability" => match text {
                "constant" => set(&mut stability, Stability::Static),
                "session" => set(&mut stability, Stability::Session),
                _ => invalid(
                    "stability",
                    "\"constant\" or \"session\" (a per-turn writer never reaches the prefix)",
                ),
            },
            "lands" => match text {
                "prefix" => set(&mut lands, Placement::Prefix),
                "tail" => set(&mut lands, Placement::Tail),
                _ => invalid("lands", "\"prefix\" or \"tail\""),
            },
            "fingerprint" => match parse_fingerprint(text) {
                Some(f) => set(&mut fingerprint, (f, value.span())),
                None => invalid("fingerprint", "32 lowercase hex digits"),
            },
            other => {
                findings.error(
                    field.span(),
                    LockProblem::UnknownKey {
                        key: other.to_owned(),
                        expected: WRITER_KEYS,
                    },
                );
                false
            }
        };
    }
    let id = id?;
    for field in ["file", "stability", "lands"] {
        if !written.contains(field) {
            findings.error(
                key.span(),
                LockProblem::MissingField {
                    id: id.clone(),
                    field,
                },
            );
            ok = false;
        }
    }
    match (stability, &fingerprint) {
        (Some(Stability::Static), None) if !written.contains("fingerprint") => {
            findings.error(
                key.span(),
                LockProblem::MissingField {
                    id: id.clone(),
                    field: "fingerprint",
                },
            );
            ok = false;
        }
        (Some(Stability::Session), Some((_, span))) => {
            findings.error(
                span.clone(),
                LockProblem::FingerprintOfSession { id: id.clone() },
            );
            ok = false;
        }
        _ => {}
    }
    if !ok {
        return None;
    }
    Some(LockedWriter {
        id,
        file: file?,
        stability: stability?,
        lands: lands?,
        fingerprint: fingerprint
            .filter(|_| stability == Some(Stability::Static))
            .map(|(f, _)| f),
    })
}

/// Stores a field's value; `true`, for `ok &=` (TOML itself refuses a repeated key).
fn set<T>(slot: &mut Option<T>, value: T) -> bool {
    *slot = Some(value);
    true
}

fn parse_fingerprint(text: &str) -> Option<Fingerprint> {
    if text.len() != 32 || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(Digest128::from_bytes(bytes))
}

/// A lock read from its file: the writers, and where each is written.
#[derive(Debug, Clone)]
pub struct LoadedLock {
    lock: PrefixLock,
    origin: String,
    positions: BTreeMap<ComponentId, SourcePosition>,
}

impl LoadedLock {
    /// The writers it records.
    pub fn lock(&self) -> &PrefixLock {
        &self.lock
    }

    /// The file name given when it was read.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Where the table of the writer with this id starts.
    pub fn position(&self, id: &ComponentId) -> Option<&SourcePosition> {
        self.positions.get(id)
    }

    /// Every difference between the lock and `components` under `policy`, one per line,
    /// by id; empty when they match. Each is positioned at the writer's declaration
    /// (`file:line:1`), or, for a writer no longer linked, at its table in the lock.
    pub fn compare<'a>(
        &self,
        components: impl IntoIterator<Item = &'a Component>,
        policy: &PromptPolicy,
    ) -> Vec<LockDifference> {
        let linked: BTreeMap<&ComponentId, &Component> =
            components.into_iter().map(|c| (c.id(), c)).collect();
        let now: BTreeMap<&ComponentId, LockedWriter> = linked
            .iter()
            .filter_map(|(id, c)| LockedWriter::of(c, policy).map(|w| (*id, w)))
            .collect();
        let ids: BTreeSet<&ComponentId> = now
            .keys()
            .copied()
            .chain(self.lock.writers.keys())
            .collect();
        let mut out = Vec::new();
        for id in ids {
            let mut push = |position: SourcePosition, change| {
                out.push(LockDifference { position, change });
            };
            let id = id.clone();
            match (self.lock.writers.get(&id), now.get(&id), linked.get(&id)) {
                (None, Some(writer), Some(c)) => {
                    let resolution = policy.resolve(c);
                    let requested_by = if resolution.requested == Placement::Prefix {
                        resolution.reason.source()
                    } else {
                        // Declared for the prefix, put in the tail by [prompt.placement].
                        RequestSource::Declaration
                    };
                    push(
                        declaration_position(c),
                        LockChange::NewWriter {
                            id,
                            requested_by,
                            lands: writer.lands,
                        },
                    );
                }
                (Some(was), None, Some(c)) => push(
                    declaration_position(c),
                    if c.stability() == Stability::Turn {
                        LockChange::Stability {
                            id,
                            was: was.stability,
                            now: Stability::Turn,
                        }
                    } else {
                        LockChange::NoLongerAsks { id }
                    },
                ),
                (Some(was), None, None) => push(
                    self.positions
                        .get(&id)
                        .cloned()
                        .unwrap_or_else(|| SourcePosition {
                            origin: self.origin.clone(),
                            line: 1,
                            column: 1,
                        }),
                    LockChange::Gone {
                        id,
                        file: was.file.clone(),
                    },
                ),
                (Some(was), Some(writer), Some(c)) => {
                    let position = declaration_position(c);
                    if was.file != writer.file {
                        push(
                            position.clone(),
                            LockChange::Moved {
                                id: id.clone(),
                                was: was.file.clone(),
                                now: writer.file.clone(),
                            },
                        );
                    }
                    if was.stability != writer.stability {
                        push(
                            position.clone(),
                            LockChange::Stability {
                                id: id.clone(),
                                was: was.stability,
                                now: writer.stability,
                            },
                        );
                    } else if let (Some(old), Some(new)) = (was.fingerprint, writer.fingerprint)
                        && old != new
                    {
                        push(
                            position.clone(),
                            LockChange::Text {
                                id: id.clone(),
                                was: old,
                                now: new,
                                lands: writer.lands,
                            },
                        );
                    }
                    if was.lands != writer.lands {
                        push(
                            position,
                            LockChange::Lands {
                                id,
                                was: was.lands,
                                now: writer.lands,
                            },
                        );
                    }
                }
                // A writer in `now` is linked, and every id is in the lock or in `now`.
                (_, Some(_), None) | (None, None, _) => {}
            }
        }
        out
    }
}

/// `file:line:1` of a component's declaration, as `file!()` gave the file.
fn declaration_position(component: &Component) -> SourcePosition {
    SourcePosition {
        origin: component.source().file.to_string(),
        line: usize::try_from(component.source().line).unwrap_or(usize::MAX),
        column: 1,
    }
}

/// One difference between a lock and the program: `src/prompt.rs:12:1: message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{position}: {change}")]
pub struct LockDifference {
    /// The writer's declaration, or its table in the lock when it is no longer linked.
    pub position: SourcePosition,
    /// What changed.
    pub change: LockChange,
}

/// What changed about one writer since the lock was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockChange {
    /// A writer that can reach the prefix and is not in the lock.
    #[error("{}", new_writer_message(.id, *.requested_by, *.lands))]
    NewWriter {
        /// Its id.
        id: ComponentId,
        /// Who asks the prefix for it.
        requested_by: RequestSource,
        /// Where the agent.toml puts it.
        lands: Placement,
    },
    /// The agent.toml now puts it elsewhere.
    #[error("{}", lands_message(.id, *.now))]
    Lands {
        /// Its id.
        id: ComponentId,
        /// Where the lock has it.
        was: Placement,
        /// Where it lands now.
        now: Placement,
    },
    /// Its text is now of another stability.
    #[error("`{id}` changed stability from {was} (in the lock) to {now}{}", if *.now == Stability::Turn { ": a per-turn writer never reaches the prefix" } else { "" })]
    Stability {
        /// Its id.
        id: ComponentId,
        /// What the lock says.
        was: Stability,
        /// What it is now.
        now: Stability,
    },
    /// A constant whose text changed.
    #[error("the text of prefix constant `{id}` changed: fingerprint {was} in the lock, {now} now{}", if *.lands == Placement::Prefix { "; sessions cached with the old text miss the cache after an upgrade" } else { "" })]
    Text {
        /// Its id.
        id: ComponentId,
        /// The fingerprint in the lock.
        was: Fingerprint,
        /// The fingerprint of the text now.
        now: Fingerprint,
        /// Where it lands.
        lands: Placement,
    },
    /// Declared in another file.
    #[error("`{id}` is now declared in {now}; the lock says {}", excerpt(.was))]
    Moved {
        /// Its id.
        id: ComponentId,
        /// The file in the lock.
        was: String,
        /// The file now.
        now: String,
    },
    /// Still linked, but it no longer asks for the prefix.
    #[error("`{id}` no longer asks for the prefix; the lock lists it")]
    NoLongerAsks {
        /// Its id.
        id: ComponentId,
    },
    /// In the lock, but no longer linked into the program.
    #[error("`{id}` (declared in {}) is in the lock but no longer linked into the program", excerpt(.file))]
    Gone {
        /// Its id.
        id: ComponentId,
        /// The file the lock says it was declared in.
        file: String,
    },
}

impl LockChange {
    /// The writer it is about.
    pub fn id(&self) -> &ComponentId {
        match self {
            LockChange::NewWriter { id, .. }
            | LockChange::Lands { id, .. }
            | LockChange::Stability { id, .. }
            | LockChange::Text { id, .. }
            | LockChange::Moved { id, .. }
            | LockChange::NoLongerAsks { id }
            | LockChange::Gone { id, .. } => id,
        }
    }
}

fn lands_message(id: &ComponentId, now: Placement) -> String {
    match now {
        Placement::Prefix => {
            format!("the agent.toml now lets `{id}` into the prefix; the lock has it in the tail")
        }
        Placement::Tail => format!(
            "`{id}` now lands in the tail under the agent.toml; the lock has it in the prefix"
        ),
    }
}

fn new_writer_message(id: &ComponentId, requested_by: RequestSource, lands: Placement) -> String {
    match (requested_by, lands) {
        (RequestSource::Declaration, Placement::Prefix) => format!(
            "new prefix writer `{id}` is not in the lock: it declares placement = \"prefix\" and the agent.toml lets it in"
        ),
        (RequestSource::Declaration, Placement::Tail) => format!(
            "new prefix writer `{id}` is not in the lock: it declares placement = \"prefix\"; the agent.toml keeps it in the tail, but one that allows it (`*`) puts it above the cache line"
        ),
        (source, Placement::Prefix) => format!(
            "the agent.toml lets `{id}` into the prefix ({source} asks for it) and the lock does not list it"
        ),
        (source, Placement::Tail) => format!(
            "the agent.toml asks the prefix for `{id}` ({source}) and the lock does not list it; no prefix_allow entry lets it in yet"
        ),
    }
}

/// What is wrong in a lock file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockProblem {
    /// The TOML does not parse. Only the first syntax error is reported.
    #[error("{}", .0.message().trim())]
    Syntax(toml::de::Error),
    /// The text is longer than [`LOCK_LIMIT`].
    #[error("the file is {len} bytes; a prefix lock is read up to {limit} bytes")]
    TooLarge {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        limit: u64,
    },
    /// A key that does not exist there.
    #[error("unknown field `{}`, expected one of {expected}", excerpt(.key))]
    UnknownKey {
        /// The key.
        key: String,
        /// The keys that exist there.
        expected: &'static str,
    },
    /// A value of the wrong TOML type.
    #[error("invalid type: {found}, expected {expected}")]
    WrongType {
        /// What was found.
        found: String,
        /// What is expected there.
        expected: &'static str,
    },
    /// No `version = 1`.
    #[error("no `version`: a prefix lock starts with `version = {LOCK_FORMAT_VERSION}`")]
    MissingVersion,
    /// A format version this library does not read.
    #[error(
        "format version {found} is not one this program reads (it reads {LOCK_FORMAT_VERSION}); regenerate the lock with this program's `--bless`"
    )]
    UnsupportedVersion {
        /// The version as written.
        found: String,
    },
    /// A `[writer.<id>]` whose id is not a valid component id.
    #[error("`[writer.{}]`: invalid component id: {error}", excerpt(.key))]
    InvalidId {
        /// The key as written.
        key: String,
        /// Why it is not an id.
        error: IdError,
    },
    /// A writer's table lacks a field.
    #[error("writer `{id}` has no `{field}`")]
    MissingField {
        /// The writer.
        id: ComponentId,
        /// The missing field.
        field: &'static str,
    },
    /// A field's value is not one of the allowed ones.
    #[error("invalid {field}: {value:?}, expected {expected}")]
    InvalidValue {
        /// The field.
        field: &'static str,
        /// The value as written.
        value: String,
        /// What is allowed.
        expected: &'static str,
    },
    /// A fingerprint on a session writer, whose text is only known when a session starts.
    #[error("writer `{id}` is a session writer: only a constant has a fingerprint")]
    FingerprintOfSession {
        /// The writer.
        id: ComponentId,
    },
}

config::file_problem!(LockProblem);

type Findings = config::Findings<LockProblem>;

/// A problem with its position: `prefix.lock:7:1: message`.
pub type LockFileDiagnostic = Diagnostic<LockProblem>;

/// Every problem of a lock file, in source order. Reading fails closed: no lock is returned.
pub type LockFileErrors = Diagnostics<LockProblem>;

impl fmt::Display for LockedWriter {
    /// `id (stability, lands prefix|tail)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, lands {})", self.id, self.stability, self.lands)
    }
}
