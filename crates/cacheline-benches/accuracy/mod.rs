//! The accuracy benchmark (issue 25): changes of every cause injected into the captured
//! sessions of five agents must be named with the right cause and place by the audit (the
//! one engine, through [`Auditor::push_line`] on the audit's log format); append-only turns
//! must give no false break; and a concurrency set (subagents, parallel side calls, title and
//! classifier calls, `count_tokens`) is scored for the "previous request" baseline and the
//! engine's predecessor search. Deterministic: one seed, one table.

mod inject;
mod launches;
pub mod synth;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub use prompt_core::ApiKind;
use prompt_measure::Tokenizer;
use prompt_measure::audit::{AuditConfig, Auditor, RequestAudit};
use prompt_wire::engine::{Analysis, CauseKind, Place};
use serde_json::Value;

pub use inject::{Expected, applicable};
pub use launches::{Launches, Resumed};
pub use synth::{Request, Rng};

/// Why the benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum AccuracyError {
    /// A capture could not be read.
    #[error("cannot read the capture {path}: {cause}")]
    Capture {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: String,
    },
    /// The audit refused a generated line.
    #[error("the audit refused generated line {line} ({agent}): {cause}")]
    Audit {
        /// The agent.
        agent: &'static str,
        /// The line number in its auditor.
        line: u64,
        /// Why (bounded).
        cause: String,
    },
}

/// The benchmark's size.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// The seed.
    pub seed: u64,
    /// Sessions per agent.
    pub episodes: usize,
    /// Append-only turns per session.
    pub turns: usize,
    /// Changes injected per three append-only turns.
    pub injections_per_three: usize,
    /// Concurrency-set sessions per Anthropic agent.
    pub concurrent_sessions: usize,
}

impl Config {
    /// The published run: 31 sessions of 20 turns per agent, two changes injected in every
    /// three turns, 20 concurrency-set sessions per Anthropic agent.
    pub fn published(seed: u64) -> Self {
        Self {
            seed,
            episodes: 31,
            turns: 20,
            injections_per_three: 2,
            concurrent_sessions: 20,
        }
    }
}

/// One token per four bytes: the benchmark's tokenizer (the verdicts do not depend on it).
struct Quarter;

impl Tokenizer for Quarter {
    fn name(&self) -> &str {
        "quarter"
    }
    fn encode(&self, text: &str) -> Vec<u32> {
        // Each token the four bytes it stands for: the simulator's columns, which compare
        // tokens, see every change of the text.
        text.as_bytes()
            .chunks(4)
            .map(|c| {
                let mut b = [0u8; 4];
                b[..c.len()].copy_from_slice(c);
                u32::from_le_bytes(b)
            })
            .collect()
    }
}

/// An agent's capture: its API and the requests of its main conversation.
#[derive(Debug, Clone)]
pub struct Agent {
    /// Its directory under `tests/fixtures/agents`.
    pub name: &'static str,
    /// Its API.
    pub api: ApiKind,
    /// Its captured requests that carry tools (the main conversation).
    pub requests: Vec<Request>,
}

/// The five captured agents.
pub const AGENTS: [(&str, ApiKind); 5] = [
    ("claude-code", ApiKind::Anthropic),
    ("opencode", ApiKind::Anthropic),
    ("codex", ApiKind::OpenAiResponses),
    ("gemini-cli", ApiKind::Gemini),
    ("qwen-code", ApiKind::OpenAi),
];

/// The workspace's root (two folders above the benches crate, `crates/cacheline-benches`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The name the table gives an API.
fn label(api: ApiKind) -> &'static str {
    match api {
        ApiKind::Anthropic => "Anthropic Messages",
        ApiKind::OpenAiResponses => "OpenAI Responses",
        ApiKind::Gemini => "Gemini",
        ApiKind::OpenAi | ApiKind::LlamaCpp => "OpenAI Chat Completions",
    }
}

