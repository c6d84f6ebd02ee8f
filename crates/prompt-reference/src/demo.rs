//! A scripted session over the reference components: what `cacheline demo` prints.
//!
//! The session is [`crate::scenario`]'s script, the one `cacheline simulate` measures in
//! tokens: the date rolls over midnight, the todo list changes, plan mode toggles, the
//! assistant instructions are edited, tools are called and the history is compacted; the demo
//! also registers an MCP server's guidance at run time. It is composed under the operator's
//! policy as the `cacheline` strategy, and as `replace_at_head` (every writer rewritten into
//! message 0 each turn). For every turn the report gives the request size and the bytes reused
//! from the previous request (their longest common prefix) under both.

use std::collections::HashSet;

use prompt_registry::divergence::common_prefix_len;
use prompt_registry::node::{NodeKind, Producer};
use prompt_registry::snapshot::{RestoreMode, SessionSnapshot};
use prompt_registry::tools::ToolSet;
use prompt_registry::{
    Component, ComponentId, DeliveryStyle, Namespace, PromptPolicy, Registry, RegistryError,
    Request, Session, SessionContext, SessionOptions,
};
use serde::{Deserialize, Serialize};

use crate::components::ToolsField;
use crate::scenario::{RequestLabels, ScenarioError, ScenarioSize, Strategy, request_events};

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// A saved demo that cannot be resumed.
    #[error("cannot resume the saved demo: {0}")]
    State(String),
    /// The saved session cannot be resumed.
    #[error("cannot resume the saved session: {}", prompt_registry::input::chain(.0))]
    Restore(#[from] prompt_registry::snapshot::RestoreError),
    /// Writing a body failed.
    #[error("writing a request body: {}", prompt_registry::input::chain(.0))]
    Write(#[source] std::io::Error),
    /// The encoder could not turn a request into its body.
    #[error("encoding request {sequence}: {}", prompt_registry::input::chain(&**.source))]
    Encode {
        /// The request's sequence number.
        sequence: u64,
        /// What the encoder said.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Registry problem (duplicate id, bad namespace).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The scripted session could not be composed.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// A branch of the session could not be made.
    #[error(transparent)]
    Branch(#[from] prompt_registry::BranchError),
}

/// One appended node.
#[derive(Debug, Clone, Serialize)]
pub struct Appended {
    /// Who wrote it.
    pub producer: String,
    /// Its kind.
    pub kind: NodeKind,
    /// Its size in bytes.
    pub bytes: usize,
    /// Why it was appended.
    pub why: String,
}

/// One request of the demo: a turn's user request, or a continuation after tool results.
#[derive(Debug, Clone, Serialize)]
pub struct DemoTurn {
    /// Turn number, from 1.
    pub turn: u64,
    /// The request's label: `3` for turn 3's user request, `3.1` for its first continuation.
    pub label: String,
    /// Whether the request continues after tool results (no new user message).
    pub continuation: bool,
    /// What happened before this turn's request.
    pub events: Vec<String>,
    /// Serialized request size.
    pub request_bytes: usize,
    /// Bytes shared with the previous request (its longest common prefix).
    pub reused_bytes: usize,
    /// Replace-at-head: request size.
    pub head_rewrite_bytes: usize,
    /// Replace-at-head: bytes shared with its previous request.
    pub head_rewrite_reused: usize,
    /// Nodes appended this turn (tail updates, system prompt updates, the user message).
    pub appended: Vec<Appended>,
    /// Ephemeral messages at the end of this request only.
    pub ephemeral: Vec<String>,
    /// The prefix fingerprint.
    pub fingerprint: String,
    /// The session's routing key (`prompt_cache_key`).
    pub routing_key: String,
    /// The request's number in the session, counting from 1.
    pub sequence: u64,
}

/// Why a node was appended, for the report. `first` is whether its producer appears in
/// the history for the first time in this epoch.
fn why(producer: &Producer, first: bool) -> &'static str {
    match producer {
        Producer::User => "the user's message",
        Producer::Assistant => "the assistant's previous reply",
        Producer::Tool => "a tool result",
        Producer::SystemPrompt => "system prompt changed: appended, message 0 untouched",
        Producer::Compaction => "compaction summary",
        Producer::Foreign => "a message of the adopted conversation",
        Producer::Component(_) | Producer::Prefix if first => {
            "its first output in this cache epoch"
        }
        Producer::Component(_) | Producer::Prefix => {
            "its output changed since the update it last appended"
        }
    }
}

/// `registry` plus the guidance of a GitHub MCP server, registered at run time.
fn with_mcp_server(registry: &Registry) -> Result<Registry, RegistryError> {
    let mut registry = registry.clone();
    let mcp_id = ComponentId::new("mcp:github").map_err(|source| RegistryError::InvalidId {
        location: prompt_registry::component::SourceLocation::caller(),
        source,
    })?;
    registry.register_dynamic(
        Namespace::Mcp,
        Component::session(mcp_id, |_| {
            Some("GitHub MCP server: use github_search before opening issues.".to_owned())
        })
        .describe("guidance sent by the GitHub MCP server"),
    )?;
    Ok(registry)
}

/// Runs the scripted session for `turns` turns under `policy`.
pub fn run(
    registry: &Registry,
    policy: &PromptPolicy,
    turns: u64,
) -> Result<Vec<DemoTurn>, DemoError> {
    run_with_progress(registry, policy, turns, |_| {})
}

/// [`run`], calling `progress` with the number of requests composed so far (each turn is
/// composed twice: the library's way, then replace-at-head).
pub fn run_with_progress(
    registry: &Registry,
    policy: &PromptPolicy,
    turns: u64,
    progress: impl FnMut(u64),
) -> Result<Vec<DemoTurn>, DemoError> {
    let mut options = DemoOptions::new(turns);
    let mut progress = progress;
    options.progress = Some(&mut progress);
    Ok(run_demo(registry, policy, options)?.turns)
}

/// Where a demo stopped: written by `cacheline demo --save`, read by `--resume`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DemoState {
    /// `cacheline-demo`.
    pub format: String,
    /// 1.
    pub version: u32,
    /// Turns played.
    pub turn: u64,
    /// The last request as measured (for the bytes the next one reuses).
    pub previous: String,
    /// Producers already heard in the current cache epoch.
    pub seen: Vec<Producer>,
    /// The label state: the turn and continuation of the last request.
    pub label: (u64, u64),
    /// The session.
    pub session: SessionSnapshot,
}

/// Turns a request into the bytes measured and written (a wire format's body).
pub type Encode<'a> =
    &'a mut dyn FnMut(&Request<'_>) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>>;

