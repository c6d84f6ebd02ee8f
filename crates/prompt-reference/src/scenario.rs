//! The scripted agent session behind `cacheline demo` and `cacheline simulate`, and the
//! ways of composing it into requests.
//!
//! The script ([`script`]) is one conversation over the reference components: large tool
//! schemas (the built-in twelve plus [`EXTRA_TOOLS`]), instructions and guidelines, the
//! project's AGENTS.md ([`PROJECT_MEMORY`]), a skills catalog; tool calls that read files,
//! grep, edit and run tests. The date rolls over midnight (turns 12 and 33), the todo list
//! changes every four turns, plan mode toggles (on at turns 5 and 15, off two turns later, …),
//! memory recall changes with every query, the git state after every edit, the assistant
//! instructions are edited once (turn 7) and the history is compacted twice (before turns 10
//! and 24, keeping the last four messages). [`ScriptedTurn::events`] names what changed
//! before each turn.
//!
//! [`ScenarioSize`] sets the bulk of the values, not the script: [`ScenarioSize::Full`] (the
//! free functions [`script`], [`session_values`], [`compose`], [`run_cacheline`]) is what
//! `cacheline demo` and `cacheline simulate` measure; [`ScenarioSize::Compact`], the same
//! events at the same turns with five tool schemas, a one-line project memory and short
//! tool outputs and replies, is what `cacheline bench-live` sends to a small local model.
//!
//! [`compose`] turns the same script into requests under each [`Strategy`]:
//!
//! - `replace_at_head`: every writer rendered into one system message, rewritten each turn
//!   (writers ordered as the library orders the prefix: constant, session, then per-turn; the
//!   most charitable order for this strategy), then the history;
//! - `append_system`: the same system text, kept with [`prompt_registry::set_system_prompt`]:
//!   placed once, and appended whole whenever it changes; volatile values are still inside it,
//!   so it changes nearly every turn;
//! - `cacheline`: the real [`prompt_registry::Session`] from [`Registry::start_session`] with
//!   [`DEFAULT_AGENT_TOML`]: a frozen prefix, persisted tail updates, ephemeral git state and
//!   memory recall at the end of each request. [`run_cacheline`] drives that session under
//!   any policy and hands over each [`Request`] as composed.
//!
//! Anthropic breakpoints sit where the library would place them: after the first message
//! (the prefix, or the system message) and after the last message that later requests keep
//! (for `cacheline`, before the ephemeral tail).
//!
//! ```
//! use prompt_registry::{Registry, Session};
//! use prompt_reference::scenario::{self, Strategy};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let registry = Registry::linked()?;
//! let head = scenario::compose(Strategy::ReplaceAtHead, &registry, 3)?;
//! let ours = scenario::compose(Strategy::Cacheline, &registry, 3)?;
//! // Cacheline keeps message 0; replace-at-head rewrites it every turn.
//! assert_eq!(ours[0].messages[0], ours[2].messages[0]);
//! assert_ne!(head[0].messages[0], head[1].messages[0]);
//! assert!(scenario::script(7).events().iter().any(|e| e.to_string().contains("instructions")));
//! # Ok(()) }
//! ```

use std::fmt;

use prompt_registry::raw_json::canonical;
use prompt_registry::tools::{ToolSet, ToolSource};
use prompt_registry::wire::{Next, WireOptions};
use prompt_registry::{
    ApiKind, Component, ComponentId, ComposeError, Conversation, ConversationError, DeliveryStyle,
    Extensions, PromptPolicy, Registry, Request, Session, SessionContext, SessionOptions,
    TurnContext, component::Content, policy::PolicyErrors, set_system_prompt,
};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::components::{
    ASSISTANT_INSTRUCTIONS, DEFAULT_AGENT_TOML, DEFAULT_TOOLS, Environment, GitState, PlanMode,
    ProjectMemory, RecalledMemories, SkillList, Today, TodoList, ToolCatalog, ToolsField,
};

/// Tool schemas added to the built-in ones, for a tool list the size of a real coding
/// agent's.
pub const EXTRA_TOOLS: &str = include_str!("agent_tools.json");

/// The project's AGENTS.md in the scripted session.
pub const PROJECT_MEMORY: &str = include_str!("agent_memory.md");

/// Messages kept after the compaction.
pub const KEEP_AFTER_COMPACTION: usize = 4;

/// The turn before whose request the assistant instructions are edited.
pub const INSTRUCTIONS_EDIT_TURN: u64 = 7;

/// The project memory of the [`ScenarioSize::Compact`] session.
pub const COMPACT_PROJECT_MEMORY: &str = "Rust workspace. Run `cargo test --workspace`. Errors use thiserror. Keep README tables measured.";

/// The tool schemas of the [`ScenarioSize::Compact`] session: the built-in tools that the
/// built-in agent.toml allows, which are the ones the script calls.
pub const COMPACT_TOOLS: [&str; 5] = ["read_file", "list_dir", "grep", "edit_file", "run_tests"];

/// How large the scripted session's values are. The script of events is the same at every
/// size: the same questions, dates, todo lists, plan mode, instructions edit, tool calls and
/// compactions at the same turns; only the bulk changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScenarioSize {
    /// A real coding agent's session: 24 tool schemas, the whole [`PROJECT_MEMORY`], eight
    /// skills, 96-line file listings, 14 grep hits, 18 tests and replies of a few sentences.
    /// What `cacheline demo` and `cacheline simulate` measure.
    #[default]
    Full,
    /// Small enough for a 135M model on a CPU (`cacheline bench-live`): the five
    /// [`COMPACT_TOOLS`], [`COMPACT_PROJECT_MEMORY`], two skills, 6-line file listings, 3 grep
    /// hits, 4 tests and one-sentence replies; 8 turns stay under 3k tokens.
    Compact,
}

impl ScenarioSize {
    fn pick<T>(self, full: T, compact: T) -> T {
        match self {
            ScenarioSize::Full => full,
            ScenarioSize::Compact => compact,
        }
    }

    /// Lines of a file listing.
    fn listing_lines(self) -> usize {
        self.pick(96, 6)
    }

    /// Hits of a grep.
    fn grep_hits(self) -> usize {
        self.pick(14, 3)
    }

    /// Tests in a test run.
    fn tests(self) -> usize {
        self.pick(18, 4)
    }
}

