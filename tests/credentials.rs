//! One rule for what is a credential: the Rust side (`prompt_wire::engine::names_credential`,
//! which `cacheline evidence` masks body fields by) and the capture script
//! (`scripts/agents/upstream.py`, which writes such headers as `[redacted]`) read the same
//! two lists.
/// The credential rule is the capture's: `REDACT_EXACT` and `REDACT_PARTS` of
/// `scripts/agents/upstream.py`, read from the script itself, so the two cannot drift.
#[test]
fn the_credential_rule_is_the_capture_scripts_rule() {
    use prompt_registry::wire::engine::{CREDENTIAL_NAMES, CREDENTIAL_PARTS, names_credential};
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

/// The relay the agent tests put before a real upstream (`scripts/agents/relay.py`) drops the
/// hop-by-hop headers of the one header policy (`prompt_registry::wire::engine::headers`),
/// and besides them only `host` and `content-length`, which it sets itself.
#[test]
fn the_relay_drops_the_header_policy_s_hop_by_hop_headers() {
    use prompt_registry::wire::engine::headers::{HOP_BY_HOP, HeaderRole, role_of};
    let script = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/agents/relay.py"
    ))
    .unwrap();
    let start = script.find("HOP = {").unwrap();
    let rest = &script[start..];
    let end = rest.find('}').unwrap();
    let listed: Vec<&str> = rest[..end].split('"').skip(1).step_by(2).collect();
    for h in HOP_BY_HOP {
        assert!(listed.contains(&h), "relay.py does not drop {h}");
    }
    for h in &listed {
        assert!(
            role_of(h) == HeaderRole::HopByHop || matches!(*h, "host" | "content-length"),
            "relay.py drops {h}, which the header policy forwards"
        );
    }
}
