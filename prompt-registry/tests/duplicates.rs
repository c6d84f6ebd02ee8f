//! A second component with the same id makes the registry fail, naming both.

use prompt_registry::{Registry, RegistryError, TurnContext, prompt_component};

/// Today's date.
#[prompt_component(placement = "tail")]
fn date(_turn: &TurnContext) -> Option<String> {
    Some("It is Sunday.".to_owned())
}

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
    assert!(first.file.ends_with("tests/duplicates.rs"), "{first}");
    assert!(second.file.ends_with("tests/duplicates.rs"), "{second}");
    let mut lines = [first.line, second.line];
    lines.sort_unstable();
    assert_eq!(lines, [7, 13]);
    let text = err.to_string();
    assert!(text.contains("duplicates.rs:7"), "{text}");
    assert!(text.contains("duplicates.rs:13"), "{text}");
    // Keep the functions used so the test also proves the items are emitted unchanged.
    let _ = (date, my_date);
}
