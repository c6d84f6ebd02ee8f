//! What a session store holds, as the readers hand it over: sessions of requests, each with
//! the provider's usage, and what the reader skipped.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use prompt_measure::{Provider, Usage};
use serde::Serialize;

/// A coding agent whose session store is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Agent {
    /// Claude Code (`~/.claude/projects/<project>/<session>.jsonl`).
    ClaudeCode,
    /// Codex CLI (`~/.codex/sessions/YYYY/MM/DD/rollout-….jsonl`).
    Codex,
    /// Gemini CLI (`~/.gemini/tmp/<project>/chats/session-….jsonl`).
    GeminiCli,
    /// Qwen Code (`~/.qwen/projects/<project>/chats/<session>.jsonl`).
    QwenCode,
    /// opencode (`~/.local/share/opencode/opencode.db`, SQLite).
    Opencode,
}

impl Agent {
    /// Every agent, in display order.
    pub const ALL: [Agent; 5] = [
        Agent::ClaudeCode,
        Agent::Codex,
        Agent::GeminiCli,
        Agent::QwenCode,
        Agent::Opencode,
    ];

    /// Its name on the command line and in JSON (`claude-code`, `codex`, `gemini-cli`,
    /// `qwen-code`, `opencode`).
    pub fn name(self) -> &'static str {
        match self {
            Agent::ClaudeCode => "claude-code",
            Agent::Codex => "codex",
            Agent::GeminiCli => "gemini-cli",
            Agent::QwenCode => "qwen-code",
            Agent::Opencode => "opencode",
        }
    }

    /// The agent of that name (also `claude`, `gemini`, `qwen`).
    ///
    /// ```
    /// use cacheline_import::Agent;
    /// assert_eq!(Agent::from_name("claude"), Some(Agent::ClaudeCode));
    /// assert_eq!(Agent::from_name("qwen-code"), Some(Agent::QwenCode));
    /// assert_eq!(Agent::from_name("vim"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Agent> {
        let name = name.trim().to_ascii_lowercase();
        Agent::ALL
            .into_iter()
            .find(|a| a.name() == name || a.name().split('-').next() == Some(name.as_str()))
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a record was read: a file and its line (for a database, its row's number in the
/// order read).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Origin {
    /// The file.
    pub path: PathBuf,
    /// The line, from 1.
    pub line: u64,
}

impl Origin {
    /// `path:line`.
    pub fn new(path: &Path, line: u64) -> Self {
        Self {
            path: path.to_owned(),
            line,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.path.display(), self.line)
    }
}

/// One model request as the store records it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredRequest {
    /// When it was sent or answered, in seconds since the epoch (the agent's clock).
    pub time: Option<f64>,
    /// The model.
    pub model: String,
    /// Whose usage object the counts are (and whose prices apply).
    pub provider: Provider,
    /// The provider's usage, as a reply's.
    pub usage: Usage,
    /// The first request of a new process of the agent (a resume or continue), as the
    /// store shows it.
    pub new_process: bool,
    /// The first request after a compaction the store records.
    pub after_compaction: bool,
    /// The first request of a new user prompt.
    pub new_prompt: bool,
    /// Where it was read.
    pub origin: Origin,
    /// The request rebuilt from the store, when the store holds it whole (Claude Code
    /// 2.1.332+): the body the audit reads.
    pub body: Option<String>,
    /// The headers the rebuilt request was sent with, as far as the store tells them (the
    /// session id, the agent, the betas): what the audit reads beside the body.
    pub headers: Vec<(String, String)>,
    /// The provider's reply id with its counts, where the store names it (Claude Code): a
    /// reply another file already holds (a resumed or forked session copies its history) is
    /// counted once.
    pub reply: Option<String>,
}

impl StoredRequest {
    /// A request of `provider` with `usage`, read at `origin`: no time or model yet, no
    /// marker set, nothing rebuilt.
    pub(crate) fn counted(provider: Provider, usage: Usage, origin: Origin) -> Self {
        Self {
            time: None,
            model: String::new(),
            provider,
            usage,
            new_process: false,
            after_compaction: false,
            new_prompt: false,
            origin,
            body: None,
            headers: Vec::new(),
            reply: None,
        }
    }
}

/// One session as a store records it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredSession {
    /// The agent.
    pub agent: Agent,
    /// The agent's version that wrote it (the last seen; empty if none).
    pub version: String,
    /// The session id.
    pub session: String,
    /// The project (its directory, or the name the store gives it).
    pub project: String,
    /// Its requests in the order sent.
    pub requests: Vec<StoredRequest>,
}

