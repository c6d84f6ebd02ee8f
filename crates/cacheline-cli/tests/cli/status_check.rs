//! `status` and `check` of the `cacheline` binary, over the reference components.

use serde_json::Value;

use crate::{cacheline, temp_file};
use prompt_reference::components::IDS;

#[test]
fn status_json_lists_every_reference_component_with_resolved_placement() {
    let (code, out, err) = cacheline(&["status", "--json"]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let components = json["prompt"]["components"]
        .as_array()
        .unwrap_or_else(|| panic!("{out}"));
    let placement = |id: &str| {
        components
            .iter()
            .find(|c| c["id"] == id)
            .map(|c| c["placement"].as_str().unwrap_or("").to_owned())
            .unwrap_or_else(|| panic!("{id} missing from status"))
    };
    for id in IDS {
        let expected = match id {
            "assistant_instructions"
            | "guidelines"
            | "tool_schemas"
            | "project_memory"
            | "skills_catalog"
            | "runtime_environment" => "prefix",
            _ => "tail",
        };
        assert_eq!(placement(id), expected, "{id}");
    }
    assert_eq!(json["prompt"]["default"], "tail");
    assert_eq!(json["prompt"]["prefix_allow"][0], "assistant_instructions");
    let date = components
        .iter()
        .find(|c| c["id"] == "date")
        .unwrap_or_else(|| panic!("date"));
    // docs/status-json.md, schema version 1: every key on every row, with its type.
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["tools"]["lands"], "request field");
    assert_eq!(json["tools"]["stability"], "session");
    assert!(json["tools"]["definitions"].as_u64().is_some_and(|n| n > 0));
    assert_eq!(json["tools"]["sources"][0], "builtin");
    assert!(json["tools"]["fingerprint"].is_string());
    assert!(json["prompt"]["prefix_deny"].is_array());
    let one_of =
        |value: &Value, allowed: &[&str]| value.as_str().is_some_and(|v| allowed.contains(&v));
    for row in components {
        let placement = ["prefix", "tail"];
        assert!(row["id"].is_string(), "{row}");
        assert!(one_of(&row["placement"], &placement), "{row}");
        assert!(
            row["declared"].is_null() || one_of(&row["declared"], &placement),
            "{row}"
        );
        assert!(one_of(&row["requested"], &placement), "{row}");
        assert!(
            one_of(&row["stability"], &["constant", "session", "turn"]),
            "{row}"
        );
        assert_eq!(row["constant"], row["stability"] == "constant", "{row}");
        if row["placement"] == "prefix" {
            assert!(row["persist"].is_null(), "{row}");
        } else {
            assert!(one_of(&row["persist"], &["history", "ephemeral"]), "{row}");
        }
        assert!(
            row["cleared"].is_null() || row["cleared"].is_string(),
            "{row}"
        );
        assert!(row["reason"].is_string(), "{row}");
        assert!(
            one_of(
                &row["rule"]["rule"],
                &[
                    "tail_requested",
                    "allowed",
                    "denied",
                    "not_allowed",
                    "per_turn"
                ]
            ),
            "{row}"
        );
        assert!(
            one_of(
                &row["rule"]["source"],
                &["config", "declaration", "default", "runtime"]
            ),
            "{row}"
        );
        assert!(
            row["source"].as_str().is_some_and(|s| s.contains(".rs:")),
            "{row}"
        );
        assert!(row["what"].as_str().is_some_and(|w| !w.is_empty()), "{row}");
    }
    assert_eq!(date["stability"], "turn");
    assert_eq!(date["constant"], false);
    assert_eq!(date["what"], "Today's date.");
    assert!(
        date["source"]
            .as_str()
            .unwrap_or("")
            .contains("components.rs:")
    );
}

#[test]
fn check_reports_broken_config_with_line_col_and_exit_2() {
    let path = temp_file(
        "broken.toml",
        "[tools]\nallow = [\"x\"]\n\n[prompt]\nprefix_allow = [\"tool_schema\", \"skill:[a]\"]\ndefualt = \"tail\"\n",
    );
    let (code, out, err) = cacheline(&["check", path.to_str().unwrap_or("")]);
    assert_eq!(code, 2, "out: {out}\nerr: {err}");
    let shown = path.display().to_string();
    assert!(
        err.contains(&format!("{shown}:6:1: error: unknown field `defualt`")),
        "{err}"
    );
    // Fix the unknown key: the pattern errors show, all of them, with positions.
    let path = temp_file(
        "broken2.toml",
        "[prompt]\nprefix_allow = [\"tool_schema\", \"skill:[a]\"]\n",
    );
    let (code, _, err) = cacheline(&["check", path.to_str().unwrap_or("")]);
    assert_eq!(code, 2);
    let shown = path.display().to_string();
    assert!(err.contains(&format!("{shown}:2:17: error: `tool_schema` in prefix_allow names no known component; did you mean `tool_schemas`?")), "{err}");
    assert!(
        err.contains(&format!(
            "{shown}:2:32: error: malformed pattern `skill:[a]`"
        )),
        "{err}"
    );
}

