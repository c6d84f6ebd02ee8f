//! `cacheline proxy -- CMD ARGS…`: runs a command with its base-URL variables pointed at
//! the proxy, forwards SIGINT and SIGTERM to it, and exits with its exit code.

use std::ffi::OsString;
use std::net::SocketAddr;

use crate::error::ProxyError;

/// The environment a launched command gets: each API's base-URL variable, as the SDKs and
/// agents document it, pointed at the proxy at `addr`.
///
/// | variable | read by |
/// |---|---|
/// | `ANTHROPIC_BASE_URL` | Claude Code, Anthropic's SDKs |
/// | `OPENAI_BASE_URL` (with `/v1`) | OpenAI's SDKs, Codex CLI's built-in `openai` provider, Qwen Code |
/// | `GOOGLE_GEMINI_BASE_URL` | Gemini CLI |
pub fn base_url_env(addr: SocketAddr) -> Vec<(&'static str, String)> {
    let root = format!("http://{addr}");
    vec![
        ("ANTHROPIC_BASE_URL", root.clone()),
        ("OPENAI_BASE_URL", format!("{root}/v1")),
        ("GOOGLE_GEMINI_BASE_URL", root),
    ]
}

/// The exit statuses a shell gives a command it cannot find or cannot run
/// ([`ProxyError::shell_exit_code`]).
pub use crate::error::{NOT_EXECUTABLE, NOT_FOUND};

/// The exit status a shell would report: the code, or 128 + the signal that ended it.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}

/// Sends `signal` to the process `pid`.
#[allow(unsafe_code)]
fn forward_signal(pid: u32, signal: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a stale pid at
    // worst fails with ESRCH.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Runs `command` with `args`, its environment extended by [`base_url_env`], forwarding
/// SIGINT and SIGTERM to it until it exits; returns its [`exit_code`]. A command that cannot
/// be started is a [`ProxyError::Command`] carrying the OS error, whose
/// [`ProxyError::shell_exit_code`] is the status a shell would give: 127 not found, 126 not
/// executable.
pub async fn run(
    command: &OsString,
    args: &[OsString],
    addr: SocketAddr,
) -> Result<i32, ProxyError> {
    use tokio::signal::unix::{SignalKind, signal};
    let shown = command
        .to_string_lossy()
        .chars()
        .take(200)
        .collect::<String>();
    let err = |source| ProxyError::Command {
        command: shown.clone(),
        source,
    };
    let mut child = tokio::process::Command::new(command)
        .args(args)
        .envs(base_url_env(addr))
        .spawn()
        .map_err(err)?;
    let mut int = signal(SignalKind::interrupt()).map_err(err)?;
    let mut term = signal(SignalKind::terminate()).map_err(err)?;
    loop {
        tokio::select! {
            status = child.wait() => return status.map(exit_code).map_err(err),
            _ = int.recv() => {
                if let Some(pid) = child.id() { forward_signal(pid, libc::SIGINT) }
            }
            _ = term.recv() => {
                if let Some(pid) = child.id() { forward_signal(pid, libc::SIGTERM) }
            }
        }
    }
}
