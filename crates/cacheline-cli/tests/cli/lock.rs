//! `cacheline check AGENT_TOML --lock FILE`: the step `.ci/run` runs, over the reference
//! components' lock (`crates/prompt-reference/prefix.lock`) and its agent.toml.

use std::path::PathBuf;

use crate::{cacheline, temp_file};

fn reference(file: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../prompt-reference")
        .join(file)
        .to_string_lossy()
        .into_owned()
}

/// The declaration of a reference component, as the binary's registry has it.
fn declared_at(name: &str) -> String {
    let components =
        std::fs::read_to_string(reference("src/components.rs")).unwrap_or_else(|e| panic!("{e}"));
    let line = components
        .lines()
        .position(|l| l.starts_with(&format!("pub const {name}:")))
        .unwrap_or_else(|| panic!("no `pub const {name}`"));
    format!("crates/prompt-reference/src/components.rs:{}:1", line + 1)
}

#[test]
fn check_lock_passes_on_the_reference_lock() {
    let lock = reference("prefix.lock");
    let (code, out, err) = cacheline(&["check", &reference("agent.toml"), "--lock", &lock]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!("{lock}: ok, 6 prefix writer(s) as locked")),
        "{out}"
    );
    assert!(err.is_empty(), "{err}");
}

#[test]
fn check_lock_names_the_declaration_of_each_changed_reference_writer() {
    let locked =
        std::fs::read_to_string(reference("prefix.lock")).unwrap_or_else(|e| panic!("{e}"));
    // The lock as it was before someone edited the guidelines' text.
    let stale_fingerprint = "0123456789abcdef0123456789abcdef";
    let mut in_guidelines = false;
    let stale: String = locked
        .lines()
        .map(|line| {
            if line.starts_with("[writer.") {
                in_guidelines = line == "[writer.guidelines]";
            }
            if in_guidelines && line.starts_with("fingerprint = ") {
                format!("fingerprint = \"{stale_fingerprint}\"\n")
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    assert_ne!(
        stale, locked,
        "the reference lock lists the guidelines' fingerprint"
    );
    let lock = temp_file("stale-prefix.lock", &stale);
    let lock = lock.to_string_lossy();
    // And an agent.toml that no longer lets the assistant instructions in.
    let agent_toml =
        std::fs::read_to_string(reference("agent.toml")).unwrap_or_else(|e| panic!("{e}"));
    let narrowed = temp_file(
        "narrowed-agent.toml",
        &agent_toml.replacen("  \"assistant_instructions\",\n", "", 1),
    );
    let (code, _, err) = cacheline(&["check", &narrowed.to_string_lossy(), "--lock", &lock]);
    assert_eq!(code, 2, "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.contains(": error: ")).collect();
    assert_eq!(errors.len(), 2, "{err}");
    assert_eq!(
        errors[0],
        format!(
            "{}: error: `assistant_instructions` now lands in the tail under the agent.toml; the lock has it in the prefix",
            declared_at("ASSISTANT_INSTRUCTIONS")
        )
    );
    assert!(
        errors[1].starts_with(&format!(
            "{}: error: the text of prefix constant `guidelines` changed: fingerprint {stale_fingerprint} in the lock, ",
            declared_at("GUIDELINES")
        )),
        "{}",
        errors[1]
    );
    assert!(
        err.contains(&format!(
            "{lock}: 2 difference(s) with the prompt writers; after review, accept them with --bless"
        )),
        "{err}"
    );
}
