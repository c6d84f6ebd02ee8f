//! `proxy-bench`: the scripted upstream, the open-loop load driver and the table of the proxy
//! benchmark (issue 24). `scripts/bench-proxy.sh` runs it all; see docs/benchmarks.md.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use cacheline_benches::proxy_bench::driver::{self, LoadConfig, Target};
use cacheline_benches::proxy_bench::report::{self, Record};
use cacheline_upstream::Upstream;
use cacheline_upstream::provider::{self, ProviderConfig};
use clap::{Args, Parser, Subcommand};

#[derive(Parser)]
#[command(about = "The proxy benchmark: scripted upstream, open-loop driver, Markdown table")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the scripted upstream (prints `listening on http://ADDR`, then serves until killed).
    Upstream {
        /// Address to listen on (port 0 picks one).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Content deltas per streamed reply.
        #[arg(long, default_value_t = 3)]
        events: usize,
        /// Pause between stream events, microseconds.
        #[arg(long, default_value_t = 0)]
        event_delay_us: u64,
        /// Runtime worker threads.
        #[arg(long, default_value_t = 1)]
        threads: usize,
    },
    /// One timed open-loop run; appends a `load` record to --out.
    Load {
        #[command(flatten)]
        target: TargetArgs,
        /// Requests per second.
        #[arg(long)]
        rate: u32,
        /// Seconds of sending.
        #[arg(long, default_value_t = 5.0)]
        secs: f64,
        /// Ask for SSE streams.
        #[arg(long)]
        stream: bool,
        /// Distinct sessions the requests rotate over.
        #[arg(long, default_value_t = 200)]
        sessions: usize,
        /// Unrecorded requests sent first (connections, caches, JIT of the contender).
        #[arg(long, default_value_t = 50)]
        warmup: u64,
        /// Which repeat of this run it is (recorded, for the table's spread).
        #[arg(long, default_value_t = 0)]
        repeat: u32,
    },
    /// Open --sessions idle sessions (one request each) and append an `idle` record with the
    /// VmRSS of --pid and its children before and after.
    Idle {
        #[command(flatten)]
        target: TargetArgs,
        /// The proxy's process id.
        #[arg(long)]
        pid: u32,
        /// Sessions to open.
        #[arg(long, default_value_t = 10_000)]
        sessions: usize,
        /// Requests in flight at once.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// At most this many sessions opened per second (default: as fast as answered).
        #[arg(long)]
        rate: Option<u32>,
        /// Seconds to wait after the last answer before reading RSS.
        #[arg(long, default_value_t = 2.0)]
        settle_secs: f64,
        /// Sessions opened (one request each, sessions of their own) before memory is read
        /// the first time: what a proxy holds once whatever number of sessions (buffers,
        /// pools, the bodies kept for excerpts) is then not counted per session.
        #[arg(long, default_value_t = 0)]
        warm_up: usize,
    },
    /// Append a `skipped` record: the contender could not be measured, and why.
    Skip {
        /// The contender.
        #[arg(long)]
        label: String,
        /// Why.
        #[arg(long)]
        reason: String,
        /// Results file (JSON lines).
        #[arg(long)]
        out: PathBuf,
    },
    /// Print the Markdown tables of a results file.
    Table {
        /// Results file (JSON lines).
        results: PathBuf,
    },
}

#[derive(Args)]
struct TargetArgs {
    /// The contender's name in the table (`direct` is the baseline).
    #[arg(long)]
    label: String,
    /// Base URL, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    target: String,
    /// Path of OpenAI Chat Completions there.
    #[arg(long, default_value = "/v1/chat/completions")]
    openai_path: String,
    /// Path of Anthropic Messages there.
    #[arg(long, default_value = "/v1/messages")]
    anthropic_path: String,
    /// Extra header `Name: value` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// Per-request timeout, seconds.
    #[arg(long, default_value_t = 30.0)]
    timeout_secs: f64,
    /// Send agents' bodies and session headers, read from this directory of captures
    /// (tests/fixtures/agents) instead of the small synthetic bodies.
    #[arg(long)]
    agent_bodies: Option<PathBuf>,
    /// The contender's `/metrics` URL (`cacheline proxy`'s), read before and after the run
    /// for its analysis figures.
    #[arg(long)]
    metrics: Option<String>,
    /// Results file (JSON lines), appended to.
    #[arg(long)]
    out: PathBuf,
}

impl TargetArgs {
    fn target(&self) -> Target {
        Target {
            base: self.target.trim_end_matches('/').to_owned(),
            openai_path: self.openai_path.clone(),
            anthropic_path: self.anthropic_path.clone(),
            headers: self
                .headers
                .iter()
                .filter_map(|h| {
                    h.split_once(':')
                        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
                })
                .collect(),
        }
    }
    fn bodies(&self) -> Result<Option<std::sync::Arc<driver::AgentBodies>>, BenchError> {
        self.agent_bodies
            .as_deref()
            .map(|dir| driver::AgentBodies::from_fixtures(dir).map(std::sync::Arc::new))
            .transpose()
            .map_err(BenchError::Bodies)
    }
    fn timeout(&self) -> Duration {
        Duration::try_from_secs_f64(self.timeout_secs).unwrap_or(Duration::from_secs(30))
    }
}

#[derive(Debug, thiserror::Error)]
enum BenchError {
    #[error("starting the runtime: {0}")]
    Runtime(std::io::Error),
    #[error("scripted upstream: cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("scripted upstream: accept failed: {0}")]
    Accept(std::io::Error),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} line {line}: {source}")]
    Parse {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Rss(#[from] report::RssError),
    #[error("agents' bodies: {0}")]
    Bodies(String),
}

fn append(path: &PathBuf, record: &Record) -> Result<(), BenchError> {
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let line = serde_json::to_string(record).map_err(std::io::Error::other)?;
        writeln!(file, "{line}")
    };
    write().map_err(|source| BenchError::Write {
        path: path.clone(),
        source,
    })
}

