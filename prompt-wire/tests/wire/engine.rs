//! The engine's bounds under hostile input: what it holds stays within its configuration
//! whatever the log, and a body of many distinct roles is read without a table per role.

use prompt_wire::engine::{Canonical, Context, Engine, EngineConfig, Exchange, MAX_ROLES};

fn body(session: usize, turns: usize) -> String {
    let messages: Vec<serde_json::Value> = (0..turns)
        .map(|t| {
            let role = if t % 2 == 0 { "user" } else { "assistant" };
            serde_json::json!({"role": role, "content": format!("session {session} turn {t}")})
        })
        .collect();
    serde_json::json!({"model": format!("m{}", session % 3), "messages": messages}).to_string()
}

#[test]
fn sessions_and_requests_held_stay_within_the_configured_bounds() {
    let config = EngineConfig::default()
        .with_max_requests(50)
        .with_max_elements(400)
        .with_keep_bodies(4);
    let mut engine = Engine::new(config);
    let count = &mut |_: &Canonical<'_>, b: &prompt_wire::engine::Block| b.len;
    for i in 0..2_000usize {
        let b = body(i, 1 + i % 7);
        let id = format!("session-{i}");
        let x = Exchange {
            session: Some(&id),
            ..Exchange::body(b.as_bytes())
        };
        engine
            .analyze(&x, i as u64, count)
            .unwrap_or_else(|e| panic!("{e}"));
        let held = engine.held();
        assert!(held.requests <= 50, "{held:?}");
        assert!(held.elements <= 400, "{held:?}");
        // A session none of whose requests is held is forgotten with its last one.
        assert!(held.sessions <= held.requests, "{held:?}");
    }
    assert_eq!(engine.held().dropped, 2_000 - engine.held().requests as u64);
}

#[test]
fn a_body_of_many_distinct_roles_names_at_most_max_roles_of_them() {
    let messages: Vec<serde_json::Value> = (0..20_000)
        .map(|i| serde_json::json!({"role": format!("r{i}"), "content": "x"}))
        .collect();
    let b = serde_json::json!({"model": "m", "messages": messages}).to_string();
    let c = Canonical::read(b.as_bytes(), Context::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.messages.len(), 20_000);
    assert_eq!(c.roles.len(), MAX_ROLES);
    assert_eq!(c.role(&c.messages[0]), "r0");
    assert_eq!(c.role(&c.messages[19_999]), "…");
    // The same body with one late message edited is still told apart, by its hash.
    let edited = b.replacen(
        r#"{"content":"x","role":"r19999"}"#,
        r#"{"content":"y","role":"r19999"}"#,
        1,
    );
    assert_ne!(edited, b);
    let d =
        Canonical::read(edited.as_bytes(), Context::default()).unwrap_or_else(|e| panic!("{e}"));
    let found = prompt_wire::engine::diff(&c, &d);
    assert!(!found.extends);
    assert_eq!(found.changes[0].json_path, "messages[19999].content[0]");
}
