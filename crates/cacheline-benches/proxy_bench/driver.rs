//! The open-loop load driver: requests leave at a fixed rate whatever the answers do, from many
//! sessions that each grow like an agent's conversation.
//!
//! Request `j` of a run belongs to session `j % sessions`, at turn `(j / sessions) % max_turns`;
//! even sessions speak OpenAI Chat Completions, odd ones Anthropic Messages. A session's body is
//! a system prompt naming the session (about 1 KiB: a distinct prefix per session), its first
//! user message, then one assistant reply and one tool-result-like user message per earlier turn,
//! so turn `t + 1` is turn `t` with an append.
//!
//! With [`AgentBodies`] (`--agent-bodies`), a session sends what a coding agent sends instead:
//! Anthropic sessions the first request of the Claude Code capture (its system prompt, 26 tools
//! and first message, about 122 KiB) and OpenAI sessions the first of the Qwen Code capture
//! (about 80 KiB), each with the agent's `user-agent` and a session header of its own (Claude
//! Code's `x-claude-code-session-id`, its body's `session_id` rewritten to match; opencode's
//! `x-session-id` for the OpenAI ones, as Qwen Code names none), growing by appended messages
//! the same way.
//!
//! Each request records its total latency (send to last body byte) and its time to first byte
//! (send to the first body frame), measured from when its task starts sending; a request that
//! takes longer than [`LoadConfig::timeout`] counts as an error.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The paths and headers a contender is reached by.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://host:port`, without a trailing slash.
    pub base: String,
    /// Path of OpenAI Chat Completions at the target, e.g. `/v1/chat/completions`.
    pub openai_path: String,
    /// Path of Anthropic Messages at the target, e.g. `/v1/messages`.
    pub anthropic_path: String,
    /// Extra request headers (name, value), e.g. a proxy's key; each replaces a default header of
    /// the same name.
    pub headers: Vec<(String, String)>,
}

impl Target {
    /// The scripted upstream itself at `base`.
    pub fn direct(base: impl Into<String>) -> Self {
        Self {
            base: base.into(),
            openai_path: "/v1/chat/completions".into(),
            anthropic_path: "/v1/messages".into(),
            headers: Vec::new(),
        }
    }
}

/// One run at one rate.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Requests per second (at least 1).
    pub rate: u32,
    /// How long requests are sent.
    pub duration: Duration,
    /// Whether requests ask for an SSE stream.
    pub stream: bool,
    /// Distinct sessions the requests rotate over (at least 1).
    pub sessions: usize,
    /// Turns a session grows to before it starts again (at least 1).
    pub max_turns: usize,
    /// A request slower than this is an error.
    pub timeout: Duration,
    /// Agents' bodies and headers instead of the small synthetic ones.
    pub bodies: Option<std::sync::Arc<AgentBodies>>,
}

/// One agent's captured request, ready to grow: the body for whole and for streamed replies,
/// where appended messages go in each, and the headers it is sent with.
#[derive(Debug, Clone)]
pub struct AgentTemplate {
    /// The body with `"stream":false` and with `"stream":true`.
    bodies: [String; 2],
    /// The offset of the `]` closing `messages` in each body.
    insert_at: [usize; 2],
    /// The session id the capture's body holds, rewritten to each session's own.
    captured_session: Option<String>,
    /// The header that names the session.
    session_header: &'static str,
    /// Headers sent as the agent sent them (`user-agent`, `anthropic-*`).
    headers: Vec<(String, String)>,
    /// Whether appended messages take Anthropic's block form.
    anthropic: bool,
}

/// The two agents' templates ([`AgentBodies::from_fixtures`]).
#[derive(Debug, Clone)]
pub struct AgentBodies {
    /// For the Anthropic sessions (Claude Code).
    pub anthropic: AgentTemplate,
    /// For the OpenAI sessions (Qwen Code).
    pub openai: AgentTemplate,
}

