//! The prefix lock, as an agent's crate and its CI use it (issue 18, "Done when"): a crate
//! with two prefix writers and a blessed lock passes; adding a third prefix writer, letting a
//! tail writer in through agent.toml, or editing a prefix constant's text each fails with one
//! line naming the writer and its declaration; adding a tail writer passes; blessing makes it
//! pass again and changes only the lines about that writer. Through the API
//! (`lock::check_lock`), the command line (`check --lock`, `--bless`) and the test helper
//! (`assert_registry_lock` with `CACHELINE_LOCK=bless`, in a test process of its own).
//!
//! Each registry is built from the registrations `#[prompt_component]` submits, with this
//! file's `file!()` and the `line!()` of each writer's function, so each change below is the
//! registry a pull request making it would link.

use std::path::{Path, PathBuf};
use std::process::Command;

use prompt_registry::__private::{Registration, Render};
use prompt_registry::cli::{App, run_with};
use prompt_registry::lock::{
    Before, LOCK_ENV, LockDifference, LockMode, LockOutcome, assert_registry_lock, check_lock,
    text_fingerprint,
};
use prompt_registry::{Persist, Placement, PromptPolicy, Registry, SessionContext, TurnContext};

/// The agent.toml of the crate: both declared prefix writers allowed, by name.
const AGENT_TOML: &str = "[prompt]\nprefix_allow = [\"house_rules\", \"tool_list\"]\n";

/// The same, letting the tail writer `reviewer_note` in.
const LET_IN_AGENT_TOML: &str = "[prompt]\nprefix_allow = [\"house_rules\", \"tool_list\", \"reviewer_note\"]\n\n[prompt.placement]\nreviewer_note = \"prefix\"\n";

const HOUSE_RULES: &str = "No force pushes.";
const EDITED_HOUSE_RULES: &str = "No force pushes, ever.";

fn tools(_: &SessionContext) -> Option<String> {
    Some("Tools: read_file, grep.".to_owned())
}

fn reviewer(_: &SessionContext) -> Option<String> {
    Some("Reviewer on duty: Ada.".to_owned())
}

fn date(_: &TurnContext<'_>) -> Option<String> {
    Some("Today is 2026-11-30.".to_owned())
}

/// A registration as the attribute writes it, declared at `line` of this file.
fn declared(
    id: &'static str,
    placement: Option<Placement>,
    render: Render,
    line: u32,
) -> Registration {
    Registration {
        id,
        placement,
        persist: Persist::History,
        cleared: None,
        what: "A fixture writer.",
        file: file!(),
        line,
        render,
    }
}

// The crate's writers, one function each: the line of its `declared` call is its declaration.

fn house_rules(text: &'static str) -> Registration {
    declared(
        "house_rules",
        Some(Placement::Prefix),
        Render::Static(text),
        line!(),
    )
}

fn tool_list() -> Registration {
    declared(
        "tool_list",
        Some(Placement::Prefix),
        Render::Session(tools),
        line!(),
    )
}

fn reviewer_note() -> Registration {
    declared(
        "reviewer_note",
        Some(Placement::Tail),
        Render::Session(reviewer),
        line!(),
    )
}

fn today() -> Registration {
    declared("today", Some(Placement::Tail), Render::Turn(date), line!())
}

/// The third prefix writer of the pull request.
fn weather_widget() -> Registration {
    declared(
        "weather_widget",
        Some(Placement::Prefix),
        Render::Static("Weather: sunny."),
        line!(),
    )
}

/// A new tail writer.
fn todo_list() -> Registration {
    declared(
        "todo_list",
        Some(Placement::Tail),
        Render::Turn(date),
        line!(),
    )
}

/// A new writer that declares nothing: the tail, by `[prompt] default`.
fn session_banner() -> Registration {
    declared("session_banner", None, Render::Session(reviewer), line!())
}

/// The crate as it is: two prefix writers and two tail writers.
fn the_crate() -> Vec<Registration> {
    vec![
        house_rules(HOUSE_RULES),
        tool_list(),
        reviewer_note(),
        today(),
    ]
}

fn with(mut registrations: Vec<Registration>, more: Registration) -> Vec<Registration> {
    registrations.push(more);
    registrations
}

fn registry_of(registrations: &[Registration]) -> Registry {
    Registry::from_registrations(registrations).unwrap_or_else(|e| panic!("{e}"))
}