/// Gets each request's sequence number and bytes.
pub type Sink<'a> = &'a mut dyn FnMut(u64, &[u8]) -> std::io::Result<()>;

/// How to run the demo: [`DemoOptions::new`], then set the fields that differ.
#[non_exhaustive]
pub struct DemoOptions<'a> {
    /// The last turn to play.
    pub turns: u64,
    /// The delivery style of the library's session.
    pub delivery: DeliveryStyle,
    /// The tools sent in a tools field; `None`: rendered as text in the prefix, as a
    /// backend without a tools field receives them.
    pub tools: Option<ToolSet>,
    /// Where to resume from.
    pub resume: Option<DemoState>,
    /// The bytes measured for a request (default: the messages array); a wire format
    /// gives the request body.
    pub encode: Option<Encode<'a>>,
    /// Gets each request's sequence number and bytes (`--write-bodies`).
    pub sink: Option<Sink<'a>>,
    /// Gets the number of requests composed so far.
    pub progress: Option<&'a mut dyn FnMut(u64)>,
}

impl std::fmt::Debug for DemoOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DemoOptions")
            .field("turns", &self.turns)
            .field("delivery", &self.delivery)
            .field("tools", &self.tools)
            .field("resume", &self.resume.is_some())
            .field("encode", &self.encode.is_some())
            .field("sink", &self.sink.is_some())
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl DemoOptions<'_> {
    /// `turns` turns from the start, in the system style, tools as text.
    pub fn new(turns: u64) -> Self {
        Self {
            turns,
            delivery: DeliveryStyle::system(),
            tools: None,
            resume: None,
            encode: None,
            sink: None,
            progress: None,
        }
    }
}

/// What a demo run produced.
#[derive(Debug)]
pub struct DemoRun {
    /// The requests played.
    pub turns: Vec<DemoTurn>,
    /// Where it stopped, to resume from.
    pub state: DemoState,
}

