//! A scripted session over the reference components: what `cacheline demo` prints.
//!
//! Over the turns the date rolls over midnight, the todo list changes, plan mode toggles,
//! the assistant instructions are edited, tools are called, an MCP server's guidance is
//! registered at run time, and the history is compacted. For every turn the report gives the
//! request size, the bytes reused from the previous request, and the same figure for the old
//! replace-at-head composition (everything rewritten into message 0 each turn).

use prompt_core::{
    Component, ComponentId, ComposeError, Content, DeliveryStyle, Extensions, NodeKind, Producer,
    PromptPolicy, SessionContext, SessionOptions, TurnContext,
};
use serde::Serialize;
use serde_json::json;

use crate::reference::{
    ASSISTANT_INSTRUCTIONS, Environment, GitState, PlanMode, ProjectMemory, RecalledMemories,
    SkillList, Today, TodoList,
};
use crate::{Namespace, Registry, RegistryError};

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// Registry problem (duplicate id, bad namespace).
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Composition problem (a prefix component changed).
    #[error(transparent)]
    Compose(#[from] ComposeError),
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

/// One turn of the demo.
#[derive(Debug, Clone, Serialize)]
pub struct DemoTurn {
    /// Turn number, from 1.
    pub turn: u64,
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
}

fn lcp(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

const QUESTIONS: [&str; 6] = [
    "Add a --json flag to the status command.",
    "Why does the check command exit with 2 on this file?",
    "Refactor the table printer so columns align with wide characters.",
    "Write a test for the deny-wins rule.",
    "Summarize what changed today.",
    "Is the prefix fingerprint stable across processes?",
];

fn todo_at(turn: u64) -> Vec<String> {
    let all = [
        "add --json to status",
        "test deny-wins",
        "align table columns",
        "document agent.toml",
        "benchmark one turn",
    ];
    // The list changes every few turns: an item is done, another appears.
    let start = (turn / 3) as usize % all.len();
    (0..3)
        .map(|i| all[(start + i) % all.len()].to_owned())
        .collect()
}

fn session_values() -> Extensions {
    Extensions::new()
        .with(Environment {
            os: "linux".into(),
            project_root: "/home/dev/cacheline".into(),
        })
        .with(ProjectMemory(
            "Rust workspace. Run `cargo test --workspace`. Errors use thiserror. Keep README tables measured.".into(),
        ))
        .with(SkillList(vec![
            ("release".into(), "cut a release: changelog, tag, publish".into()),
            ("bench".into(), "run and record benchmarks".into()),
        ]))
}

fn turn_values(turn: u64, date: &str, todo: Vec<String>, plan: bool) -> Extensions {
    Extensions::new()
        .with(Today(date.into()))
        .with(TodoList(todo))
        .with(PlanMode(plan))
        .with(GitState {
            branch: "main".into(),
            dirty: (0..turn % 3).map(|i| format!("src/file{i}.rs")).collect(),
        })
        .with(RecalledMemories(vec![format!(
            "memory relevant to question {turn}"
        )]))
}

/// Runs the scripted session for `turns` turns under `policy`.
pub fn run(
    registry: &Registry,
    policy: &PromptPolicy,
    turns: u64,
) -> Result<Vec<DemoTurn>, DemoError> {
    let mut registry = registry.clone();
    let mcp_id = ComponentId::new("mcp:github").map_err(|source| RegistryError::InvalidId {
        location: prompt_core::SourceLocation::caller(),
        source,
    })?;
    registry.register_dynamic(
        Namespace::Mcp,
        Component::session(mcp_id, |_| {
            Some("GitHub MCP server: use github_search before opening issues.".to_owned())
        })
        .describe("guidance sent by the GitHub MCP server"),
    )?;
    let mut session = registry.start_session(
        policy,
        SessionContext::new(session_values()),
        SessionOptions {
            delivery: DeliveryStyle::system(),
        },
    )?;
    // The replace-at-head baseline renders every writer itself, from the same values.
    let baseline_ctx = SessionContext::new(session_values());
    let mut out = Vec::new();
    let mut previous: Vec<u8> = Vec::new();
    let mut head_previous: Vec<u8> = Vec::new();
    let mut head_history: Vec<serde_json::Value> = Vec::new();
    let mut instructions = ASSISTANT_INSTRUCTIONS.to_owned();
    let mut last_todo: Vec<String> = Vec::new();
    let mut plan = false;
    for turn in 1..=turns {
        let mut events = Vec::new();
        let date = if turn >= 4 {
            "2026-12-01"
        } else {
            "2026-11-30"
        };
        if turn == 4 {
            events.push("the date rolled over midnight".to_owned());
        }
        let todo = todo_at(turn);
        if turn > 1 && todo != last_todo {
            events.push("the todo list changed".to_owned());
        }
        last_todo = todo.clone();
        let plan_now = matches!(turn % 6, 3 | 4);
        if turn > 1 && plan_now != plan {
            events.push(format!(
                "plan mode turned {}",
                if plan_now { "on" } else { "off" }
            ));
        }
        plan = plan_now;
        if turn == 7 {
            instructions.push_str(" Answer in at most five sentences unless asked for more.");
            session.set_system_prompt(&instructions);
            events.push("the assistant instructions were edited".to_owned());
        }
        if turn == 10 && session.history().len() > 6 {
            let end = session.history().len() - 4;
            session.compact(
                0..end,
                "Summary of turns 1-8: added --json to status, wrote the deny-wins test, aligned the table.",
            )?;
            head_history = head_history.split_off(head_history.len().saturating_sub(4));
            head_history.insert(
                0,
                json!({"role": "system", "content": "Summary of turns 1-8."}),
            );
            events.push("the history was compacted (new cache epoch)".to_owned());
        }
        let question = QUESTIONS[(turn as usize - 1) % QUESTIONS.len()];
        let request = session.turn(turn_values(turn, date, todo.clone(), plan), question)?;
        let bytes = request.to_bytes();
        let appended = request
            .new_nodes()
            .iter()
            .map(|n| Appended {
                producer: n.producer().to_string(),
                kind: n.kind(),
                bytes: n.bytes().len(),
                why: match n.producer() {
                    Producer::User => "the user's message".to_owned(),
                    Producer::Assistant => "the assistant's previous reply".to_owned(),
                    Producer::Tool => "a tool result".to_owned(),
                    Producer::SystemPrompt => {
                        "system prompt changed: appended, message 0 untouched".to_owned()
                    }
                    Producer::Compaction => "compaction summary".to_owned(),
                    Producer::Component(_) | Producer::Prefix => {
                        "its output differs from the last one it appended".to_owned()
                    }
                },
            })
            .collect();
        let ephemeral = request
            .ephemeral()
            .iter()
            .map(|(id, _)| id.to_string())
            .collect();
        let fingerprint = request.prefix_fingerprint().to_string();

        // The old way: every writer rendered into one system message at the head.
        let baseline_values = turn_values(turn, date, todo, plan);
        let turn_ctx = TurnContext::new(&baseline_ctx, &baseline_values, turn);
        let mut head_text = vec![instructions.clone()];
        for c in registry
            .components()
            .filter(|c| c.id().as_str() != "assistant_instructions")
        {
            let text = match c.content() {
                Content::Static(t) => Some(t.to_string()),
                Content::Session(f) => f(&baseline_ctx),
                Content::Turn(f) => f(&turn_ctx),
            };
            head_text.extend(text);
        }
        head_history.push(json!({"role": "user", "content": question}));
        let mut head = vec![json!({"role": "system", "content": head_text.join("\n\n")})];
        head.extend(head_history.iter().cloned());
        let head_bytes = serde_json::to_vec(&head).unwrap_or_default();

        out.push(DemoTurn {
            turn,
            events,
            request_bytes: bytes.len(),
            reused_bytes: lcp(&previous, &bytes),
            head_rewrite_bytes: head_bytes.len(),
            head_rewrite_reused: lcp(&head_previous, &head_bytes),
            appended,
            ephemeral,
            fingerprint,
        });
        previous = bytes;
        head_previous = head_bytes;

        let reply = if turn % 3 == 2 {
            json!({"role": "assistant", "content": null, "reasoning_content": "I should look at the file first.",
                   "tool_calls": [{"id": format!("call_{turn}"), "type": "function",
                                   "function": {"name": "read_file", "arguments": "{\"path\":\"src/cli.rs\"}"}}]})
        } else {
            json!({"role": "assistant", "content": format!("Done with step {turn}: the change is small and tested.")})
        };
        session.record_assistant(&reply)?;
        head_history.push(reply);
        if turn % 3 == 2 {
            let result = "pub fn run(args: Vec<String>) -> ExitCode { /* 120 lines */ }";
            session.record_tool_result(&format!("call_{turn}"), result)?;
            head_history.push(
                json!({"role": "tool", "tool_call_id": format!("call_{turn}"), "content": result}),
            );
        }
    }
    Ok(out)
}