/// A record or line a reader skipped, with its reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedLine {
    /// Where.
    pub origin: Origin,
    /// Why: a malformed or cut line, a line over the cap, an unreadable file.
    pub reason: String,
}

/// What the readers skipped, by agent and version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Skips {
    /// Records of a type the reader does not know, per `agent version` and type, counted.
    pub unknown_records: BTreeMap<String, BTreeMap<String, u64>>,
    /// Fields of a usage object the reader does not know, per `agent version` and field.
    pub unknown_fields: BTreeMap<String, BTreeMap<String, u64>>,
    /// Lines skipped (malformed, cut, too long), counted per `agent version`.
    pub malformed: BTreeMap<String, u64>,
    /// The first skipped lines, with file and line ([`Skips::MAX_LISTED`] at most).
    pub lines: Vec<SkippedLine>,
    /// Files or databases that could not be read at all, with why.
    pub sources: Vec<SkippedLine>,
}

/// The most distinct names counted per agent (a hostile file's invented types share one
/// "…" count past it).
const MAX_NAMES: usize = 256;

impl Skips {
    /// The most skipped lines listed with their place (the rest are only counted).
    pub const MAX_LISTED: usize = 100;

    fn key(agent: Agent, version: &str) -> String {
        if version.is_empty() {
            agent.name().to_owned()
        } else {
            format!(
                "{} {}",
                agent.name(),
                prompt_measure::logged::bounded_field(version)
            )
        }
    }

    fn bump(map: &mut BTreeMap<String, BTreeMap<String, u64>>, key: String, name: &str) {
        let names = map.entry(key).or_default();
        let name = if names.contains_key(name) || names.len() < MAX_NAMES {
            prompt_measure::logged::bounded_field(name)
        } else {
            "…".to_owned()
        };
        let n = names.entry(name).or_default();
        *n = n.saturating_add(1);
    }

    /// Counts a record of unknown type.
    pub fn unknown_record(&mut self, agent: Agent, version: &str, kind: &str) {
        Self::bump(&mut self.unknown_records, Self::key(agent, version), kind);
    }

    /// Counts a usage field the reader does not know.
    pub fn unknown_field(&mut self, agent: Agent, version: &str, field: &str) {
        Self::bump(&mut self.unknown_fields, Self::key(agent, version), field);
    }

    /// Counts a skipped line and lists it while the list has room.
    pub fn line(&mut self, agent: Agent, version: &str, origin: Origin, reason: String) {
        let n = self.malformed.entry(Self::key(agent, version)).or_default();
        *n = n.saturating_add(1);
        if self.lines.len() < Self::MAX_LISTED {
            self.lines.push(SkippedLine { origin, reason });
        }
    }

    /// Notes a source that could not be read.
    pub fn source(&mut self, path: &Path, reason: String) {
        if self.sources.len() < Self::MAX_LISTED {
            self.sources.push(SkippedLine {
                origin: Origin::new(path, 0),
                reason,
            });
        }
    }

    /// Adds `other`'s counts and listed lines (what another reader skipped).
    pub fn merge(&mut self, other: Skips) {
        for (map, theirs) in [
            (&mut self.unknown_records, other.unknown_records),
            (&mut self.unknown_fields, other.unknown_fields),
        ] {
            for (key, names) in theirs {
                for (name, n) in names {
                    let ours = map.entry(key.clone()).or_default();
                    let name = if ours.contains_key(&name) || ours.len() < MAX_NAMES {
                        name
                    } else {
                        "…".to_owned()
                    };
                    let c = ours.entry(name).or_default();
                    *c = c.saturating_add(n);
                }
            }
        }
        for (key, n) in other.malformed {
            let c = self.malformed.entry(key).or_default();
            *c = c.saturating_add(n);
        }
        let room = Self::MAX_LISTED.saturating_sub(self.lines.len());
        self.lines.extend(other.lines.into_iter().take(room));
        let room = Self::MAX_LISTED.saturating_sub(self.sources.len());
        self.sources.extend(other.sources.into_iter().take(room));
    }

    /// Lines skipped in all.
    pub fn malformed_total(&self) -> u64 {
        self.malformed
            .values()
            .fold(0u64, |a, b| a.saturating_add(*b))
    }

    /// Unknown records in all.
    pub fn unknown_total(&self) -> u64 {
        self.unknown_records
            .values()
            .flat_map(BTreeMap::values)
            .fold(0u64, |a, b| a.saturating_add(*b))
    }
}
