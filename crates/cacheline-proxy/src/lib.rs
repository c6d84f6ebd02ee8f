//! # cacheline-proxy
//!
//! `cacheline proxy`: a local proxy for LLM APIs that forwards every request and reply byte
//! for byte and names, per session and as it happens, what broke the prompt cache.
//!
//! - **Byte-exact**: the request's method, path and query, headers (hop-by-hop ones aside,
//!   as Go's `httputil.ReverseProxy`; `Host` set to the upstream's) and body go upstream
//!   unchanged; the reply's status, headers and body come back unchanged, frame by frame as
//!   they arrive (server-sent events are never re-encoded).
//! - **Off the hot path**: the analysis gets the same frames (shared, not copied), at most
//!   [`ProxyConfig::max_copy_bytes`] of each body, all held under one memory budget
//!   ([`Limits::analysis_budget`], in flight and queued), through a bounded queue it is never
//!   waited on: when the queue or the budget is full the copy is dropped and counted
//!   ([`Totals::analysis_dropped`]).
//! - **One analysis**: the analysis thread writes each exchange as a line of the audit's log
//!   format ([`prompt_measure::audit`]) and audits that line; `cacheline audit` on the log
//!   gives the verdicts the proxy printed.
//! - **No credential written**: only the headers [`prompt_wire::engine::keep_header`] keeps
//!   reach the analysis and the log; the query (Gemini's `?key=`) never does.
//!
//! [`Proxy::start`] runs one on a listener; [`ProxyState::snapshot`] and
//! [`ProxyState::subscribe`] observe it; [`launcher`] runs a command through it.

#![deny(unsafe_code)]
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use prompt_measure::AuditConfig;
use prompt_measure::audit::AuditSummary;
use tokio::net::TcpListener;
use tokio::sync::watch;

mod accept;
pub mod access;
mod analysis;
mod conn;
mod copy;
mod counts;
pub mod diagnose;
mod error;
mod forward;
pub mod launcher;
pub mod limits;
mod log;
pub mod metrics;
mod page;
pub mod route;
pub mod sessions;
pub mod stabilize;
pub mod state;

pub use access::LocalRoutes;
pub use copy::ANALYSIS_BUDGET_BYTES;
pub use counts::{Counts, Totals};
pub use error::ProxyError;
pub use limits::Limits;
pub use prompt_measure::report::{Outcome, RequestRow, verdict_line};
pub use route::{ROUTED, Upstream, Upstreams, default_upstream, route};
pub use state::{ProxyState, SessionView};

