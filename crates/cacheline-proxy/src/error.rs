//! Why the proxy could not start or run.

use std::net::SocketAddr;
use std::path::PathBuf;

/// A shell's exit status for a command it cannot find.
pub const NOT_FOUND: i32 = 127;
/// A shell's exit status for a command it found but cannot run (not executable, not a
/// program, a directory).
pub const NOT_EXECUTABLE: i32 = 126;

/// Why the proxy could not start or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// An `--upstream` that cannot be used.
    #[error("upstream {url}: {why}")]
    Upstream {
        /// The URL (or spec) given, bounded; not shown when it carries credentials.
        url: String,
        /// Why.
        why: String,
    },
    /// A non-loopback listen address without `--allow-remote`.
    #[error(
        "listening on {0} would expose the proxy (and the credentials it forwards) beyond this machine: pass --allow-remote to do so"
    )]
    NotLoopback(SocketAddr),
    /// Binding the listener failed.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The listener's own address could not be read.
    #[error("the listener's address: {0}")]
    LocalAddr(std::io::Error),
    /// The `--log` file could not be opened.
    #[error("cannot open the log {path}: {source}")]
    Log {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `--stabilize` cannot be used as given (an entry that is not in the catalogue or not
    /// marked `repair`; with `--diagnose`).
    #[error("{0}")]
    Stabilize(String),
    /// The TLS setup for the hosted APIs failed.
    #[error("TLS setup: {0}")]
    Tls(String),
    /// The analysis thread could not be started.
    #[error("cannot start the analysis thread: {0}")]
    Thread(std::io::Error),
    /// The launched command could not be started or waited for.
    #[error("the command `{command}`: {source}")]
    Command {
        /// The program.
        command: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The runtime could not be built.
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

impl ProxyError {
    /// The exit status a shell gives when it cannot run the command:
    /// [`NOT_FOUND`](NOT_FOUND) (127) for a launched command that does not
    /// exist, [`NOT_EXECUTABLE`](NOT_EXECUTABLE) (126) for one that cannot
    /// be executed; `None` for every other error.
    pub fn shell_exit_code(&self) -> Option<i32> {
        let ProxyError::Command { source, .. } = self else {
            return None;
        };
        match source.kind() {
            std::io::ErrorKind::NotFound => Some(NOT_FOUND),
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::IsADirectory => {
                Some(NOT_EXECUTABLE)
            }
            // ENOEXEC: a file the kernel cannot run (no shebang, another architecture).
            _ if source.raw_os_error() == Some(libc::ENOEXEC) => Some(NOT_EXECUTABLE),
            _ => None,
        }
    }
}
