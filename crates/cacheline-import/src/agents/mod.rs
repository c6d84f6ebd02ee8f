//! One reader per agent's store. Each reads its files (or database) read-only and hands
//! over sessions of requests with the provider's usage; what it does not know it skips and
//! counts ([`Skips`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use prompt_measure::Usage;
use serde_json::value::RawValue;

use crate::error::ImportError;
use crate::json::Members;
use crate::lines::{Line, LineReader};
use crate::store::{Agent, Origin, Skips, StoredRequest, StoredSession};

pub mod claude;
pub mod codex;
pub mod gemini;
pub mod opencode;
pub mod qwen;

/// The bounds a reader keeps, whatever the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest line read; a longer one is skipped and counted (default 32 MiB).
    pub max_line_bytes: usize,
    /// The most bytes of messages held to rebuild one session file's requests (Claude Code
    /// 2.1.332+); past it the file's later requests are read from usage alone (default
    /// 64 MiB).
    pub max_rebuild_bytes: usize,
    /// How long to wait for a database another program holds locked (default 3 s).
    pub busy_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_line_bytes: 32 << 20,
            max_rebuild_bytes: 64 << 20,
            busy_timeout: Duration::from_secs(3),
        }
    }
}

/// What every reader is handed.
#[derive(Debug)]
pub struct ReadContext<'a> {
    /// The bounds.
    pub limits: Limits,
    /// Where skipped records are counted.
    pub skips: &'a mut Skips,
    /// The home the file was found in, if known (Claude Code's `~/.claude.json` names the
    /// device in its requests' `metadata`).
    pub home: Option<&'a Path>,
}

/// A session file of JSON lines as a reader walks it: read up to the size it has now (a
/// file still being written ends where it ended at this moment), a line over the cap skipped
/// and counted, a blank one passed over.
pub(crate) struct JsonLines<'p> {
    path: &'p Path,
    agent: Agent,
    lines: LineReader<std::io::Take<File>>,
}

impl<'p> JsonLines<'p> {
    /// Opens `path`, a session file of `agent`.
    pub(crate) fn open(path: &'p Path, agent: Agent, limits: Limits) -> Result<Self, ImportError> {
        let io = |source| ImportError::Io {
            path: path.to_owned(),
            line: None,
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(ImportError::NotAFile {
                path: path.to_owned(),
            });
        }
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Ok(Self {
            path,
            agent,
            lines: LineReader::new(file.take(len), limits.max_line_bytes),
        })
    }

    /// The next line that holds text, with where it stands; `None` at the end. A line over
    /// the cap is counted in `cx` as skipped (under `version`).
    pub(crate) fn next_text(
        &mut self,
        cx: &mut ReadContext<'_>,
        version: &str,
    ) -> Result<Option<(At<'p>, &[u8])>, ImportError> {
        let line_no = loop {
            let line_no = self.lines.line_number() + 1;
            let read = self.lines.next_line().map_err(|source| ImportError::Io {
                path: self.path.to_owned(),
                line: Some(line_no),
                source,
            })?;
            match read {
                None => return Ok(None),
                Some(Line::TooLong(n)) => cx.skips.line(
                    self.agent,
                    version,
                    Origin::new(self.path, line_no),
                    format!(
                        "line of {n} bytes over the {} byte cap",
                        cx.limits.max_line_bytes
                    ),
                ),
                Some(Line::Text(t)) if t.iter().all(u8::is_ascii_whitespace) => {}
                Some(Line::Text(_)) => break line_no,
            }
        };
        let at = At {
            agent: self.agent,
            path: self.path,
            line: line_no,
        };
        Ok(Some((at, self.lines.text())))
    }
}

/// Where a reader stands: an agent's file and a line in it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At<'p> {
    /// The agent whose file it is.
    pub(crate) agent: Agent,
    /// The file.
    pub(crate) path: &'p Path,
    /// The line, from 1.
    pub(crate) line: u64,
}

impl At<'_> {
    /// The place as a record names it.
    pub(crate) fn origin(self) -> Origin {
        Origin::new(self.path, self.line)
    }
}

/// Sets `field` to `value`, bounded, where there is one: the last seen holds.
pub(crate) fn keep_last(field: &mut String, value: Option<&str>) {
    if let Some(v) = value
        && field != v
    {
        *field = prompt_measure::logged::bounded_field(v);
    }
}

/// Sets `field`, while it is empty, to `value`, bounded: the first seen holds.
pub(crate) fn keep_first(field: &mut String, value: Option<&str>) {
    if field.is_empty()
        && let Some(v) = value
    {
        *field = prompt_measure::logged::bounded_field(v);
    }
}

