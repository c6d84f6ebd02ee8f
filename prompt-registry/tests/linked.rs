//! Components from other crates are collected when the crate is linked, and the facade
//! adds none of its own, whatever its features.

use cacheline_fixture_components as _;
use prompt_registry::{Placement, Registry};

/// The fixture crate depends on prompt-registry with every feature it offers (`cli`) and
/// defines two components: the registry holds exactly those two.
#[test]
fn components_defined_in_other_crates_are_collected_with_exact_count() {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<&str> = registry.components().map(|c| c.id().as_str()).collect();
    assert_eq!(ids, ["commit_style", "reviewer_on_duty"]);
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
