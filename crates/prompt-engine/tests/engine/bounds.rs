//! The engine's bounds under hostile input: what it holds stays within its configuration
//! whatever the log, and a body of many distinct roles is read without a table per role.

use prompt_engine::{Canonical, Context, Engine, EngineConfig, Exchange, MAX_ROLES};

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
    let count = &mut |_: &Canonical<'_>, b: &prompt_engine::Block| b.len;
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
    let found = prompt_engine::diff(&c, &d);
    assert!(!found.extends);
    // A content sent as a string is named at the string.
    assert_eq!(found.changes[0].json_path, "messages[19999].content");
}

#[test]
fn element_text_reads_an_element_of_a_held_request_while_its_body_is_kept() {
    use prompt_engine::Place;
    let mut engine = Engine::new(EngineConfig::default().with_keep_bodies(1));
    let count = &mut |_: &prompt_engine::Canonical<'_>, b: &prompt_engine::Block| b.len / 4;
    let first = br##"{"model":"claude-sonnet-4-5","system":[{"type":"text","text":"S0"}],"tools":[{"name":"a","input_schema":{}},{"name":"b","input_schema":{}}],"messages":[{"role":"user","content":[{"type":"text","text":"one"},{"type":"text","text":"# currentDate two"}]}]}"##;
    let second = br#"{"model":"claude-sonnet-4-5","system":[{"type":"text","text":"S1"}],"messages":[{"role":"user","content":"hi"}]}"#;
    engine
        .analyze(&Exchange::body(first), 7, count)
        .unwrap_or_else(|e| panic!("{e}"));
    let body = std::str::from_utf8(first).unwrap_or_default();
    let (text, start) = engine
        .element_text(
            7,
            &Place::Message {
                index: 0,
                block: Some(1),
            },
        )
        .unwrap_or_else(|| panic!("no element"));
    assert_eq!(text, r##"{"type":"text","text":"# currentDate two"}"##);
    assert_eq!(&body[start as usize..start as usize + text.len()], text);
    assert_eq!(
        engine
            .element_text(7, &Place::Tools { index: 1 })
            .map(|(t, _)| t),
        Some(r#"{"name":"b","input_schema":{}}"#)
    );
    assert!(
        engine
            .element_text(7, &Place::System { block: 0 })
            .is_some()
    );
    assert_eq!(engine.element_text(7, &Place::Tools { index: 2 }), None);
    assert_eq!(engine.element_text(8, &Place::Tools { index: 0 }), None);
    assert_eq!(engine.element_text(7, &Place::Request), None);
    // One body kept: the next request lets the first one's go.
    engine
        .analyze(&Exchange::body(second), 8, count)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(engine.element_text(7, &Place::Tools { index: 1 }), None);
    assert!(
        engine
            .element_text(
                8,
                &Place::Message {
                    index: 0,
                    block: None
                }
            )
            .is_some()
    );
}
