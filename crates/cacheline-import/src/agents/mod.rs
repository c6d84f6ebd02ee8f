//! One reader per agent's store. Each reads its files (or database) read-only and hands
//! over sessions of requests with the provider's usage; what it does not know it skips and
//! counts ([`Skips`]).

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use crate::error::ImportError;
use crate::lines::LineReader;
use crate::store::{Skips, StoredSession};

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

/// Opens `path` for reading up to the size it has now (a file still being written ends
/// where it ended at this moment).
pub(crate) fn open_lines(
    path: &Path,
    limits: Limits,
) -> Result<LineReader<std::io::Take<File>>, ImportError> {
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
    Ok(LineReader::new(file.take(len), limits.max_line_bytes))
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