/// The one way this module builds a policy.
fn policy_of(registry: &Registry, agent_toml: &str) -> PromptPolicy {
    registry
        .load_policy(agent_toml, "agent.toml")
        .and_then(|loaded| loaded.deny_warnings())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A fresh path for a lock (and its directory) of this test process.
fn fresh_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("prompt-registry-lock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const REGENERATE: &str = "my-agent check agent.toml --lock prefix.lock --bless";

fn check(registry: &Registry, agent_toml: &str, lock: &Path, mode: LockMode) -> LockOutcome {
    check_lock(
        registry,
        &policy_of(registry, agent_toml),
        lock,
        mode,
        REGENERATE,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `file:line:1` of a writer's declaration, as the registry has it.
fn declaration(registry: &Registry, id: &str) -> String {
    let source = registry
        .get(id)
        .unwrap_or_else(|| panic!("no `{id}`"))
        .source();
    assert_eq!(source.file, file!(), "{id} is declared in this file");
    format!("{}:{}:1", source.file, source.line)
}

/// The one difference of an outcome, as its line reads.
fn one_difference(outcome: LockOutcome) -> LockDifference {
    match outcome {
        LockOutcome::Differs { mut differences } => {
            assert_eq!(differences.len(), 1, "{differences:#?}");
            differences.remove(0)
        }
        other => panic!("expected one difference, got {other:?}"),
    }
}

/// A lock of the crate as it is, blessed; its text.
fn blessed_lock(name: &str) -> (PathBuf, String) {
    let lock = fresh_path(name);
    let registry = registry_of(&the_crate());
    match check(&registry, AGENT_TOML, &lock, LockMode::Bless) {
        LockOutcome::Blessed {
            writers: 2,
            before: Before::Missing,
        } => {}
        other => panic!("{other:?}"),
    }
    (lock.clone(), read(&lock))
}

#[test]
fn a_crate_with_two_prefix_writers_and_a_blessed_lock_passes() {
    let (lock, text) = blessed_lock("two.lock");
    let registry = registry_of(&the_crate());
    assert!(matches!(
        check(&registry, AGENT_TOML, &lock, LockMode::Check),
        LockOutcome::Matches { writers: 2 }
    ));
    // The two prefix writers, by id; neither tail writer.
    let tables: Vec<&str> = text.lines().filter(|l| l.starts_with("[writer.")).collect();
    assert_eq!(tables, ["[writer.house_rules]", "[writer.tool_list]"]);
    assert!(
        text.contains(&format!(
            "fingerprint = \"{}\"",
            text_fingerprint(HOUSE_RULES)
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("file = \"{}\"", file!())),
        "the file as file!() gives it, relative: {text}"
    );
    assert!(
        text.contains(REGENERATE),
        "the header says how to regenerate it: {text}"
    );
    // Blessing an unchanged crate leaves the file as it is.
    assert!(matches!(
        check(&registry, AGENT_TOML, &lock, LockMode::Bless),
        LockOutcome::Matches { writers: 2 }
    ));
    assert_eq!(read(&lock), text);
}

#[test]
fn adding_a_third_prefix_writer_fails_with_one_line_naming_it_and_its_declaration() {
    let (lock, _) = blessed_lock("third.lock");
    let registry = registry_of(&with(the_crate(), weather_widget()));
    let difference = one_difference(check(&registry, AGENT_TOML, &lock, LockMode::Check));
    assert_eq!(
        difference.to_string(),
        format!(
            "{}: new prefix writer `weather_widget` is not in the lock: it declares placement = \"prefix\"; the agent.toml keeps it in the tail, but one that allows it (`*`) puts it above the cache line",
            declaration(&registry, "weather_widget")
        )
    );
    // Under an agent.toml that allows everything it would be in the prefix: also one line.
    let allow_all = "[prompt]\nprefix_allow = [\"*\"]\n";
    let difference = one_difference(check(&registry, allow_all, &lock, LockMode::Check));
    assert!(
        difference.to_string().starts_with(&format!(
            "{}: new prefix writer `weather_widget` is not in the lock: it declares placement = \"prefix\" and the agent.toml lets it in",
            declaration(&registry, "weather_widget")
        )),
        "{difference}"
    );
}

#[test]
fn letting_a_tail_writer_in_through_agent_toml_fails_with_one_line_naming_it() {
    let (lock, _) = blessed_lock("let-in.lock");
    let registry = registry_of(&the_crate());
    let difference = one_difference(check(&registry, LET_IN_AGENT_TOML, &lock, LockMode::Check));
    assert_eq!(
        difference.to_string(),
        format!(
            "{}: the agent.toml lets `reviewer_note` into the prefix ([prompt.placement] asks for it) and the lock does not list it",
            declaration(&registry, "reviewer_note")
        )
    );
}

#[test]
fn editing_a_prefix_constant_fails_with_one_line_and_both_fingerprints() {
    let (lock, _) = blessed_lock("edit.lock");
    let registry = registry_of(&[
        house_rules(EDITED_HOUSE_RULES),
        tool_list(),
        reviewer_note(),
        today(),
    ]);
    let difference = one_difference(check(&registry, AGENT_TOML, &lock, LockMode::Check));
    assert_eq!(
        difference.to_string(),
        format!(
            "{}: the text of prefix constant `house_rules` changed: fingerprint {} in the lock, {} now; sessions cached with the old text miss the cache after an upgrade",
            declaration(&registry, "house_rules"),
            text_fingerprint(HOUSE_RULES),
            text_fingerprint(EDITED_HOUSE_RULES)
        )
    );
}

#[test]
fn adding_a_tail_writer_passes() {
    let (lock, text) = blessed_lock("tail.lock");
    let registry = registry_of(&with(with(the_crate(), todo_list()), session_banner()));
    assert!(matches!(
        check(&registry, AGENT_TOML, &lock, LockMode::Check),
        LockOutcome::Matches { writers: 2 }
    ));
    assert_eq!(read(&lock), text);
}

/// Lines of a text, each with its index.
type Lines = Vec<(usize, String)>;

/// Lines only in `old` and lines only in `new`: a longest common subsequence diff, as
/// `diff` shows a reviewer.
fn changed_lines(old: &str, new: &str) -> (Lines, Lines) {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut removed, mut added) = (Vec::new(), Vec::new());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            added.push((j, b[j].to_owned()));
            j += 1;
        } else {
            removed.push((i, a[i].to_owned()));
            i += 1;
        }
    }
    (removed, added)
}

/// The writer whose table holds line `index` of `text` (`None`: the header or `version`).
fn writer_at(text: &str, index: usize) -> Option<String> {
    text.lines()
        .take(index + 1)
        .filter_map(|l| l.strip_prefix("[writer.")?.strip_suffix(']'))
        .last()
        .map(str::to_owned)
}

/// Blessing `registry` over the crate's lock accepts exactly one difference, and every line
/// the rewrite changes is blank or in the table of `id`.
fn bless_changes_only(name: &str, registry: &Registry, agent_toml: &str, id: &str) -> String {
    let (lock, old) = blessed_lock(name);
    match check(registry, agent_toml, &lock, LockMode::Bless) {
        LockOutcome::Blessed {
            before: Before::Differences(accepted),
            ..
        } => {
            assert_eq!(accepted.len(), 1, "{accepted:#?}");
            assert_eq!(accepted[0].change.id().as_str(), id);
        }
        other => panic!("{other:?}"),
    }
    let new = read(&lock);
    let (removed, added) = changed_lines(&old, &new);
    assert!(!removed.is_empty() || !added.is_empty(), "nothing changed");
    for (index, line) in &removed {
        assert!(
            line.is_empty() || writer_at(&old, *index).as_deref() == Some(id),
            "blessing removed {line:?}, not about `{id}`:\n{old}\n---\n{new}"
        );
    }
    for (index, line) in &added {
        assert!(
            line.is_empty() || writer_at(&new, *index).as_deref() == Some(id),
            "blessing added {line:?}, not about `{id}`:\n{old}\n---\n{new}"
        );
    }
    // And now it passes.
    assert!(matches!(
        check(registry, agent_toml, &lock, LockMode::Check),
        LockOutcome::Matches { .. }
    ));
    new
}

#[test]
fn blessing_a_third_prefix_writer_passes_again_and_adds_only_its_lines() {
    let registry = registry_of(&with(the_crate(), weather_widget()));
    let new = bless_changes_only("bless-third.lock", &registry, AGENT_TOML, "weather_widget");
    assert!(new.contains("[writer.weather_widget]\n"), "{new}");
}

#[test]
fn blessing_a_tail_writer_let_in_passes_again_and_adds_only_its_lines() {
    let registry = registry_of(&the_crate());
    let new = bless_changes_only(
        "bless-let-in.lock",
        &registry,
        LET_IN_AGENT_TOML,
        "reviewer_note",
    );
    assert!(
        new.contains("[writer.reviewer_note]\nfile = ")
            && new.contains("stability = \"session\"\nlands = \"prefix\"\n"),
        "{new}"
    );
}

#[test]
fn blessing_an_edited_constant_passes_again_and_changes_only_its_fingerprint() {
    let (_, old) = blessed_lock("bless-edit-before.lock");
    let registry = registry_of(&[
        house_rules(EDITED_HOUSE_RULES),
        tool_list(),
        reviewer_note(),
        today(),
    ]);
    let new = bless_changes_only("bless-edit.lock", &registry, AGENT_TOML, "house_rules");
    let (removed, added) = changed_lines(&old, &new);
    let lines =
        |changed: Lines| -> Vec<String> { changed.into_iter().map(|(_, line)| line).collect() };
    assert_eq!(
        lines(removed),
        [format!(
            "fingerprint = \"{}\"",
            text_fingerprint(HOUSE_RULES)
        )]
    );
    assert_eq!(
        lines(added),
        [format!(
            "fingerprint = \"{}\"",
            text_fingerprint(EDITED_HOUSE_RULES)
        )]
    );
}

#[test]
fn blessing_keeps_the_header_of_the_file() {
    let (lock, text) = blessed_lock("header.lock");
    let edited = text.replacen(
        "# Prefix lock (cacheline)",
        "# Our agent's prefix lock; ask #prompt-owners before blessing.\n# Prefix lock (cacheline)",
        1,
    );
    std::fs::write(&lock, &edited).unwrap_or_else(|e| panic!("{e}"));
    let registry = registry_of(&with(the_crate(), weather_widget()));
    check(&registry, AGENT_TOML, &lock, LockMode::Bless);
    let new = read(&lock);
    assert!(
        new.starts_with("# Our agent's prefix lock; ask #prompt-owners before blessing.\n"),
        "{new}"
    );
    let (removed, _) = changed_lines(&edited, &new);
    assert!(removed.is_empty(), "{removed:?}");
}

#[test]
fn a_missing_lock_fails_the_check_and_is_not_created() {
    let lock = fresh_path("missing.lock");
    let registry = registry_of(&the_crate());
    let error = check_lock(
        &registry,
        &policy_of(&registry, AGENT_TOML),
        &lock,
        LockMode::Check,
        REGENERATE,
    )
    .err()
    .unwrap_or_else(|| panic!("a missing lock passed"));
    assert!(
        error.to_string().contains("no prefix lock here yet"),
        "{error}"
    );
    assert!(!lock.exists());
}

#[test]
fn the_lock_environment_variable_is_bless_or_unset() {
    use std::ffi::OsStr;
    assert_eq!(LockMode::from_env_value(None).ok(), Some(LockMode::Check));
    assert_eq!(
        LockMode::from_env_value(Some(OsStr::new(""))).ok(),
        Some(LockMode::Check)
    );
    assert_eq!(
        LockMode::from_env_value(Some(OsStr::new("bless"))).ok(),
        Some(LockMode::Bless)
    );
    let error = LockMode::from_env_value(Some(OsStr::new("overwrite")))
        .err()
        .unwrap_or_else(|| panic!("`overwrite` accepted"));
    assert_eq!(
        error.to_string(),
        "CACHELINE_LOCK=\"overwrite\": expected `bless` to rewrite the lock, or unset to check it"
    );
}

// --- The command line: `check AGENT_TOML --lock FILE [--bless]`, as `cli::run_with` runs it
// for an agent's binary.

const APP: App = App::new("my-agent", "1.0.0");

fn cli(registry: &Registry, args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let argv = std::iter::once("my-agent").chain(args.iter().copied());
    let code = run_with(APP, argv, registry, &mut out, &mut err);
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

fn write_config(name: &str, text: &str) -> String {
    let path = fresh_path(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
    path.to_string_lossy().into_owned()
}

/// The `file:line:col: error:` lines of standard error.
fn error_lines(err: &str) -> Vec<&str> {
    err.lines().filter(|l| l.contains(": error: ")).collect()
}

#[test]
fn check_lock_on_the_command_line_fails_on_each_change_and_bless_accepts_it() {
    let agent_toml = write_config("cli-agent.toml", AGENT_TOML);
    let let_in = write_config("cli-let-in.toml", LET_IN_AGENT_TOML);
    let third = registry_of(&with(the_crate(), weather_widget()));
    let edited = registry_of(&[
        house_rules(EDITED_HOUSE_RULES),
        tool_list(),
        reviewer_note(),
        today(),
    ]);
    let original = registry_of(&the_crate());
    for (name, registry, config, id) in [
        ("third", &third, &agent_toml, "weather_widget"),
        ("let-in", &original, &let_in, "reviewer_note"),
        ("edit", &edited, &agent_toml, "house_rules"),
    ] {
        let lock = fresh_path(&format!("cli-{name}.lock"));
        let lock = lock.to_string_lossy();
        let (code, out, err) = cli(
            &original,
            &["check", &agent_toml, "--lock", &lock, "--bless"],
        );
        assert_eq!(code, 0, "{name}: {out}{err}");
        assert!(
            out.contains(&format!("{lock}: written, 2 prefix writer(s) (a new lock)")),
            "{out}"
        );
        let (code, out, _) = cli(&original, &["check", &agent_toml, "--lock", &lock]);
        assert_eq!(code, 0, "{name}: {out}");
        assert!(
            out.contains(&format!("{lock}: ok, 2 prefix writer(s) as locked")),
            "{out}"
        );

        let (code, _, err) = cli(registry, &["check", config, "--lock", &lock]);
        assert_eq!(code, 2, "{name}: {err}");
        let lines = error_lines(&err);
        assert_eq!(lines.len(), 1, "{name}: {err}");
        assert!(
            lines[0].starts_with(&format!("{}: error: ", declaration(registry, id)))
                && lines[0].contains(&format!("`{id}`")),
            "{name}: {}",
            lines[0]
        );
        assert!(
            err.contains(&format!(
                "{lock}: 1 difference(s) with the prompt writers; after review, accept them with --bless"
            )),
            "{err}"
        );

        let (code, out, err) = cli(registry, &["check", config, "--lock", &lock, "--bless"]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(out.contains("(1 difference(s) accepted)"), "{out}");
        let (code, _, err) = cli(registry, &["check", config, "--lock", &lock]);
        assert_eq!((code, error_lines(&err)), (0, vec![]), "{name}: {err}");
    }
}

#[test]
fn check_lock_json_lists_each_difference_as_a_positioned_error() {
    let agent_toml = write_config("json-agent.toml", AGENT_TOML);
    let lock = fresh_path("json.lock");
    let lock = lock.to_string_lossy();
    let original = registry_of(&the_crate());
    let (code, _, _) = cli(
        &original,
        &["check", &agent_toml, "--lock", &lock, "--bless"],
    );
    assert_eq!(code, 0);
    let third = registry_of(&with(the_crate(), weather_widget()));
    let (code, out, _) = cli(&third, &["check", &agent_toml, "--lock", &lock, "--json"]);
    assert_eq!(code, 2);
    let json: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(json["ok"], false);
    assert_eq!(json["lock"]["file"], *lock);
    assert_eq!(json["lock"]["ok"], false);
    let diagnostics = json["diagnostics"]
        .as_array()
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(diagnostics.len(), 1, "{json}");
    let source = third
        .get("weather_widget")
        .unwrap_or_else(|| panic!("weather_widget"))
        .source();
    assert_eq!(diagnostics[0]["severity"], "error");
    assert_eq!(diagnostics[0]["file"], file!());
    assert_eq!(diagnostics[0]["line"], source.line);
    assert_eq!(diagnostics[0]["column"], 1);
    let (code, out, _) = cli(
        &original,
        &["check", &agent_toml, "--lock", &lock, "--json"],
    );
    assert_eq!(code, 0, "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(json["lock"]["writers"], 2);
}

#[test]
fn check_lock_fails_closed_on_a_malformed_lock_with_positioned_errors() {
    let agent_toml = write_config("malformed-agent.toml", AGENT_TOML);
    let lock = write_config(
        "malformed.lock",
        "version = 1\n\n[writer.house_rules]\nfile = \"src/prompt.rs\"\nstability = \"turn\"\nlands = \"prefix\"\n",
    );
    let registry = registry_of(&the_crate());
    let (code, _, err) = cli(&registry, &["check", &agent_toml, "--lock", &lock]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(&format!(
            "{lock}:5:13: error: invalid stability: \"turn\", expected \"constant\" or \"session\""
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{lock}: 1 error(s); fix the file or rewrite it with --bless"
        )),
        "{err}"
    );
    // --bless replaces it with the lock of the program.
    let (code, out, _) = cli(
        &registry,
        &["check", &agent_toml, "--lock", &lock, "--bless"],
    );
    assert_eq!(code, 0);
    assert!(out.contains("(replaced a malformed lock)"), "{out}");
}

#[test]
fn check_lock_with_a_broken_agent_toml_neither_checks_nor_writes_the_lock() {
    let broken = write_config(
        "broken-agent.toml",
        "[prompt]\nprefix_allow = [\"house_rule\"]\n",
    );
    let lock = fresh_path("broken.lock");
    let lock = lock.to_string_lossy();
    let registry = registry_of(&the_crate());
    let (code, _, err) = cli(&registry, &["check", &broken, "--lock", &lock, "--bless"]);
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!("{lock}: not checked: the agent.toml has errors")),
        "{err}"
    );
    assert!(!Path::new(&*lock).exists());
    let (code, _, err) = cli(&registry, &["check", &broken, "--bless"]);
    assert_eq!(code, 2);
    assert!(err.contains("--lock"), "--bless requires --lock: {err}");
}

// --- The test helper, from a plain `#[test]` in a process of its own, with and without
// `CACHELINE_LOCK=bless`.

const CHILD: &str = "child_a_plain_test_asserting_the_lock";
const CHILD_LOCK: &str = "PROMPT_REGISTRY_TEST_LOCK";
const CHILD_CONFIG: &str = "PROMPT_REGISTRY_TEST_AGENT_TOML";

/// What a crate's own test looks like, over the crate with its third prefix writer. Run by
/// `the_lock_environment_variable_blesses_from_a_plain_test` in a child process, whose
/// environment it sets.
#[test]
#[ignore = "run by the_lock_environment_variable_blesses_from_a_plain_test, in a process of its own"]
fn child_a_plain_test_asserting_the_lock() {
    let lock = std::env::var_os(CHILD_LOCK).unwrap_or_else(|| panic!("{CHILD_LOCK} is not set"));
    let config = std::env::var(CHILD_CONFIG).unwrap_or_else(|e| panic!("{CHILD_CONFIG}: {e}"));
    let registry = registry_of(&with(the_crate(), weather_widget()));
    assert_registry_lock(&registry, PathBuf::from(lock), Some(&config));
}

/// Runs the child test with `CACHELINE_LOCK` set to `mode` (or unset); whether it passed,
/// and its output.
fn run_child(lock: &Path, config: &str, mode: Option<&str>) -> (bool, String) {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let mut command = Command::new(exe);
    command
        .args([
            CHILD,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_LOCK, lock)
        .env(CHILD_CONFIG, config);
    match mode {
        Some(mode) => command.env(LOCK_ENV, mode),
        None => command.env_remove(LOCK_ENV),
    };
    let output = command.output().unwrap_or_else(|e| panic!("{e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains(&format!("test {CHILD} ...")),
        "the child test did not run:\n{text}"
    );
    (output.status.success(), text)
}

#[test]
fn the_lock_environment_variable_blesses_from_a_plain_test() {
    let (lock, _) = blessed_lock("env.lock");
    let config = write_config("env-agent.toml", AGENT_TOML);
    let registry = registry_of(&with(the_crate(), weather_widget()));

    let (passed, output) = run_child(&lock, &config, None);
    assert!(!passed, "{output}");
    assert!(
        output.contains(&format!(
            "{}: error: new prefix writer `weather_widget` is not in the lock",
            declaration(&registry, "weather_widget")
        )) && output.contains(
            "after review, accept them with: CACHELINE_LOCK=bless cargo test -p prompt-registry"
        ),
        "{output}"
    );
    let (passed, output) = run_child(&lock, &config, Some("bles"));
    assert!(
        !passed && output.contains("CACHELINE_LOCK=\"bles\""),
        "{output}"
    );

    let (passed, output) = run_child(&lock, &config, Some("bless"));
    assert!(passed, "{output}");
    assert!(read(&lock).contains("[writer.weather_widget]"));
    let (passed, output) = run_child(&lock, &config, None);
    assert!(passed, "{output}");
}