impl AgentBodies {
    /// Reads the first request of `DIR/claude-code/capture.jsonl` to `/v1/messages` and of
    /// `DIR/qwen-code/capture.jsonl` to `/v1/chat/completions` (tests/fixtures/agents).
    pub fn from_fixtures(dir: &std::path::Path) -> Result<Self, String> {
        Ok(Self {
            anthropic: AgentTemplate::from_capture(
                &dir.join("claude-code/capture.jsonl"),
                "/v1/messages",
                "x-claude-code-session-id",
            )?,
            openai: AgentTemplate::from_capture(
                &dir.join("qwen-code/capture.jsonl"),
                "/v1/chat/completions",
                "x-session-id",
            )?,
        })
    }

    /// The mean size of the two first-turn bodies (whole), bytes.
    pub fn mean_first_body(&self) -> usize {
        (self.anthropic.bodies[0].len() + self.openai.bodies[0].len()) / 2
    }
}

impl AgentTemplate {
    fn from_capture(
        path: &std::path::Path,
        endpoint: &str,
        session_header: &'static str,
    ) -> Result<Self, String> {
        // A capture is a few hundred KB; the cap keeps a wrong path from reading a huge file.
        let text = prompt_core::input::read_text(path, 64 << 20).map_err(|e| e.to_string())?;
        let (line_no, exchange) = text
            .lines()
            .enumerate()
            .filter_map(|(i, l)| Some((i + 1, serde_json::from_str::<serde_json::Value>(l).ok()?)))
            .find(|(_, v)| {
                v["path"].as_str().is_some_and(|p| p.starts_with(endpoint))
                    && v["request"].as_str().is_some_and(|r| r.len() > 2)
            })
            .ok_or_else(|| format!("{}: no request to {endpoint}", path.display()))?;
        let at = |what: &str| format!("{} line {line_no}: {what}", path.display());
        let body = exchange["request"].as_str().unwrap_or_default();
        let header = |name: &str| {
            exchange["headers"][name]
                .as_str()
                .map(|v| (name.to_owned(), v.to_owned()))
        };
        let captured_session = header(session_header).map(|(_, v)| v);
        let headers = ["user-agent", "anthropic-version", "anthropic-beta"]
            .iter()
            .filter_map(|n| header(n))
            .collect();
        let object = prompt_core::raw_json::Object::parse(body).map_err(|e| at(&e.to_string()))?;
        let mut bodies = [String::new(), String::new()];
        let mut insert_at = [0; 2];
        for (i, stream) in ["false", "true"].into_iter().enumerate() {
            let with = object.with("stream", stream);
            let reread =
                prompt_core::raw_json::Object::parse(&with).map_err(|e| at(&e.to_string()))?;
            let messages = reread
                .get("messages")
                .ok_or_else(|| at("no messages"))?
                .get();
            let start = prompt_core::raw_json::offset_in(&with, messages)
                .ok_or_else(|| at("messages not in the body"))?;
            insert_at[i] = start + messages.len() - 1;
            bodies[i] = with;
        }
        Ok(Self {
            bodies,
            insert_at,
            captured_session,
            session_header,
            headers,
            anthropic: endpoint == "/v1/messages",
        })
    }

    /// The body of `session` at `turn`, and the headers it goes with.
    fn request(&self, session: u64, turn: usize, stream: bool) -> (String, Vec<(String, String)>) {
        let i = usize::from(stream);
        let (body, at) = (&self.bodies[i], self.insert_at[i]);
        let id = format!("0be0c4e5-0000-4000-8000-{session:012x}");
        let text = |s: &str| serde_json::Value::from(s).to_string();
        let mut appended = String::new();
        for t in 0..turn {
            let result = text(&format!(
                "Result {session}.{t}: {}",
                "src/lib.rs src/main.rs Cargo.toml ".repeat(6)
            ));
            if self.anthropic {
                appended.push_str(&format!(
                    r#",{{"role":"assistant","content":[{{"type":"text","text":"Scripted reply."}}]}},{{"role":"user","content":[{{"type":"text","text":{result}}}]}}"#
                ));
            } else {
                appended.push_str(&format!(
                    r#",{{"role":"assistant","content":"Scripted reply."}},{{"role":"user","content":{result}}}"#
                ));
            }
        }
        let mut out = String::with_capacity(body.len() + appended.len());
        out.push_str(&body[..at]);
        out.push_str(&appended);
        out.push_str(&body[at..]);
        if let Some(captured) = &self.captured_session {
            out = out.replace(captured.as_str(), &id);
        }
        let mut headers = self.headers.clone();
        headers.push((self.session_header.to_owned(), id));
        (out, headers)
    }
}