/// How a proxy runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProxyConfig {
    /// Where each API goes.
    pub upstreams: Upstreams,
    /// The JSONL log in the audit's format, appended to (`--log`).
    pub log: Option<PathBuf>,
    /// Keep each request's body in its row ([`RequestRow::body`]) (`--keep-bodies`).
    pub keep_bodies: bool,
    /// Print one verdict line per request on standard error (from the analysis thread:
    /// a host that holds standard error's lock prints [`ProxyState::subscribe`]'s rows
    /// instead).
    pub print_verdicts: bool,
    /// Exchanges waiting for analysis; more are dropped and counted. Default 1024.
    pub queue: usize,
    /// The most bytes of a body copied for analysis (forwarding is never capped). Default
    /// 32 MiB, the audit's line limit.
    pub max_copy_bytes: usize,
    /// Sessions held in the state (least recently used dropped and counted). Default 10,000.
    pub max_sessions: usize,
    /// How long to wait for the upstream's reply head before answering 502. Default 600 s.
    pub upstream_timeout: Duration,
    /// How long to wait for a TCP connection to the upstream. Default 10 s.
    pub connect_timeout: Duration,
    /// The audit's configuration (prices, engine bounds).
    pub audit: AuditConfig,
    /// The writer catalogue verdicts name writers by (`--catalogue`); `None`: the built-in
    /// one.
    pub catalogue: Option<prompt_measure::catalogue::Catalogue>,
    /// `--diagnose`: ask the provider for its own verdict on each request
    /// ([`diagnose`]). Off by default.
    pub diagnose: bool,
    /// `--stabilize`: repair the catalogue's repairable writers ([`stabilize`]). Off by
    /// default.
    pub stabilize: StabilizeMode,
    /// Where sessions carry over between launches ([`sessions`]); `None` (the library's
    /// default; the CLI's is [`sessions::default_state_dir`]): this launch keeps nothing.
    pub state: Option<sessions::StateConfig>,
    /// Timeouts, connection and memory limits ([`Limits`]).
    pub limits: Limits,
    /// Who may read the proxy's own routes (`/metrics`, `/_cacheline/…`). Default: a
    /// loopback `Host` ([`LocalRoutes::Loopback`]).
    pub local_routes: LocalRoutes,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            upstreams: Upstreams::default(),
            log: None,
            keep_bodies: false,
            print_verdicts: false,
            queue: 1024,
            max_copy_bytes: prompt_measure::audit::DEFAULT_MAX_LINE_BYTES,
            max_sessions: 10_000,
            upstream_timeout: Duration::from_secs(600),
            connect_timeout: Duration::from_secs(10),
            audit: AuditConfig::default(),
            catalogue: None,
            diagnose: false,
            stabilize: StabilizeMode::Off,
            state: None,
            limits: Limits::default(),
            local_routes: LocalRoutes::default(),
        }
    }
}

impl ProxyConfig {
    /// The same, every API sent to `upstreams`.
    pub fn with_upstreams(mut self, upstreams: Upstreams) -> Self {
        self.upstreams = upstreams;
        self
    }

    /// The same, naming writers by `catalogue` (the built-in one extended by a user's file,
    /// [`prompt_measure::catalogue::Catalogue::builtin_with_file`]).
    pub fn with_catalogue(mut self, catalogue: prompt_measure::catalogue::Catalogue) -> Self {
        self.catalogue = Some(catalogue);
        self
    }

    /// Carries sessions over in `state` ([`sessions`]; `None`: keeps nothing).
    pub fn with_state(mut self, state: Option<sessions::StateConfig>) -> Self {
        self.state = state;
        self
    }

    /// The same, writing the audit-format log to `path`.
    pub fn with_log(mut self, path: impl Into<PathBuf>) -> Self {
        self.log = Some(path.into());
        self
    }

    /// The same, asking the provider for its own verdict (`--diagnose`) or not.
    pub fn with_diagnose(mut self, diagnose: bool) -> Self {
        self.diagnose = diagnose;
        self
    }

    /// The same, repairing as `mode` says (`--stabilize`).
    pub fn with_stabilize(mut self, mode: StabilizeMode) -> Self {
        self.stabilize = mode;
        self
    }

    /// The same, keeping bodies in rows or not.
    pub fn with_keep_bodies(mut self, keep: bool) -> Self {
        self.keep_bodies = keep;
        self
    }

    /// The same, printing verdict lines or not.
    pub fn with_print_verdicts(mut self, print: bool) -> Self {
        self.print_verdicts = print;
        self
    }

    /// The same, with an analysis queue of `n`.
    pub fn with_queue(mut self, n: usize) -> Self {
        self.queue = n;
        self
    }

    /// The same, copying at most `n` bytes of a body for analysis.
    pub fn with_max_copy_bytes(mut self, n: usize) -> Self {
        self.max_copy_bytes = n;
        self
    }

    /// The same, holding at most `n` sessions.
    pub fn with_max_sessions(mut self, n: usize) -> Self {
        self.max_sessions = n;
        self
    }

    /// The same, waiting at most `d` for an upstream's reply head.
    pub fn with_upstream_timeout(mut self, d: Duration) -> Self {
        self.upstream_timeout = d;
        self
    }

