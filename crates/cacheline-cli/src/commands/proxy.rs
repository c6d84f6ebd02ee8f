//! `cacheline proxy`: the byte-exact proxy of `cacheline-proxy`, and its launcher.

use std::error::Error;
use std::ffi::OsString;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use cacheline_proxy::{LocalRoutes, Proxy, ProxyConfig, StabilizeMode, Upstreams, bind, launcher};

/// Arguments of `proxy`.
#[derive(Debug, clap::Args)]
pub(crate) struct ProxyArgs {
    /// Address to listen on (port 0: a free port). A non-loopback address needs
    /// --allow-remote. With a command: a free loopback port unless given.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Where an API goes: anthropic=URL, openai=URL or gemini=URL (repeatable). Defaults:
    /// the providers' own endpoints.
    #[arg(long, value_name = "API=URL")]
    upstream: Vec<String>,
    /// Append every exchange to FILE as JSONL in the format `cacheline audit` reads
    /// (request and response bodies, path without its query, no credential header).
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
    /// Keep request bodies in the proxy's state (for a page); by default only hashes and
    /// counts are kept.
    #[arg(long)]
    keep_bodies: bool,
    /// A writer catalogue (TOML, docs/catalogue.md) extending the built-in one: its entries
    /// override the built-in ones of the same id.
    #[arg(long, value_name = "FILE")]
    catalogue: Option<PathBuf>,
    /// Ask the provider for its own verdict on each request beside cacheline's: adds
    /// Anthropic's `diagnostics.previous_message_id` (and its beta header) or OpenAI's
    /// `prompt_cache_options.comparison_response_id` after the prompt, for requests that
    /// name a session (see docs/proxy.md). Off by default.
    #[arg(long)]
    diagnose: bool,
    /// Repair the agent's volatile writers the catalogue marks `repair` (a date line
    /// rewritten above the history): the element sent as the provider last saw it, the new
    /// line appended after the history as an update, so the cache survives (docs/proxy.md).
    /// `--stabilize=ID,…` repairs only those entries. Off by default.
    #[arg(
        long,
        value_name = "ID,…",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        conflicts_with = "diagnose"
    )]
    stabilize: Option<String>,
    /// Carry sessions over between launches in DIR: each request is compared with its
    /// session's last one even when an earlier launch saw it (see docs/proxy.md). Default:
    /// $XDG_STATE_HOME/cacheline, else ~/.local/state/cacheline.
    #[arg(long, value_name = "DIR", conflicts_with = "no_state")]
    state: Option<PathBuf>,
    /// Keep no session state: this launch starts empty and leaves nothing behind.
    #[arg(long)]
    no_state: bool,
    /// The session state's cap in bytes (at least 4 KiB; default 64 MiB): past it the
    /// journal is compacted. Hidden: for tests of a full state.
    #[arg(long, value_name = "BYTES", hide = true, conflicts_with = "no_state")]
    state_max_bytes: Option<u64>,
    /// Allow listening on a non-loopback address. The proxy's own routes (the page, its
    /// state and events, /metrics) then need a token, printed at start.
    #[arg(long)]
    allow_remote: bool,
    /// Turn the proxy's own routes (the page, its state and events, /metrics) off.
    #[arg(long)]
    no_local_routes: bool,
    /// Run this command with its base-URL variables pointed at the proxy; its exit code
    /// is the proxy's.
    #[arg(last = true, value_name = "CMD ARGS")]
    command: Vec<OsString>,
}

/// The default address without a command.
const DEFAULT_LISTEN: &str = "127.0.0.1:8790";