/// What one request measured.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Send to the first body frame.
    pub ttfb: Duration,
    /// Send to the end of the body.
    pub total: Duration,
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    /// Requests that got a 2xx and their whole body.
    pub samples: Vec<Sample>,
    /// Requests that failed.
    pub errors: usize,
    /// The first failure, for the table (bounded to 300 characters).
    pub first_error: Option<String>,
}

/// A failed request, as the run reports it.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The request could not be built (a bad header or URL).
    #[error("building the request: {0}")]
    Build(String),
    /// The connection or exchange failed.
    #[error("sending: {0}")]
    Send(String),
    /// The contender answered with a non-2xx status.
    #[error("status {status}: {body}")]
    Status {
        /// The status code.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// The body broke off.
    #[error("reading the body: {0}")]
    Body(String),
    /// No complete answer within the timeout.
    #[error("no complete answer within {0:?}")]
    Timeout(Duration),
}

/// Bounds a message for a table cell.
fn bounded(text: impl std::fmt::Display) -> String {
    let text = text.to_string().replace(['\n', '\r', '|'], " ");
    match text.char_indices().nth(300) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

/// The client every run uses: HTTP/1.1, kept-alive connections, no Nagle delay.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A client for [`run`] and [`send`].
pub fn client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(4096)
        .build(connector)
}

/// Request `j` of a run: whether it goes to the OpenAI path, its body and its own headers.
pub fn request_of(j: u64, config: &LoadConfig) -> (bool, String, Vec<(String, String)>) {
    let sessions = config.sessions.max(1) as u64;
    let session = j % sessions;
    let turn = ((j / sessions) % config.max_turns.max(1) as u64) as usize;
    let openai = session.is_multiple_of(2);
    match &config.bodies {
        Some(agents) => {
            let template = if openai {
                &agents.openai
            } else {
                &agents.anthropic
            };
            let (body, headers) = template.request(session, turn, config.stream);
            (openai, body, headers)
        }
        None => {
            let (openai, body) = request_body(j, config.sessions, config.max_turns, config.stream);
            (openai, body, Vec::new())
        }
    }
}