/// Why the scripted session could not be composed.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The built-in agent.toml does not load against this registry (it lacks the reference
    /// components).
    #[error("<built-in agent.toml>: {0}")]
    Policy(#[from] PolicyErrors),
    /// The session refused a turn.
    #[error(transparent)]
    Compose(#[from] ComposeError),
    /// A built-in tool list is not a JSON array.
    #[error("{origin}: the tool list is not a JSON array: {source}")]
    Tools {
        /// Which list.
        origin: &'static str,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// The script's tools do not form a tool set.
    #[error("the scripted tools: {0}")]
    ToolSet(String),
    /// The caller's callback stopped the session (it keeps its own error).
    #[error("stopped by the caller")]
    Stopped,
    /// A request's body could not be written.
    #[error(transparent)]
    Wire(#[from] prompt_registry::wire::WireError),
    /// A conversation could not be started or composed.
    #[error(transparent)]
    Conversation(#[from] ConversationError),
    /// A composed request is not a JSON array of messages.
    #[error("turn {turn}: the composed request is not a JSON array: {source}")]
    Request {
        /// The turn.
        turn: u64,
        /// The parser's error.
        source: serde_json::Error,
    },
}

/// How a strategy composes requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Everything in one system message, rewritten each turn: the old behaviour.
    ReplaceAtHead,
    /// One system message, updates appended whole; volatile values still inside it.
    AppendSystem,
    /// Full policy composition through the library's `Session`.
    Cacheline,
}

impl Strategy {
    /// Every strategy, in report order.
    pub const ALL: [Strategy; 3] = [
        Strategy::ReplaceAtHead,
        Strategy::AppendSystem,
        Strategy::Cacheline,
    ];

    /// `replace_at_head`, `append_system` or `cacheline`.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::ReplaceAtHead => "replace_at_head",
            Strategy::AppendSystem => "append_system",
            Strategy::Cacheline => "cacheline",
        }
    }
}

/// A message recorded after a turn's request.
#[derive(Debug, Clone)]
pub enum Recorded {
    /// An assistant message (text or tool calls).
    Assistant(Value),
    /// A tool result.
    Tool {
        /// The call it answers.
        call_id: String,
        /// Its output.
        content: String,
    },
}

impl Recorded {
    /// The message, laid out as `Session::record_tool_result` lays it out.
    pub fn message(&self) -> Value {
        match self {
            Recorded::Assistant(v) => v.clone(),
            Recorded::Tool { call_id, content } => {
                json!({"role": "tool", "tool_call_id": call_id, "content": content})
            }
        }
    }
}

/// One turn of the script.
#[derive(Debug, Clone)]
pub struct ScriptedTurn {
    /// Turn number, from 1.
    pub turn: u64,
    /// The size of the session's values.
    pub size: ScenarioSize,
    /// Today's date.
    pub date: String,
    /// The todo list.
    pub todo: Vec<String>,
    /// Plan mode.
    pub plan: bool,
    /// Modified files.
    pub dirty: Vec<String>,
    /// Memories recalled for this query.
    pub recalled: Vec<String>,
    /// The user's message.
    pub question: String,
    /// New assistant instructions, set before this turn's request.
    pub instructions: Option<String>,
    /// A compaction summary: the history is compacted before this turn's request.
    pub compaction: Option<String>,
    /// Messages recorded after the request, in order.
    pub after: Vec<Recorded>,
}

/// Something that happened before a turn's request, as the script has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The date rolled over midnight; the new date.
    DateRolledOver(String),
    /// The todo list changed.
    TodoChanged,
    /// Plan mode turned on (`true`) or off (`false`).
    PlanMode(bool),
    /// The assistant instructions were edited.
    InstructionsEdited,
    /// The history was compacted: a new cache epoch.
    Compacted,
    /// The assistant called these tools after the previous request; their results are in
    /// the history.
    ToolsCalled(Vec<String>),
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::DateRolledOver(date) => write!(f, "the date rolled over midnight ({date})"),
            Event::TodoChanged => f.write_str("the todo list changed"),
            Event::PlanMode(on) => {
                write!(f, "plan mode turned {}", if *on { "on" } else { "off" })
            }
            Event::InstructionsEdited => f.write_str("the assistant instructions were edited"),
            Event::Compacted => f.write_str("the history was compacted (new cache epoch)"),
            Event::ToolsCalled(names) => {
                write!(f, "the assistant called {}", names.join(", "))
            }
        }
    }
}

impl ScriptedTurn {
    /// What changed before this turn's user request. None for turn 1. (The assistant's
    /// tool calls are events of the continuation requests that carry their results:
    /// [`tools_called`].)
    pub fn events(&self) -> Vec<Event> {
        let Some(previous) = self
            .turn
            .checked_sub(1)
            .filter(|t| *t > 0)
            .map(|t| self.size.script(t))
        else {
            return Vec::new();
        };
        let mut events = Vec::new();
        if self.date != previous.date {
            events.push(Event::DateRolledOver(self.date.clone()));
        }
        if self.todo != previous.todo {
            events.push(Event::TodoChanged);
        }
        if self.plan != previous.plan {
            events.push(Event::PlanMode(self.plan));
        }
        if self.instructions.is_some() {
            events.push(Event::InstructionsEdited);
        }
        if self.compaction.is_some() {
            events.push(Event::Compacted);
        }
        events
    }

    /// The messages recorded after this turn's request, split where the agent sends a
    /// continuation: each chunk ends with the last result of an assistant message's tool
    /// calls, and a continuation request follows it. The rest (the final reply) is recorded
    /// without a request after it.
    pub fn continuations(&self) -> (Vec<&[Recorded]>, &[Recorded]) {
        let mut chunks = Vec::new();
        let mut start = 0;
        let mut open: Vec<&str> = Vec::new();
        for (i, m) in self.after.iter().enumerate() {
            match m {
                Recorded::Assistant(v) => {
                    open = v
                        .get("tool_calls")
                        .and_then(Value::as_array)
                        .map(|calls| {
                            calls
                                .iter()
                                .filter_map(|c| c.get("id").and_then(Value::as_str))
                                .collect()
                        })
                        .unwrap_or_default();
                }
                Recorded::Tool { call_id, .. } => {
                    open.retain(|c| c != call_id);
                    if open.is_empty() {
                        chunks.push(&self.after[start..=i]);
                        start = i + 1;
                    }
                }
            }
        }
        (chunks, &self.after[start..])
    }
}

/// What a continuation request follows: the tools the assistant called in `chunk`.
pub fn tools_called(chunk: &[Recorded]) -> Event {
    Event::ToolsCalled(
        chunk
            .iter()
            .filter_map(|m| match m {
                Recorded::Assistant(v) => v.get("tool_calls").and_then(Value::as_array),
                Recorded::Tool { .. } => None,
            })
            .flatten()
            .filter_map(|call| call.pointer("/function/name").and_then(Value::as_str))
            .map(str::to_owned)
            .collect(),
    )
}

/// The events before `request` of `step`: the turn's changes for its user request, the
/// tools called for a continuation.
pub fn request_events(step: &ScriptedTurn, request: &Request<'_>) -> Vec<Event> {
    if !request.is_continuation() {
        return step.events();
    }
    let (chunks, _) = step.continuations();
    // The chunk whose results are new in this request.
    chunks
        .iter()
        .rev()
        .find(|chunk| {
            chunk.iter().any(|m| match m {
                Recorded::Tool { call_id, .. } => request
                    .new_nodes()
                    .iter()
                    .any(|n| n.bytes().contains(call_id.as_str())),
                Recorded::Assistant(_) => false,
            })
        })
        .map(|chunk| vec![tools_called(chunk)])
        .unwrap_or_default()
}

/// The turns before which the history is compacted, with the summary that replaces it.
const COMPACTIONS: [(u64, &str); 2] = [
    (
        10,
        "Summary of turns 1-9: added --json to `status`, found why `cacheline check` exits with 2 (an unknown component id), aligned table columns for wide characters, wrote the deny-wins test, drafted the changelog entry, showed where the prefix fingerprint is computed, renamed `Reason::NotAllowed` and fixed the clippy warnings from CI. Open: the property test for compaction, the benchmark at 2,000 nodes. The user wants small commits and answers of at most five sentences.",
    ),
    (
        24,
        "Summary of turns 1-23: added --json to `status`, wrote the deny-wins test, aligned table columns for wide characters, fixed the clippy warnings from CI and documented [prompt] in agent.toml. Open: the property test for compaction, the benchmark at 2,000 nodes, the changelog entry. The user wants small commits and answers of at most five sentences.",
    ),
];