    /// The same, with these timeouts and limits.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// The same, answering its own routes to `routes`.
    pub fn with_local_routes(mut self, routes: LocalRoutes) -> Self {
        self.local_routes = routes;
        self
    }
}

/// Which catalogue entries `--stabilize` repairs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StabilizeMode {
    /// None: every request is forwarded as it came (the default).
    #[default]
    Off,
    /// Every entry marked `repair` (`--stabilize`).
    Every,
    /// These entries, each marked `repair` (`--stabilize=ID,…`).
    Only(Vec<String>),
}

/// Binds `addr`, refusing a non-loopback one unless `allow_remote`. Port 0 takes a free port.
pub async fn bind(addr: SocketAddr, allow_remote: bool) -> Result<TcpListener, ProxyError> {
    if !addr.ip().is_loopback() && !allow_remote {
        return Err(ProxyError::NotLoopback(addr));
    }
    TcpListener::bind(addr)
        .await
        .map_err(|source| ProxyError::Bind { addr, source })
}

/// A running proxy.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<ProxyState>,
    stop: watch::Sender<bool>,
    accept: tokio::task::JoinHandle<()>,
    queue: std::sync::mpsc::SyncSender<analysis::Message>,
    analysis: std::thread::JoinHandle<analysis::Finished>,
    diagnose: Option<Arc<diagnose::Diagnose>>,
    stabilize: Option<Arc<stabilize::Stabilizer>>,
}

/// What a proxy leaves when it stops.
#[derive(Debug, Clone)]
pub struct ProxySummary {
    /// The totals.
    pub totals: Totals,
    /// The audit's summary of every analysed request (cost, breakers), if the analysis ran.
    pub audit: Option<AuditSummary>,
    /// What `--diagnose` did, when it was on.
    pub diagnose: Option<diagnose::DiagnoseCounts>,
    /// What `--stabilize` did, when it was on.
    pub stabilize: Option<stabilize::StabilizeCounts>,
}

