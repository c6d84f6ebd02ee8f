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

/// The CPU time the calling thread has used so far (user and system), or `None` where the
/// thread clock cannot be read. The analysis thread reads it around each exchange, so
/// `/metrics` can say what the analysis costs per request apart from the forwarding.
#[allow(unsafe_code)]
pub(crate) fn thread_cpu_time() -> Option<std::time::Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one `timespec` through a pointer to a live, aligned local.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } != 0 {
        return None;
    }
    let secs = u64::try_from(ts.tv_sec).ok()?;
    let nanos = u32::try_from(ts.tv_nsec).ok()?;
    Some(std::time::Duration::new(secs, nanos))
}

/// The size from which glibc's `malloc` maps an allocation of its own, set at start
/// ([`map_large_allocations`]).
pub const MMAP_THRESHOLD_BYTES: usize = 64 << 10;

/// Has glibc's `malloc` map every allocation of [`MMAP_THRESHOLD_BYTES`] or more and unmap
/// it when freed; [`crate::Proxy::start`] calls it. Left alone, glibc raises that threshold
/// each time a mapped block is freed (up to 32 MiB); request bodies then come from the heap,
/// and a heap interleaved with the sessions' small, long-lived records keeps the freed
/// bodies resident: measured with Claude Code's and Qwen Code's ~100 KB first requests,
/// 72–100 KB resident per session instead of 4.8 KB (docs/benchmarks.md). Returns whether it was set
/// (never on other C libraries, whose allocators do not keep such a threshold).
#[allow(unsafe_code)]
pub fn map_large_allocations() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let bytes = libc::c_int::try_from(MMAP_THRESHOLD_BYTES).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt(3) takes two integers and changes a setting under malloc's own lock.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// The nice value the analysis thread runs at (under `SCHED_IDLE`; see docs/proxy.md, "Off the
/// hot path"): what is left of its place below the forwarding should that policy be refused.
pub const ANALYSIS_NICE: i32 = 10;

/// Lowers the calling thread (the analysis thread) below the forwarding: `SCHED_IDLE`, so it
/// runs only on a core nothing else wants, its waking never preempts a thread forwarding a
/// reply, and a forwarding thread that wakes while it runs takes the core at once (under
/// `SCHED_BATCH` it kept the core for the rest of its slice: at 1,000 streamed requests a
/// second the first byte's p99 came 1.6–1.7 ms later than direct, 0.9 ms under `SCHED_IDLE`,
/// with no analysis dropped either way); and nice [`ANALYSIS_NICE`] (or the process' own,
/// when nicer). Measured with the proxy and the upstream on one core and ~100 KB agent
/// bodies: with neither, the end of a streamed reply arrived about 1 ms late (the analysis of
/// the exchange, woken as the reply ended, ran before its last event was written). The
/// analysis is not starved: it runs whenever the forwarding waits, and what it cannot catch
/// up with is dropped and counted. Linux only (elsewhere nothing is done); returns whether
/// both were set.
#[allow(unsafe_code)]
pub(crate) fn yield_to_forwarding() -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sched_setscheduler(2) with pid 0 (this thread) reads one live `sched_param`.
        let idle = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) } == 0;
        // SAFETY: gettid(2) takes nothing; getpriority(2) and setpriority(2) on a thread id
        // read and change that thread's nice value alone on Linux. Only ever lowered: a
        // process started nicer than ANALYSIS_NICE keeps its own.
        let nice = unsafe {
            let tid = libc::gettid().unsigned_abs();
            let now = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(libc::PRIO_PROCESS, tid, now.max(ANALYSIS_NICE)) == 0
        };
        idle && nice
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_reads_its_own_cpu_time_and_it_grows_with_work() {
        let before = thread_cpu_time().expect("the thread clock");
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let after = thread_cpu_time().expect("the thread clock");
        assert!(after > before, "{before:?} then {after:?} ({x})");
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn glibc_is_told_to_map_large_allocations() {
        assert!(map_large_allocations());
    }

    /// The analysis thread's scheduling, read back from the kernel on a thread of its own.
    #[cfg(target_os = "linux")]
    #[test]
    #[allow(unsafe_code)]
    fn the_analysis_thread_yields_to_the_forwarding() {
        let (policy, nice) = std::thread::spawn(|| {
            assert!(yield_to_forwarding());
            // SAFETY: sched_getscheduler(2) and getpriority(2) on this thread take integers.
            unsafe {
                (
                    libc::sched_getscheduler(0),
                    libc::getpriority(libc::PRIO_PROCESS, libc::gettid().unsigned_abs()),
                )
            }
        })
        .join()
        .unwrap();
        assert_eq!(policy, libc::SCHED_IDLE);
        assert!(nice >= ANALYSIS_NICE, "nice {nice}");
        // The test's own thread is untouched.
        // SAFETY: as above.
        assert_eq!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_OTHER);
    }

    #[test]
    fn the_default_connection_limit_is_half_the_descriptors_left() {
        let l = Limits::default();
        assert_eq!(l.connections(Some(1024)), 480);
        assert_eq!(l.connections(Some(10)), 64);
        assert_eq!(l.connections(None), usize::MAX);
        assert_eq!(l.with_max_connections(0).connections(Some(1024)), 1);
    }
}