fn runtime(threads: usize) -> Result<tokio::runtime::Runtime, BenchError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("proxy-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), BenchError> {
    match cli.command {
        Command::Upstream {
            listen,
            events,
            event_delay_us,
            threads,
        } => runtime(threads)?.block_on(async {
            let cannot_listen = |source| BenchError::Listen {
                addr: listen,
                source,
            };
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(cannot_listen)?;
            let addr = listener.local_addr().map_err(cannot_listen)?;
            println!("listening on http://{addr}");
            let config = ProviderConfig {
                events,
                event_delay: Duration::from_micros(event_delay_us),
            };
            Upstream::serve(listener, provider::script(config))
                .await
                .map_err(BenchError::Accept)
        }),
        Command::Load {
            target,
            rate,
            secs,
            stream,
            sessions,
            warmup,
            repeat,
        } => {
            let t = target.target();
            let bodies = target.bodies()?;
            let body_bytes = bodies.as_ref().map(|b| b.mean_first_body());
            let config = LoadConfig {
                rate,
                duration: Duration::try_from_secs_f64(secs).unwrap_or(Duration::from_secs(5)),
                stream,
                sessions,
                max_turns: 24,
                timeout: target.timeout(),
                bodies,
            };
            let (result, analysis) = runtime(1)?.block_on(async {
                let client = driver::client();
                // Warm-up requests go to sessions of their own (ids past the run's).
                for j in 0..warmup {
                    let _ = driver::send(&client, &t, 1_000_000 + j, &config).await;
                }
                let settle = Duration::from_secs(60);
                let before = match &target.metrics {
                    Some(url) => driver::settled_metrics(&client, url, settle).await,
                    None => None,
                };
                let result = driver::run(&client, &t, &config).await;
                let after = match &target.metrics {
                    Some(url) => driver::settled_metrics(&client, url, settle).await,
                    None => None,
                };
                let analysis = before
                    .zip(after)
                    .map(|(b, a)| report::AnalysisFigures::between(&b, &a));
                (result, analysis)
            });
            let mut record = Record::load(&target.label, stream, rate, &result);
            if let Record::Load {
                repeat: r,
                body_bytes: b,
                analysis: a,
                ..
            } = &mut record
            {
                (*r, *b, *a) = (repeat, body_bytes, analysis);
            }
            eprintln!("{record:?}");
            append(&target.out, &record)
        }
        Command::Idle {
            target,
            pid,
            sessions,
            concurrency,
            rate,
            settle_secs,
            warm_up,
        } => {
            let t = target.target();
            let bodies = target.bodies()?;
            let body_bytes = bodies.as_ref().map(|b| b.mean_first_body());
            let settle = Duration::try_from_secs_f64(settle_secs).unwrap_or(Duration::from_secs(2));
            let (before, result, analysis) = runtime(1)?.block_on(async {
                let client = driver::client();
                let limit = Duration::from_secs(120);
                let counted = sessions as u64;
                if warm_up > 0 {
                    // Sessions of their own, past the counted ones, analysed before memory
                    // is read.
                    let warmed = driver::open_idle_sessions(
                        &client,
                        &t,
                        counted..counted + warm_up as u64,
                        concurrency,
                        target.timeout(),
                        bodies.clone(),
                        rate,
                    )
                    .await;
                    if let Some(url) = &target.metrics {
                        driver::settled_metrics(&client, url, limit).await;
                    }
                    tokio::time::sleep(settle).await;
                    eprintln!("warm-up: {} sessions answered", warmed.samples.len());
                }
                let before_rss = report::tree_rss_kib(pid);
                let before = match &target.metrics {
                    Some(url) => driver::settled_metrics(&client, url, limit).await,
                    None => None,
                };
                let out = driver::open_idle_sessions(
                    &client,
                    &t,
                    0..counted,
                    concurrency,
                    target.timeout(),
                    bodies,
                    rate,
                )
                .await;
                // Every exchange analysed before memory is read: a session the analysis has
                // not reached yet holds nothing.
                let after = match &target.metrics {
                    Some(url) => driver::settled_metrics(&client, url, limit).await,
                    None => None,
                };
                tokio::time::sleep(settle).await;
                let analysis = before
                    .zip(after)
                    .map(|(b, a)| report::AnalysisFigures::between(&b, &a));
                (before_rss, out, analysis)
            });
            let before = before?;
            let after = report::tree_rss_kib(pid)?;
            let record = Record::Idle {
                label: target.label.clone(),
                sessions,
                warm_up,
                ok: result.samples.len(),
                first_error: result.first_error,
                rss_before_kib: before,
                rss_after_kib: after,
                body_bytes,
                analysis,
            };
            eprintln!("{record:?}");
            append(&target.out, &record)
        }
        Command::Skip { label, reason, out } => append(&out, &Record::Skipped { label, reason }),
        Command::Table { results } => {
            let text = std::fs::read_to_string(&results).map_err(|source| BenchError::Read {
                path: results.clone(),
                source,
            })?;
            let mut records = Vec::new();
            for (i, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                records.push(
                    serde_json::from_str(line).map_err(|source| BenchError::Parse {
                        path: results.clone(),
                        line: i + 1,
                        source,
                    })?,
                );
            }
            print!("{}", report::markdown(&records));
            Ok(())
        }
    }
}
