//! The `cacheline` subcommands, run in-process over this binary's registry: the reference
//! components plus one component this file adds with no declaration.

use std::io::Write;

use prompt_registry::cli::{DefaultConfig, run_with};
use prompt_registry::reference::{DEFAULT_AGENT_TOML, IDS};
use prompt_registry::{Registry, TurnContext, prompt_component};
use serde_json::Value;

/// A writer added next quarter by someone who never heard of the cache.
#[prompt_component]
fn weather_widget(_turn: &TurnContext) -> Option<String> {
    Some("It is sunny.".to_owned())
}

const DEFAULT: DefaultConfig = DefaultConfig {
    name: "<built-in agent.toml>",
    text: DEFAULT_AGENT_TOML,
};

fn run(args: &[&str]) -> (u8, String, String) {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let argv = std::iter::once("cacheline").chain(args.iter().copied());
    let code = run_with(argv, &registry, Some(DEFAULT), &mut out, &mut err);
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

fn temp_config(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cacheline-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join(name);
    let mut f = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{e}"));
    f.write_all(text.as_bytes())
        .unwrap_or_else(|e| panic!("{e}"));
    path
}

#[test]
fn status_json_lists_every_reference_component_with_resolved_placement() {
    let (code, out, err) = run(&["status", "--json"]);
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
    for key in [
        "declared",
        "stability",
        "constant",
        "reason",
        "source",
        "what",
        "persist",
    ] {
        assert!(date.get(key).is_some(), "row lacks {key}: {date}");
    }
    assert_eq!(date["stability"], "turn");
    assert_eq!(date["constant"], false);
    assert_eq!(date["what"], "Today's date.");
    assert!(
        date["source"]
            .as_str()
            .unwrap_or("")
            .contains("reference.rs:")
    );
}

#[test]
fn newly_added_component_with_no_config_change_lands_in_tail_and_status_says_why() {
    let (code, out, _) = run(&["status", "--json"]);
    assert_eq!(code, 0);
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    let row = json["prompt"]["components"]
        .as_array()
        .and_then(|rows| rows.iter().find(|c| c["id"] == "weather_widget"))
        .unwrap_or_else(|| panic!("weather_widget missing"))
        .clone();
    assert_eq!(row["placement"], "tail");
    assert_eq!(row["declared"], Value::Null);
    assert_eq!(row["reason"], "tail requested by [prompt] default");
    assert_eq!(row["rule"]["rule"], "tail_requested");
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
}

#[test]
fn check_reports_broken_config_with_line_col_and_exit_2() {
    let path = temp_config(
        "broken.toml",
        "[tools]\nallow = [\"x\"]\n\n[prompt]\nprefix_allow = [\"tool_schema\", \"skill:[a]\"]\ndefualt = \"tail\"\n",
    );
    let (code, out, err) = run(&["check", "--config", path.to_str().unwrap_or("")]);
    assert_eq!(code, 2, "out: {out}\nerr: {err}");
    let shown = path.display().to_string();
    assert!(
        err.contains(&format!("{shown}:6:1: unknown field `defualt`")),
        "{err}"
    );
    // Fix the unknown key: the pattern errors show, all of them, with positions.
    let path = temp_config(
        "broken2.toml",
        "[prompt]\nprefix_allow = [\"tool_schema\", \"skill:[a]\"]\n",
    );
    let (code, _, err) = run(&["check", "--config", path.to_str().unwrap_or("")]);
    assert_eq!(code, 2);
    let shown = path.display().to_string();
    assert!(err.contains(&format!("{shown}:2:17: `tool_schema` in prefix_allow names no known component; did you mean `tool_schemas`?")), "{err}");
    assert!(
        err.contains(&format!("{shown}:2:32: malformed pattern `skill:[a]`")),
        "{err}"
    );
}

#[test]
fn check_exit_codes_for_clean_warnings_and_strict() {
    let clean = temp_config(
        "clean.toml",
        "[prompt]\nprefix_allow = [\"tool_schemas\"]\n",
    );
    let (code, out, _) = run(&["check", "--config", clean.to_str().unwrap_or("")]);
    assert_eq!(code, 0);
    assert!(out.contains("ok, 0 warning(s)"), "{out}");
    let warn = temp_config("warn.toml", "[prompt]\nprefix_allow = [\"mcp:*\"]\n");
    let (code, _, err) = run(&["check", "--config", warn.to_str().unwrap_or("")]);
    assert_eq!(code, 0);
    assert!(
        err.contains(":2:17: warning: pattern `mcp:*` in prefix_allow matches no known component"),
        "{err}"
    );
    let (code, _, _) = run(&["check", "--strict", "--config", warn.to_str().unwrap_or("")]);
    assert_eq!(code, 1);
    let (code, _, err) = run(&["check", "--config", "/nonexistent/agent.toml"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("/nonexistent/agent.toml: cannot read"),
        "{err}"
    );
}

#[test]
fn demo_runs_the_scripted_session_and_reuses_the_prefix_every_turn() {
    let (code, out, err) = run(&["demo", "--turns", "12", "--json"]);
    assert_eq!(code, 0, "{err}");
    let turns: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    let turns = turns.as_array().unwrap_or_else(|| panic!("{out}"));
    assert_eq!(turns.len(), 12);
    let events: Vec<String> = turns
        .iter()
        .flat_map(|t| t["events"].as_array().cloned().unwrap_or_default())
        .filter_map(|e| e.as_str().map(str::to_owned))
        .collect();
    for expected in [
        "date rolled over",
        "todo list changed",
        "plan mode turned on",
        "instructions were edited",
        "compacted",
        "called read_file",
    ] {
        assert!(
            events.iter().any(|e| e.contains(expected)),
            "no event {expected}: {events:?}"
        );
    }
    let bytes = |t: &Value, key: &str| {
        t[key]
            .as_u64()
            .unwrap_or_else(|| panic!("turn {}: no {key}", t["turn"]))
    };
    let fingerprint = &turns[0]["fingerprint"];
    // Bytes sent again, not served by the previous request's prefix, from turn 2 on.
    let (mut resent, mut head_resent) = (0, 0);
    for pair in turns.windows(2) {
        let (before, t) = (&pair[0], &pair[1]);
        assert_eq!(
            &t["fingerprint"], fingerprint,
            "prefix fingerprint is stable"
        );
        let reused = bytes(t, "reused_bytes");
        let head = bytes(t, "head_rewrite_reused");
        resent += bytes(t, "request_bytes") - reused;
        head_resent += bytes(t, "head_rewrite_bytes") - head;
        let compacted = t["events"].as_array().is_some_and(|e| {
            e.iter()
                .any(|e| e.as_str().is_some_and(|e| e.contains("compacted")))
        });
        if compacted {
            // A new cache epoch: the frozen prefix is still reused, nearly as much as the
            // unchanged start of replace-at-head's system message.
            assert!(
                10 * reused >= 9 * head,
                "turn {}: reused {reused} vs replace-at-head {head}",
                t["turn"]
            );
            continue;
        }
        // All of the previous request is reused but its ephemeral tail (git state, memory
        // recall), and never less than replace-at-head reuses.
        let lost = bytes(before, "request_bytes") - reused;
        assert!(
            lost < 1024,
            "turn {}: {lost} B of the previous request not reused",
            t["turn"]
        );
        assert!(
            reused >= head,
            "turn {}: reused {reused} vs replace-at-head {head}",
            t["turn"]
        );
    }
    // Replace-at-head re-sends its whole history every turn.
    assert!(
        head_resent > 3 * resent,
        "re-sent: cacheline {resent} B, replace-at-head {head_resent} B"
    );
    // The edit of the instructions is appended, never written over message 0.
    let edit = turns
        .iter()
        .find(|t| t["turn"] == 7)
        .unwrap_or_else(|| panic!("turn 7"));
    assert!(
        edit["appended"]
            .as_array()
            .is_some_and(|a| a.iter().any(|n| n["producer"] == "system_prompt"))
    );
    // Replace-at-head rewrites the start of message 0 there and keeps almost nothing.
    let (reused, head) = (
        bytes(edit, "reused_bytes"),
        bytes(edit, "head_rewrite_reused"),
    );
    assert!(
        reused > 5 * head,
        "turn 7: reused {reused} vs replace-at-head {head}"
    );
}

#[test]
fn unknown_subcommand_is_a_usage_error() {
    let (code, _, err) = run(&["frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.contains("unrecognized subcommand"), "{err}");
}

// Keep the extra component's function used.
#[test]
fn weather_widget_is_an_ordinary_function() {
    let ctx = prompt_registry::SessionContext::default();
    let values = prompt_registry::Extensions::new();
    let turn = TurnContext::new(&ctx, &values, 1);
    assert_eq!(weather_widget(&turn).as_deref(), Some("It is sunny."));
}

#[test]
fn status_prefix_needs_allow_deny_wins_and_config_placement_is_honoured() {
    let config = temp_config(
        "rules.toml",
        "[prompt]\nprefix_allow = [\"assistant_instructions\", \"guidelines\", \"date\"]\nprefix_deny = [\"guidelines\"]\n[prompt.placement]\ndate = \"prefix\"\n",
    );
    let (code, out, err) = run(&[
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
    // Declared tail, config asks prefix, allowed: prefix.
    let date = row("date");
    assert_eq!(date["declared"], "tail");
    assert_eq!(date["placement"], "prefix");
    assert_eq!(
        date["reason"],
        "prefix requested by [prompt.placement]; allowed by prefix_allow `date`"
    );
    assert_eq!(row("assistant_instructions")["placement"], "prefix");
}
