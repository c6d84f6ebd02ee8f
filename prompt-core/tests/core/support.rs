//! Shared fixtures: a small, realistic component set.

use prompt_core::snapshot::{RestoreError, RestoreMode, Restored, SessionSnapshot};
use prompt_core::{
    Component, ComponentId, Persist, Placement, PromptPolicy, Session, SessionContext,
    SessionOptions,
};

/// A per-turn value: today's date.
pub struct Date(pub String);
/// A per-turn value: the todo list.
pub struct Todo(pub Vec<String>);
/// A per-turn value: whether plan mode is on.
pub struct PlanMode(pub bool);
/// A session value: the project root.
pub struct ProjectRoot(pub String);

/// Builds an id known to be valid.
pub fn id(text: &str) -> ComponentId {
    match ComponentId::new(text) {
        Ok(id) => id,
        Err(e) => panic!("fixture id {text:?} is invalid: {e}"),
    }
}

/// Components with every stability and placement, named like a real agent's.
pub fn components() -> Vec<Component> {
    vec![
        Component::constant(
            id("assistant_instructions"),
            "You are a careful coding assistant.",
        )
        .placement(Placement::Prefix)
        .describe("who the assistant is"),
        Component::constant(
            id("tool_schemas"),
            r#"[{"name":"read_file","parameters":{"path":"string"}}]"#,
        )
        .placement(Placement::Prefix)
        .describe("tool list"),
        Component::session(id("project_memory"), |s| {
            s.get::<ProjectRoot>()
                .map(|r| format!("Project root: {}", r.0))
        })
        .describe("AGENTS.md of the project"),
        Component::session(id("skill:pdf"), |_| Some("Skill: read PDFs.".to_owned()))
            .placement(Placement::Prefix)
            .describe("a skill"),
        Component::session(id("mcp:github"), |_| {
            Some("GitHub MCP guidance.".to_owned())
        })
        .placement(Placement::Prefix)
        .describe("MCP server guidance"),
        Component::turn(id("date"), |t| {
            t.get::<Date>().map(|d| format!("Today is {}.", d.0))
        })
        .describe("the date"),
        Component::turn(id("todo_addendum"), |t| {
            t.get::<Todo>()
                .filter(|todo| !todo.0.is_empty())
                .map(|todo| todo.0.join("\n"))
        })
        .placement(Placement::Tail)
        .describe("todo list"),
        Component::turn(id("plan_addendum"), |t| {
            t.get::<PlanMode>().map(|p| {
                if p.0 {
                    "Plan mode is ON."
                } else {
                    "Plan mode is off."
                }
                .to_owned()
            })
        })
        .placement(Placement::Tail)
        .persist(Persist::Ephemeral)
        .describe("plan mode"),
    ]
}

/// The ids of [`components`].
pub fn known_ids() -> Vec<ComponentId> {
    components().iter().map(|c| c.id().clone()).collect()
}

/// The assistant's instructions in the prefix and the todo list as a turn value: the agent
/// whose sessions the lifecycle and restore tests save and resume.
pub fn instructions_and_todo(instructions: &'static str) -> Vec<Component> {
    vec![
        Component::constant(id("assistant_instructions"), instructions)
            .placement(Placement::Prefix),
        Component::turn(id("todo_addendum"), |t| {
            t.get::<Todo>().map(|todo| todo.0.join("\n"))
        }),
    ]
}

/// The policy that lets `assistant_instructions` into the prefix, checked against
/// `components`.
pub fn instructions_in_prefix(components: &[Component]) -> PromptPolicy {
    PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"assistant_instructions\"]",
        "agent.toml",
        components,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .ignore_warnings()
}

/// Restores `snapshot` Strict with no session values, as an app does at a restart.
pub fn restore_strict(
    snapshot: &SessionSnapshot,
    components: Vec<Component>,
    policy: &PromptPolicy,
    options: SessionOptions,
) -> Result<Restored, RestoreError> {
    Session::restore(
        snapshot,
        components,
        policy,
        SessionContext::default(),
        options,
        RestoreMode::Strict,
    )
}

/// [`restore_strict`] of a session restored over the components it was saved with: its
/// prefix comes back unchanged.
pub fn restore_unchanged(
    snapshot: &SessionSnapshot,
    components: Vec<Component>,
    policy: &PromptPolicy,
    options: SessionOptions,
) -> Session {
    let Restored {
        session, changes, ..
    } = restore_strict(snapshot, components, policy, options)
        .unwrap_or_else(|e| panic!("restore: {e}"));
    assert!(changes.is_none());
    session
}
