//! Errors: each names the file (and the line, where there is one) and keeps its cause.

use std::path::PathBuf;

/// Why a source could not be read, or the import could not go on.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// A file or folder could not be opened or read.
    #[error("{}{}: {source}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The line being read, if any.
        line: Option<u64>,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A database could not be opened or queried (locked past the wait, corrupt, not one).
    #[error("{}: {source}", path.display())]
    Database {
        /// The database file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: rusqlite::Error,
    },
    /// A path given is neither a file nor a folder (a device, a pipe, a socket).
    #[error("{}: not a regular file or folder", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
}

/// `error` and its causes, joined by `: `, each cause once and at most eight of them.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    let mut n = 0;
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        n += 1;
        if n == 8 {
            break;
        }
        cause = c.source();
    }
    text
}
