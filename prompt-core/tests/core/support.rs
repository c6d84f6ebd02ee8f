//! Shared fixtures: a small, realistic component set.

use prompt_core::{Component, ComponentId, Persist, Placement};

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
