//! `cli::run_with`, as an agent embeds it: its own components, its own name and version.

use prompt_registry::cli::{App, run_with};
use prompt_registry::{Registry, TurnContext, prompt_component};
use serde_json::Value;

/// A writer added next quarter by someone who never heard of the cache.
#[prompt_component]
fn weather_widget(_turn: &TurnContext) -> Option<String> {
    Some("It is sunny.".to_owned())
}

/// Who the assistant is.
#[prompt_component(placement = "prefix")]
const HOUSE_STYLE: &str = "You are the house assistant.";

const APP: App = App::new("my-agent", "3.1.4");

fn run(args: &[&str]) -> (u8, String, String) {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let argv = std::iter::once("my-agent").chain(args.iter().copied());
    let code = run_with(APP, argv, &registry, &mut out, &mut err);
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

#[test]
fn an_embedding_application_shows_its_own_name_and_version() {
    let (code, out, _) = run(&["--version"]);
    assert_eq!((code, out.trim()), (0, "my-agent 3.1.4"));
    let (code, out, _) = run(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("Usage: my-agent <COMMAND>"), "{out}");
    assert!(!out.contains("cacheline"), "{out}");
    // The macro fills in the calling crate's own name and version.
    let app = prompt_registry::cli_app!();
    assert_eq!(
        (app.name, app.version),
        ("prompt-registry", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn newly_added_component_with_no_config_change_lands_in_tail_and_status_says_why() {
    let (code, out, err) = run(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["schema_version"], 1);
    let rows = json["prompt"]["components"]
        .as_array()
        .unwrap_or_else(|| panic!("{json}"));
    // Exactly the application's own two writers: the facade adds none.
    assert_eq!(rows.len(), 2, "{json}");
    let row = rows
        .iter()
        .find(|c| c["id"] == "weather_widget")
        .unwrap_or_else(|| panic!("weather_widget missing"));
    assert_eq!(row["placement"], "tail");
    assert_eq!(row["declared"], Value::Null);
    assert_eq!(row["reason"], "tail requested by [prompt] default");
    assert_eq!(row["rule"]["rule"], "tail_requested");
    // No config: even the declared prefix writer is demoted until an allow entry names it.
    let house = rows
        .iter()
        .find(|c| c["id"] == "house_style")
        .unwrap_or_else(|| panic!("house_style missing"));
    assert_eq!(house["placement"], "tail");
    // The table says the same.
    let (_, table, _) = run(&["status"]);
    let line = table
        .lines()
        .find(|l| l.starts_with("weather_widget"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        line.contains("tail") && line.ends_with("tail requested by [prompt] default"),
        "{line}"
    );
    let _ = (weather_widget, HOUSE_STYLE);
}

#[test]
fn check_json_reports_the_outcome_and_every_diagnostic_with_its_position() {
    let dir = std::env::temp_dir().join(format!("prompt-registry-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let file = dir.join("agent.toml");
    std::fs::write(
        &file,
        "[prompt]\nprefix_allow = [\"house_style\", \"hous_style\"]\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (code, out, _) = run(&["check", &file.to_string_lossy(), "--json"]);
    assert_eq!(code, 2);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(json["ok"], false);
    assert_eq!(json["diagnostics"][0]["severity"], "error");
    assert_eq!(json["diagnostics"][0]["line"], 2);
    assert_eq!(json["diagnostics"][0]["column"], 32);
    std::fs::write(&file, "[prompt]\nprefix_allow = [\"house_style\"]\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let (code, out, _) = run(&["check", &file.to_string_lossy(), "--json"]);
    assert_eq!(code, 0, "{out}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(json["ok"], true);
    assert_eq!(json["prefix"], serde_json::json!(["house_style"]));
}

fn write_config(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("prompt-registry-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
    file.to_string_lossy().into_owned()
}

#[test]
fn check_accepts_runtime_ids_and_lists_the_ones_it_could_not_resolve() {
    let file = write_config(
        "runtime.toml",
        "[prompt]\nprefix_allow = [\"house_style\", \"mcp:github\", \"skill:*\"]\n[prompt.placement]\n\"mcp:github\" = \"prefix\"\n",
    );
    let (code, out, err) = run(&["check", &file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains(&format!("{file}:2:32: warning: `mcp:github` in prefix_allow names no registered component yet: run-time entries are checked when the component registers")),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{file}:4:1: warning: `mcp:github` in [prompt.placement]"
        )),
        "{err}"
    );
    assert!(
        out.contains("ok, 3 warning(s)")
            && out.contains(
                "unresolved: mcp:github (run-time entries are checked when the component registers)"
            ),
        "{out}"
    );
    let (code, _, _) = run(&["check", "--strict", &file]);
    assert_eq!(code, 1);
    let (code, out, _) = run(&["check", "--json", &file]);
    assert_eq!(code, 0);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(json["unresolved"], serde_json::json!(["mcp:github"]));
    assert_eq!(json["diagnostics"][0]["severity"], "warning");
    // A foreign name is an error, with its normalization.
    let file = write_config("github.toml", "[prompt]\nprefix_allow = [\"mcp:GitHub\"]\n");
    let (code, _, err) = run(&["check", &file]);
    assert_eq!(code, 2);
    assert!(
        err.contains("did you mean `mcp:github`, the normalization of `GitHub`?"),
        "{err}"
    );
}

#[test]
fn check_strict_fails_on_a_misspelled_prompt_section() {
    let file = write_config("promt.toml", "[promt]\nprefix_allow = [\"house_style\"]\n");
    let (code, out, err) = run(&["check", &file]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains(&format!(
            "{file}:1:2: warning: `promt` looks like a misspelled `prompt`"
        )),
        "{err}"
    );
    let (code, _, _) = run(&["check", "--strict", &file]);
    assert_eq!(code, 1);
}

#[test]
fn check_fails_a_per_turn_writer_promoted_by_configuration() {
    // weather_widget renders every turn and declares nothing.
    let file = write_config(
        "per_turn.toml",
        "[prompt]\ndefault = \"prefix\"\nprefix_allow = [\"house_style\", \"weather_widget\"]\n",
    );
    let (code, _, err) = run(&["check", "--strict", &file]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{file}:2:11: error: default = \"prefix\" requests the prefix for `weather_widget`"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("{file}:3:32: error: `weather_widget` in prefix_allow renders every turn (stability: turn)")),
        "{err}"
    );
    assert!(err.contains("2 error(s); nothing is promoted"), "{err}");
    // By glob: loads; the status row says why it stays in the tail.
    let file = write_config(
        "per_turn_glob.toml",
        "[prompt]\ndefault = \"prefix\"\nprefix_allow = [\"*\"]\n",
    );
    let (code, out, err) = run(&["status", "--json", "--config", &file]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let row = json["prompt"]["components"]
        .as_array()
        .and_then(|rows| rows.iter().find(|c| c["id"] == "weather_widget"))
        .cloned()
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(row["placement"], "tail");
    assert_eq!(row["rule"]["rule"], "per_turn");
    assert_eq!(
        row["reason"],
        "prefix requested by [prompt] default; kept in the tail: it renders every turn, and a glob (`*`) never promotes a per-turn writer"
    );
}
