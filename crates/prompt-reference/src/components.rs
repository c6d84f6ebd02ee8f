//! Reference components: the writers of a real coding agent's prompt, written with the
//! attribute, with the placement and stability a careful engineer would choose.
//!
//! | id | placement | stability | why |
//! |---|---|---|---|
//! | `assistant_instructions` | prefix | constant | who the assistant is; edits go through `set_system_prompt` (appended) |
//! | `guidelines` | prefix | constant | coding rules shipped with the agent |
//! | `tool_schemas` | prefix | session | the tool list is fixed when the session starts, sorted so order never varies |
//! | `project_memory` | prefix | session | AGENTS.md read once at session start |
//! | `skills_catalog` | prefix | session | names and one-liners of the skills found at start |
//! | `runtime_environment` | prefix | session | OS and project root do not change within a session |
//! | `date` | tail | turn, persisted | rolls over at midnight: one small update when it does |
//! | `todo_addendum` | tail | turn, persisted | changes every few turns; the model needs the latest list |
//! | `plan_addendum` | tail | turn, persisted | plan mode toggles; each toggle is appended once |
//! | `git_state` | tail | turn, ephemeral | changes after every edit; only the current state matters |
//! | `memory_recall` | tail | turn, ephemeral | recalled for this query only |
//!
//! The values they read are the types in this module, inserted into the session's or the
//! turn's [`prompt_registry::Extensions`].

use prompt_registry::{SessionContext, TurnContext, prompt_component};

/// Session value: the operating system and project root.
#[derive(Debug, Clone)]
pub struct Environment {
    /// e.g. `linux`.
    pub os: String,
    /// Absolute project root.
    pub project_root: String,
}

/// Session value: the project's AGENTS.md (or similar) text.
#[derive(Debug, Clone)]
pub struct ProjectMemory(pub String);

/// Session value: skills found on disk at session start, as (name, one-line description).
#[derive(Debug, Clone)]
pub struct SkillList(pub Vec<(String, String)>);

/// Session value: the tools travel in the request's `tools` field, so `tool_schemas` has
/// nothing to write (text-rendered tools are only for backends without a tools field).
#[derive(Debug, Clone, Copy)]
pub struct ToolsField;

/// Session value: tool schemas as JSON objects (one per tool); sorted by name when rendered.
#[derive(Debug, Clone)]
pub struct ToolCatalog(pub Vec<serde_json::Value>);

/// Turn value: today's date, `YYYY-MM-DD`.
#[derive(Debug, Clone)]
pub struct Today(pub String);

/// Turn value: the open todo items.
#[derive(Debug, Clone)]
pub struct TodoList(pub Vec<String>);

/// Turn value: whether plan mode is on.
#[derive(Debug, Clone, Copy)]
pub struct PlanMode(pub bool);

/// Turn value: `git status`, summarized.
#[derive(Debug, Clone)]
pub struct GitState {
    /// Current branch.
    pub branch: String,
    /// Modified files.
    pub dirty: Vec<String>,
}

/// Turn value: memories recalled for the current query.
#[derive(Debug, Clone)]
pub struct RecalledMemories(pub Vec<String>);

/// Who the assistant is.
#[prompt_component(placement = "prefix")]
pub const ASSISTANT_INSTRUCTIONS: &str = "You are Cacheline Coder, a careful software engineering assistant working inside the user's repository. \
You read code before changing it, keep changes small and reviewable, and explain what you did and why in plain words. \
When a request is ambiguous you ask one precise question instead of guessing. You never invent file contents, APIs or test results: \
you use the tools to look, and you report what the tools returned. Prefer the project's existing helpers, naming and error types over new ones.";

/// Coding rules shipped with the agent.
#[prompt_component(placement = "prefix")]
pub const GUIDELINES: &str = "Guidelines:\n\
- Run the project's tests after every change that can affect them; quote failures verbatim.\n\
- Never rewrite files wholesale when an edit of a few lines suffices.\n\
- Library code returns typed errors; no unwrap on input paths.\n\
- Keep secrets out of logs, commits and messages.\n\
- When a tool call fails, read the error, fix the cause, and retry at most twice before asking.\n\
- Write commit messages in the imperative mood with a one-line summary under 72 characters.\n\
- Respect .gitignore and never touch files outside the project root.\n\
- Prefer standard library facilities over new dependencies; justify any new dependency.";

/// Built-in tool schemas, used when the session provides no [`ToolCatalog`].
pub const DEFAULT_TOOLS: &str = include_str!("reference_tools.json");