/// Reads the five captures.
pub fn load_agents(root: &Path) -> Result<Vec<Agent>, AccuracyError> {
    AGENTS
        .iter()
        .map(|&(name, api)| {
            let path = root
                .join("tests/fixtures/agents")
                .join(name)
                .join("capture.jsonl");
            let err = |cause: String| AccuracyError::Capture {
                path: path.clone(),
                cause,
            };
            let text = std::fs::read_to_string(&path).map_err(|e| err(e.to_string()))?;
            let mut requests = Vec::new();
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let v: Value = serde_json::from_str(line).map_err(|e| err(e.to_string()))?;
                let body = match v.get("request") {
                    Some(Value::String(s)) => serde_json::from_str(s).ok(),
                    Some(o @ Value::Object(_)) => Some(o.clone()),
                    _ => None,
                };
                let Some(body) = body else { continue };
                if body.get("tools").is_none() {
                    continue;
                }
                requests.push(Request {
                    path: v.get("path").and_then(Value::as_str).unwrap_or("/").into(),
                    headers: v
                        .get("headers")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default(),
                    body,
                    ts: v.get("ts").and_then(Value::as_f64),
                    session: String::new(),
                    text: None,
                    usage: None,
                    launch: None,
                });
            }
            if requests.is_empty() {
                return Err(err("no request with tools".into()));
            }
            Ok(Agent {
                name,
                api,
                requests,
            })
        })
        .collect()
}

/// An auditor fed generated lines.
struct Audit<'t> {
    agent: &'static str,
    api: ApiKind,
    auditor: Auditor<'t>,
    line: u64,
}

impl<'t> Audit<'t> {
    fn new(agent: &'static str, api: ApiKind, tokenizer: &'t Quarter) -> Self {
        Self {
            agent,
            api,
            auditor: Auditor::new(tokenizer, AuditConfig::default()),
            line: 0,
        }
    }

    fn push(&mut self, r: &Request) -> Result<RequestAudit, AccuracyError> {
        self.line += 1;
        let text = r.line(self.api);
        match self.auditor.push_line(self.line, &text) {
            Ok(Some(a)) => Ok(a),
            Ok(None) => Err(self.error("a blank line".into())),
            Err(e) => Err(self.error(prompt_core::input::excerpt(&e.to_string(), 300).into())),
        }
    }

    fn error(&self, cause: String) -> AccuracyError {
        AccuracyError::Audit {
            agent: self.agent,
            line: self.line,
            cause,
        }
    }
}

/// Whether a verdict says tokens were lost.
fn is_break(v: &Analysis) -> bool {
    v.cause.as_ref().is_some_and(|c| c.kind().loses_tokens())
}

/// Where the verdict's cause is (its change's place; the request for a timing or provider
/// finding).
fn verdict_place(v: &Analysis) -> Place {
    v.cause
        .as_ref()
        .and_then(|cause| v.changes.iter().find(|c| c.cause == *cause))
        .map_or(Place::Request, |c| c.place.clone())
}

/// The same place: the same field and index (a message's block compared when both name one).
pub fn same_place(expected: &Place, got: &Place) -> bool {
    match (expected, got) {
        (Place::Message { index: a, block: x }, Place::Message { index: b, block: y }) => {
            a == b && (x.is_none() || y.is_none() || x == y)
        }
        _ => expected == got,
    }
}

/// How one injected change was named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The right cause at the right place.
    Right,
    /// Another cause or another place.
    Misnamed,
    /// No break (or, for a serialization-only change, no note).
    Missed,
}

