//! `status` shows each writer's `cleared` text, in its table and its JSON, and
//! docs/status-json.md names exactly the keys of a row.

use std::collections::BTreeSet;

use prompt_registry::cli::{App, run_with};
use prompt_registry::{Registry, TurnContext, prompt_component};
use serde_json::Value;

struct Todo(Vec<String>);

/// The open todo items; once the list empties, says so once.
#[prompt_component(placement = "tail", cleared = "No open todo items.")]
fn open_todo_items(turn: &TurnContext) -> Option<String> {
    turn.get::<Todo>()
        .filter(|todo| !todo.0.is_empty())
        .map(|todo| todo.0.join(", "))
}

/// Today's date; its last text stands.
#[prompt_component(placement = "tail")]
fn today(_turn: &TurnContext) -> Option<String> {
    Some("Today is 2026-12-01.".to_owned())
}

fn run(args: &[&str]) -> (u8, String, String) {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let argv = std::iter::once("my-agent").chain(args.iter().copied());
    let code = run_with(
        App::new("my-agent", "1.0.0"),
        argv,
        &registry,
        &mut out,
        &mut err,
    );
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

/// The keys docs/status-json.md's table documents for a component row (the rows between
/// `prompt.components` and `tools`, written as `` `key` `` or `` `a`, `b` ``).
fn documented_row_keys() -> BTreeSet<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/status-json.md");
    let doc = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut keys = BTreeSet::new();
    let mut in_rows = false;
    for line in doc.lines().filter(|l| l.starts_with("| `")) {
        let cell = line.split('|').nth(1).unwrap_or_default().trim();
        if cell == "`prompt.components`" {
            in_rows = true;
            continue;
        }
        if cell.starts_with("`tools`") {
            break;
        }
        if in_rows {
            for key in cell.split(',') {
                keys.insert(key.trim().trim_matches('`').to_owned());
            }
        }
    }
    keys
}

#[test]
fn every_key_of_a_status_row_is_in_this_table_and_cleared_shows_in_text_and_json() {
    let (code, out, err) = run(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let rows = json["prompt"]["components"]
        .as_array()
        .unwrap_or_else(|| panic!("{json}"));
    let row = |id: &str| {
        rows.iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{id} missing: {json}"))
    };
    assert_eq!(row("open_todo_items")["cleared"], "No open todo items.");
    assert_eq!(row("today")["cleared"], Value::Null);

    // The table names exactly the keys of a row: none undocumented, none gone.
    let keys: BTreeSet<String> = row("open_todo_items")
        .as_object()
        .unwrap_or_else(|| panic!("a row is an object"))
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        keys,
        documented_row_keys(),
        "docs/status-json.md's row keys"
    );

    let (code, table, err) = run(&["status"]);
    assert_eq!(code, 0, "{err}");
    let header = table
        .lines()
        .find(|l| l.starts_with("ID "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(header.contains("CLEARED"), "{header}");
    let todo = table
        .lines()
        .find(|l| l.starts_with("open_todo_items"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(todo.contains("\"No open todo items.\""), "{todo}");
    let today = table
        .lines()
        .find(|l| l.starts_with("today"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(!today.contains('"'), "{today}");
}
