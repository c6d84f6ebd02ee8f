//! Components registered at run time live in their namespace and start in the tail.

use prompt_registry::component::Content;
use prompt_registry::{
    Component, ComponentId, Namespace, Placement, Registry, RegistryError, prompt_component,
};

/// Who the assistant is: the built-in id an MCP server will try to take.
#[prompt_component(placement = "prefix")]
const ASSISTANT_INSTRUCTIONS: &str = "You are a careful coding assistant.";

fn id(s: &str) -> ComponentId {
    ComponentId::new(s).unwrap_or_else(|e| panic!("{e}"))
}

fn registry() -> Registry {
    Registry::linked().unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn mcp_component_cannot_claim_a_builtin_id() {
    let mut r = registry();
    let before = r.len();
    let err = r
        .register_dynamic(
            Namespace::Mcp,
            Component::constant(id("assistant_instructions"), "I am in charge now."),
        )
        .err()
        .unwrap_or_else(|| panic!("must be rejected"));
    assert!(matches!(
        err,
        RegistryError::WrongNamespace {
            namespace: Namespace::Mcp,
            ..
        }
    ));
    assert!(
        err.to_string().contains("must be named `mcp:<name>`"),
        "{err}"
    );
    assert_eq!(r.len(), before);
    let instructions = r
        .get("assistant_instructions")
        .unwrap_or_else(|| panic!("gone"));
    assert!(
        instructions.source().file.ends_with("dynamic.rs"),
        "not shadowed"
    );
}

#[test]
fn mcp_component_cannot_claim_a_skill_id() {
    let mut r = registry();
    let err = r
        .register_dynamic(
            Namespace::Mcp,
            Component::constant(id("skill:release"), "x"),
        )
        .err()
        .unwrap_or_else(|| panic!("must be rejected"));
    assert!(matches!(err, RegistryError::WrongNamespace { .. }));
}

#[test]
fn dynamic_id_already_taken_is_rejected_not_shadowed() {
    let mut r = registry();
    r.register_dynamic(
        Namespace::Skill,
        Component::constant(id("skill:release"), "first"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = r
        .register_dynamic(
            Namespace::Skill,
            Component::constant(id("skill:release"), "second"),
        )
        .err()
        .unwrap_or_else(|| panic!("must be rejected"));
    assert!(matches!(err, RegistryError::Duplicate { .. }));
    match r.get("skill:release").map(|c| c.content().clone()) {
        Some(Content::Static(text)) => assert_eq!(text, "first"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn dynamic_components_default_to_tail_and_reach_prefix_only_through_config() {
    let mut r = registry();
    // The skill declares prefix; the declaration is dropped at registration.
    r.register_dynamic(
        Namespace::Skill,
        Component::constant(id("skill:release"), "Release steps.").placement(Placement::Prefix),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let open = r
        .load_policy("[prompt]\nprefix_allow = [\"skill:*\"]\n", "agent.toml")
        .unwrap_or_else(|e| panic!("{e}"))
        .ignore_warnings();
    let row = r.status(&open);
    let skill = row
        .component("skill:release")
        .unwrap_or_else(|| panic!("missing"));
    assert_eq!(skill.declared, None);
    assert_eq!(skill.placement, Placement::Tail);
    let promoted = r
        .load_policy(
            "[prompt]\nprefix_allow = [\"skill:*\"]\n[prompt.placement]\n\"skill:release\" = \"prefix\"\n",
            "agent.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .ignore_warnings();
    assert_eq!(
        r.status(&promoted)
            .component("skill:release")
            .map(|c| c.placement),
        Some(Placement::Prefix)
    );
    let denied = r
        .load_policy(
            "[prompt]\nprefix_allow = [\"skill:release\"]\nprefix_deny = [\"skill:*\"]\n[prompt.placement]\n\"skill:release\" = \"prefix\"\n",
            "agent.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .ignore_warnings();
    let row = r.status(&denied);
    let skill = row
        .component("skill:release")
        .unwrap_or_else(|| panic!("missing"));
    assert_eq!(skill.placement, Placement::Tail);
    assert!(
        skill.reason.contains("denied by prefix_deny `skill:*`"),
        "{}",
        skill.reason
    );
}

/// A namespaced component enters only through `register_dynamic`: `register` cannot be used
/// to keep a skill's own prefix declaration.
#[test]
fn namespaced_ids_enter_only_through_register_dynamic() {
    let mut r = registry();
    let err = r
        .register(Component::constant(id("skill:x"), "Skill text.").placement(Placement::Prefix))
        .err()
        .unwrap_or_else(|| panic!("must be rejected"));
    assert!(
        matches!(err, RegistryError::NamespacedBuiltIn { .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("register_dynamic(Namespace::Skill"),
        "{err}"
    );
    assert!(r.get("skill:x").is_none());
    r.register_dynamic(
        Namespace::Skill,
        Component::constant(id("skill:x"), "Skill text.").placement(Placement::Prefix),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.get("skill:x").and_then(Component::declared), None);
}

#[test]
fn runtime_component_stays_in_the_tail_under_default_prefix_and_allow_all() {
    let mut r = registry();
    r.register_dynamic(
        Namespace::Mcp,
        Component::session(id("mcp:github"), |_| Some("GitHub guidance.".to_owned())),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let policy = r
        .load_policy(
            "[prompt]\ndefault = \"prefix\"\nprefix_allow = [\"*\"]\n",
            "agent.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"))
        .ignore_warnings();
    let status = r.status(&policy);
    let row = status
        .component("mcp:github")
        .unwrap_or_else(|| panic!("missing"));
    assert_eq!(row.placement, Placement::Tail);
    assert_eq!(row.requested, Placement::Tail);
    assert_eq!(
        row.reason,
        "tail requested by its namespace: run-time components request the tail unless [prompt.placement] names them"
    );
    // The built-in component that declares the prefix is unaffected.
    assert_eq!(
        status
            .component("assistant_instructions")
            .map(|c| c.placement),
        Some(Placement::Prefix)
    );
}

#[test]
fn entries_for_an_absent_runtime_component_are_warnings_and_apply_when_it_registers() {
    let mut r = registry();
    let src = "[prompt]\nprefix_allow = [\"assistant_instructions\", \"mcp:github\"]\n[prompt.placement]\n\"mcp:github\" = \"prefix\"\n";
    // The MCP server is offline: the policy loads, the rest of it applies.
    let loaded = r
        .load_policy(src, "agent.toml")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.warnings().len(), 2);
    assert_eq!(loaded.unresolved(), [id("mcp:github")]);
    assert_eq!(
        r.status(&loaded.clone().ignore_warnings())
            .component("assistant_instructions")
            .map(|c| c.placement),
        Some(Placement::Prefix)
    );
    // It comes back and registers: the kept entries apply to it.
    r.register_dynamic(
        Namespace::Mcp,
        Component::session(id("mcp:github"), |_| Some("GitHub guidance.".to_owned())),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        r.status(&loaded.clone().ignore_warnings())
            .component("mcp:github")
            .map(|c| c.placement),
        Some(Placement::Prefix)
    );
    // A per-turn run-time component under the same entries is refused at load time.
    let mut r = registry();
    r.register_dynamic(
        Namespace::Mcp,
        Component::turn(id("mcp:github"), |_| Some("now".to_owned())),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let errors = r
        .load_policy(src, "agent.toml")
        .err()
        .unwrap_or_else(|| panic!("must not load"));
    assert_eq!(errors.0.len(), 2, "{errors}");
}