#[test]
fn check_exit_codes_for_clean_warnings_and_strict() {
    let clean = temp_file(
        "clean.toml",
        "[prompt]\nprefix_allow = [\"tool_schemas\"]\n",
    );
    let (code, out, _) = cacheline(&["check", clean.to_str().unwrap_or("")]);
    assert_eq!(code, 0);
    assert!(out.contains("ok, 0 warning(s)"), "{out}");
    let warn = temp_file("warn.toml", "[prompt]\nprefix_allow = [\"mcp:*\"]\n");
    let (code, _, err) = cacheline(&["check", warn.to_str().unwrap_or("")]);
    assert_eq!(code, 0);
    assert!(
        err.contains(":2:17: warning: pattern `mcp:*` in prefix_allow matches no known component"),
        "{err}"
    );
    let (code, _, _) = cacheline(&["check", "--strict", warn.to_str().unwrap_or("")]);
    assert_eq!(code, 1);
    let (code, _, err) = cacheline(&["check", "/nonexistent/agent.toml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("/nonexistent/agent.toml: cannot read"),
        "{err}"
    );
}

#[test]
fn status_prefix_needs_allow_deny_wins_and_config_placement_is_honoured() {
    let config = temp_file(
        "rules.toml",
        "[prompt]\nprefix_allow = [\"assistant_instructions\", \"guidelines\", \"project_memory\"]\nprefix_deny = [\"guidelines\"]\n[prompt.placement]\nproject_memory = \"tail\"\n",
    );
    let (code, out, err) = cacheline(&[
        "status",
        "--json",
        "--config",
        config.to_str().unwrap_or(""),
    ]);
    assert_eq!(code, 0, "{err}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    let row = |id: &str| {
        json["prompt"]["components"]
            .as_array()
            .and_then(|rows| rows.iter().find(|c| c["id"] == id))
            .cloned()
            .unwrap_or_else(|| panic!("{id} missing"))
    };
    // Declared prefix, no allow entry: demoted.
    let tools = row("tool_schemas");
    assert_eq!(tools["placement"], "tail");
    assert_eq!(
        tools["reason"],
        "prefix requested by its declaration; demoted to tail: no prefix_allow entry matches"
    );
    // Allowed and denied: deny wins.
    let guidelines = row("guidelines");
    assert_eq!(guidelines["placement"], "tail");
    assert!(
        guidelines["reason"]
            .as_str()
            .unwrap_or("")
            .contains("denied by prefix_deny `guidelines` (deny wins)")
    );
    // Declared prefix, allowed, config asks tail: tail.
    let memory = row("project_memory");
    assert_eq!(memory["declared"], "prefix");
    assert_eq!(memory["placement"], "tail");
    assert_eq!(memory["reason"], "tail requested by [prompt.placement]");
    assert_eq!(row("assistant_instructions")["placement"], "prefix");
}

/// A per-turn writer promoted by configuration used to pass `check --strict` and crash the
/// session at turn 2: now the file is refused, by `check` and by `status`, naming it.
#[test]
fn check_refuses_a_per_turn_writer_promoted_by_configuration() {
    let config = temp_file(
        "per_turn.toml",
        "[prompt]\nprefix_allow = [\"assistant_instructions\", \"date\"]\n[prompt.placement]\ndate = \"prefix\"\n",
    );
    let path = config.to_str().unwrap_or("");
    let (code, out, err) = cacheline(&["check", "--strict", path]);
    assert_eq!(code, 2, "out: {out}\nerr: {err}");
    assert!(
        err.contains(&format!(
            "{path}:2:43: error: `date` in prefix_allow renders every turn (stability: turn)"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{path}:4:1: error: `date` in [prompt.placement] requests the prefix, but `date` renders every turn (stability: turn)"
        )),
        "{err}"
    );
    let (code, _, err) = cacheline(&["status", "--config", path]);
    assert_eq!(code, 2, "{err}");
}

/// `check` validates a file naming run-time components it cannot know, and says which.
#[test]
fn check_accepts_runtime_entries_and_lists_the_unresolved_ones() {
    let config = temp_file(
        "runtime.toml",
        "[prompt]\nprefix_allow = [\"assistant_instructions\", \"mcp:github\"]\n[prompt.placement]\n\"mcp:github\" = \"prefix\"\n",
    );
    let path = config.to_str().unwrap_or("");
    let (code, out, err) = cacheline(&["check", path]);
    assert_eq!(code, 0, "out: {out}\nerr: {err}");
    assert!(out.contains("unresolved: mcp:github"), "{out}");
    assert!(
        err.contains(&format!(
            "{path}:2:43: warning: `mcp:github` in prefix_allow names no registered component yet"
        )),
        "{err}"
    );
    let (code, out, _) = cacheline(&["check", "--json", path]);
    assert_eq!(code, 0);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(json["unresolved"][0], "mcp:github");
}