impl Proxy {
    /// Serves `listener` with `config`: call inside a tokio runtime. Returns once the
    /// analysis is ready (its tokenizer loaded), so no early exchange is dropped for it.
    /// Raises the process' soft open-files limit to its hard one
    /// ([`limits::raise_open_files_limit`]) and has glibc map large allocations so that
    /// freed bodies leave the resident set ([`limits::map_large_allocations`]).
    pub async fn start(listener: TcpListener, config: ProxyConfig) -> Result<Proxy, ProxyError> {
        let addr = listener.local_addr().map_err(ProxyError::LocalAddr)?;
        let nofile = limits::raise_open_files_limit().ok().map(|l| l.after);
        limits::map_large_allocations();
        let log = match &config.log {
            Some(path) => Some(
                log::ExchangeLog::open(path).map_err(|source| ProxyError::Log {
                    path: path.clone(),
                    source,
                })?,
            ),
            None => None,
        };
        let state = Arc::new(
            ProxyState::new(config.max_sessions)
                .with_analysis_budget(config.limits.analysis_budget),
        );
        let (queue, rx) = std::sync::mpsc::sync_channel(config.queue.max(1));
        let diagnose = config
            .diagnose
            .then(|| Arc::new(diagnose::Diagnose::default()));
        let stabilize = match &config.stabilize {
            StabilizeMode::Off => None,
            mode => {
                if config.diagnose {
                    return Err(ProxyError::Stabilize(
                        "--stabilize and --diagnose cannot be used together: each changes the request, and a verdict would not say whose change it judged".to_owned(),
                    ));
                }
                let builtin;
                let catalogue = match &config.catalogue {
                    Some(c) => c,
                    None => {
                        builtin = prompt_measure::catalogue::Catalogue::builtin()
                            .map_err(|e| ProxyError::Stabilize(e.to_string()))?;
                        builtin
                    }
                };
                let chosen = match mode {
                    StabilizeMode::Only(ids) => Some(ids.as_slice()),
                    _ => None,
                };
                let entries = stabilize::repairable(catalogue.writers(), chosen)
                    .map_err(ProxyError::Stabilize)?;
                let (s, warning) = stabilize::Stabilizer::new(
                    entries,
                    config.state.as_ref().map(|c| c.dir.clone()),
                );
                if let Some(w) = warning {
                    eprintln!("cacheline proxy: --stabilize: {w}");
                }
                Some(Arc::new(s))
            }
        };
        let shared = Arc::new(forward::Shared::new(
            forward::ForwardConfig {
                limits: config.limits.clone(),
                upstreams: config.upstreams.clone(),
                max_copy_bytes: config.max_copy_bytes,
                upstream_timeout: config.upstream_timeout,
                connect_timeout: config.connect_timeout,
                local_routes: config.local_routes.clone(),
                stabilize: stabilize.clone(),
            },
            addr,
            queue.clone(),
            state.clone(),
            diagnose.clone(),
        )?);
        let connections = Arc::new(accept::Connections::new(config.limits.connections(nofile)));
        let settings = analysis::Settings {
            audit: config.audit,
            log,
            max_copy_bytes: config.max_copy_bytes,
            keep_bodies: config.keep_bodies,
            print_verdicts: config.print_verdicts,
            catalogue: config.catalogue.clone(),
            diagnose: diagnose.clone(),
            state: config.state.clone(),
            launch: launch_id(),
        };
        let thread_state = state.clone();
        let (ready, loaded) = tokio::sync::oneshot::channel();
        let analysis = std::thread::Builder::new()
            .name("cacheline-proxy-analysis".to_owned())
            .spawn(move || analysis::run(rx, thread_state, settings, ready))
            .map_err(ProxyError::Thread)?;
        // Its tokenizer loaded (or failed to: a warning then, and traffic still flows).
        let _ = loaded.await;
        let (stop, stopped) = watch::channel(false);
        let accept = tokio::spawn(accept::accept_loop(listener, shared, connections, stopped));
        Ok(Proxy {
            addr,
            state,
            stop,
            accept,
            queue,
            analysis,
            diagnose,
            stabilize,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its state: sessions, rows, totals, the event stream.
    pub fn state(&self) -> Arc<ProxyState> {
        self.state.clone()
    }

    /// Stops accepting, lets the analysis finish what is queued, and returns the summary.
    pub async fn shutdown(self) -> ProxySummary {
        let _ = self.stop.send(true);
        let _ = self.accept.await;
        let queue = self.queue;
        let handle = self.analysis;
        let audit = tokio::task::spawn_blocking(move || {
            // Blocks only while the queue is full of exchanges still to analyse.
            let _ = queue.send(analysis::Message::Stop);
            handle.join().ok().flatten()
        })
        .await
        .ok()
        .flatten();
        ProxySummary {
            totals: self.state.totals(),
            audit,
            diagnose: self.diagnose.as_ref().map(|d| d.counts()),
            stabilize: self.stabilize.as_ref().map(|s| s.counts()),
        }
    }
}

/// This launch's id: its process and start time (one per proxy, in each log line and state
/// entry; a request continuing a session another launch saw is a resumed one).
fn launch_id() -> String {
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!("{}-{started}", std::process::id())
}

impl ProxySummary {
    /// The session summary printed on exit: requests, tokens cached and re-processed, breaks
    /// by cause, the cost above the ideal when the audit's price table applies, and the
    /// audit's "Cache lifetime" section ([`prompt_measure::lifetime::summary_text`]).
    pub fn text(&self) -> String {
        let t = &self.totals;
        let mut s = format!(
            "cacheline proxy: {} requests forwarded, {} analysed",
            t.forwarded, t.analysed
        );
        if t.not_analysed > 0 {
            s.push_str(&format!(", {} not analysed", t.not_analysed));
        }
        if t.analysis_dropped > 0 {
            let why = match t.analysis_over_budget {
                0 => "its queue was full".to_owned(),
                n if n == t.analysis_dropped => "its memory budget was full".to_owned(),
                n => format!("its queue or, for {n}, its memory budget was full"),
            };
            s.push_str(&format!(
                "; analysis dropped {} requests ({why})",
                t.analysis_dropped
            ));
        }
        if t.log_failures > 0 {
            s.push_str(&format!(
                "; the log has no line for {} requests (writing it failed)",
                t.log_lines_not_written
            ));
        }
        s.push_str(&format!("; {} sessions", t.sessions));
        if t.sessions_dropped > 0 {
            s.push_str(&format!(
                " ({} more dropped, least recently used)",
                t.sessions_dropped
            ));
        }
        for w in &t.warnings {
            s.push_str(&format!("\n  warning: {w}"));
        }
        let c = &t.counts;
        s.push_str(&format!(
            "\n  tokens: {} input, {} reported cached, {} re-processed, {} expected from cache",
            c.input, c.cached, c.reprocessed, c.expected_cached
        ));
        if let Some(causes) = prompt_measure::report::causes_text(&c.breaks) {
            s.push_str(&format!("\n  verdicts by cause: {causes}"));
        }
        if let Some(a) = &self.audit
            && a.requests > 0
        {
            match (a.overspend_pct, a.overspend_undefined) {
                (Some(p), _) => s.push_str(&format!(
                    "\n  cost: {p:.1}% above the ideal (every re-sent token read from cache), at the audit's prices ({})",
                    a.hit_rate_source
                )),
                (None, Some(why)) => s.push_str(&format!("\n  cost: undefined ({why})")),
                (None, None) => {}
            }
            s.push_str("\n  ");
            s.push_str(
                &prompt_measure::lifetime::summary_text(
                    &a.lifetime,
                    prompt_measure::AuditConfig::default().top,
                )
                .replace('\n', "\n  "),
            );
        }
        if let Some(d) = &self.diagnose {
            s.push_str(&format!(
                "\n  --diagnose: field added to {} requests; sent unchanged: {} naming no session, {} already asking, {} of a model or upstream without diagnostics, {} with no earlier reply (OpenAI), {} unreadable",
                d.added, d.unnamed, d.agent_sent, d.unsupported, d.no_previous, d.failed
            ));
        }
        if let Some(r) = &self.stabilize {
            s.push_str(&format!(
                "\n  --stabilize: {} requests repaired, {} forwarded unchanged (each verdict says why)",
                r.repaired, r.refused
            ));
        }
        if let Some(line) = self
            .audit
            .as_ref()
            .and_then(|a| prompt_measure::report::provider_verdicts_text(&a.provider_verdicts))
        {
            s.push_str(&format!("\n  {line}"));
        }
        s
    }
}

#[cfg(test)]
mod lifetime_tests {
    use super::*;

    /// The proxy's summary at exit prints the audit's "Cache lifetime" section, the same
    /// text `cacheline audit` prints (one formatter).
    #[test]
    fn the_exit_summary_prints_the_cache_lifetime_section() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../prompt-measure/tests/fixtures/audit/lifetime_anthropic.jsonl"
        );
        let bytes = std::fs::read(path).unwrap();
        let tokenizer = prompt_measure::O200kBase::shared().unwrap();
        let mut auditor = prompt_measure::Auditor::new(tokenizer, Default::default());
        prompt_measure::audit::audit_reader(
            bytes.as_slice(),
            std::path::Path::new(path),
            &mut auditor,
            |_| Ok(()),
        )
        .unwrap();
        let audit = auditor.summary();
        let section = prompt_measure::lifetime::summary_text(&audit.lifetime, 5);
        assert!(section.contains("3 requests expired"), "{section}");
        let text = ProxySummary {
            totals: Totals::default(),
            audit: Some(audit),
            diagnose: None,
            stabilize: None,
        }
        .text();
        assert!(
            text.contains(&format!("\n  {}", section.replace('\n', "\n  "))),
            "{text}"
        );
    }
}
