//! `policy_loader`: arbitrary bytes as an `agent.toml`, loaded against a fixed component set
//! with every stability, built-in and run-time, declared and not.

use prompt_core::config::Diagnostics;
use prompt_core::placement::{Placement, Stability};
use prompt_core::{Component, PromptPolicy};

use crate::shared::{assert_errors, assert_positions, id};

/// Every kind of component the loader must tell apart.
fn components() -> Vec<Component> {
    let session = |_: &prompt_core::SessionContext| Some("session text".to_owned());
    let turn = |_: &prompt_core::TurnContext<'_>| Some("turn text".to_owned());
    vec![
        Component::constant(id("assistant_instructions"), "Be careful.")
            .placement(Placement::Prefix),
        Component::constant(id("tool_schemas"), "[]").placement(Placement::Prefix),
        Component::constant(id("house_rules"), "No force pushes."),
        Component::session(id("project_memory"), session),
        Component::session(id("skills_catalog"), session).placement(Placement::Prefix),
        Component::session(id("guidelines"), session).placement(Placement::Tail),
        Component::turn(id("date"), turn),
        Component::turn(id("todo_addendum"), turn).placement(Placement::Tail),
        // Hand-built: the attribute refuses a per-turn renderer declared for the prefix.
        Component::turn(id("clock"), turn).placement(Placement::Prefix),
        Component::session(id("skill:pdf"), session),
        Component::constant(id("skill:release"), "Release steps.").placement(Placement::Prefix),
        Component::session(id("mcp:github"), session).placement(Placement::Prefix),
        Component::turn(id("mcp:weather"), turn),
        Component::turn(id("skill:ticker"), turn).placement(Placement::Prefix),
    ]
}

/// Loads `data` (UTF-8 or not: invalid bytes become U+FFFD) and checks the loader's promises:
/// no panic; on success every prefix component requested it, matches an allow entry and no
/// deny entry, is not per-turn, and is a run-time component only through an exact
/// `[prompt.placement]` entry; on failure at least one diagnostic; every position inside the
/// file.
pub fn policy_loader(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let components = components();
    match PromptPolicy::from_agent_toml(&text, "agent.toml", &components) {
        Ok(loaded) => {
            let (policy, warnings) = loaded.into_parts();
            assert_positions(&text, "agent.toml", warnings.iter().map(|w| &w.position));
            let policy = &policy;
            for c in &components {
                let r = policy.resolve(c);
                if r.placement != Placement::Prefix {
                    continue;
                }
                let cid = c.id();
                assert_eq!(r.requested, Placement::Prefix, "{cid}: {r:?}");
                assert!(
                    policy.prefix_allow.iter().any(|p| p.matches(cid)),
                    "{cid}: no allow entry"
                );
                assert!(
                    !policy.prefix_deny.iter().any(|p| p.matches(cid)),
                    "{cid}: denied yet in the prefix"
                );
                assert_ne!(
                    c.stability(),
                    Stability::Turn,
                    "{cid}: per-turn in the prefix"
                );
                if cid.namespace().is_some() {
                    assert_eq!(
                        policy.placement.get(cid),
                        Some(&Placement::Prefix),
                        "{cid}: run-time component in the prefix without [prompt.placement]"
                    );
                }
            }
        }
        Err(Diagnostics(errors)) => {
            assert_errors(&text, "agent.toml", errors.iter().map(|e| &e.position));
        }
    }
}
