//! `lock_file`: arbitrary bytes as a prefix lock (`prompt_core::lock`), read and compared
//! with a fixed component set of every stability and placement.

use prompt_core::component::SourceLocation;
use prompt_core::config::Diagnostics;
use prompt_core::lock::{LockChange, PrefixLock};
use prompt_core::placement::Placement;
use prompt_core::{Component, PromptPolicy};

use crate::shared::{assert_errors, id};

fn components() -> Vec<Component> {
    let session = |_: &prompt_core::SessionContext| Some("session text".to_owned());
    let turn = |_: &prompt_core::TurnContext<'_>| Some("turn text".to_owned());
    let at = |line| SourceLocation::new("agent/src/prompt.rs", line);
    vec![
        Component::constant(id("house_rules"), "No force pushes.")
            .placement(Placement::Prefix)
            .located_at(at(10)),
        Component::session(id("tool_list"), session)
            .placement(Placement::Prefix)
            .located_at(at(20)),
        Component::session(id("reviewer_note"), session)
            .placement(Placement::Tail)
            .located_at(at(30)),
        Component::constant(id("banner"), "Welcome.").located_at(at(40)),
        Component::turn(id("clock"), turn)
            .placement(Placement::Prefix)
            .located_at(at(50)),
    ]
}

/// Reads `data` (invalid UTF-8 becomes U+FFFD) as a lock and checks the reader's promises:
/// no panic; on failure at least one diagnostic, each inside the text, in source order; on
/// success the lock reads back identically once rendered, every difference with the
/// components is positioned, and a per-turn writer is never a new prefix writer.
pub fn lock_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match PrefixLock::parse(&text, "prefix.lock") {
        Ok(loaded) => {
            let rendered = loaded.lock().render("fuzz");
            match PrefixLock::parse(&rendered, "again.lock") {
                Ok(again) => assert_eq!(again.lock(), loaded.lock(), "{rendered}"),
                Err(e) => panic!("a rendered lock does not read back: {e}\n{rendered}"),
            }
            let components = components();
            for policy in [
                PromptPolicy::default(),
                PromptPolicy::from_agent_toml(
                    "[prompt]\ndefault = \"prefix\"\nprefix_allow = [\"*\"]\n",
                    "agent.toml",
                    &components,
                )
                .map(|l| l.ignore_warnings())
                .unwrap_or_else(|e| panic!("{e}")),
            ] {
                for d in loaded.compare(&components, &policy) {
                    assert!(d.position.line >= 1 && d.position.column >= 1, "{d}");
                    // A per-turn writer is never one the lock should list.
                    assert!(
                        !(d.change.id().as_str() == "clock"
                            && matches!(d.change, LockChange::NewWriter { .. })),
                        "{d}"
                    );
                }
            }
        }
        Err(Diagnostics(errors)) => {
            assert_errors(&text, "prefix.lock", errors.iter().map(|e| &e.position));
        }
    }
}
