//! `probe-template`: a chat template's treatment of appended updates.

use std::path::PathBuf;

use serde_json::Value;

use crate::{cacheline, cacheline_with_stdin};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../prompt-template-probe/tests/fixtures/chat-templates"
    ))
    .join(name)
}

#[test]
fn cli_probe_template_json_has_the_three_keys() {
    let path = fixture("google-gemma-2-2b-it.jinja");
    let path = path.to_string_lossy();
    let (code, out, err) = cacheline(&["probe-template", path.as_ref(), "--json"]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["mid_system"], "raises");
    assert_eq!(json["prefix_stable"], true);
    assert_eq!(json["delivery"], "user_reminder");
    assert_eq!(
        json["mid_system_detail"]["message"],
        "Conversation roles must alternate user/assistant/user/assistant/..."
    );
    assert_eq!(json["delivery_detail"]["updates"], "merged_into_user");
    assert_eq!(json["delivery_detail"]["prefix"], "first_user");

    let path = fixture("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja");
    let path = path.to_string_lossy();
    let (code, text, _) = cacheline(&["probe-template", path.as_ref()]);
    assert_eq!(code, 0);
    assert!(text.contains("mid_system:    hoisted"), "{text}");
    assert!(text.contains("prefix_stable: no: system_update"), "{text}");
    assert!(text.contains("delivery:      user_reminder"), "{text}");

    let (code, _, err) = cacheline(&["probe-template", "/nonexistent/template.jinja"]);
    assert_eq!(code, 2);
    assert!(
        err.starts_with("error: /nonexistent/template.jinja: cannot read"),
        "{err}"
    );
}

#[test]
fn probe_template_reads_standard_input() {
    let source = std::fs::read(fixture("hf-SmolLM2.jinja")).unwrap_or_else(|e| panic!("{e}"));
    let (code, out, err) = cacheline_with_stdin(&["probe-template", "-", "--json"], &source);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(json["delivery"], "system");
}