impl ReadContext<'_> {
    /// Counts the record `at` skipped, with why.
    pub(crate) fn skip(&mut self, at: At<'_>, version: &str, reason: &str) {
        self.skips
            .line(at.agent, version, at.origin(), reason.to_owned());
    }

    /// The JSON record `text` holds, read as a `T`; one that cannot be read is counted as
    /// the record `at` skipped and gives `None`.
    pub(crate) fn record<'t, T: serde::Deserialize<'t>>(
        &mut self,
        at: At<'_>,
        version: &str,
        text: &'t [u8],
    ) -> Option<T> {
        self.parsed(at, version, serde_json::from_slice(text))
    }

    /// What `parsed` holds; a JSON error counts the record `at` skipped (cut short or
    /// malformed) and gives `None`.
    pub(crate) fn parsed<T>(
        &mut self,
        at: At<'_>,
        version: &str,
        parsed: serde_json::Result<T>,
    ) -> Option<T> {
        match parsed {
            Ok(value) => Some(value),
            Err(e) => {
                self.skips
                    .line(at.agent, version, at.origin(), malformed(&e));
                None
            }
        }
    }

    /// The counts a usage object holds under `names` (`None` for one it does not name; a
    /// count that is no number reads 0), or `None` if `raw` is no object. A member neither
    /// named nor in `known` is counted as a field `agent` does not know.
    pub(crate) fn counts<const N: usize>(
        &mut self,
        raw: &RawValue,
        names: [&str; N],
        known: &[&str],
        agent: Agent,
        version: &str,
    ) -> Option<[Option<u64>; N]> {
        let members: Members<'_> = serde_json::from_str(raw.get()).ok()?;
        let mut counts = [None; N];
        for (key, value) in &members.0 {
            if let Some(i) = names.iter().position(|n| n == key) {
                counts[i] = Some(value.get().trim().parse::<u64>().unwrap_or(0));
            } else if !known.contains(&key.as_str()) {
                self.skips.unknown_field(agent, version, key);
            }
        }
        Some(counts)
    }
}

/// A Gemini usage object (Gemini CLI's `tokens`, Qwen Code's `usageMetadata`), its counts
/// named `[prompt, cached, output, thoughts]`: the prompt counts the cached tokens, thoughts
/// are billed as output. `None` without a prompt count.
pub(crate) fn gemini_usage(
    cx: &mut ReadContext<'_>,
    raw: &RawValue,
    names: [&str; 4],
    known: &[&str],
    agent: Agent,
    version: &str,
) -> Option<Usage> {
    let [prompt, cached, output, thoughts] = cx.counts(raw, names, known, agent, version)?;
    let prompt = prompt?;
    let cached = cached.unwrap_or(0);
    Some(Usage {
        input_uncached: prompt.saturating_sub(cached),
        cache_read: cached.min(prompt),
        cache_write: 0,
        output: output.unwrap_or(0).saturating_add(thoughts.unwrap_or(0)),
    })
}

/// A file's sessions by id, in the order first seen.
#[derive(Default)]
pub(crate) struct SessionsById {
    sessions: Vec<StoredSession>,
    index: HashMap<String, usize>,
}

impl SessionsById {
    /// Adds `request` to the session `id` of `agent` (a new one the first time).
    pub(crate) fn push(&mut self, agent: Agent, id: &str, request: StoredRequest) {
        let sessions = &mut self.sessions;
        let slot = *self.index.entry(id.to_owned()).or_insert_with(|| {
            sessions.push(StoredSession {
                agent,
                version: String::new(),
                session: prompt_measure::logged::bounded_field(id),
                project: String::new(),
                requests: Vec::new(),
            });
            sessions.len() - 1
        });
        if let Some(s) = sessions.get_mut(slot) {
            s.requests.push(request);
        }
    }

    /// The sessions, each with the file's last `version` and its `project`.
    pub(crate) fn finish(mut self, version: &str, project: &str) -> Sessions {
        for s in &mut self.sessions {
            s.version = version.to_owned();
            s.project = project.to_owned();
        }
        self.sessions
    }
}

/// A path's last part as text (empty if none).
pub(crate) fn name_of(path: Option<&Path>) -> String {
    path.and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A line's JSON could not be read: why, briefly.
pub(crate) fn malformed(e: &serde_json::Error) -> String {
    if e.is_eof() {
        format!("cut short ({e})")
    } else {
        format!("malformed JSON ({e})")
    }
}

/// Sessions read from one source.
pub type Sessions = Vec<StoredSession>;
