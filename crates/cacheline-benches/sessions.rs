//! The sessions the divan benchmarks start from: an agent's components (instructions in the
//! prefix, a per-turn date in the tail), a history grown turn by turn, and the next turn.
//! A benchmark panics on any error: it measures the path that works.

use prompt_core::{
    Component, ComponentId, Extensions, Placement, PromptPolicy, Request, Session, SessionContext,
    SessionOptions,
};
use serde_json::json;

/// The date the per-turn component writes.
pub struct Date(pub String);

/// A component id, known valid.
pub fn id(s: &str) -> ComponentId {
    ComponentId::new(s).unwrap_or_else(|e| panic!("{e}"))
}

/// The instructions (about 700 bytes, in the prefix), `more` components, and the per-turn
/// date, in a session with `options` whose policy lets the instructions and `more` into the
/// prefix.
pub fn session_with(more: Vec<Component>, options: SessionOptions) -> Session {
    let mut components = vec![
        Component::constant(
            id("assistant_instructions"),
            "You are a careful coding assistant. ".repeat(20),
        )
        .placement(Placement::Prefix),
    ];
    components.extend(more);
    let allow: Vec<String> = components
        .iter()
        .map(|c| format!("{:?}", c.id().as_str()))
        .collect();
    components.push(Component::turn(id("date"), |t| {
        t.get::<Date>().map(|d| format!("Today is {}.", d.0))
    }));
    let toml = format!("[prompt]\nprefix_allow = [{}]\n", allow.join(", "));
    let policy = PromptPolicy::from_agent_toml(&toml, "agent.toml", &components)
        .unwrap_or_else(|e| panic!("{e}"))
        .ignore_warnings();
    Session::start(components, &policy, SessionContext::default(), options)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A session of no components under the default policy.
pub fn bare() -> Session {
    Session::start(
        vec![],
        &PromptPolicy::default(),
        SessionContext::default(),
        SessionOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// Adds answered turns until the history has at least `nodes` nodes; the date changes every
/// seventh turn.
pub fn grow(s: &mut Session, nodes: usize) {
    let mut day = 0;
    while s.history().len() < nodes {
        day += 1;
        let values = Extensions::new().with(Date(format!("day {}", day / 7)));
        if let Err(e) = s.turn(
            values,
            format!("Question {day}: what does module {day} do?"),
        ) {
            panic!("{e}");
        }
        let reply = json!({"role": "assistant", "content": format!("Module {day} parses the config and returns typed errors with line numbers.")});
        if let Err(e) = s.record_assistant(&reply) {
            panic!("{e}");
        }
    }
}

/// The next turn, on a later day.
pub fn next_turn<'s>(s: &'s mut Session, text: &str) -> Request<'s> {
    let values = Extensions::new().with(Date("day 9999".to_owned()));
    s.turn(values, text).unwrap_or_else(|e| panic!("{e}"))
}

/// The previous sample's turn answered, outside the measured time: a turn is refused while
/// the last request has no reply.
pub fn answer(s: &mut Session) {
    if s.unanswered_request().is_some()
        && let Err(e) = s.record_assistant(&json!({"role": "assistant", "content": "Ok."}))
    {
        panic!("{e}");
    }
}