/// Scores one verdict against what was injected, with what the verdict said.
pub fn score(expected: &Expected, v: &Analysis) -> (Outcome, String) {
    let said = match &v.cause {
        Some(c) => format!("{} at {:?}", c.kind(), verdict_place(v)),
        None => "no break".to_owned(),
    };
    if expected.kind == CauseKind::SerializationOnly {
        if is_break(v) {
            return (Outcome::Misnamed, said);
        }
        let note = v
            .changes
            .iter()
            .find(|c| c.cause.kind() == CauseKind::SerializationOnly);
        return match note {
            Some(c) if same_place(&expected.place, &c.place) => (Outcome::Right, said),
            Some(c) => (
                Outcome::Misnamed,
                format!("serialization_only at {:?}", c.place),
            ),
            None => (Outcome::Missed, said),
        };
    }
    if !is_break(v) {
        return (Outcome::Missed, said);
    }
    let kind = v.cause.as_ref().map(|c| c.kind());
    if kind == Some(expected.kind) && same_place(&expected.place, &verdict_place(v)) {
        (Outcome::Right, said)
    } else {
        (Outcome::Misnamed, said)
    }
}

/// Counts of one row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Changes injected.
    pub injected: u64,
    /// Named with the right cause and place.
    pub right: u64,
    /// Named with another cause or place.
    pub misnamed: u64,
    /// Not named.
    pub missed: u64,
}

impl Counts {
    fn add(&mut self, o: Outcome) {
        self.injected += 1;
        match o {
            Outcome::Right => self.right += 1,
            Outcome::Misnamed => self.misnamed += 1,
            Outcome::Missed => self.missed += 1,
        }
    }
}

/// One method's figures on the concurrency set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Method {
    /// Requests scored (every request after the session's first).
    pub requests: u64,
    /// Breaks named where no token was lost.
    pub false_breaks: u64,
    /// The right predecessor (or, for a new conversation, none blamed).
    pub right_predecessor: u64,
    /// Another one.
    pub wrong_predecessor: u64,
}

impl Method {
    fn tally(&mut self, false_break: bool, right: bool) {
        self.requests += 1;
        self.false_breaks += u64::from(false_break);
        if right {
            self.right_predecessor += 1;
        } else {
            self.wrong_predecessor += 1;
        }
    }
}

/// What the benchmark measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// By API and cause.
    pub injected: BTreeMap<(ApiKind, CauseKind), Counts>,
    /// Append-only turns by API, and the false breaks among them.
    pub append_only: BTreeMap<ApiKind, (u64, u64)>,
    /// A few misnamed or missed injections per API and cause: what was expected, what was said.
    pub examples: BTreeMap<(ApiKind, CauseKind), Vec<String>>,
    /// False breaks on append-only turns: what was said.
    pub false_break_examples: Vec<String>,
    /// The concurrency set: the baseline, then the engine.
    pub concurrency: (Method, Method),
    /// False breaks the engine named in the concurrency set: what was said.
    pub concurrency_examples: Vec<String>,
    /// Requests in the concurrency set by kind.
    pub concurrency_kinds: BTreeMap<&'static str, u64>,
    /// The concurrency set by kind of request (the session's first left out): the baseline,
    /// then the engine.
    pub concurrency_by_kind: BTreeMap<&'static str, (Method, Method)>,
    /// Sessions continued by a new launch.
    pub launches: Launches,
    /// Injected breaks of the bytes whose tokens lost were checked against the provider's own
    /// column ([`RequestAudit::lost_by_provider_column`]), by API: checked, and off by more
    /// than the rule's tolerance.
    pub tokens_lost: BTreeMap<ApiKind, (u64, u64)>,
    /// Tokens lost off the provider's column: what was said and what the column says.
    pub tokens_lost_examples: Vec<String>,
}

impl Report {
    /// Every injected change.
    pub fn total(&self) -> Counts {
        self.injected
            .values()
            .fold(Counts::default(), |a, c| Counts {
                injected: a.injected + c.injected,
                right: a.right + c.right,
                misnamed: a.misnamed + c.misnamed,
                missed: a.missed + c.missed,
            })
    }

    /// Append-only turns and false breaks in all.
    pub fn append_only_total(&self) -> (u64, u64) {
        self.append_only
            .values()
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    }
}