const QUESTIONS: [&str; 12] = [
    "Add a --json flag to the status command; keep the table output as it is.",
    "Why does `cacheline check` exit with 2 on tests/fixtures/agent-toml/bad/unknown.toml?",
    "The table printer misaligns columns when an id contains wide characters. Fix it.",
    "Write a test for the deny-wins rule: a component both allowed and denied must land in the tail.",
    "Summarize what changed today, for the changelog.",
    "Is the prefix fingerprint stable across processes? Show me where it is computed.",
    "Rename `Reason::NotAllowed` to `Reason::NotInAllowList` everywhere, docs included.",
    "The CI run failed on clippy. Look at the log and fix the warnings.",
    "Add a property test: compaction never changes the prefix bytes.",
    "Profile one turn with a 2,000-node history; where does the time go?",
    "Document agent.toml's [prompt] section with an example for MCP servers.",
    "Review the diff of this branch against the guidelines before I open the PR.",
];

const TODOS: [&str; 8] = [
    "add --json to status",
    "test deny-wins",
    "align table columns with wide characters",
    "document agent.toml",
    "benchmark one turn at 2,000 nodes",
    "fix clippy warnings on CI",
    "property test: compaction keeps the prefix",
    "write the changelog entry",
];

const FILES: [&str; 6] = [
    "prompt-registry/src/cli/mod.rs",
    "prompt-registry/src/status.rs",
    "prompt-core/src/policy.rs",
    "prompt-core/src/compose.rs",
    "prompt-core/src/history.rs",
    "tests/core_policy.rs",
];

const CODE: [&str; 24] = [
    "use std::fmt;",
    "use std::io::{self, Write};",
    "",
    "use serde::Serialize;",
    "",
    "/// Where every component lands under a policy, and why.",
    "#[derive(Debug, Clone, Serialize)]",
    "pub struct StatusReport {",
    "    /// The prompt section.",
    "    pub prompt: PromptStatus,",
    "}",
    "",
    "impl StatusReport {",
    "    pub fn new<'a>(components: impl Iterator<Item = &'a Component>, policy: &PromptPolicy) -> Self {",
    "        let mut rows: Vec<ComponentStatus> = components.map(|c| ComponentStatus::of(c, policy)).collect();",
    "        rows.sort_by(|a, b| (a.placement, &a.id).cmp(&(b.placement, &b.id)));",
    "        Self { prompt: PromptStatus { components: rows } }",
    "    }",
    "",
    "    pub fn to_json(&self) -> String {",
    "        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!(\"{{\\\"error\\\": \\\"{e}\\\"}}\"))",
    "    }",
    "}",
    "",
];

fn file_listing(path: &str, turn: u64, size: ScenarioSize) -> String {
    let lines = size.listing_lines();
    let mut out = format!("{path} (lines 1-{lines} of 311)\n");
    for i in 0..lines {
        let line = CODE[(i + turn as usize) % CODE.len()];
        let line = line.replace("StatusReport", &format!("StatusReport{}", i / 24));
        out.push_str(&format!("{:>4}\t{line}\n", i + 1));
    }
    out
}

