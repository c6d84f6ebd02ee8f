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

/// The credential rule is the capture's: `REDACT_EXACT` and `REDACT_PARTS` of
/// `scripts/agents/upstream.py`, read from the script itself, so the two cannot drift.
#[test]
fn the_credential_rule_is_the_capture_scripts_rule() {
    use prompt_wire::engine::{CREDENTIAL_NAMES, CREDENTIAL_PARTS, names_credential};
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/agents/upstream.py"
    ))
    .unwrap();
    let quoted = |name: &str| -> Vec<String> {
        let start = script.find(&format!("{name} = ")).unwrap();
        let rest = &script[start..];
        let end = rest.find(['}', ')']).unwrap();
        let mut found: Vec<String> = rest[..end]
            .split('"')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        found.sort();
        found
    };
    let mut names: Vec<String> = CREDENTIAL_NAMES.iter().map(|s| s.to_string()).collect();
    names.sort();
    let mut parts: Vec<String> = CREDENTIAL_PARTS.iter().map(|s| s.to_string()).collect();
    parts.sort();
    assert_eq!(names, quoted("REDACT_EXACT"));
    assert_eq!(parts, quoted("REDACT_PARTS"));
    for name in [
        "Authorization",
        "x-api-key",
        "api_key",
        "apiKey",
        "client_secret",
        "cookie",
    ] {
        assert!(names_credential(name), "{name}");
    }
    for name in [
        "model",
        "messages",
        "user-agent",
        "x-claude-code-session-id",
    ] {
        assert!(!names_credential(name), "{name}");
    }
}