/// Runs the benchmark.
pub fn run(root: &Path, config: Config) -> Result<Report, AccuracyError> {
    let agents = load_agents(root)?;
    let tokenizer = Quarter;
    let mut rng = Rng::new(config.seed);
    let mut report = Report {
        seed: config.seed,
        ..Report::default()
    };
    let mut n = 0u64;
    for agent in &agents {
        let api = agent.api;
        let causes = applicable(api);
        let mut clean = Audit::new(agent.name, api, &tokenizer);
        let mut injected = Audit::new(agent.name, api, &tokenizer);
        let mut turn_no = 0usize;
        let mut next_cause = 0usize;
        for episode in 0..config.episodes {
            let mut prev = session_start(agent, &mut rng, episode);
            prev.session = format!("{}-{episode}", agent.name);
            clean.push(&prev)?;
            for _ in 0..config.turns {
                n += 1;
                let next = inject::append_turn(api, &mut rng, &prev, n);
                let audit = clean.push(&next)?;
                let row = report.append_only.entry(api).or_default();
                row.0 += 1;
                if is_break(&audit.verdict) {
                    row.1 += 1;
                    if report.false_break_examples.len() < 12 {
                        report.false_break_examples.push(format!(
                            "{} line {}: {}",
                            agent.name,
                            audit.line,
                            prompt_measure::audit::verdict_text(&audit)
                        ));
                    }
                }
                let injections = (turn_no % 3 < config.injections_per_three) as usize;
                turn_no += 1;
                for _ in 0..injections {
                    let kind = causes[next_cause % causes.len()];
                    next_cause += 1;
                    n += 1;
                    let Some((pred, x, expected)) =
                        inject::inject(api, kind, &mut rng, &prev, &next, n)
                    else {
                        continue;
                    };
                    let session = format!("inj-{n}");
                    let mut pred = pred;
                    pred.session = session.clone();
                    let mut x = x;
                    if kind != CauseKind::ColdStart {
                        x.session = session;
                    }
                    injected.push(&pred)?;
                    let audit = injected.push(&x)?;
                    check_tokens_lost(&mut report, agent, &tokenizer, &pred, &x)?;
                    let (outcome, said) = score(&expected, &audit.verdict);
                    report.injected.entry((api, kind)).or_default().add(outcome);
                    if outcome != Outcome::Right {
                        let ex = report.examples.entry((api, kind)).or_default();
                        if ex.len() < 3 {
                            ex.push(format!(
                                "{}: injected {} at {:?} ({}); said {said}",
                                agent.name, kind, expected.place, expected.how
                            ));
                        }
                    }
                }
                prev = next;
            }
        }
    }
    report.concurrency = concurrency(&agents, &tokenizer, &mut rng, &mut report, config)?;
    report.launches = launches::run(&agents, &tokenizer, config)?;
    Ok(report)
}

/// A session's first request: one of the agent's captured requests, a day later per
/// episode, Anthropic's markers where the agents place them.
fn session_start(agent: &Agent, rng: &mut Rng, episode: usize) -> Request {
    let api = agent.api;
    let base = &agent.requests[rng.below(agent.requests.len())];
    let mut first = base.clone();
    first.ts = Some(base.ts.unwrap_or(1.8e9) + 86_400.0 * episode as f64);
    if api == ApiKind::Anthropic {
        let markers = synth::message_markers(first.messages(api)).max(1);
        synth::move_markers(first.messages_mut(api), markers);
    }
    first
}