/// Runs the demo as `options` says: from the start or from a saved state, to `turns`.
pub fn run_demo(
    registry: &Registry,
    policy: &PromptPolicy,
    options: DemoOptions<'_>,
) -> Result<DemoRun, DemoError> {
    let DemoOptions {
        turns,
        delivery,
        tools,
        resume,
        mut encode,
        mut sink,
        mut progress,
    } = options;
    let registry = with_mcp_server(registry)?;
    let size = ScenarioSize::Full;
    let values = session_values(tools.is_some())?;
    let session_options = session_options(delivery, tools);
    let components: Vec<Component> = registry.components().cloned().collect();
    let (mut session, first, mut previous, mut seen, mut labels) = match resume {
        None => (
            Session::start(
                components,
                policy,
                SessionContext::new(values),
                session_options,
            )
            .map_err(ScenarioError::from)?,
            1,
            Vec::new(),
            HashSet::new(),
            RequestLabels::default(),
        ),
        Some(state) => {
            if state.format != DEMO_FORMAT || state.version != 1 {
                return Err(DemoError::State(format!(
                    "not a saved demo: format {:?}, version {}",
                    state.format, state.version
                )));
            }
            if state.turn != session_turns(&state.session) {
                return Err(DemoError::State(format!(
                    "the saved demo says turn {} but its session has played {}",
                    state.turn,
                    session_turns(&state.session)
                )));
            }
            let first = state.turn.checked_add(1).ok_or_else(|| {
                DemoError::State(format!("turn {} is the last one there is", state.turn))
            })?;
            let prompt_registry::Restored {
                session, changes, ..
            } = Session::restore(
                &state.session,
                components,
                policy,
                SessionContext::new(values),
                session_options,
                RestoreMode::Strict,
            )?;
            if let Some(changes) = changes {
                return Err(DemoError::State(changes.summary()));
            }
            (
                session,
                first,
                state.previous.into_bytes(),
                state.seen.into_iter().collect(),
                RequestLabels::resume(state.label.0, state.label.1),
            )
        }
    };
    let mut epoch = session.history().epoch();
    let mut out: Vec<DemoTurn> = Vec::new();
    let mut failed: Option<DemoError> = None;
    let played = size.play(&mut session, first..=turns, &mut |step, request| {
        let bytes = match encode.as_mut() {
            Some(encode) => match encode(request) {
                Ok(bytes) => bytes,
                Err(source) => {
                    failed = Some(DemoError::Encode {
                        sequence: request.sequence(),
                        source,
                    });
                    return Err(ScenarioError::Stopped);
                }
            },
            None => request.to_bytes(),
        };
        if let Some(sink) = sink.as_mut()
            && let Err(e) = sink(request.sequence(), &bytes)
        {
            failed = Some(DemoError::Write(e));
            return Err(ScenarioError::Stopped);
        }
        if request.epoch() != epoch {
            epoch = request.epoch();
            seen.clear();
            // What survived the compaction was already said in this epoch.
            let kept = request.nodes().len() - request.new_nodes().len();
            for node in &request.nodes()[..kept] {
                seen.insert(node.producer().clone());
            }
        }
        if let Some(progress) = progress.as_mut() {
            progress(request.sequence());
        }
        out.push(DemoTurn {
            turn: step.turn,
            label: labels.next(step.turn, request.is_continuation()),
            continuation: request.is_continuation(),
            events: request_events(step, request)
                .iter()
                .map(ToString::to_string)
                .collect(),
            request_bytes: bytes.len(),
            reused_bytes: common_prefix_len(&previous, &bytes),
            head_rewrite_bytes: 0,
            head_rewrite_reused: 0,
            appended: request
                .new_nodes()
                .iter()
                .map(|n| Appended {
                    producer: n.producer().to_string(),
                    kind: n.kind(),
                    bytes: n.bytes().len(),
                    why: why(n.producer(), seen.insert(n.producer().clone())).to_owned(),
                })
                .collect(),
            ephemeral: request
                .ephemeral()
                .iter()
                .map(|(id, _)| id.to_string())
                .collect(),
            fingerprint: request.prefix_fingerprint().to_string(),
            routing_key: request.routing_key().to_string(),
            sequence: request.sequence(),
        });
        previous = bytes;
        Ok(())
    });
    if let Some(e) = failed {
        return Err(e);
    }
    played?;
    // The baseline, composed from the start, request by request beside the library's.
    let head = size.compose(Strategy::ReplaceAtHead, &registry, turns)?;
    for t in &mut out {
        let index = usize::try_from(t.sequence)
            .unwrap_or(usize::MAX)
            .saturating_sub(1);
        let Some(request) = head.get(index) else {
            continue;
        };
        let bytes = request.to_bytes();
        t.head_rewrite_bytes = bytes.len();
        t.head_rewrite_reused = index
            .checked_sub(1)
            .and_then(|i| head.get(i))
            .map_or(0, |p| common_prefix_len(&p.to_bytes(), &bytes));
        if let Some(progress) = progress.as_mut() {
            progress(session.requests().saturating_add(t.sequence));
        }
    }
    let state = DemoState {
        format: DEMO_FORMAT.to_owned(),
        version: 1,
        turn: turns,
        previous: String::from_utf8_lossy(&previous).into_owned(),
        seen: seen.into_iter().collect(),
        label: labels.state(),
        session: session.save(),
    };
    Ok(DemoRun { turns: out, state })
}

/// The demo session's id (its routing key derives from it).
pub const DEMO_SESSION_ID: &str = "cacheline-demo";

