//! The writer catalogue: every entry named on a captured or reconstructed request pair.

use prompt_measure::AuditConfig;
use prompt_measure::audit::verdict_text;

use super::audit::audit_bytes;

#[test]
fn debug_print() {
    for agent in [
        "claude-code",
        "codex",
        "gemini-cli",
        "qwen-code",
        "opencode",
    ] {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/agents")
            .join(agent)
            .join("capture.jsonl");
        let a = audit_bytes(agent, &std::fs::read(p).unwrap(), AuditConfig::default());
        for r in &a.requests {
            println!("{agent} {} {:?} {}", r.line, r.agent, verdict_text(r));
        }
    }
}