/// Holds an injected break's tokens lost against what its provider's own column says,
/// the pair audited alone (the simulator's cache is shared by every session of an auditor, as
/// an organisation's is, so a column is the pair's own only in an auditor of its own). A break
/// of the prompt's text against its predecessor, on the same lane.
fn check_tokens_lost(
    report: &mut Report,
    agent: &Agent,
    tokenizer: &Quarter,
    pred: &Request,
    x: &Request,
) -> Result<(), AccuracyError> {
    let mut alone = Audit::new(agent.name, agent.api, tokenizer);
    let pred = alone.push(pred)?;
    let r = alone.push(x)?;
    let v = &r.verdict;
    let Some(p) = &v.predecessor else {
        return Ok(());
    };
    if v.tokens_lost == 0 || !p.same_lane || p.tag != pred.line {
        return Ok(());
    }
    let Some((column, tolerance)) = r.lost_by_provider_column(&pred) else {
        return Ok(());
    };
    let row = report.tokens_lost.entry(agent.api).or_default();
    row.0 += 1;
    if v.tokens_lost.abs_diff(column) > tolerance {
        row.1 += 1;
        if report.tokens_lost_examples.len() < 40 {
            report.tokens_lost_examples.push(format!(
                "{} {}: {} tokens lost, the provider's column {column}",
                agent.name,
                v.cause.as_ref().map_or("-", |c| c.kind().as_str()),
                v.tokens_lost
            ));
        }
    }
    Ok(())
}

/// The concurrency set: Anthropic sessions (Claude Code's and opencode's captures) where the
/// main conversation is interleaved, on one session, with a subagent, parallel side calls,
/// title and classifier calls and `count_tokens`.
fn concurrency(
    agents: &[Agent],
    tokenizer: &Quarter,
    rng: &mut Rng,
    report: &mut Report,
    config: Config,
) -> Result<(Method, Method), AccuracyError> {
    let mut baseline = Method::default();
    let mut engine = Method::default();
    for agent in agents.iter().filter(|a| a.api == ApiKind::Anthropic) {
        for s in 0..config.concurrent_sessions {
            let script = inject::concurrent_session(agent, rng, s);
            let mut audit = Audit::new(agent.name, ApiKind::Anthropic, tokenizer);
            let mut canon_prev: Option<String> = None;
            let mut tags: Vec<u64> = Vec::new();
            for (i, step) in script.iter().enumerate() {
                *report.concurrency_kinds.entry(step.kind).or_default() += 1;
                let a = audit.push(&step.request)?;
                tags.push(a.line);
                let text = step.request.body_text();
                if i > 0 {
                    // The baseline: the engine's own diff with the line just before.
                    let prev = canon_prev.as_deref().unwrap_or("");
                    let broke = baseline_breaks(prev, &text, &script[i - 1].request, &step.request);
                    let baseline_right = step.truth == Some(i - 1);
                    // A new conversation's cold start is right, not a break.
                    let cold = a
                        .verdict
                        .cause
                        .as_ref()
                        .is_some_and(|c| c.kind() == CauseKind::ColdStart);
                    let engine_broke = is_break(&a.verdict) && !(step.truth.is_none() && cold);
                    if engine_broke {
                        let n = report
                            .concurrency_examples
                            .iter()
                            .filter(|e| e.starts_with(step.kind))
                            .count();
                        if n < 3 {
                            report.concurrency_examples.push(format!(
                                "{} (truth: line {:?}): {}",
                                step.kind,
                                step.truth.map(|t| tags[t]),
                                prompt_measure::audit::verdict_text(&a)
                            ));
                        }
                    }
                    let said = a.verdict.predecessor.as_ref().map(|p| p.tag);
                    // A request that starts a conversation (or counts tokens first) continues
                    // none: right when nothing is blamed on what the engine compared it with.
                    let engine_right = match step.truth {
                        Some(t) => said == Some(tags[t]),
                        None => !engine_broke,
                    };
                    let by_kind = report.concurrency_by_kind.entry(step.kind).or_default();
                    by_kind.0.tally(broke, baseline_right);
                    by_kind.1.tally(engine_broke, engine_right);
                    baseline.tally(broke, baseline_right);
                    engine.tally(engine_broke, engine_right);
                }
                canon_prev = Some(text);
            }
        }
    }
    Ok((baseline, engine))
}