fn session_turns(snapshot: &SessionSnapshot) -> u64 {
    snapshot.turns()
}

/// The demo session's values: the full script's, and the tools field's marker when the
/// tools travel in a tools field.
fn session_values(tools_field: bool) -> Result<prompt_registry::Extensions, DemoError> {
    let mut values = ScenarioSize::Full.session_values()?;
    if tools_field {
        values.insert(ToolsField);
    }
    Ok(values)
}

/// The demo session's options. A fixed session id: the demo's bodies are the same in every
/// run.
fn session_options(delivery: DeliveryStyle, tools: Option<ToolSet>) -> SessionOptions {
    SessionOptions::new()
        .with_delivery(delivery)
        .with_tools(tools.unwrap_or_default())
        .with_session_id(DEMO_SESSION_ID)
}

/// What a desktop app does besides taking turns, and what the provider's cache keeps of it.
#[derive(Debug, Clone, Serialize)]
pub struct LifecycleStep {
    /// What was done.
    pub action: String,
    /// The request it sent, in bytes.
    pub request_bytes: usize,
    /// Bytes shared with the last request the demo sent (what the provider holds).
    pub reused_bytes: usize,
    /// What the cache kept, and why.
    pub kept: String,
}

/// After a run: a regenerated last reply, an edit of an earlier user message and a restart
/// with edited instructions, each a branch (or a restore) of the session the run ended
/// with, measured against the last request it sent.
pub fn play_lifecycle(
    registry: &Registry,
    policy: &PromptPolicy,
    run: &DemoRun,
    delivery: DeliveryStyle,
    tools: Option<ToolSet>,
    encode: Encode<'_>,
) -> Result<Vec<LifecycleStep>, DemoError> {
    let registry = with_mcp_server(registry)?;
    let tools_field = tools.is_some();
    let options = session_options(delivery, tools);
    let restore = |options: SessionOptions| {
        registry
            .restore_session(
                &run.state.session,
                policy,
                SessionContext::new(session_values(tools_field)?),
                options,
                RestoreMode::Strict,
            )
            .map_err(DemoError::from)
    };
    let session = restore(options.clone())?.session;
    let last = run.state.previous.as_bytes();
    let turn = run.state.turn;
    let size = ScenarioSize::Full;
    let values = |t: u64| crate::scenario::turn_values(&size.script(t));
    let mut steps = Vec::new();
    let mut measure = |action: String, request: &Request<'_>, kept: String| {
        let bytes = encode(request).map_err(|source| DemoError::Encode {
            sequence: request.sequence(),
            source,
        })?;
        steps.push(LifecycleStep {
            action,
            request_bytes: bytes.len(),
            reused_bytes: common_prefix_len(last, &bytes),
            kept,
        });
        Ok::<(), DemoError>(())
    };

    let mut again = session.regenerate()?;
    let request = again.resend(values(turn)).map_err(ScenarioError::from)?;
    measure(
        format!("regenerate the last reply (turn {turn})"),
        &request,
        "the same request, sent again".to_owned(),
    )?;

    let users: Vec<usize> = session
        .history()
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind() == NodeKind::User)
        .map(|(i, _)| i)
        .collect();
    if let Some(&k) = users.len().checked_sub(2).and_then(|i| users.get(i)) {
        let edited_turn = turn.saturating_sub(1).max(1);
        let mut edited = session.edit_user_message(k)?;
        let request = edited
            .turn(
                values(edited_turn),
                "Let me rephrase that: what changed in this module?",
            )
            .map_err(ScenarioError::from)?;
        measure(
            format!("edit the user message of turn {edited_turn} and send it"),
            &request,
            format!("everything before the edited message (history node {k})"),
        )?;
    }

    let edited_prompt = "You are a careful coding assistant. Keep every answer under five lines.";
    let restored = restore(options.with_system_prompt(edited_prompt))?;
    let how = match restored.system_prompt {
        Some(prompt_registry::SystemPromptChange::Appended(at)) => format!("appended at node {at}"),
        Some(prompt_registry::SystemPromptChange::Deferred) => {
            "merged into the next user message".to_owned()
        }
        other => format!("{other:?}"),
    };
    let mut resumed = restored.session;
    let next = size.script(turn.saturating_add(1));
    let request = resumed
        .turn(values(turn.saturating_add(1)), next.question.as_str())
        .map_err(ScenarioError::from)?;
    measure(
        format!(
            "restart the app with edited instructions (turn {})",
            turn.saturating_add(1)
        ),
        &request,
        format!("the saved prefix and history, restored Strict; the edit {how}"),
    )?;
    Ok(steps)
}

/// The `format` of a saved demo.
pub const DEMO_FORMAT: &str = "cacheline-demo";
