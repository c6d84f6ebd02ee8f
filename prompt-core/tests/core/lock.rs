//! The prefix lock's file and comparison (`prompt_core::lock`): who is listed, malformed
//! lock files (positioned, all at once, fail closed, size cap), each kind of difference, and
//! the properties that make it reviewable: it reads back as written, its text does not
//! depend on registration order, and a change to one writer changes only that writer's
//! lines.

use proptest::prelude::*;

use crate::support::id;
use prompt_core::component::SourceLocation;
use prompt_core::config::Diagnostics;
use prompt_core::lock::{
    LOCK_LIMIT, LockChange, LockProblem, PrefixLock, portable_path, text_fingerprint,
};
use prompt_core::{Component, Placement, PromptPolicy};

/// The one way this module builds a policy.
fn policy_of(components: &[Component], agent_toml: &str) -> PromptPolicy {
    PromptPolicy::from_agent_toml(agent_toml, "agent.toml", components)
        .and_then(|loaded| loaded.deny_warnings())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn at(file: &'static str, line: u32) -> SourceLocation {
    SourceLocation::new(file, line)
}

/// A crate: two prefix writers, a tail session writer, a per-turn writer declared for the
/// prefix (by hand: the attribute refuses it), one that declares nothing.
fn writers() -> Vec<Component> {
    vec![
        Component::constant(id("house_rules"), "No force pushes.")
            .placement(Placement::Prefix)
            .located_at(at("agent/src/prompt.rs", 10)),
        Component::session(id("tool_list"), |_| Some("read_file".to_owned()))
            .placement(Placement::Prefix)
            .located_at(at("agent/src/prompt.rs", 20)),
        Component::session(id("reviewer_note"), |_| Some("Ada.".to_owned()))
            .placement(Placement::Tail)
            .located_at(at("agent/src/prompt.rs", 30)),
        Component::turn(id("clock"), |_| Some("12:00".to_owned()))
            .placement(Placement::Prefix)
            .located_at(at("agent/src/prompt.rs", 40)),
        Component::constant(id("banner"), "Welcome.").located_at(at("agent/src/prompt.rs", 50)),
    ]
}

const AGENT_TOML: &str = "[prompt]\nprefix_allow = [\"house_rules\", \"tool_list\"]\n";

fn ids(lock: &PrefixLock) -> Vec<String> {
    lock.writers().map(|w| w.id().to_string()).collect()
}

#[test]
fn the_lock_lists_who_can_reach_the_prefix_and_never_a_per_turn_writer() {
    let components = writers();
    let lock = PrefixLock::of(&components, &policy_of(&components, AGENT_TOML));
    assert_eq!(ids(&lock), ["house_rules", "tool_list"]);
    // Declared for the prefix, with no agent.toml letting it in: listed, landing in the tail.
    let lock = PrefixLock::of(&components, &PromptPolicy::default());
    assert_eq!(ids(&lock), ["house_rules", "tool_list"]);
    assert!(lock.writers().all(|w| w.lands() == Placement::Tail));
    // `default = "prefix"` asks the prefix for the writer that declares nothing.
    let lock = PrefixLock::of(
        &components,
        &policy_of(
            &components,
            "[prompt]\ndefault = \"prefix\"\nprefix_allow = [\"*\"]\n",
        ),
    );
    assert_eq!(ids(&lock), ["banner", "house_rules", "tool_list"]);
    let house = lock
        .get("house_rules")
        .unwrap_or_else(|| panic!("house_rules"));
    assert_eq!(
        house.fingerprint(),
        Some(text_fingerprint("No force pushes."))
    );
    assert_eq!(lock.get("tool_list").and_then(|w| w.fingerprint()), None);
}

/// Every problem of `src` as a lock: `(line, column, message)`.
fn problems(src: &str) -> Vec<(usize, usize, String)> {
    match PrefixLock::parse(src, "prefix.lock") {
        Ok(_) => panic!("accepted:\n{src}"),
        Err(Diagnostics(errors)) => errors
            .iter()
            .map(|d| {
                assert_eq!(d.position.origin, "prefix.lock");
                (d.position.line, d.position.column, d.problem.to_string())
            })
            .collect(),
    }
}

#[test]
fn every_problem_of_a_malformed_lock_is_reported_at_once_in_source_order() {
    let got = problems(concat!(
        "version = 1\n",
        "writers = 2\n",
        "\n",
        "[writer.house_rules]\n",
        "file = \"agent/src/prompt.rs\"\n",
        "stability = \"turn\"\n",
        "lands = \"above\"\n",
        "fingerprint = \"XYZ\"\n",
        "\n",
        "[writer.Tool_List]\n",
        "file = \"agent/src/prompt.rs\"\n",
        "\n",
        "[writer.banner]\n",
        "file = 3\n",
        "stability = \"session\"\n",
        "lands = \"tail\"\n",
        "fingerprint = \"b624cb805ab495d5da60e6a3cf9aa2bc\"\n",
        "colour = \"red\"\n",
    ));
    let positions: Vec<(usize, usize)> = got.iter().map(|(l, c, _)| (*l, *c)).collect();
    assert_eq!(
        positions,
        [
            (2, 1),
            (6, 13),
            (7, 9),
            (8, 15),
            (10, 9),
            (14, 8),
            (17, 15),
            (18, 1)
        ],
        "{got:#?}"
    );
    let messages: Vec<&str> = got.iter().map(|(_, _, m)| m.as_str()).collect();
    assert_eq!(
        messages[0],
        "unknown field `writers`, expected one of `version`, `writer`"
    );
    assert!(
        messages[1]
            .starts_with("invalid stability: \"turn\", expected \"constant\" or \"session\"")
    );
    assert_eq!(
        messages[2],
        "invalid lands: \"above\", expected \"prefix\" or \"tail\""
    );
    assert_eq!(
        messages[3],
        "invalid fingerprint: \"XYZ\", expected 32 lowercase hex digits"
    );
    assert!(
        messages[4].starts_with("`[writer.Tool_List]`: invalid component id"),
        "{}",
        messages[4]
    );
    assert_eq!(messages[5], "invalid type: integer `3`, expected a string");
    assert_eq!(
        messages[6],
        "writer `banner` is a session writer: only a constant has a fingerprint"
    );
    assert!(messages[7].starts_with("unknown field `colour`, expected one of `file`"));
}

#[test]
fn missing_fields_are_errors_at_the_writers_table() {
    let got = problems(concat!(
        "version = 1\n",
        "[writer.house_rules]\n",
        "stability = \"constant\"\n",
        "[writer.tool_list]\n",
        "file = \"agent/src/prompt.rs\"\n",
        "stability = \"session\"\n",
        "lands = \"prefix\"\n",
        "fingerprint = \"b624cb805ab495d5da60e6a3cf9aa2bc\"\n",
    ));
    let lines: Vec<(usize, usize, &str)> =
        got.iter().map(|(l, c, m)| (*l, *c, m.as_str())).collect();
    assert_eq!(
        lines,
        [
            (2, 9, "writer `house_rules` has no `file`"),
            (2, 9, "writer `house_rules` has no `lands`"),
            (2, 9, "writer `house_rules` has no `fingerprint`"),
            (
                8,
                15,
                "writer `tool_list` is a session writer: only a constant has a fingerprint"
            ),
        ]
    );
}

#[test]
fn a_lock_without_the_format_version_or_with_another_is_refused() {
    assert_eq!(
        problems("[writer]\n"),
        [(
            1,
            1,
            "no `version`: a prefix lock starts with `version = 1`".to_owned()
        )]
    );
    let got = problems("version = 2\n");
    assert_eq!((got[0].0, got[0].1), (1, 11));
    assert!(
        got[0]
            .2
            .starts_with("format version 2 is not one this program reads (it reads 1)")
    );
    assert_eq!(
        problems("version = \"1\"\n")[0].2,
        "invalid type: string \"1\", expected the format version, an integer"
    );
    assert!(
        problems("version = 0x1\n")[0]
            .2
            .starts_with("format version 0x1 is not one")
    );
}

#[test]
fn a_syntax_error_is_positioned_and_a_writer_listed_twice_is_one() {
    let got = problems("version = 1\n[writer.house_rules\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, 2);
    let twice = concat!(
        "version = 1\n",
        "[writer.banner]\nfile = \"a.rs\"\nstability = \"session\"\nlands = \"tail\"\n",
        "[writer.banner]\nfile = \"a.rs\"\nstability = \"session\"\nlands = \"tail\"\n",
    );
    let got = problems(twice);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, 6, "{got:?}");
}

#[test]
fn a_lock_over_the_size_limit_is_refused_unparsed() {
    let limit = usize::try_from(LOCK_LIMIT).unwrap_or(usize::MAX);
    let src = format!("version = 1\n#{}\n", "x".repeat(limit));
    match PrefixLock::parse(&src, "prefix.lock") {
        Err(Diagnostics(errors)) => {
            assert_eq!(errors.len(), 1);
            assert!(matches!(errors[0].problem, LockProblem::TooLarge { .. }));
        }
        Ok(_) => panic!("a lock over the limit was read"),
    }
}

/// The differences between the lock of `before` and `after`, as lines.
fn differences(before: &[Component], after: &[Component], agent_toml: &str) -> Vec<String> {
    let text = PrefixLock::of(before, &policy_of(before, AGENT_TOML)).render("test");
    let loaded = PrefixLock::parse(&text, "prefix.lock").unwrap_or_else(|e| panic!("{e}"));
    loaded
        .compare(after, &policy_of(after, agent_toml))
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn a_writer_no_longer_linked_is_named_at_its_table_in_the_lock() {
    let before = writers();
    let after: Vec<Component> = writers()
        .into_iter()
        .filter(|c| c.id().as_str() != "tool_list")
        .collect();
    assert_eq!(
        differences(
            &before,
            &after,
            "[prompt]\nprefix_allow = [\"house_rules\"]\n"
        ),
        [
            "prefix.lock:11:9: `tool_list` (declared in agent/src/prompt.rs) is in the lock but no longer linked into the program"
        ]
    );
}

#[test]
fn a_writer_that_no_longer_asks_or_now_renders_every_turn_is_one_line_at_its_declaration() {
    let before = writers();
    let mut after = writers();
    after[1] = Component::session(id("tool_list"), |_| Some("read_file".to_owned()))
        .placement(Placement::Tail)
        .located_at(at("agent/src/prompt.rs", 20));
    assert_eq!(
        differences(&before, &after, AGENT_TOML),
        ["agent/src/prompt.rs:20:1: `tool_list` no longer asks for the prefix; the lock lists it"]
    );
    after[1] = Component::turn(id("tool_list"), |_| Some("read_file".to_owned()))
        .placement(Placement::Prefix)
        .located_at(at("agent/src/prompt.rs", 20));
    assert_eq!(
        differences(
            &before,
            &after,
            "[prompt]\nprefix_allow = [\"house_rules\"]\n"
        ),
        [
            "agent/src/prompt.rs:20:1: `tool_list` changed stability from session (in the lock) to turn: a per-turn writer never reaches the prefix"
        ]
    );
}

#[test]
fn a_changed_stability_a_moved_declaration_and_a_demotion_are_one_line_each() {
    let before = writers();
    let mut after = writers();
    // The constant became a session renderer, in another file.
    after[0] = Component::session(id("house_rules"), |_| Some("No force pushes.".to_owned()))
        .placement(Placement::Prefix)
        .located_at(at("agent/src/rules.rs", 3));
    let got = differences(
        &before,
        &after,
        "[prompt]\nprefix_allow = [\"house_rules\"]\n",
    );
    assert_eq!(
        got,
        [
            "agent/src/rules.rs:3:1: `house_rules` is now declared in agent/src/rules.rs; the lock says agent/src/prompt.rs",
            "agent/src/rules.rs:3:1: `house_rules` changed stability from constant (in the lock) to session",
            "agent/src/prompt.rs:20:1: `tool_list` now lands in the tail under the agent.toml; the lock has it in the prefix",
        ]
    );
    // An unchanged program has none; a moved line number is not a difference.
    let mut moved = writers();
    moved[0] = Component::constant(id("house_rules"), "No force pushes.")
        .placement(Placement::Prefix)
        .located_at(at("agent/src/prompt.rs", 99));
    assert!(differences(&before, &moved, AGENT_TOML).is_empty());
}

#[test]
fn a_file_quoted_from_the_lock_is_an_excerpt() {
    let long = "a/".repeat(5000) + "lib.rs";
    let text = format!(
        "version = 1\n[writer.gone]\nfile = \"{long}\"\nstability = \"session\"\nlands = \"tail\"\n"
    );
    let loaded = PrefixLock::parse(&text, "prefix.lock").unwrap_or_else(|e| panic!("{e}"));
    let got = loaded.compare(&writers(), &PromptPolicy::default());
    assert_eq!(got.len(), 3, "{got:#?}");
    let gone = got[0].to_string();
    assert!(
        gone.starts_with("prefix.lock:2:9: `gone` (declared in a/a/"),
        "{gone}"
    );
    assert!(gone.len() < 300, "{} bytes", gone.len());
}

#[test]
fn a_lock_of_nothing_is_the_header_and_the_version() {
    let text = PrefixLock::default().render("line one\n# line two\n\nline\u{7}four");
    assert_eq!(
        text,
        "# line one\n# line two\n#\n# line\u{fffd}four\n\nversion = 1\n"
    );
    let loaded = PrefixLock::parse(&text, "prefix.lock").unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.lock().is_empty());
    assert_eq!(
        prompt_core::lock::header_of(&text),
        Some("# line one\n# line two\n#\n# line\u{fffd}four\n")
    );
    assert_eq!(prompt_core::lock::header_of("version = 1\n"), None);
}

#[test]
fn the_change_of_each_difference_names_its_writer() {
    let before = writers();
    let after = vec![
        Component::constant(id("house_rules"), "No force pushes, ever.")
            .placement(Placement::Prefix)
            .located_at(at("agent/src/prompt.rs", 10)),
    ];
    let text = PrefixLock::of(&before, &policy_of(&before, AGENT_TOML)).render("");
    let loaded = PrefixLock::parse(&text, "prefix.lock").unwrap_or_else(|e| panic!("{e}"));
    let got = loaded.compare(
        &after,
        &policy_of(&after, "[prompt]\nprefix_allow = [\"house_rules\"]\n"),
    );
    let named: Vec<(&str, bool)> = got
        .iter()
        .map(|d| {
            (
                d.change.id().as_str(),
                matches!(d.change, LockChange::Text { .. }),
            )
        })
        .collect();
    assert_eq!(named, [("house_rules", true), ("tool_list", false)]);
}

// --- Properties.

/// A writer as a strategy: id, declaration file (any text, hostile included), line,
/// constant text or session, declared placement, whether the agent.toml lists it.
#[derive(Debug, Clone)]
struct Writer {
    name: String,
    file: String,
    line: u32,
    text: Option<String>,
    declared: Option<Placement>,
    allowed: bool,
}

impl Writer {
    fn component(&self) -> Component {
        let id = id(&self.name);
        let component = match &self.text {
            Some(text) => Component::constant(id, text.clone()),
            None => Component::session(id, |_| Some("session text".to_owned())),
        };
        let component = component.located_at(SourceLocation::new(self.file.clone(), self.line));
        match self.declared {
            Some(p) => component.placement(p),
            None => component,
        }
    }
}

fn writer() -> impl Strategy<Value = Writer> {
    (
        "[a-z][a-z0-9_]{0,12}",
        prop_oneof![
            "[a-z/]{1,30}\\.rs",
            "/[a-zA-Z0-9 ._-]{0,20}/src/[a-z]{1,8}\\.rs",
            "[a-zA-Z]:\\\\[a-z\\\\]{0,20}src\\\\lib\\.rs",
            "\\PC{0,24}",
            ".{0,24}",
            "[\\x00-\\x1f\"'\\\\#\\[\\]=]{0,12}",
        ],
        1u32..5000,
        proptest::option::of(".{0,40}"),
        prop_oneof![
            Just(None),
            Just(Some(Placement::Prefix)),
            Just(Some(Placement::Tail))
        ],
        any::<bool>(),
    )
        .prop_map(|(name, file, line, text, declared, allowed)| Writer {
            name,
            file,
            line,
            text,
            declared,
            allowed,
        })
        .prop_filter("a valid, unreserved id", |w| {
            prompt_core::ComponentId::new(w.name.as_str()).is_ok()
        })
}

/// Writers with distinct ids.
fn crate_writers() -> impl Strategy<Value = Vec<Writer>> {
    proptest::collection::vec(writer(), 0..12).prop_map(|mut writers| {
        let mut seen = std::collections::BTreeSet::new();
        writers.retain(|w| seen.insert(w.name.clone()));
        writers
    })
}

/// The agent.toml of `writers`: `default` as given, an exact allow entry for each allowed.
fn agent_toml(writers: &[Writer], default_prefix: bool) -> String {
    let allowed: Vec<String> = writers
        .iter()
        .filter(|w| w.allowed)
        .map(|w| format!("\"{}\"", w.name))
        .collect();
    format!(
        "[prompt]\ndefault = \"{}\"\nprefix_allow = [{}]\n",
        if default_prefix { "prefix" } else { "tail" },
        allowed.join(", ")
    )
}

fn lock_text(writers: &[Writer], default_prefix: bool) -> (String, Vec<Component>, PromptPolicy) {
    let components: Vec<Component> = writers.iter().map(Writer::component).collect();
    let policy = policy_of(&components, &agent_toml(writers, default_prefix));
    let text = PrefixLock::of(&components, &policy).render("header");
    (text, components, policy)
}

/// The writer whose table holds line `index` of `text`.
fn table_of(text: &str, index: usize) -> Option<String> {
    text.lines()
        .take(index + 1)
        .filter_map(|l| l.strip_prefix("[writer.")?.strip_suffix(']'))
        .last()
        .map(str::to_owned)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_rendered_lock_reads_back_as_written_and_matches_its_program(
        writers in crate_writers(),
        default_prefix in any::<bool>(),
    ) {
        let (text, components, policy) = lock_text(&writers, default_prefix);
        let loaded = PrefixLock::parse(&text, "prefix.lock");
        prop_assert!(loaded.is_ok(), "{text}\n{:?}", loaded.err());
        let loaded = loaded.unwrap_or_else(|e| panic!("{e}"));
        prop_assert_eq!(loaded.lock(), &PrefixLock::of(&components, &policy));
        prop_assert!(loaded.compare(&components, &policy).is_empty());
        // Nothing absolute, no backslash, ordered by id.
        for w in loaded.lock().writers() {
            prop_assert!(!w.file().starts_with('/') && !w.file().contains('\\'), "{}", w.file());
        }
        let ids: Vec<String> = loaded.lock().writers().map(|w| w.id().to_string()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        prop_assert_eq!(ids, sorted);
    }

    #[test]
    fn the_text_does_not_depend_on_registration_order(
        writers in crate_writers(),
        default_prefix in any::<bool>(),
    ) {
        let (text, _, _) = lock_text(&writers, default_prefix);
        let mut reversed = writers.clone();
        reversed.reverse();
        let (again, _, _) = lock_text(&reversed, default_prefix);
        prop_assert_eq!(text, again);
    }

    #[test]
    fn changing_one_writer_changes_only_its_lines(
        writers in crate_writers().prop_filter("a writer to change", |w| !w.is_empty()),
        pick in any::<prop::sample::Index>(),
        change in 0u8..4,
        default_prefix in any::<bool>(),
    ) {
        let (old, _, _) = lock_text(&writers, default_prefix);
        let mut changed = writers.clone();
        let w = &mut changed[pick.index(writers.len())];
        match change {
            0 => w.text = Some(format!("{}!", w.text.clone().unwrap_or_default())),
            1 => w.allowed = !w.allowed,
            2 => w.declared = if w.declared == Some(Placement::Prefix) { Some(Placement::Tail) } else { Some(Placement::Prefix) },
            _ => w.line += 1,
        }
        let name = w.name.clone();
        let (new, _, _) = lock_text(&changed, default_prefix);
        // Line-aligned where both have the same writers; otherwise one table more or less.
        let old_lines: Vec<&str> = old.lines().collect();
        let new_lines: Vec<&str> = new.lines().collect();
        let kept = |text: &str| -> Vec<String> {
            text.lines()
                .enumerate()
                .filter(|(i, l)| !l.is_empty() && table_of(text, *i).as_deref() != Some(name.as_str()))
                .map(|(_, l)| l.to_owned())
                .collect()
        };
        prop_assert_eq!(kept(&old), kept(&new), "\n{}\n---\n{}", old, new);
        if change == 3 {
            prop_assert_eq!(old_lines, new_lines, "a moved line is not in the lock");
        }
    }

    #[test]
    fn portable_paths_are_relative_and_slash_separated(file in "\\PC{0,60}") {
        let path = portable_path(&file);
        prop_assert!(!path.starts_with('/'), "{path}");
        prop_assert!(!path.contains('\\'), "{path}");
    }

    #[test]
    fn any_text_is_read_without_a_panic_and_errors_are_inside_it(src in "(\\PC|\n){0,200}") {
        if let Err(Diagnostics(errors)) = PrefixLock::parse(&src, "prefix.lock") {
            prop_assert!(!errors.is_empty());
            let lines: Vec<usize> = src.split('\n').map(|l| l.chars().count()).collect();
            for e in &errors {
                let width = lines.get(e.position.line - 1);
                prop_assert!(width.is_some_and(|w| e.position.column <= w + 1), "{e}");
            }
        }
    }
}