/// The synthetic body of request `j` of a run, and whether it goes to the OpenAI path.
pub fn request_body(j: u64, sessions: usize, max_turns: usize, stream: bool) -> (bool, String) {
    let sessions = sessions.max(1) as u64;
    let session = j % sessions;
    let turn = ((j / sessions) % max_turns.max(1) as u64) as usize;
    let openai = session.is_multiple_of(2);
    let system = format!(
        "You are coding agent session {session}. {}",
        "Follow the repository's conventions, keep changes small, run the tests. ".repeat(14)
    );
    // Written by hand, not through a map: the keys keep this order, so a later turn's body is
    // an earlier one's with messages appended (serde_json's map would sort `system` last).
    let text = |s: &str| serde_json::Value::from(s).to_string();
    let mut messages = Vec::with_capacity(1 + 2 * turn);
    messages.push(format!(
        r#"{{"role":"user","content":{}}}"#,
        text(&format!("Session {session}: list the files."))
    ));
    for t in 0..turn {
        messages.push(r#"{"role":"assistant","content":"Scripted reply."}"#.to_owned());
        let result = format!(
            "Result {session}.{t}: {}",
            "src/lib.rs src/main.rs Cargo.toml ".repeat(6)
        );
        messages.push(format!(r#"{{"role":"user","content":{}}}"#, text(&result)));
    }
    let messages = messages.join(",");
    let body = if openai {
        format!(
            r#"{{"model":"bench","messages":[{{"role":"system","content":{}}},{messages}],"stream":{stream}}}"#,
            text(&system)
        )
    } else {
        format!(
            r#"{{"model":"bench","max_tokens":64,"system":{},"messages":[{messages}],"stream":{stream}}}"#,
            text(&system)
        )
    };
    (openai, body)
}

/// Sends request `j` and measures it.
pub async fn send(
    client: &HttpClient,
    target: &Target,
    j: u64,
    config: &LoadConfig,
) -> Result<Sample, RequestError> {
    let (openai, body, own_headers) = request_of(j, config);
    let path = if openai {
        &target.openai_path
    } else {
        &target.anthropic_path
    };
    let mut builder = Request::post(format!("{}{}", target.base, path))
        .header("content-type", "application/json");
    builder = if openai {
        builder.header("authorization", "Bearer sk-bench")
    } else {
        builder
            .header("x-api-key", "sk-bench")
            .header("anthropic-version", "2023-06-01")
    };
    let mut request = builder
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| RequestError::Build(bounded(e)))?;
    // The agent's headers, then the target's, replace the defaults of the same name (a
    // proxy's own key).
    for (name, value) in own_headers.iter().chain(&target.headers) {
        let name = hyper::header::HeaderName::try_from(name.as_str())
            .map_err(|e| RequestError::Build(bounded(e)))?;
        let value = hyper::header::HeaderValue::try_from(value.as_str())
            .map_err(|e| RequestError::Build(bounded(e)))?;
        request.headers_mut().insert(name, value);
    }
    let started = Instant::now();
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| RequestError::Send(bounded(format!("{e:?}"))))?;
        let status = response.status();
        let mut body = response.into_body();
        let mut ttfb = None;
        let mut kept = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| RequestError::Body(bounded(e)))?;
            if let Some(data) = frame.data_ref() {
                if !data.is_empty() && ttfb.is_none() {
                    ttfb = Some(started.elapsed());
                }
                if !status.is_success() && kept.len() < 300 {
                    kept.extend_from_slice(&data[..data.len().min(300)]);
                }
            }
        }
        let total = started.elapsed();
        if !status.is_success() {
            return Err(RequestError::Status {
                status: status.as_u16(),
                body: bounded(String::from_utf8_lossy(&kept)),
            });
        }
        Ok(Sample {
            ttfb: ttfb.unwrap_or(total),
            total,
        })
    };
    tokio::time::timeout(config.timeout, exchange)
        .await
        .map_err(|_| RequestError::Timeout(config.timeout))?
}

/// Runs `config` open-loop against `target`: request `j` is started at `j / rate` seconds
/// whether or not earlier ones have been answered. Waits for every request (or its timeout).
pub async fn run(client: &HttpClient, target: &Target, config: &LoadConfig) -> RunResult {
    let rate = u64::from(config.rate.max(1));
    let count = (config.duration.as_secs_f64() * rate as f64).round() as u64;
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(count as usize);
    for j in 0..count {
        tokio::time::sleep_until(start + period.mul_f64(j as f64)).await;
        let (client, target, config) = (client.clone(), target.clone(), config.clone());
        tasks.push(tokio::spawn(async move {
            send(&client, &target, j, &config).await
        }));
    }
    collect(tasks).await
}

/// Sends requests `0..sessions` (turn 0 of each session, whole replies) with at most
/// `concurrency` in flight and, with `rate`, at most that many per second (so that a proxy
/// analysing each exchange after forwarding it keeps up, and every session is held): each
/// session sends one request and is then left idle.
pub async fn open_idle_sessions(
    client: &HttpClient,
    target: &Target,
    sessions: std::ops::Range<u64>,
    concurrency: usize,
    timeout: Duration,
    bodies: Option<std::sync::Arc<AgentBodies>>,
    rate: Option<u32>,
) -> RunResult {
    // Session `j` is request `j` of a run of `sessions.end` sessions: the ids of one range
    // are never another's.
    let config = LoadConfig {
        rate: 1,
        duration: Duration::ZERO,
        stream: false,
        sessions: usize::try_from(sessions.end).unwrap_or(usize::MAX),
        max_turns: 1,
        timeout,
        bodies,
    };
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(concurrency.max(1)));
    let mut tasks = Vec::new();
    let start = tokio::time::Instant::now();
    let period = rate.map(|r| Duration::from_secs_f64(1.0 / f64::from(r.max(1))));
    let first = sessions.start;
    for j in sessions {
        if let Some(period) = period {
            tokio::time::sleep_until(start + period.mul_f64((j - first) as f64)).await;
        }
        let Ok(permit) = limit.clone().acquire_owned().await else {
            break;
        };
        let (client, target, config) = (client.clone(), target.clone(), config.clone());
        tasks.push(tokio::spawn(async move {
            let out = send(&client, &target, j, &config).await;
            drop(permit);
            out
        }));
    }
    collect(tasks).await
}