fn grep_output(turn: u64, size: ScenarioSize) -> String {
    (0..size.grep_hits())
        .map(|i| {
            let file = FILES[(i + turn as usize) % FILES.len()];
            format!(
                "{file}:{}:    let resolution = policy.resolve(&component); // {}",
                40 + i * 17,
                TODOS[i % TODOS.len()]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn test_output(turn: u64, size: ScenarioSize) -> String {
    let tests = size.tests();
    let mut out = format!(
        "   Compiling prompt-core v0.1.0 (/home/dev/cacheline/prompt-core)\n   Compiling prompt-registry v0.1.0 (/home/dev/cacheline/prompt-registry)\n    Finished `test` profile [unoptimized + debuginfo] target(s) in 14.2s\n     Running tests/core_policy.rs\n\nrunning {tests} tests\n",
    );
    for i in 0..tests {
        let name = [
            "deny_wins",
            "glob_matches",
            "unknown_id_is_an_error",
            "placement_table",
        ][i % 4];
        out.push_str(&format!("test {name}_{i} ... ok\n"));
    }
    let failed = turn.is_multiple_of(4);
    out.push_str(&format!(
        "\ntest result: {}. {} passed; {} failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.{:02}s\n",
        if failed { "FAILED" } else { "ok" },
        tests - usize::from(failed),
        u8::from(failed),
        turn % 100
    ));
    out
}

fn tool_call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": canonical(&arguments)}})
}

/// Turn `turn` of the script (from 1), at [`ScenarioSize::Full`].
pub fn script(turn: u64) -> ScriptedTurn {
    ScenarioSize::Full.script(turn)
}

/// The session-frozen values of the script, at [`ScenarioSize::Full`].
pub fn session_values() -> Result<Extensions, ScenarioError> {
    ScenarioSize::Full.session_values()
}

impl ScenarioSize {
    /// Turn `turn` of the script (from 1), at this size.
    pub fn script(self, turn: u64) -> ScriptedTurn {
        let t = turn.max(1) as usize;
        let question = QUESTIONS[(t - 1) % QUESTIONS.len()];
        let date = match turn {
            ..12 => "2026-11-30",
            12..33 => "2026-12-01",
            _ => "2026-12-02",
        };
        let start = (t - 1) / 4;
        let todo = (0..3)
            .map(|i| TODOS[(start + i) % TODOS.len()].to_owned())
            .collect();
        let dirty = (0..(t % 4))
            .map(|i| FILES[(t + i) % FILES.len()].to_owned())
            .collect();
        let recalled = vec![
            format!(
                "The user prefers small, reviewable commits (relevant to: {}).",
                question.chars().take(40).collect::<String>()
            ),
            format!(
                "Last time {} was touched, the table tests needed updating.",
                FILES[t % FILES.len()]
            ),
        ];
        ScriptedTurn {
            turn,
            size: self,
            date: date.to_owned(),
            todo,
            plan: matches!(t % 10, 5 | 6),
            dirty,
            recalled,
            question: question.to_owned(),
            instructions: (turn == INSTRUCTIONS_EDIT_TURN).then(|| {
                format!(
                    "{ASSISTANT_INSTRUCTIONS} Answer in at most five sentences unless asked for more."
                )
            }),
            compaction: COMPACTIONS
                .iter()
                .find(|(at, _)| *at == turn)
                .map(|(_, summary)| (*summary).to_owned()),
            after: self.after(turn, FILES[t % FILES.len()]),
        }
    }

    /// What the assistant does after turn `turn`'s request: a reply (turns 1, 4, 7, …),
    /// reading `file` (turns 2, 5, …), or grep, edit and test runs (turns 3, 6, …).
    fn after(self, turn: u64, file: &str) -> Vec<Recorded> {
        let reply =
            |text: String| Recorded::Assistant(json!({"role": "assistant", "content": text}));
        match turn.max(1) % 3 {
            1 => vec![reply(self.pick(
                format!("Done. I changed {file} in two places and kept the public API as it was. The existing tests pass; I added one case for turn {turn} that fails without the change. Next I would like to update the docs, unless you prefer to review first."),
                format!("Done: I changed {file} and added a test case for turn {turn}."),
            ))],
            2 => {
                let id = format!("call_{turn}_read");
                vec![
                    Recorded::Assistant(json!({"role": "assistant", "content": null,
                        "reasoning_content": format!("I need to read {file} before changing anything."),
                        "tool_calls": [tool_call(&id, "read_file", json!({"path": file, "limit": self.listing_lines()}))]})),
                    Recorded::Tool {
                        call_id: id,
                        content: file_listing(file, turn, self),
                    },
                    reply(self.pick(
                        format!("{file} builds the report in `StatusReport::new` and prints it in `fmt`. The change belongs in `new`: rows are sorted there. I will edit it and run the policy tests."),
                        "The rows are sorted in `StatusReport::new`; I will edit it there.".to_owned(),
                    )),
                ]
            }
            _ => {
                let grep = format!("call_{turn}_grep");
                let edit = format!("call_{turn}_edit");
                let test = format!("call_{turn}_test");
                let failed = turn.is_multiple_of(4);
                vec![
                    Recorded::Assistant(json!({"role": "assistant", "content": null,
                        "tool_calls": [tool_call(&grep, "grep", json!({"pattern": "policy.resolve", "path": "."}))]})),
                    Recorded::Tool {
                        call_id: grep,
                        content: grep_output(turn, self),
                    },
                    Recorded::Assistant(json!({"role": "assistant", "content": null,
                        "tool_calls": [
                            tool_call(&edit, "edit_file", json!({"path": file, "old": "rows.sort_by(|a, b| (a.placement, &a.id).cmp(&(b.placement, &b.id)));", "new": "rows.sort_by(|a, b| a.id.cmp(&b.id));"})),
                            tool_call(&test, "run_tests", json!({"filter": "core_policy"}))]})),
                    Recorded::Tool {
                        call_id: edit,
                        content: format!("Edited {file}: 1 replacement."),
                    },
                    Recorded::Tool {
                        call_id: test,
                        content: test_output(turn, self),
                    },
                    reply(match (self, failed) {
                        (ScenarioSize::Full, true) => format!("The edit is in and the policy tests ran (turn {turn}). One test fails: the expected order in the fixture assumed placement-first sorting. I will update the fixture next."),
                        (ScenarioSize::Full, false) => format!("The edit is in and the policy tests ran (turn {turn}). All {} pass.", self.tests()),
                        (ScenarioSize::Compact, true) => "Edited; one policy test fails, I will update its fixture.".to_owned(),
                        (ScenarioSize::Compact, false) => "Edited; the policy tests pass.".to_owned(),
                    }),
                ]
            }
        }
    }

    /// The session-frozen values of the script, at this size.
    pub fn session_values(self) -> Result<Extensions, ScenarioError> {
        let mut tools: Vec<Value> =
            serde_json::from_str(DEFAULT_TOOLS).map_err(|source| ScenarioError::Tools {
                origin: "reference::DEFAULT_TOOLS",
                source,
            })?;
        match self {
            ScenarioSize::Full => {
                let extra: Vec<Value> =
                    serde_json::from_str(EXTRA_TOOLS).map_err(|source| ScenarioError::Tools {
                        origin: "scenario::EXTRA_TOOLS",
                        source,
                    })?;
                tools.extend(extra);
            }
            ScenarioSize::Compact => tools.retain(|t| {
                t.pointer("/function/name")
                    .and_then(Value::as_str)
                    .is_some_and(|name| COMPACT_TOOLS.contains(&name))
            }),
        }
        let skills = [
            (
                "release",
                "cut a release: changelog, version bump, tag, publish",
            ),
            (
                "bench",
                "run the divan benchmarks and record the figures in docs/",
            ),
            ("review", "review a diff against the project guidelines"),
            (
                "triage",
                "reproduce an issue, find the first bad commit, label it",
            ),
            (
                "docs",
                "write or update reference documentation from the code",
            ),
            (
                "migrate",
                "move a crate to a new major version of a dependency",
            ),
            ("fuzz", "set up and run cargo-fuzz on a parser"),
            ("ci", "diagnose a failing CI job from its log"),
        ];
        let skills = &skills[..self.pick(skills.len(), 2)];
        Ok(Extensions::new()
            .with(Environment {
                os: "linux".into(),
                project_root: "/home/dev/cacheline".into(),
            })
            .with(ProjectMemory(
                self.pick(PROJECT_MEMORY, COMPACT_PROJECT_MEMORY).to_owned(),
            ))
            .with(SkillList(
                skills
                    .iter()
                    .map(|(n, d)| ((*n).to_owned(), (*d).to_owned()))
                    .collect(),
            ))
            .with(ToolCatalog(tools)))
    }
}

impl ScenarioSize {
    /// The script's tools as a [`ToolSet`] (built-in source): what a session sends in the
    /// request's `tools` field.
    pub fn tools(self) -> Result<ToolSet, ScenarioError> {
        let values = self.session_values()?;
        let catalog = values
            .get::<ToolCatalog>()
            .map(|c| Value::Array(c.0.clone()))
            .unwrap_or_default();
        ToolSet::from_openai(&[(ToolSource::builtin(), &catalog)])
            .map_err(|e| ScenarioError::ToolSet(e.to_string()))
    }
}

/// The per-turn values of a scripted turn.
pub fn turn_values(turn: &ScriptedTurn) -> Extensions {
    Extensions::new()
        .with(Today(turn.date.clone()))
        .with(TodoList(turn.todo.clone()))
        .with(PlanMode(turn.plan))
        .with(GitState {
            branch: "feature/status-json".into(),
            dirty: turn.dirty.clone(),
        })
        .with(RecalledMemories(turn.recalled.clone()))
}

/// One composed request: its messages, serialized, and its Anthropic breakpoints (message
/// counts).
#[derive(Debug, Clone)]
pub struct ComposedRequest {
    /// The turn.
    pub turn: u64,
    /// The request's number in the session, counting turns and continuations from 1.
    pub sequence: u64,
    /// Whether it continues after tool results (no new user message).
    pub continuation: bool,
    /// The messages, each as sent.
    pub messages: Vec<String>,
    /// Breakpoints, as message counts.
    pub breakpoints: Vec<usize>,
}

impl ComposedRequest {
    /// The request as sent, `[m0,m1,…]`; for `cacheline`, byte for byte what
    /// [`Request::to_bytes`] gave.
    pub fn to_bytes(&self) -> Vec<u8> {
        let len = self.messages.iter().map(|m| m.len() + 1).sum::<usize>() + 1;
        let mut out = Vec::with_capacity(len);
        out.push(b'[');
        for (i, m) in self.messages.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(m.as_bytes());
        }
        out.push(b']');
        out
    }
}

/// Composes `turns` turns of the script under every strategy, at [`ScenarioSize::Full`], in
/// [`Strategy::ALL`] order: what `cacheline simulate` replays.
pub fn compose_all(
    registry: &Registry,
    turns: u64,
) -> Result<Vec<(Strategy, Vec<ComposedRequest>)>, ScenarioError> {
    Strategy::ALL
        .into_iter()
        .map(|strategy| Ok((strategy, compose(strategy, registry, turns)?)))
        .collect()
}

/// Composes `turns` turns of the script under `strategy`, at [`ScenarioSize::Full`].
pub fn compose(
    strategy: Strategy,
    registry: &Registry,
    turns: u64,
) -> Result<Vec<ComposedRequest>, ScenarioError> {
    ScenarioSize::Full.compose(strategy, registry, turns)
}

impl ScenarioSize {
    /// Composes `turns` turns of the script under `strategy`, at this size (`cacheline`:
    /// under [`default_policy`]).
    pub fn compose(
        self,
        strategy: Strategy,
        registry: &Registry,
        turns: u64,
    ) -> Result<Vec<ComposedRequest>, ScenarioError> {
        match strategy {
            Strategy::Cacheline => {
                compose_cacheline(self, registry, &default_policy(registry)?, turns)
            }
            Strategy::ReplaceAtHead | Strategy::AppendSystem => {
                compose_baseline(self, strategy, registry, turns)
            }
        }
    }

    /// Plays `turns` turns of the script, at this size, through the library's
    /// [`prompt_registry::Session`] under `policy`: see [`run_cacheline`].
    pub fn run_cacheline<F>(
        self,
        registry: &Registry,
        policy: &PromptPolicy,
        turns: u64,
        mut each: F,
    ) -> Result<(), ScenarioError>
    where
        F: FnMut(&ScriptedTurn, &Request<'_>) -> Result<(), ScenarioError>,
    {
        let mut session = registry.start_session(
            policy,
            SessionContext::new(self.session_values()?),
            SessionOptions::default(),
        )?;
        self.play(&mut session, 1..=turns, &mut each)
    }

    /// Plays turns `turns` of the script through `session`: before each turn's request it
    /// sets the edited instructions and compacts the history as the script says (keeping
    /// at least the last [`KEEP_AFTER_COMPACTION`] messages, never separating a tool call
    /// from its results); after it, it records the assistant's tool calls and their
    /// results, composing a continuation after each call's results, as an agent does; then
    /// the final reply. `each` gets every request as composed.
    pub fn play<F>(
        self,
        session: &mut Session,
        turns: std::ops::RangeInclusive<u64>,
        each: &mut F,
    ) -> Result<(), ScenarioError>
    where
        F: FnMut(&ScriptedTurn, &Request<'_>) -> Result<(), ScenarioError>,
    {
        self.play_with(session, turns, &mut |_, _| Ok(()), each)
    }

    /// [`ScenarioSize::play`], calling `before` with each turn before anything of it is
    /// done: where an MCP server connects, or an agent refreshes what it froze.
    pub fn play_with<F>(
        self,
        session: &mut Session,
        turns: std::ops::RangeInclusive<u64>,
        before: &mut dyn FnMut(&ScriptedTurn, &mut Session) -> Result<(), ScenarioError>,
        each: &mut F,
    ) -> Result<(), ScenarioError>
    where
        F: FnMut(&ScriptedTurn, &Request<'_>) -> Result<(), ScenarioError>,
    {
        self.play_inner(session, turns, None, before, each)
    }

    /// [`ScenarioSize::play`] as one of many users of the same agent: every question starts
    /// with `(user) `, so sessions share the frozen prefix and nothing after it (a fleet of
    /// sessions, as `cacheline bench-fleet` plays them).
    pub fn play_as<F>(
        self,
        user: &str,
        session: &mut Session,
        turns: std::ops::RangeInclusive<u64>,
        each: &mut F,
    ) -> Result<(), ScenarioError>
    where
        F: FnMut(&ScriptedTurn, &Request<'_>) -> Result<(), ScenarioError>,
    {
        self.play_inner(session, turns, Some(user), &mut |_, _| Ok(()), each)
    }

    fn play_inner<F>(
        self,
        session: &mut Session,
        turns: std::ops::RangeInclusive<u64>,
        user: Option<&str>,
        before: &mut dyn FnMut(&ScriptedTurn, &mut Session) -> Result<(), ScenarioError>,
        each: &mut F,
    ) -> Result<(), ScenarioError>
    where
        F: FnMut(&ScriptedTurn, &Request<'_>) -> Result<(), ScenarioError>,
    {
        for turn in turns {
            let step = self.script(turn);
            before(&step, session)?;
            step.prepare(session)?;
            let question = match user {
                Some(user) => format!("({user}) {}", step.question),
                None => step.question.clone(),
            };
            let request = session.turn(turn_values(&step), question)?;
            each(&step, &request)?;
            let (chunks, rest) = step.continuations();
            for chunk in chunks {
                record(session, chunk)?;
                let request = session.continuation(turn_values(&step))?;
                each(&step, &request)?;
            }
            record(session, rest)?;
        }
        Ok(())
    }
}

/// What a tool call the model made itself gets as its result in [`ScenarioSize::play_live`]:
/// the script goes on with its own calls.
pub const NOT_RUN: &str = "(not run: the scripted session goes on)";

impl ScenarioSize {
    /// Plays turns `turns` of the script through `conversation` with a live model's
    /// replies: `send` sends each request (`next`, composed with
    /// [`Conversation::compose`](prompt_registry::Conversation::compose)) and records the
    /// model's reply into the conversation, as an agent does.
    ///
    /// Before each turn's request the edited instructions and the compaction come as in
    /// [`ScenarioSize::play`]. The script's tool rounds stay scripted (a small model does
    /// not call tools reliably): after the reply to a request that the script answers with
    /// tool calls, the script's assistant message with those calls and their results are
    /// recorded, and the continuation is sent. The script's final assistant messages are
    /// not recorded: the model's reply to the turn's last request is its answer. A call the
    /// model made itself is answered with [`NOT_RUN`] before the script goes on.
    pub fn play_live<E>(
        self,
        conversation: &mut Conversation,
        turns: std::ops::RangeInclusive<u64>,
        send: &mut dyn FnMut(&ScriptedTurn, &mut Conversation, Next) -> Result<(), E>,
    ) -> Result<(), E>
    where
        E: From<ScenarioError>,
    {
        for turn in turns {
            let step = self.script(turn);
            step.prepare(conversation.session_mut())?;
            send(
                &step,
                conversation,
                Next::turn(turn_values(&step), step.question.clone()),
            )?;
            let (chunks, _answer) = step.continuations();
            for chunk in chunks {
                answer_open_calls(conversation.session_mut())?;
                record(conversation.session_mut(), chunk)?;
                send(&step, conversation, Next::continuation(turn_values(&step)))?;
            }
            answer_open_calls(conversation.session_mut())?;
        }
        Ok(())
    }
}

impl ScenarioSize {
    /// A conversation of the script at this size to `api`: `registry`'s components under
    /// `policy`, the session's values with the tool schemas in the API's tools field
    /// ([`ToolsField`]), a wire with `wire`. What [`ScenarioSize::play_live`] plays.
    pub fn conversation(
        self,
        registry: &Registry,
        policy: &PromptPolicy,
        api: ApiKind,
        wire: WireOptions,
    ) -> Result<Conversation, ScenarioError> {
        let mut values = self.session_values()?;
        values.insert(ToolsField);
        Ok(Conversation::start(
            registry.components().cloned().collect(),
            policy,
            SessionContext::new(values),
            prompt_registry::wire::session_options(api, self.tools()?),
            api,
            wire,
        )?)
    }
}

/// The wire options of a live session on llama.cpp's server: greedy (`temperature: 0`),
/// `max_tokens` tokens per reply (`max_output_tokens` on Responses), streamed or not. On
/// `/v1/messages` the per-request tail is a user message of its own
/// ([`WireOptions::tail_in_own_message`]): the server puts a message's text before its tool
/// results, so a tail merged after them would come first in the prompt.
pub fn llama_cpp_wire_options(api: ApiKind, max_tokens: u32, stream: bool) -> WireOptions {
    let mut options = WireOptions::new("smollm2").param("temperature", &json!(0));
    options = match api {
        ApiKind::OpenAiResponses => options.param("max_output_tokens", &json!(max_tokens)),
        ApiKind::Anthropic => options
            .param("max_tokens", &json!(max_tokens))
            .tail_in_own_message(),
        _ => options.param("max_tokens", &json!(max_tokens)),
    };
    if stream {
        options = options.param("stream", &json!(true));
    }
    options
}

/// Answers the calls the model made itself with [`NOT_RUN`].
fn answer_open_calls(session: &mut Session) -> Result<(), ScenarioError> {
    for id in session.history().open_tool_calls() {
        session.record_tool_result(&id, NOT_RUN)?;
    }
    Ok(())
}

impl ScriptedTurn {
    /// What the script does before the turn's request: the edited instructions, the
    /// compaction (keeping at least the last [`KEEP_AFTER_COMPACTION`] messages, never
    /// separating a tool call from its results).
    fn prepare(&self, session: &mut Session) -> Result<(), ScenarioError> {
        if let Some(text) = &self.instructions {
            session.set_system_prompt(text);
        }
        if let Some(summary) = &self.compaction {
            let cut = session.history().safe_cut(0, KEEP_AFTER_COMPACTION);
            if cut > 0 {
                session.compact(0..cut, summary)?;
            }
        }
        Ok(())
    }
}

/// Records scripted messages into a session.
fn record(session: &mut Session, messages: &[Recorded]) -> Result<(), ScenarioError> {
    for m in messages {
        match m {
            Recorded::Assistant(v) => session.record_assistant(v)?,
            Recorded::Tool { call_id, content } => session.record_tool_result(call_id, content)?,
        }
    }
    Ok(())
}

/// One request of the script composed both ways, as `cacheline bench-live` sends it.
#[derive(Debug, Clone)]
pub struct PairedTurn {
    /// Turn number, from 1.
    pub turn: u64,
    /// The request's label: the turn (`3`) for a user request, the turn and the
    /// continuation's number (`3.2`) for a continuation.
    pub label: String,
    /// What changed before this request.
    pub events: Vec<String>,
    /// The request as the library composes it (prefix, append-only history, tail).
    pub library: Vec<u8>,
    /// The same turn with every writer rendered into message 0 ([`Strategy::ReplaceAtHead`]).
    pub head: Vec<u8>,
}

impl ScenarioSize {
    /// Composes `turns` turns of the script at this size both ways: through the library's
    /// session under `policy`, and replace-at-head as `cacheline simulate` composes it.
    pub fn paired(
        self,
        registry: &Registry,
        policy: &PromptPolicy,
        turns: u64,
    ) -> Result<Vec<PairedTurn>, ScenarioError> {
        let mut labels = RequestLabels::default();
        self.paired_with(registry, policy, turns, |step, request| {
            Ok((
                step.turn,
                labels.next(step.turn, request.is_continuation()),
                request_events(step, request),
                request.to_bytes(),
            ))
        })?
        .into_iter()
        .map(|((turn, label, events, library), head)| {
            Ok(PairedTurn {
                turn,
                label,
                events: events.iter().map(ToString::to_string).collect(),
                library,
                head: head.to_bytes(),
            })
        })
        .collect()
    }

    /// The one driver of "the library against replace-at-head": plays the script through the
    /// library's session under `policy`, handing each turn and its [`Request`] to `each`,
    /// then composes the same turns replace-at-head; returns each turn's result beside the
    /// baseline's request.
    pub fn paired_with<T>(
        self,
        registry: &Registry,
        policy: &PromptPolicy,
        turns: u64,
        mut each: impl FnMut(&ScriptedTurn, &Request<'_>) -> Result<T, ScenarioError>,
    ) -> Result<Vec<(T, ComposedRequest)>, ScenarioError> {
        let mut library = Vec::new();
        self.run_cacheline(registry, policy, turns, |step, request| {
            library.push(each(step, request)?);
            Ok(())
        })?;
        let head = self.compose(Strategy::ReplaceAtHead, registry, turns)?;
        Ok(library.into_iter().zip(head).collect())
    }
}

/// Labels requests as the reports show them: `3` for turn 3's user request, `3.1`, `3.2`
/// for the continuations that follow it.
#[derive(Debug, Default)]
pub struct RequestLabels {
    turn: u64,
    continuation: u64,
}

impl RequestLabels {
    /// Labels that go on after a request of `turn` with `continuation` continuations.
    pub fn resume(turn: u64, continuation: u64) -> Self {
        Self { turn, continuation }
    }

    /// The turn and continuation of the last label: what [`RequestLabels::resume`] takes.
    pub fn state(&self) -> (u64, u64) {
        (self.turn, self.continuation)
    }

    /// The label of the next request.
    pub fn next(&mut self, turn: u64, continuation: bool) -> String {
        if continuation && turn == self.turn {
            self.continuation += 1;
            format!("{turn}.{}", self.continuation)
        } else {
            self.turn = turn;
            self.continuation = 0;
            turn.to_string()
        }
    }
}

fn split_messages(turn: u64, bytes: &[u8]) -> Result<Vec<String>, ScenarioError> {
    let raw: Vec<&RawValue> =
        serde_json::from_slice(bytes).map_err(|source| ScenarioError::Request { turn, source })?;
    Ok(raw.into_iter().map(|m| m.get().to_owned()).collect())
}

/// The request as the simulator reads it: messages and Anthropic breakpoints.
fn composed(step: &ScriptedTurn, request: &Request<'_>) -> Result<ComposedRequest, ScenarioError> {
    let stable = request.message_count() - request.ephemeral().len();
    let breakpoints = if request.has_prefix() {
        vec![1, stable]
    } else {
        vec![stable]
    };
    Ok(ComposedRequest {
        turn: step.turn,
        sequence: request.sequence(),
        continuation: request.is_continuation(),
        messages: split_messages(step.turn, &request.to_bytes())?,
        breakpoints,
    })
}

/// How the tools and guidance of an MCP server that connects mid-session reach the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum McpArrival {
    /// Refresh the frozen prefix at once: a new cache epoch at the connection.
    RefreshNow,
    /// Announce the server in the tail at once, and refresh at the next compaction, which
    /// starts a new epoch anyway.
    DeferToCompaction,
}

impl McpArrival {
    /// `mcp_refresh_now` or `mcp_refresh_deferred`: the arm's name in `cacheline simulate`.
    pub fn as_str(self) -> &'static str {
        match self {
            McpArrival::RefreshNow => "mcp_refresh_now",
            McpArrival::DeferToCompaction => "mcp_refresh_deferred",
        }
    }
}

/// The GitHub MCP server's tool schemas, as it lists them.
pub fn mcp_github_tools() -> Vec<Value> {
    ["search_issues", "create_issue", "get_pull_request"]
        .iter()
        .map(|name| {
            json!({"type": "function", "function": {"name": name,
                "description": format!("GitHub: {}.", name.replace('_', " ")),
                "parameters": {"type": "object", "properties": {"repo": {"type": "string"}, "query": {"type": "string"}}, "required": ["repo"]}}})
        })
        .collect()
}

/// Composes the script at [`ScenarioSize::Full`] with a GitHub MCP server connecting before
/// turn `connect_at`, its tools and guidance taken in as `arrival` says.
pub fn compose_mcp_arrival(
    registry: &Registry,
    turns: u64,
    connect_at: u64,
    arrival: McpArrival,
) -> Result<Vec<ComposedRequest>, ScenarioError> {
    let size = ScenarioSize::Full;
    let policy = default_policy(registry)?;
    let mut session = registry.start_session(
        &policy,
        SessionContext::new(size.session_values()?),
        SessionOptions::default(),
    )?;
    let guidance = || {
        ComponentId::new("mcp:github").map(|id| {
            Component::session(id, |_| {
                Some("GitHub MCP server: search issues before opening one; link pull requests by number.".to_owned())
            })
        })
    };
    // The new prefix: the server's guidance promoted, its tools in the catalog.
    let promoted = registry
        .load_policy(
            &format!("{DEFAULT_AGENT_TOML}\n[prompt.placement]\n\"mcp:github\" = \"prefix\"\n")
                .replace("prefix_allow = [", "prefix_allow = [\n  \"mcp:github\","),
            "<built-in agent.toml + mcp:github>",
        )?
        .deny_warnings()?;
    let mut out = Vec::new();
    let mut before = |step: &ScriptedTurn, session: &mut Session| -> Result<(), ScenarioError> {
        if step.turn != connect_at {
            return Ok(());
        }
        let Ok(guidance) = guidance() else {
            return Ok(());
        };
        let mut components: Vec<Component> = registry.components().cloned().collect();
        components.push(guidance);
        let mut values = size.session_values()?;
        if let Some(ToolCatalog(tools)) = values.get::<ToolCatalog>().cloned() {
            values.insert(ToolCatalog(
                tools.into_iter().chain(mcp_github_tools()).collect(),
            ));
        }
        let context = SessionContext::new(values);
        match arrival {
            McpArrival::RefreshNow => {
                session.refresh(
                    components,
                    &promoted,
                    session.tools().clone(),
                    Some(context),
                )?;
            }
            McpArrival::DeferToCompaction => {
                // Announced in the tail now (run-time components request the tail)…
                session.refresh(components.clone(), &policy, session.tools().clone(), None)?;
                // …and moved into the prefix by the next compaction.
                session.refresh_at_next_compaction(
                    components,
                    &promoted,
                    session.tools().clone(),
                    Some(context),
                )?;
            }
        }
        Ok(())
    };
    size.play_with(
        &mut session,
        1..=turns,
        &mut before,
        &mut |step, request| {
            out.push(composed(step, request)?);
            Ok(())
        },
    )?;
    Ok(out)
}

fn compose_cacheline(
    size: ScenarioSize,
    registry: &Registry,
    policy: &PromptPolicy,
    turns: u64,
) -> Result<Vec<ComposedRequest>, ScenarioError> {
    let mut out = Vec::new();
    size.run_cacheline(registry, policy, turns, |step, request| {
        out.push(composed(step, request)?);
        Ok(())
    })?;
    Ok(out)
}

/// [`DEFAULT_AGENT_TOML`] loaded against `registry`: the policy `compose` uses.
pub fn default_policy(registry: &Registry) -> Result<PromptPolicy, ScenarioError> {
    Ok(registry
        .load_policy(DEFAULT_AGENT_TOML, "<built-in agent.toml>")?
        .deny_warnings()?)
}

/// Plays `turns` turns of the script, at [`ScenarioSize::Full`], through the library's
/// [`prompt_registry::Session`] under `policy` (the `cacheline` strategy): before each request it
/// sets the edited instructions and compacts the history as the script says (keeping the
/// last [`KEEP_AFTER_COMPACTION`] messages), hands the turn and its [`Request`] to `each`,
/// then records the turn's assistant messages and tool results.
pub fn run_cacheline<F>(
    registry: &Registry,
    policy: &PromptPolicy,
    turns: u64,
    each: F,
) -> Result<(), ScenarioError>
where
    F: FnMut(&ScriptedTurn, &Request<'_>) -> Result<(), ScenarioError>,
{
    ScenarioSize::Full.run_cacheline(registry, policy, turns, each)
}

/// Every writer's text for this turn in one string, in the library's prefix order
/// (constant, session, per-turn; then by id), the instructions as currently edited.
fn head_text(
    components: &[&Component],
    session: &SessionContext,
    values: &Extensions,
    turn: u64,
    instructions: &str,
) -> String {
    let ctx = TurnContext::new(session, values, turn);
    components
        .iter()
        .filter_map(|c| {
            if c.id().as_str() == "assistant_instructions" {
                return Some(instructions.to_owned());
            }
            match c.content() {
                Content::Static(t) => Some(t.to_string()),
                Content::Session(f) => f(session),
                Content::Turn(f) => f(&ctx),
            }
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

fn compose_baseline(
    size: ScenarioSize,
    strategy: Strategy,
    registry: &Registry,
    turns: u64,
) -> Result<Vec<ComposedRequest>, ScenarioError> {
    let session = SessionContext::new(size.session_values()?);
    let mut components: Vec<&Component> = registry.components().collect();
    components.sort_by(|a, b| (a.stability(), a.id()).cmp(&(b.stability(), b.id())));
    let mut instructions = ASSISTANT_INSTRUCTIONS.to_owned();
    // replace_at_head: the history after the head. append_system: the whole message list.
    let mut history: Vec<Value> = Vec::new();
    let style = DeliveryStyle::system();
    let mut out = Vec::new();
    let mut sequence = 0;
    for turn in 1..=turns {
        let step = size.script(turn);
        if let Some(text) = &step.instructions {
            instructions.clone_from(text);
        }
        if let Some(summary) = &step.compaction {
            let summary = json!({"role": "system", "content": summary});
            let keep_from = safe_keep_from(&history, KEEP_AFTER_COMPACTION);
            let kept = history.split_off(keep_from);
            history = match strategy {
                Strategy::AppendSystem => {
                    let first: Vec<Value> = history.into_iter().take(1).collect();
                    first.into_iter().chain([summary]).chain(kept).collect()
                }
                _ => std::iter::once(summary).chain(kept).collect(),
            };
        }
        let head = head_text(
            &components,
            &session,
            &turn_values(&step),
            turn,
            &instructions,
        );
        // append_system keeps the head in the list (appended whole when it changes);
        // replace_at_head writes it over message 0 of every request.
        if strategy == Strategy::AppendSystem {
            set_system_prompt(&mut history, &head, &style);
        }
        let compose = |history: &[Value]| -> Vec<String> {
            match strategy {
                // Keys sorted whatever the program's serde_json features, as the library
                // writes values.
                Strategy::AppendSystem => history.iter().map(canonical).collect(),
                _ => std::iter::once(json!({"role": "system", "content": head}))
                    .chain(history.iter().cloned())
                    .map(|m| canonical(&m))
                    .collect(),
            }
        };
        history.push(json!({"role": "user", "content": step.question}));
        let mut continuation = false;
        let (chunks, rest) = step.continuations();
        for chunk in chunks.into_iter().map(Some).chain([None]) {
            let messages = compose(&history);
            sequence += 1;
            out.push(ComposedRequest {
                turn,
                sequence,
                continuation,
                breakpoints: vec![1, messages.len()],
                messages,
            });
            let Some(chunk) = chunk else { break };
            history.extend(chunk.iter().map(Recorded::message));
            continuation = true;
        }
        history.extend(rest.iter().map(Recorded::message));
    }
    Ok(out)
}

/// Where to cut a message list to keep at least its last `keep` messages without separating
/// a tool call from its results: the baseline's compaction keeps what the library keeps.
fn safe_keep_from(history: &[Value], keep: usize) -> usize {
    let calls = |m: &Value| -> Vec<String> {
        m.get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut cut = history.len().saturating_sub(keep);
    while cut > 0 {
        let kept_answers_a_dropped_call = history[cut..].iter().any(|m| {
            m.get("tool_call_id")
                .and_then(Value::as_str)
                .is_some_and(|id| {
                    history[..cut]
                        .iter()
                        .any(|earlier| calls(earlier).iter().any(|c| c == id))
                })
        });
        if !kept_answers_a_dropped_call {
            break;
        }
        cut -= 1;
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_composed_cacheline_request_is_the_sessions_request_byte_for_byte() {
        let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
        let policy = default_policy(&registry).unwrap_or_else(|e| panic!("{e}"));
        let mut sent = Vec::new();
        run_cacheline(&registry, &policy, 4, |_, request| {
            sent.push(request.to_bytes());
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let composed = compose(Strategy::Cacheline, &registry, 4).unwrap_or_else(|e| panic!("{e}"));
        let composed: Vec<Vec<u8>> = composed.iter().map(ComposedRequest::to_bytes).collect();
        assert_eq!(sent, composed);
    }

    /// The users of a fleet share the agent's prefix and nothing after it; each has its own
    /// routing key, and its question carries its name.
    #[test]
    fn fleet_sessions_share_the_prefix_and_keep_their_own_key() {
        let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
        let policy = default_policy(&registry).unwrap_or_else(|e| panic!("{e}"));
        let sessions = fleet_sessions(ScenarioSize::Compact, &registry, &policy, "run", 3, 3, 4)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sessions.len(), 3);
        let keys: std::collections::BTreeSet<&str> =
            sessions.iter().map(|s| s.routing_key.as_str()).collect();
        assert_eq!(keys.len(), 3, "one key per session");
        let first = |i: usize| -> Value {
            serde_json::from_slice(&sessions[i].requests[0].1).unwrap_or_else(|e| panic!("{e}"))
        };
        let (a, b) = (first(0), first(1));
        assert_eq!(a["tools"], b["tools"]);
        assert_eq!(
            a["messages"][0], b["messages"][0],
            "the frozen prefix is shared"
        );
        assert_eq!(
            a["prompt_cache_key"].as_str(),
            Some(sessions[0].routing_key.as_str())
        );
        let question = |v: &Value| {
            v["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["role"] == "user")
                .map(|m| m["content"].to_string())
                .collect::<String>()
        };
        assert!(question(&a).contains("(run-0) "), "{}", question(&a));
        assert!(question(&b).contains("(run-1) "), "{}", question(&b));
        assert_eq!(
            sessions[0].requests.len(),
            sessions[1].requests.len(),
            "the same script"
        );
    }

    #[test]
    fn the_compact_size_plays_the_same_script_smaller() {
        for turn in 1..=40 {
            let (full, compact) = (script(turn), ScenarioSize::Compact.script(turn));
            assert_eq!(full.events(), compact.events(), "turn {turn}");
            assert_eq!(
                (&full.question, &full.date, &full.todo, full.plan),
                (
                    &compact.question,
                    &compact.date,
                    &compact.todo,
                    compact.plan
                ),
                "turn {turn}"
            );
            assert_eq!(full.instructions, compact.instructions, "turn {turn}");
            assert_eq!(full.compaction, compact.compaction, "turn {turn}");
            let size = |t: &ScriptedTurn| -> usize {
                t.after.iter().map(|m| m.message().to_string().len()).sum()
            };
            assert!(size(&compact) < size(&full), "turn {turn}");
        }
        let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
        let bytes = |size: ScenarioSize| -> usize {
            size.compose(Strategy::Cacheline, &registry, 8)
                .unwrap_or_else(|e| panic!("{e}"))
                .iter()
                .map(|r| r.to_bytes().len())
                .sum()
        };
        assert!(bytes(ScenarioSize::Compact) * 3 < bytes(ScenarioSize::Full));
    }

    #[test]
    fn events_name_what_the_script_changes() {
        let names = |turn| -> Vec<String> {
            script(turn)
                .events()
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert!(names(1).is_empty());
        assert_eq!(names(2), Vec::<String>::new());
        assert!(names(3).is_empty(), "tool calls are continuation events");
        let turn_2 = script(2);
        let (chunks, rest) = turn_2.continuations();
        assert_eq!(chunks.len(), 1);
        assert_eq!(
            tools_called(chunks[0]).to_string(),
            "the assistant called read_file"
        );
        assert_eq!(rest.len(), 1);
        let turn_3 = script(3);
        let (chunks, _) = turn_3.continuations();
        let called: Vec<String> = chunks.iter().map(|c| tools_called(c).to_string()).collect();
        assert_eq!(
            called,
            [
                "the assistant called grep",
                "the assistant called edit_file, run_tests"
            ]
        );
        assert!(names(5).contains(&"plan mode turned on".to_owned()));
        assert!(names(7).contains(&"the assistant instructions were edited".to_owned()));
        assert!(names(10).contains(&"the history was compacted (new cache epoch)".to_owned()));
        assert!(names(12).contains(&"the date rolled over midnight (2026-12-01)".to_owned()));
    }
}

/// One session of a fleet: its routing key and each request's Chat Completions body.
#[derive(Debug, Clone)]
pub struct FleetSessionBodies {
    /// The session's routing key, as `prompt_wire::Wire::routing_header` gives it.
    pub routing_key: String,
    /// `(label, body)` of each request, in order.
    pub requests: Vec<(String, Vec<u8>)>,
}

/// `sessions` users of one agent playing the script's first `turns` turns at `size`
/// (each question tagged with its user, [`ScenarioSize::play_as`]): every session has the
/// session values of `size`, its tools in the tools field and its own session id
/// (`{run}-{i}`); each request is written as llama.cpp's Chat Completions body
/// (`ApiKind::LlamaCpp`, model `smollm2`, greedy, `max_tokens` tokens). What
/// `cacheline bench-fleet` sends through a router.
pub fn fleet_sessions(
    size: ScenarioSize,
    registry: &Registry,
    policy: &PromptPolicy,
    run: &str,
    sessions: usize,
    turns: u64,
    max_tokens: u32,
) -> Result<Vec<FleetSessionBodies>, ScenarioError> {
    use prompt_registry::wire::{self, Wire, WireOptions};
    let api = prompt_registry::ApiKind::LlamaCpp;
    let tools = size.tools()?;
    (0..sessions)
        .map(|i| {
            let mut values = size.session_values()?;
            values.insert(crate::components::ToolsField);
            let id = format!("{run}-{i}");
            let mut session = Session::start(
                registry.components().cloned().collect(),
                policy,
                SessionContext::new(values),
                wire::session_options(api, tools.clone()).with_session_id(id.clone()),
            )?;
            let options = WireOptions::new("smollm2")
                .param("temperature", &json!(0))
                .param("max_tokens", &json!(max_tokens));
            let mut wire = Wire::new(api, options)?;
            let mut labels = RequestLabels::default();
            let mut requests = Vec::new();
            let mut routing_key = String::new();
            let mut failed = None;
            size.play_as(&id, &mut session, 1..=turns, &mut |step, request| {
                routing_key = wire.routing_header(request).1;
                match wire.body(request) {
                    Ok(body) => {
                        let label = labels.next(step.turn, request.is_continuation());
                        requests.push((label, body.to_bytes()));
                        Ok(())
                    }
                    Err(e) => {
                        failed = Some(e);
                        Err(ScenarioError::Stopped)
                    }
                }
            })
            .map_err(|e| failed.take().map_or(e, ScenarioError::Wire))?;
            Ok(FleetSessionBodies {
                routing_key,
                requests,
            })
        })
        .collect()
}
