//! The proxy's timeouts and limits ([`Limits`]; docs/proxy.md lists each with its default),
//! and the open-files limit raised at start ([`raise_open_files_limit`]).

use std::time::Duration;

use crate::copy::ANALYSIS_BUDGET_BYTES;

/// How long a client has to send a request's head: from its connection, or from the first
/// byte of a later request on a kept-alive connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a kept-alive client connection may wait for its next request: longer than the
/// 90 s that Go's and hyper's clients keep an idle connection, so that they, not the proxy,
/// close it (a request sent as the proxy closes would fail).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// How long an idle pooled connection to an upstream is kept.
pub const UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Idle pooled connections kept per upstream; more are closed as they become idle.
pub const UPSTREAM_MAX_IDLE: usize = 64;

/// The most bytes hyper buffers per connection and direction (a request or reply head must
/// fit in it): 64 KiB instead of hyper's ~400 KiB, so that 100 uploads streaming at once
/// hold a few MiB rather than a hundred.
pub const CONNECTION_BUFFER_BYTES: usize = 64 << 10;

/// Descriptors kept aside from [`Limits::max_connections`]' share of the open-files limit
/// (the listener, the log, the runtime's own).
const RESERVED_DESCRIPTORS: u64 = 64;

/// The proxy's timeouts and limits.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// How long a client has to send a request's whole head, from its connection (or from
    /// the first byte of a later request on a kept-alive connection); then the connection
    /// is closed. Default [`HEADER_READ_TIMEOUT`] (30 s).
    pub header_read_timeout: Duration,
    /// How long a kept-alive client connection may wait for its next request. Default
    /// [`IDLE_TIMEOUT`] (120 s).
    pub idle_timeout: Duration,
    /// How long an idle pooled upstream connection is kept. Default
    /// [`UPSTREAM_IDLE_TIMEOUT`] (30 s).
    pub upstream_idle_timeout: Duration,
    /// Idle pooled connections kept per upstream. Default [`UPSTREAM_MAX_IDLE`] (64).
    pub upstream_max_idle: usize,
    /// Client connections served at once: past it, idle ones are closed first, and a new
    /// one waits for a free place. `None` (the default): half the open-files limit less
    /// 64 (a forwarded request holds two descriptors), at least 64.
    pub max_connections: Option<usize>,
    /// The bytes of body copies held for the analysis at once, in flight and queued: a copy
    /// that would pass it is dropped and counted. Default [`ANALYSIS_BUDGET_BYTES`]
    /// (256 MiB).
    pub analysis_budget: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            upstream_idle_timeout: UPSTREAM_IDLE_TIMEOUT,
            upstream_max_idle: UPSTREAM_MAX_IDLE,
            max_connections: None,
            analysis_budget: ANALYSIS_BUDGET_BYTES,
        }
    }
}

impl Limits {
    /// The same, closing a connection whose request head has not come within `d`.
    pub fn with_header_read_timeout(mut self, d: Duration) -> Self {
        self.header_read_timeout = d;
        self
    }

    /// The same, closing a kept-alive connection idle for `d`.
    pub fn with_idle_timeout(mut self, d: Duration) -> Self {
        self.idle_timeout = d;
        self
    }

    /// The same, closing a pooled upstream connection idle for `d`.
    pub fn with_upstream_idle_timeout(mut self, d: Duration) -> Self {
        self.upstream_idle_timeout = d;
        self
    }

    /// The same, serving at most `n` client connections at once.
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = Some(n.max(1));
        self
    }

    /// The same, holding at most `bytes` of body copies for the analysis.
    pub fn with_analysis_budget(mut self, bytes: u64) -> Self {
        self.analysis_budget = bytes;
        self
    }

    /// [`Limits::max_connections`], or its default under the open-files limit `nofile`.
    pub(crate) fn connections(&self, nofile: Option<u64>) -> usize {
        self.max_connections.unwrap_or_else(|| {
            let share = nofile.map_or(u64::MAX, |n| n.saturating_sub(RESERVED_DESCRIPTORS) / 2);
            usize::try_from(share.max(64)).unwrap_or(usize::MAX)
        })
    }
}

/// The open-files limit, before and after [`raise_open_files_limit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit the process inherited.
    pub before: u64,
    /// The soft limit now (the hard limit, when raising it succeeded).
    pub after: u64,
}

/// Raises the soft open-files limit (`RLIMIT_NOFILE`) to the hard one, as servers do: the
/// common inherited soft limit of 1,024 is reached by a few hundred concurrent streams (each
/// holds a client and an upstream socket). [`crate::Proxy::start`] calls it.
#[allow(unsafe_code)]
pub fn raise_open_files_limit() -> std::io::Result<OpenFiles> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes one `rlimit` through a pointer to a live, aligned local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    // macOS refuses a soft limit over OPEN_MAX when the hard one is unlimited.
    #[cfg(target_os = "macos")]
    let target = if limit.rlim_max == libc::RLIM_INFINITY {
        libc::rlim_t::from(libc::OPEN_MAX.unsigned_abs())
    } else {
        limit.rlim_max
    };
    #[cfg(not(target_os = "macos"))]
    let target = limit.rlim_max;
    if target <= before {
        return Ok(OpenFiles {
            before,
            after: before,
        });
    }
    limit.rlim_cur = target;
    // SAFETY: setrlimit(2) reads one `rlimit` from a live, aligned local.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(OpenFiles {
        before,
        after: limit.rlim_cur,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_connection_limit_is_half_the_descriptors_left() {
        let l = Limits::default();
        assert_eq!(l.connections(Some(1024)), 480);
        assert_eq!(l.connections(Some(10)), 64);
        assert_eq!(l.connections(None), usize::MAX);
        assert_eq!(l.with_max_connections(0).connections(Some(1024)), 1);
    }
}
