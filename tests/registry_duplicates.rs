//! A second component named like a reference one makes the registry fail, naming both.

use prompt_registry::{Registry, RegistryError, TurnContext, prompt_component};

/// A second writer that also calls itself `date`.
#[prompt_component(id = "date")]
fn my_date(_turn: &TurnContext) -> Option<String> {
    Some("It is Monday.".to_owned())
}

#[test]
fn duplicate_ids_are_reported_with_both_locations() {
    let err = match Registry::linked() {
        Err(e) => e,
        Ok(_) => panic!("duplicate ids must be rejected"),
    };
    let RegistryError::Duplicate { id, first, second } = &err else {
        panic!("wrong error: {err}");
    };
    assert_eq!(id.as_str(), "date");
    let mut files = [first.file.to_string(), second.file.to_string()];
    files.sort();
    assert!(
        files[0].ends_with("prompt-registry/src/reference.rs"),
        "{files:?}"
    );
    assert!(
        files[1].ends_with("tests/registry_duplicates.rs"),
        "{files:?}"
    );
    let text = err.to_string();
    assert!(text.contains("registry_duplicates.rs:7"), "{text}");
    assert!(text.contains("reference.rs:"), "{text}");
    // Keep the function used so the test also proves the item is emitted unchanged.
    let _ = my_date;
}