pub(crate) fn run(
    args: &ProxyArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    let mut upstreams = Upstreams::default();
    for spec in &args.upstream {
        upstreams.set(spec)?;
    }
    let mut config = ProxyConfig::default()
        .with_upstreams(upstreams)
        .with_keep_bodies(args.keep_bodies)
        .with_diagnose(args.diagnose)
        .with_stabilize(match args.stabilize.as_deref() {
            None => StabilizeMode::Off,
            Some("") => StabilizeMode::Every,
            Some(ids) => StabilizeMode::Only(
                ids.split(',')
                    .map(str::trim)
                    .filter(|id| !id.is_empty())
                    .map(str::to_owned)
                    .collect(),
            ),
        })
        // Verdict lines are printed here, from the state's event stream: the facade holds
        // standard error's lock while a command runs.
        .with_print_verdicts(false);
    if let Some(log) = &args.log {
        config = config.with_log(log);
    }
    if !args.no_state {
        let dir = args
            .state
            .clone()
            .or_else(cacheline_proxy::sessions::default_state_dir);
        let state = dir.map(|d| {
            let mut state = cacheline_proxy::sessions::StateConfig::in_dir(d);
            if let Some(max) = args.state_max_bytes {
                state.max_bytes = max;
            }
            state
        });
        config = config.with_state(state);
    }
    // Beyond loopback, the page, state, events and metrics (prompt excerpts, counts) need
    // a token; forwarding stays open (the agents send their own credentials).
    let token = if args.no_local_routes {
        config = config.with_local_routes(LocalRoutes::Off);
        None
    } else if args.allow_remote {
        let token = cacheline_proxy::access::new_token()?;
        config = config.with_local_routes(LocalRoutes::Token(token.clone()));
        Some(token)
    } else {
        None
    };
    if let Some(path) = &args.catalogue {
        match prompt_measure::catalogue::Catalogue::builtin_with_file(path) {
            Ok(c) => config = config.with_catalogue(c),
            Err(e) => {
                writeln!(err, "cacheline proxy: {e}")?;
                return Ok(2);
            }
        }
    }
    let listen = match (args.listen, args.command.is_empty()) {
        (Some(a), _) => a,
        (None, true) => DEFAULT_LISTEN.parse()?,
        (None, false) => SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(cacheline_proxy::ProxyError::Runtime)?;
    let (code, summary) = runtime.block_on(async {
        let listener = bind(listen, args.allow_remote).await?;
        let proxy = Proxy::start(listener, config).await?;
        let addr = proxy.addr();
        let mut events = proxy.state().subscribe();
        let mut warnings = proxy.state().subscribe_warnings();
        if let Some(token) = &token {
            writeln!(
                err,
                "cacheline proxy: its own routes need this token (Authorization: Bearer TOKEN, or ?token=TOKEN): {token}; the page: http://{addr}/_cacheline/?token={token}"
            )?;
            err.flush()?;
        }
        let work = async {
            match args.command.split_first() {
                Some((cmd, rest)) => launcher::run(cmd, rest, addr).await,
                None => {
                    wait_for_stop().await;
                    Ok(0)
                }
            }
        };
        if args.command.is_empty() {
            writeln!(
                err,
                "cacheline proxy: listening on http://{addr} (ANTHROPIC_BASE_URL=http://{addr}, OPENAI_BASE_URL=http://{addr}/v1, GOOGLE_GEMINI_BASE_URL=http://{addr}); Ctrl-C stops"
            )?;
            err.flush()?;
        }
        let mut work = std::pin::pin!(work);
        let code = loop {
            tokio::select! {
                code = &mut work => match code {
                    Ok(code) => break code,
                    // A command that cannot be run exits as a shell's would: 127 not
                    // found, 126 not executable.
                    Err(e) => match e.shell_exit_code() {
                        Some(code) => {
                            writeln!(err, "cacheline proxy: {e}")?;
                            break code;
                        }
                        None => return Err(e.into()),
                    },
                },
                event = events.recv() => print_event(event, err)?,
                warning = warnings.recv() => print_warning(warning, err)?,
            }
        };
        let summary = proxy.shutdown().await;
        while let Ok(row) = events.try_recv() {
            print_event(Ok(row), err)?;
        }
        while let Ok(w) = warnings.try_recv() {
            print_warning(Ok(w), err)?;
        }
        Ok::<_, Box<dyn Error>>((code, summary))
    })?;
    out.flush()?;
    writeln!(err, "{}", summary.text())?;
    Ok(u8::try_from(code & 0xff).unwrap_or(1))
}

/// One verdict line, or how many were missed.
fn print_event(
    event: Result<cacheline_proxy::RequestRow, tokio::sync::broadcast::error::RecvError>,
    err: &mut dyn Write,
) -> std::io::Result<()> {
    use tokio::sync::broadcast::error::RecvError;
    match event {
        Ok(row) => writeln!(err, "{}", cacheline_proxy::verdict_line(&row))?,
        Err(RecvError::Lagged(n)) => writeln!(
            err,
            "cacheline proxy: {n} verdict lines not printed (the terminal fell behind)"
        )?,
        // The state lives as long as the proxy: not reached while it runs.
        Err(RecvError::Closed) => return Ok(()),
    }
    err.flush()
}

/// A warning, as it is given (a failing `--log`): once, when it happens.
fn print_warning(
    warning: Result<String, tokio::sync::broadcast::error::RecvError>,
    err: &mut dyn Write,
) -> std::io::Result<()> {
    match warning {
        Ok(w) => writeln!(
            err,
            "cacheline proxy: warning: {}",
            prompt_core::input::escape_controls(&w)
        )?,
        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
            writeln!(err, "cacheline proxy: {n} warnings not printed")?
        }
        // The state lives as long as the proxy: not reached while it runs.
        Err(tokio::sync::broadcast::error::RecvError::Closed) => return Ok(()),
    }
    err.flush()
}

/// Until SIGINT or SIGTERM.
async fn wait_for_stop() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