/// The tool list, sorted by name so its bytes never depend on discovery order.
#[prompt_component(placement = "prefix", what = "tool schemas, sorted by name")]
pub fn tool_schemas(session: &SessionContext) -> Option<String> {
    if session.get::<ToolsField>().is_some() {
        return None;
    }
    let mut tools: Vec<serde_json::Value> = match session.get::<ToolCatalog>() {
        Some(catalog) => catalog.0.clone(),
        None => serde_json::from_str(DEFAULT_TOOLS).ok()?,
    };
    tools.sort_by(|a, b| {
        let name = |v: &serde_json::Value| v["function"]["name"].as_str().unwrap_or("").to_owned();
        name(a).cmp(&name(b))
    });
    // Keys sorted whatever the program's serde_json features: a prefix writer's bytes.
    let body = prompt_registry::raw_json::canonical(&serde_json::Value::Array(tools));
    Some(format!("# Tools\nYou may call these functions:\n{body}"))
}

/// The project's AGENTS.md, read once at session start.
#[prompt_component(placement = "prefix")]
pub fn project_memory(session: &SessionContext) -> Option<String> {
    session
        .get::<ProjectMemory>()
        .map(|m| format!("# Project memory (AGENTS.md)\n{}", m.0))
}

/// Skills available in this session.
#[prompt_component(placement = "prefix")]
pub fn skills_catalog(session: &SessionContext) -> Option<String> {
    let skills = session.get::<SkillList>()?;
    let mut lines: Vec<String> = skills
        .0
        .iter()
        .map(|(name, what)| format!("- {name}: {what}"))
        .collect();
    lines.sort();
    Some(format!(
        "# Skills\nLoad a skill with the load_skill tool when it fits the task:\n{}",
        lines.join("\n")
    ))
}

/// Operating system and project root.
#[prompt_component(placement = "prefix")]
pub fn runtime_environment(session: &SessionContext) -> Option<String> {
    session.get::<Environment>().map(|e| {
        format!(
            "# Environment\nOS: {}\nProject root: {}",
            e.os, e.project_root
        )
    })
}

/// Today's date.
#[prompt_component(placement = "tail")]
pub fn date(turn: &TurnContext) -> Option<String> {
    turn.get::<Today>()
        .map(|d| format!("Today's date is {}.", d.0))
}

/// The open todo items.
#[prompt_component(placement = "tail")]
pub fn todo_addendum(turn: &TurnContext) -> Option<String> {
    let todo = turn.get::<TodoList>()?;
    if todo.0.is_empty() {
        return Some("The todo list is empty.".to_owned());
    }
    let items: Vec<String> = todo.0.iter().map(|t| format!("- [ ] {t}")).collect();
    Some(format!("Current todo list:\n{}", items.join("\n")))
}

/// Whether plan mode is on.
#[prompt_component(placement = "tail")]
pub fn plan_addendum(turn: &TurnContext) -> Option<String> {
    turn.get::<PlanMode>().map(|p| {
        if p.0 {
            "Plan mode is ON: propose a plan and wait for approval; do not edit files.".to_owned()
        } else {
            "Plan mode is off: you may edit files.".to_owned()
        }
    })
}

/// Branch and modified files.
#[prompt_component(placement = "tail", persist = "ephemeral")]
pub fn git_state(turn: &TurnContext) -> Option<String> {
    turn.get::<GitState>().map(|g| {
        if g.dirty.is_empty() {
            format!("git: on branch {}, clean.", g.branch)
        } else {
            format!(
                "git: on branch {}, modified: {}.",
                g.branch,
                g.dirty.join(", ")
            )
        }
    })
}

/// Memories recalled for this query.
#[prompt_component(placement = "tail", persist = "ephemeral")]
pub fn memory_recall(turn: &TurnContext) -> Option<String> {
    let recalled = turn.get::<RecalledMemories>()?;
    if recalled.0.is_empty() {
        return None;
    }
    Some(format!("Relevant memories:\n- {}", recalled.0.join("\n- ")))
}

/// The built-in agent.toml used when `--config` is absent: `crates/prompt-reference/agent.toml`,
/// the file the reference components' prefix lock (`crates/prompt-reference/prefix.lock`) is
/// checked against.
pub const DEFAULT_AGENT_TOML: &str = include_str!("../agent.toml");

/// The ids of the reference components, sorted.
pub const IDS: [&str; 11] = [
    "assistant_instructions",
    "date",
    "git_state",
    "guidelines",
    "memory_recall",
    "plan_addendum",
    "project_memory",
    "runtime_environment",
    "skills_catalog",
    "todo_addendum",
    "tool_schemas",
];