/// The "previous request" baseline: `prompt_wire::engine::diff` of the two bodies as the
/// engine reads them; a change that loses tokens is a break.
fn baseline_breaks(prev: &str, text: &str, p: &Request, r: &Request) -> bool {
    use prompt_wire::engine::{Canonical, Context, diff};
    let headers = |r: &Request| -> Vec<(String, String)> {
        r.headers
            .iter()
            .filter_map(|(k, v)| Some((k.to_ascii_lowercase(), v.as_str()?.to_owned())))
            .collect()
    };
    let (hp, hr) = (headers(p), headers(r));
    let a = Canonical::read(
        prev.as_bytes(),
        Context {
            path: Some(&p.path),
            headers: &hp,
        },
    );
    let b = Canonical::read(
        text.as_bytes(),
        Context {
            path: Some(&r.path),
            headers: &hr,
        },
    );
    match (a, b) {
        (Ok(a), Ok(b)) => diff(&a, &b).first_break().is_some(),
        _ => true,
    }
}

/// The table, in Markdown.
pub fn markdown(report: &Report, config: &Config) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Seed {}: {} sessions per agent, {} append-only turns each.\n",
        report.seed, config.episodes, config.turns
    );
    let total = report.total();
    let (turns, false_breaks) = report.append_only_total();
    let _ = writeln!(
        s,
        "**{} changes injected: {} named right, {} misnamed, {} missed. {} append-only turns: {} false breaks.**\n",
        thousands(total.injected),
        thousands(total.right),
        thousands(total.misnamed),
        thousands(total.missed),
        thousands(turns),
        thousands(false_breaks)
    );
    let apis = [
        ApiKind::Anthropic,
        ApiKind::OpenAiResponses,
        ApiKind::Gemini,
        ApiKind::OpenAi,
    ];
    let _ = writeln!(
        s,
        "| cause | {} |",
        apis.iter()
            .map(|a| label(*a))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(s, "|---|{}", "---|".repeat(apis.len()));
    let _ = writeln!(
        s,
        "| *(injected / right / misnamed / missed)* |{}",
        " |".repeat(apis.len())
    );
    for kind in CauseKind::ALL {
        let cells: Vec<String> = apis
            .iter()
            .map(|&api| match report.injected.get(&(api, kind)) {
                Some(c) => format!(
                    "{} / {} / {} / {}",
                    c.injected, c.right, c.misnamed, c.missed
                ),
                None => "—".to_owned(),
            })
            .collect();
        let _ = writeln!(s, "| `{kind}` | {} |", cells.join(" | "));
    }
    let per_api = |api: ApiKind| {
        report.injected.iter().filter(|((a, _), _)| *a == api).fold(
            Counts::default(),
            |a, (_, c)| Counts {
                injected: a.injected + c.injected,
                right: a.right + c.right,
                misnamed: a.misnamed + c.misnamed,
                missed: a.missed + c.missed,
            },
        )
    };
    let cells: Vec<String> = apis
        .iter()
        .map(|&api| {
            let c = per_api(api);
            format!(
                "**{} / {} / {} / {}**",
                c.injected, c.right, c.misnamed, c.missed
            )
        })
        .collect();
    let _ = writeln!(s, "| all | {} |", cells.join(" | "));
    let cells: Vec<String> = apis
        .iter()
        .map(|api| {
            let (t, f) = report.append_only.get(api).copied().unwrap_or_default();
            format!("{t} turns, {f} false breaks")
        })
        .collect();
    let _ = writeln!(s, "| append-only | {} |", cells.join(" | "));
    let _ = writeln!(s, "\n— : the cause cannot occur on that API (see below).\n");
    let (checked, off) = report
        .tokens_lost
        .values()
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let by_api: Vec<String> = apis
        .iter()
        .map(|api| {
            let (c, o) = report.tokens_lost.get(api).copied().unwrap_or_default();
            format!("{} {o} of {c}", label(*api))
        })
        .collect();
    let _ = writeln!(
        s,
        "Tokens lost against the provider's own column (each injected break of the prompt's text, the pair audited alone): {} checked, {} off by more than the rule's step ({}).\n",
        thousands(checked),
        thousands(off),
        by_api.join(", ")
    );
    let l = &report.launches;
    let _ = writeln!(
        s,
        "Sessions continued by a new launch (the predecessor restored from the earlier launch's record, as `cacheline proxy` keeps it):\n"
    );
    let _ = writeln!(
        s,
        "| | {} |",
        apis.iter()
            .map(|a| label(*a))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(s, "|---|{}", "---|".repeat(apis.len()));
    for (name, rows) in [
        (
            "append-only turns resumed *(turns / false breaks / wrong predecessor)*",
            &l.resumed,
        ),
        (
            "the same beside a side call of another lane",
            &l.beside_side_call,
        ),
    ] {
        let cells: Vec<String> = apis
            .iter()
            .map(|api| {
                let r = rows.get(api).copied().unwrap_or_default();
                format!("{} / {} / {}", r.turns, r.false_breaks, r.wrong_predecessor)
            })
            .collect();
        let _ = writeln!(s, "| {name} | {} |", cells.join(" | "));
    }
    let cells: Vec<String> = apis
        .iter()
        .map(|api| {
            let c = l.injected.get(api).copied().unwrap_or_default();
            format!(
                "{} / {} / {} / {}",
                c.injected, c.right, c.misnamed, c.missed
            )
        })
        .collect();
    let _ = writeln!(
        s,
        "| changes injected *(injected / right / misnamed / missed)* | {} |\n",
        cells.join(" | ")
    );
    let (b, e) = report.concurrency;
    let kinds: Vec<String> = report
        .concurrency_kinds
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let _ = writeln!(s, "Concurrency set ({}):\n", kinds.join(", "));
    let _ = writeln!(
        s,
        "| requests | scored | false breaks: previous request | false breaks: the engine | right / wrong predecessor: previous request | right / wrong predecessor: the engine |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    let rows = report
        .concurrency_by_kind
        .iter()
        .map(|(k, m)| ((*k).to_owned(), *m))
        .chain(std::iter::once(("**all**".to_owned(), (b, e))));
    for (name, (b, e)) in rows {
        let _ = writeln!(
            s,
            "| {name} | {} | {} | {} | {} / {} | {} / {} |",
            b.requests,
            b.false_breaks,
            e.false_breaks,
            b.right_predecessor,
            b.wrong_predecessor,
            e.right_predecessor,
            e.wrong_predecessor
        );
    }
    s
}

/// What went wrong, for a reader: the misnamed and missed examples and the false breaks.
pub fn findings(report: &Report) -> String {
    let mut s = String::new();
    for ((api, kind), ex) in &report.examples {
        for e in ex {
            let _ = writeln!(s, "{} {kind}: {e}", label(*api));
        }
    }
    for e in &report.concurrency_examples {
        let _ = writeln!(s, "concurrency: {e}");
    }
    for e in &report.false_break_examples {
        let _ = writeln!(s, "false break: {e}");
    }
    for e in &report.launches.examples {
        let _ = writeln!(s, "launches: {e}");
    }
    for e in &report.tokens_lost_examples {
        let _ = writeln!(s, "tokens lost: {e}");
    }
    s
}

fn thousands(n: u64) -> String {
    prompt_measure::audit::thousands(n)
}

/// The marker comments the table is written between in docs/benchmarks.md.
pub const BEGIN: &str = "<!-- accuracy:begin (cargo run --release -p cacheline-benches --bin accuracy -- --seed 1 --markdown) -->";
/// The end marker.
pub const END: &str = "<!-- accuracy:end -->";

/// The table between the markers of `doc`, if both are there.
pub fn table_in(doc: &str) -> Option<&str> {
    let start = doc.find(BEGIN)? + BEGIN.len();
    let end = doc[start..].find(END)? + start;
    Some(doc[start..end].trim_matches('\n'))
}