/// A proxy's `/metrics` at `url`, each metric's samples summed by name (labels dropped);
/// `None` when it cannot be read.
pub async fn metrics(
    client: &HttpClient,
    url: &str,
) -> Option<std::collections::BTreeMap<String, f64>> {
    let request = Request::get(url).body(Full::new(Bytes::new())).ok()?;
    let response = client.request(request).await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body = response.into_body().collect().await.ok()?.to_bytes();
    let mut sums = std::collections::BTreeMap::new();
    for line in String::from_utf8_lossy(&body).lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        if let Ok(v) = value.parse::<f64>() {
            *sums.entry(name.to_owned()).or_insert(0.0) += v;
        }
    }
    Some(sums)
}

/// [`metrics`] once the proxy has analysed (or dropped) every request it forwarded, polled
/// every 50 ms for at most `limit`: the analysis runs after the answer, so a reading taken
/// as the last answer arrives would miss the last requests' CPU.
pub async fn settled_metrics(
    client: &HttpClient,
    url: &str,
    limit: Duration,
) -> Option<std::collections::BTreeMap<String, f64>> {
    let until = Instant::now() + limit;
    loop {
        let m = metrics(client, url).await?;
        let get = |n: &str| m.get(n).copied().unwrap_or(0.0);
        let done =
            get("cacheline_proxy_requests_total") + get("cacheline_proxy_analysis_dropped_total");
        if done >= get("cacheline_proxy_forwarded_total") || Instant::now() >= until {
            return Some(m);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The samples of `tasks`, as they end; a failed request or task counted, the first error kept.
async fn collect<E: std::fmt::Display>(
    tasks: Vec<tokio::task::JoinHandle<Result<Sample, E>>>,
) -> RunResult {
    let mut result = RunResult::default();
    for task in tasks {
        match task.await {
            Ok(Ok(sample)) => result.samples.push(sample),
            Ok(Err(error)) => {
                result.errors += 1;
                result.first_error.get_or_insert_with(|| bounded(error));
            }
            Err(join) => {
                result.errors += 1;
                result.first_error.get_or_insert_with(|| bounded(join));
            }
        }
    }
    result
}

/// The `q`-quantile (0..=1) of `values` by nearest rank; `None` when empty. Sorts `values`.
pub fn percentile(values: &mut [Duration], q: f64) -> Option<Duration> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let rank = (q.clamp(0.0, 1.0) * values.len() as f64).ceil() as usize;
    Some(values[rank.clamp(1, values.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_grows_by_appends_and_sessions_have_distinct_prefixes() {
        let (openai, t0) = request_body(0, 4, 8, false);
        let (_, t1) = request_body(4, 4, 8, false);
        assert!(openai);
        // Turn 1 of session 0 starts with turn 0's messages.
        let cut = t0.find("list the files.").unwrap();
        assert_eq!(t0[..cut], t1[..cut]);
        assert!(t1.len() > t0.len());
        let (anthropic_is_openai, other) = request_body(1, 4, 8, true);
        assert!(!anthropic_is_openai);
        assert!(other.contains("\"stream\":true") && other.contains("session 1."));
    }

    #[test]
    fn percentiles_are_by_nearest_rank() {
        let mut v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&mut v, 0.5), Some(Duration::from_millis(50)));
        assert_eq!(percentile(&mut v, 0.99), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&mut [], 0.5), None);
    }
}
