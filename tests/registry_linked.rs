//! Components from other crates are collected when the crate is linked.

use cacheline_fixture_components as _;
use prompt_registry::reference::IDS;
use prompt_registry::{Placement, Registry};

#[test]
fn components_defined_in_other_crates_are_collected_with_exact_count() {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    // 11 reference components (prompt-registry, feature `reference`) + 2 in the fixture crate.
    assert_eq!(registry.len(), IDS.len() + 2);
    for id in IDS.iter().chain(&["commit_style", "reviewer_on_duty"]) {
        assert!(registry.get(id).is_some(), "{id} not collected");
    }
    let commit = registry
        .get("commit_style")
        .unwrap_or_else(|| panic!("missing"));
    assert_eq!(commit.declared(), Some(Placement::Prefix));
    assert_eq!(commit.description(), "House style for commit messages.");
    assert!(
        commit
            .source()
            .file
            .ends_with("fixture-components/src/lib.rs"),
        "{}",
        commit.source()
    );
    assert_eq!(commit.source().line, 8);
}

#[test]
fn registry_order_is_deterministic_by_id() {
    let a: Vec<String> = Registry::linked()
        .unwrap_or_else(|e| panic!("{e}"))
        .components()
        .map(|c| c.id().to_string())
        .collect();
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!(a, sorted);
}
