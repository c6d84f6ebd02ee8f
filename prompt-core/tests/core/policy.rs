//! The `[prompt]` policy: resolution rules and strict parsing.

use std::fs;
use std::path::Path;

use crate::support::{components, id};
use prompt_core::config::Diagnostics;
use prompt_core::input::{CONFIG_LIMIT, InputError};
use prompt_core::policy::{
    IdPattern, LoadError, LoadedPolicy, PerTurnPromotion, PolicyErrors, PolicyProblem, Reason,
    RequestSource,
};
use prompt_core::{Component, Placement, PromptPolicy};

fn try_load(toml: &str) -> Result<LoadedPolicy, PolicyErrors> {
    PromptPolicy::from_agent_toml(toml, "agent.toml", &components())
}

fn load(toml: &str) -> PromptPolicy {
    match try_load(toml) {
        Ok(loaded) => loaded.ignore_warnings(),
        Err(e) => panic!("policy should load: {e}"),
    }
}

/// The errors of a file that must not load, as `(line, column, message)`.
fn errors(toml: &str) -> Vec<(usize, usize, String)> {
    match try_load(toml) {
        Ok(_) => panic!("must not load:\n{toml}"),
        Err(Diagnostics(errors)) => errors
            .into_iter()
            .map(|e| (e.position.line, e.position.column, e.problem.to_string()))
            .collect(),
    }
}

fn component(name: &str) -> Component {
    components()
        .into_iter()
        .find(|c| c.id().as_str() == name)
        .unwrap_or_else(|| panic!("no fixture component {name}"))
}

#[test]
fn new_component_without_declaration_or_config_lands_in_tail() {
    let policy = load("[prompt]\nprefix_allow = [\"*\"]\n");
    let date = component("date");
    assert_eq!(date.declared(), None);
    let r = policy.resolve(&date);
    assert_eq!(r.placement, Placement::Tail);
    assert_eq!(
        r.reason,
        Reason::TailRequested {
            source: RequestSource::Default
        }
    );
    assert_eq!(r.reason.to_string(), "tail requested by [prompt] default");
}

#[test]
fn missing_prompt_section_gives_default_policy_and_everything_in_tail() {
    let policy = load("[tools]\nallow = [\"read_file\"]\n");
    assert_eq!(policy, PromptPolicy::default());
    for c in components() {
        assert_eq!(policy.resolve(&c).placement, Placement::Tail, "{}", c.id());
    }
}

#[test]
fn prefix_request_without_allow_entry_is_demoted_to_tail() {
    let policy = load("[prompt]\nprefix_allow = [\"tool_schemas\"]\n");
    let r = policy.resolve(&component("assistant_instructions"));
    assert_eq!(r.requested, Placement::Prefix);
    assert_eq!(r.placement, Placement::Tail);
    assert!(r.demoted());
    assert_eq!(
        r.reason,
        Reason::NotAllowed {
            source: RequestSource::Declaration
        }
    );
    assert!(
        r.reason
            .to_string()
            .contains("demoted to tail: no prefix_allow entry matches")
    );
}

#[test]
fn allowed_prefix_request_lands_in_prefix_and_names_the_pattern() {
    let policy = load(
        "[prompt]\nprefix_allow = [\"assistant_instructions\", \"skill:*\"]\n[prompt.placement]\n\"skill:pdf\" = \"prefix\"\n",
    );
    let r = policy.resolve(&component("skill:pdf"));
    assert_eq!(r.placement, Placement::Prefix);
    assert_eq!(
        r.reason,
        Reason::Allowed {
            source: RequestSource::Config,
            pattern: "skill:*".into()
        }
    );
    let r = policy.resolve(&component("assistant_instructions"));
    assert_eq!(
        r.reason,
        Reason::Allowed {
            source: RequestSource::Declaration,
            pattern: "assistant_instructions".into()
        }
    );
}

#[test]
fn deny_beats_allow_by_exact_id() {
    let policy =
        load("[prompt]\nprefix_allow = [\"tool_schemas\"]\nprefix_deny = [\"tool_schemas\"]\n");
    let r = policy.resolve(&component("tool_schemas"));
    assert_eq!(r.placement, Placement::Tail);
    assert!(matches!(r.reason, Reason::Denied { ref pattern, .. } if pattern == "tool_schemas"));
}

#[test]
fn deny_by_glob_beats_allow_by_exact_id() {
    let policy = load(
        "[prompt]\nprefix_allow = [\"mcp:github\"]\nprefix_deny = [\"mcp:*\"]\n[prompt.placement]\n\"mcp:github\" = \"prefix\"\n",
    );
    let r = policy.resolve(&component("mcp:github"));
    assert_eq!(r.placement, Placement::Tail);
    assert_eq!(
        r.reason,
        Reason::Denied {
            source: RequestSource::Config,
            pattern: "mcp:*".into()
        }
    );
    assert!(r.reason.to_string().contains("deny wins"));
}

#[test]
fn config_placement_overrides_declaration_both_ways() {
    let policy = load(
        "[prompt]\nprefix_allow = [\"*\"]\n[prompt.placement]\nproject_memory = \"prefix\"\nassistant_instructions = \"tail\"\n",
    );
    let memory = policy.resolve(&component("project_memory"));
    assert_eq!(memory.placement, Placement::Prefix);
    assert!(matches!(
        memory.reason,
        Reason::Allowed {
            source: RequestSource::Config,
            ..
        }
    ));
    let instructions = policy.resolve(&component("assistant_instructions"));
    assert_eq!(instructions.placement, Placement::Tail);
    assert_eq!(
        instructions.reason,
        Reason::TailRequested {
            source: RequestSource::Config
        }
    );
}

#[test]
fn default_prefix_still_needs_an_allow_entry() {
    let policy = load("[prompt]\ndefault = \"prefix\"\nprefix_allow = [\"project_memory\"]\n");
    assert_eq!(
        policy.resolve(&component("project_memory")).placement,
        Placement::Prefix
    );
    let date = policy.resolve(&component("date"));
    assert_eq!(date.placement, Placement::Tail);
    assert_eq!(
        date.reason,
        Reason::NotAllowed {
            source: RequestSource::Default
        }
    );
}

#[test]
fn glob_matching_nothing_is_a_warning_not_an_error() {
    let src = "[prompt]\nprefix_allow = [\"assistant_instructions\", \"mcp:slack*\"]\n";
    let loaded = try_load(src).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.warnings().len(), 1);
    let w = &loaded.warnings()[0];
    assert_eq!((w.position.line, w.position.column), (2, 43));
    assert!(matches!(
        w.problem,
        PolicyProblem::GlobMatchesNothing { .. }
    ));
    assert_eq!(
        w.to_string(),
        "agent.toml:2:43: pattern `mcp:slack*` in prefix_allow matches no known component"
    );
    // The glob is kept, not dropped: a component registered later can still match it.
    assert_eq!(loaded.clone().ignore_warnings().prefix_allow.len(), 2);
}

#[test]
fn a_deny_glob_over_a_runtime_namespace_loads_under_deny_warnings_without_any_such_writer() {
    // An app without MCP servers or web skills denies them ahead of registration: that is
    // the point of the entry, so it is not a warning and `deny_warnings` accepts the file.
    let src = "[prompt]\nprefix_allow = [\"assistant_instructions\"]\nprefix_deny = [\"mcp:slack*\", \"skill:web-*\"]\n";
    let loaded = try_load(src).unwrap_or_else(|e| panic!("{e}"));
    assert!(loaded.warnings().is_empty(), "{:?}", loaded.warnings());
    let policy = loaded.deny_warnings().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(policy.prefix_deny.len(), 2);
    // A deny glob outside the run-time namespaces that matches nothing is still a typo.
    let typo = "[prompt]\nprefix_deny = [\"dtae*\"]\n";
    let loaded = try_load(typo).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.warnings().len(), 1);
    assert_eq!(
        loaded.warnings()[0].to_string(),
        "agent.toml:2:16: pattern `dtae*` in prefix_deny matches no known component"
    );
    // And an allow glob over a run-time namespace still warns: it promotes nothing today.
    let allow = "[prompt]\nprefix_allow = [\"mcp:slack*\"]\n";
    assert_eq!(
        try_load(allow)
            .unwrap_or_else(|e| panic!("{e}"))
            .warnings()
            .len(),
        1
    );
}

#[test]
fn good_fixtures_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent-toml/good");
    let full = fs::read_to_string(dir.join("full.toml")).unwrap_or_default();
    let policy = load(&full);
    assert_eq!(
        policy.resolve(&component("project_memory")).placement,
        Placement::Prefix
    );
    assert_eq!(
        policy.resolve(&component("mcp:github")).placement,
        Placement::Tail
    );
    assert_eq!(
        policy.placement.get(&id("project_memory")),
        Some(&Placement::Prefix)
    );
}

/// Each file in `fixtures/agent-toml/bad` starts with `# expect: LINE:COL fragment` lines;
/// loading must fail with exactly those errors, in that order, and never panic.
#[test]
fn malformed_agent_toml_corpus_reports_line_and_column() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent-toml/bad");
    let mut entries: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    entries.sort();
    assert!(entries.len() >= 15, "corpus shrank to {}", entries.len());
    for path in entries {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let src = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected: Vec<(usize, usize, String)> = src
            .lines()
            .filter_map(|l| l.strip_prefix("# expect: "))
            .map(|rest| {
                let (pos, fragment) = rest.split_once(' ').unwrap_or((rest, ""));
                let (line, col) = pos
                    .split_once(':')
                    .unwrap_or_else(|| panic!("{name}: bad expect"));
                (
                    line.parse().unwrap_or_else(|_| panic!("{name}: bad line")),
                    col.parse().unwrap_or_else(|_| panic!("{name}: bad column")),
                    fragment.to_owned(),
                )
            })
            .collect();
        assert!(!expected.is_empty(), "{name} has no expectation");
        let result =
            std::panic::catch_unwind(|| PromptPolicy::from_agent_toml(&src, &name, &components()));
        let Ok(result) = result else {
            panic!("{name}: loading panicked");
        };
        let errors = match result {
            Ok(_) => panic!("{name}: loaded, but must fail"),
            Err(errors) => errors.0,
        };
        let got: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), expected.len(), "{name}: got {got:#?}");
        for ((line, col, fragment), err) in expected.iter().zip(&errors) {
            assert_eq!(
                (err.position.line, err.position.column),
                (*line, *col),
                "{name}: {err}"
            );
            assert!(
                err.to_string()
                    .starts_with(&format!("{name}:{line}:{col}: ")),
                "{err}"
            );
            assert!(
                err.to_string().contains(fragment.as_str()),
                "{name}: `{err}` lacks `{fragment}`"
            );
        }
    }
}

// Issue point 9: a run-time component requests the prefix only through an exact
// `[prompt.placement]` entry; `default` and a declaration never apply to it.
#[test]
fn runtime_component_requests_the_tail_even_with_default_prefix_and_allow_all() {
    let policy = load("[prompt]\ndefault = \"prefix\"\nprefix_allow = [\"*\"]\n");
    for name in ["mcp:github", "skill:pdf"] {
        let r = policy.resolve(&component(name));
        assert_eq!(r.placement, Placement::Tail, "{name}");
        assert_eq!(r.requested, Placement::Tail, "{name}");
        assert_eq!(
            r.reason,
            Reason::TailRequested {
                source: RequestSource::Runtime
            }
        );
        assert_eq!(
            r.reason.to_string(),
            "tail requested by its namespace: run-time components request the tail unless [prompt.placement] names them"
        );
    }
    // The same file promotes a built-in session component that declares nothing.
    assert_eq!(
        policy.resolve(&component("project_memory")).placement,
        Placement::Prefix
    );
}

#[test]
fn runtime_component_reaches_the_prefix_through_an_exact_placement_entry() {
    let policy = load(
        "[prompt]\nprefix_allow = [\"mcp:*\"]\n[prompt.placement]\n\"mcp:github\" = \"prefix\"\n",
    );
    let r = policy.resolve(&component("mcp:github"));
    assert_eq!(r.placement, Placement::Prefix);
    assert_eq!(
        r.reason,
        Reason::Allowed {
            source: RequestSource::Config,
            pattern: "mcp:*".into()
        }
    );
}

// Issue point 11: `[prompt]` must be a table; serde's positional filling is gone.
#[test]
fn prompt_as_an_array_is_refused_not_filled_by_position() {
    assert_eq!(
        errors("prompt = [\"prefix\", [\"*\"]]\n"),
        [(
            1,
            10,
            "invalid type: array, expected a [prompt] table".to_owned()
        )]
    );
    assert_eq!(
        errors("prompt = { default = \"prefix\", prefix_allow = 1 }\n"),
        [(
            1,
            47,
            "invalid type: integer `1`, expected an array of id patterns".to_owned()
        )]
    );
}

#[test]
fn array_of_prompt_tables_is_an_error_that_says_so() {
    let got =
        errors("[tools]\nallow = []\n[[prompt]]\ndefault = \"prefix\"\nprefix_allow = [\"*\"]\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].0, got[0].1), (3, 1));
    assert!(
        got[0].2.contains("`[[prompt]]` is an array of tables")
            && got[0].2.contains("write `[prompt]`"),
        "{got:?}"
    );
}

// Issue point 12: promoting a per-turn component is a load error; a glob never promotes one.
#[test]
fn per_turn_component_promoted_by_placement_is_a_load_error() {
    let src = "[prompt]\nprefix_allow = [\"d*\"]\n[prompt.placement]\ndate = \"prefix\"\n";
    let Err(Diagnostics(errs)) = try_load(src) else {
        panic!("must not load")
    };
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(
        errs[0].problem,
        PolicyProblem::PerTurnPromoted {
            id: id("date"),
            by: PerTurnPromotion::Placement
        }
    );
    let text = errs[0].to_string();
    assert!(
        text.starts_with("agent.toml:4:1: `date` in [prompt.placement] requests the prefix")
            && text.contains("renders every turn (stability: turn)")
            && text.contains("set it to \"tail\""),
        "{text}"
    );
    // Asking for the tail is fine.
    load("[prompt.placement]\ndate = \"tail\"\n");
}

#[test]
fn exact_allow_entry_for_per_turn_component_is_a_load_error() {
    let got = errors("[prompt]\nprefix_allow = [\"assistant_instructions\", \"todo_addendum\"]\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].0, got[0].1), (2, 43));
    assert!(
        got[0]
            .2
            .contains("`todo_addendum` in prefix_allow renders every turn (stability: turn)")
            && got[0].2.contains("remove it from prefix_allow"),
        "{got:?}"
    );
}

#[test]
fn default_prefix_promoting_per_turn_component_is_a_load_error() {
    let got = errors("[prompt]\ndefault = \"prefix\"\nprefix_allow = [\"date\"]\n");
    // Both entries that promote it, in source order: `default`, then the allow entry.
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!((got[0].0, got[0].1), (2, 11));
    assert!(
        got[0]
            .2
            .starts_with("default = \"prefix\" requests the prefix for `date`")
            && got[0].2.contains("renders every turn (stability: turn)"),
        "{got:?}"
    );
    assert_eq!((got[1].0, got[1].1), (3, 17));
    assert!(got[1].2.contains("`date` in prefix_allow"), "{got:?}");
}

#[test]
fn glob_never_promotes_a_per_turn_component_and_says_why() {
    let policy = load("[prompt]\ndefault = \"prefix\"\nprefix_allow = [\"*\"]\n");
    let r = policy.resolve(&component("date"));
    assert_eq!(r.requested, Placement::Prefix);
    assert_eq!(r.placement, Placement::Tail);
    assert!(r.demoted());
    assert_eq!(
        r.reason,
        Reason::PerTurn {
            source: RequestSource::Default,
            pattern: "*".into()
        }
    );
    assert_eq!(
        r.reason.to_string(),
        "prefix requested by [prompt] default; kept in the tail: it renders every turn, and a glob (`*`) never promotes a per-turn writer"
    );
}

#[test]
fn resolve_never_puts_a_per_turn_component_in_the_prefix() {
    // A hand-built policy skips the loader's checks; resolution still refuses.
    let policy = PromptPolicy {
        default: Placement::Prefix,
        prefix_allow: vec![IdPattern::parse("date").unwrap_or_else(|e| panic!("{e}"))],
        placement: [(id("todo_addendum"), Placement::Prefix)].into(),
        ..PromptPolicy::default()
    };
    for c in components() {
        let r = policy.resolve(&c);
        if c.stability() == prompt_core::placement::Stability::Turn {
            assert_eq!(r.placement, Placement::Tail, "{}", c.id());
        }
    }
    let r = policy.resolve(&component("date"));
    assert!(matches!(r.reason, Reason::PerTurn { .. }), "{:?}", r.reason);
    assert!(
        r.reason
            .to_string()
            .contains("even with prefix_allow `date`")
    );
    // A per-turn component that declares the prefix (hand-built: the attribute refuses it).
    let eager = Component::turn(id("clock"), |_| Some("now".into())).placement(Placement::Prefix);
    let policy = PromptPolicy {
        prefix_allow: vec![IdPattern::parse("*").unwrap_or_else(|e| panic!("{e}"))],
        ..PromptPolicy::default()
    };
    assert_eq!(policy.resolve(&eager).placement, Placement::Tail);
}

// Issue point 13: unregistered run-time ids are warnings, kept; built-in ones stay errors.
#[test]
fn unregistered_runtime_ids_are_warnings_and_kept_in_the_policy() {
    let src = "[prompt]\nprefix_allow = [\"mcp:slack\", \"skill:gone\"]\nprefix_deny = [\"mcp:evil\"]\n[prompt.placement]\n\"mcp:slack\" = \"prefix\"\n";
    let loaded = try_load(src).unwrap_or_else(|e| panic!("{e}"));
    let warnings: Vec<String> = loaded.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(
        warnings,
        [
            "agent.toml:2:17: `mcp:slack` in prefix_allow names no registered component yet: run-time entries are checked when the component registers",
            "agent.toml:2:30: `skill:gone` in prefix_allow names no registered component yet: run-time entries are checked when the component registers",
            "agent.toml:3:16: `mcp:evil` in prefix_deny names no registered component yet: run-time entries are checked when the component registers",
            "agent.toml:5:1: `mcp:slack` in [prompt.placement] names no registered component yet: run-time entries are checked when the component registers",
        ]
    );
    assert_eq!(
        loaded.unresolved(),
        [id("mcp:slack"), id("skill:gone"), id("mcp:evil")]
    );
    // Kept: the server comes back online, registers, and the entries apply to it.
    let slack = Component::session(id("mcp:slack"), |_| Some("Slack guidance.".into()));
    assert_eq!(
        loaded.clone().ignore_warnings().resolve(&slack).placement,
        Placement::Prefix
    );
    // A built-in id that names nothing stays an error.
    let got = errors("[prompt]\nprefix_allow = [\"mcp:slack\", \"tool_schema\"]\n");
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(got[0].2.contains("did you mean `tool_schemas`?"), "{got:?}");
}

#[test]
fn namespaced_id_with_a_foreign_name_suggests_its_normalization() {
    let got = errors(
        "[prompt]\nprefix_allow = [\"mcp:GitHub\"]\n[prompt.placement]\n\"mcp:brave.search\" = \"prefix\"\n",
    );
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!((got[0].0, got[0].1), (2, 17));
    assert!(
        got[0]
            .2
            .ends_with("; did you mean `mcp:github`, the normalization of `GitHub`?"),
        "{got:?}"
    );
    assert_eq!((got[1].0, got[1].1), (4, 1));
    assert!(
        got[1]
            .2
            .starts_with("invalid component id in [prompt.placement]")
            && got[1].2.ends_with(
                "; did you mean `mcp:brave-search`, the normalization of `brave.search`?"
            ),
        "{got:?}"
    );
}

// Issue point 14: a near-miss of the section name is a warning with a suggestion.
#[test]
fn near_miss_of_the_section_name_is_a_warning_with_a_suggestion() {
    for (src, name) in [
        ("[promt]\nprefix_allow = [\"*\"]\n", "promt"),
        ("[Prompt]\nprefix_allow = [\"*\"]\n", "Prompt"),
        (
            "[tools]\nallow = []\n[prompts.placement]\nx = 1\n",
            "prompts",
        ),
    ] {
        let loaded = try_load(src).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            loaded.clone().ignore_warnings(),
            PromptPolicy::default(),
            "{src}"
        );
        let warnings: Vec<String> = loaded.warnings().iter().map(ToString::to_string).collect();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains(&format!(
                "`{name}` looks like a misspelled `prompt`: it is ignored"
            )) && warnings[0].ends_with("did you mean `[prompt]`?"),
            "{warnings:?}"
        );
        assert!(matches!(
            loaded.warnings()[0].problem,
            PolicyProblem::SectionNearMiss { .. }
        ));
    }
    assert_eq!(
        try_load("[project]\n[model]\n[tools]\n")
            .map(|l| l.warnings().len())
            .ok(),
        Some(0)
    );
}

// Issue point 15 and the restructure: every error at once, each positioned, linear.
#[test]
fn every_error_of_a_file_is_reported_at_once_in_source_order() {
    let got = errors(
        "[prompt]\nprefix_alow = [\"tool_schemas\"]\ndefault = \"top\"\nprefix_deny = [\"mcp:*\", 3]\n[prompt.placement]\nmemory = \"prefix\"\ndate = \"prefix\"\n",
    );
    let positions: Vec<(usize, usize)> = got.iter().map(|(l, c, _)| (*l, *c)).collect();
    assert_eq!(
        positions,
        [(2, 1), (3, 11), (4, 25), (6, 1), (7, 1)],
        "{got:#?}"
    );
    assert!(
        got[0].2.contains("unknown field `prefix_alow`")
            && got[0].2.ends_with("did you mean `prefix_allow`?")
    );
    assert!(got[1].2.contains("expected \"prefix\" or \"tail\""));
    assert!(got[2].2.contains("invalid type: integer `3`"));
    assert!(
        got[3]
            .2
            .contains("`memory` in [prompt.placement] names no known component")
    );
    assert!(got[4].2.contains("renders every turn"));
}

/// `n` malformed entries (`"Bad0"`, …), ten to a line, and where each starts.
fn malformed_entries(n: usize) -> (String, Vec<(usize, usize)>) {
    let mut src = String::from("[prompt]\nprefix_allow = [\n");
    let mut at = Vec::with_capacity(n);
    let mut line = 3;
    let mut column = 1;
    for i in 0..n {
        at.push((line, column));
        let entry = format!("\"Bad{i}\", ");
        column += entry.len();
        src.push_str(&entry);
        if i % 10 == 9 {
            src.push('\n');
            line += 1;
            column = 1;
        }
    }
    src.push_str("]\n");
    (src, at)
}

#[test]
fn two_hundred_thousand_malformed_entries_load_with_exact_positions() {
    for n in [20_000, 200_000] {
        let (src, at) = malformed_entries(n);
        let started = std::time::Instant::now();
        let got = try_load(&src);
        let elapsed = started.elapsed();
        let Err(Diagnostics(errs)) = got else {
            panic!("must not load")
        };
        eprintln!(
            "{n} malformed entries: {} errors in {elapsed:?}",
            errs.len()
        );
        assert_eq!(errs.len(), n);
        for i in [0, 1, 9, 10, 12_345, n / 2, n - 1] {
            let e = &errs[i];
            assert_eq!(
                (e.position.line, e.position.column),
                at[i],
                "entry {i}: {e}"
            );
            assert!(
                e.to_string()
                    .contains(&format!("malformed pattern `Bad{i}` in prefix_allow")),
                "{e}"
            );
        }
    }
    // One line holding every entry: columns are counted in one pass too.
    let n = 50_000;
    let entries: Vec<String> = (0..n).map(|i| format!("\"é{i}\"")).collect();
    let src = format!("[prompt]\nprefix_allow = [{}]\n", entries.join(","));
    let Err(Diagnostics(errs)) = try_load(&src) else {
        panic!("must not load")
    };
    assert_eq!(errs.len(), n);
    let mut column = 17;
    for (i, entry) in entries.iter().enumerate() {
        assert_eq!(
            (errs[i].position.line, errs[i].position.column),
            (2, column)
        );
        column += entry.chars().count() + 1;
    }
}

#[test]
fn nesting_past_the_parser_limit_is_reported_where_it_passes_the_limit() {
    let src = format!(
        "[tools]\nallow = [\"read_file\"]\n[prompt]\nprefix_allow = {}{}\n",
        "[".repeat(200),
        "]".repeat(200)
    );
    let got = errors(&src);
    assert_eq!(got.len(), 1, "{got:?}");
    // toml's limit is 80 levels: the 81st `[` (column 16 + 80) is where it stops.
    assert_eq!((got[0].0, got[0].1), (4, 96), "{got:?}");
    assert!(got[0].2.contains("max recursion depth"), "{got:?}");
    let src = format!("[x]\ny = {}1{}\n", "{a=".repeat(100), "}".repeat(100));
    let got = errors(&src);
    assert_eq!((got[0].0, got[0].1), (2, 5 + 3 * 80), "{got:?}");
}

// Issue point 16: bounded input, regular files only.
#[test]
fn text_over_the_config_limit_is_refused_with_a_position() {
    let limit = usize::try_from(CONFIG_LIMIT).unwrap_or(usize::MAX);
    let line = format!("# {}\n", "x".repeat(1021));
    let mut src = String::from("[prompt]\n");
    while src.len() <= limit {
        src.push_str(&line);
    }
    let got = errors(&src);
    assert_eq!(got.len(), 1, "{got:?}");
    // Byte `limit` is the first one past the limit: line 2 + (limit - 9) / 1024, column 1 + ….
    let past = limit - "[prompt]\n".len();
    assert_eq!((got[0].0, got[0].1), (2 + past / 1024, 1 + past % 1024));
    assert!(
        got[0]
            .2
            .contains("an agent.toml is read up to 4194304 bytes"),
        "{got:?}"
    );
    // Exactly at the limit is accepted.
    src.truncate(limit);
    let cut = src.rfind('\n').map_or(0, |i| i + 1);
    src.truncate(cut);
    src.push_str(&"#".repeat(limit - src.len()));
    assert_eq!(src.len(), limit);
    assert!(try_load(&src).is_ok());
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("prompt-core-policy-{name}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

#[test]
fn load_agent_toml_refuses_a_fifo_without_blocking() {
    let dir = temp_dir("fifo");
    let fifo = dir.join("agent.toml");
    let _ = fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    let (send, receive) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let result = PromptPolicy::load_agent_toml(&path, &components());
        let _ = send.send(result.map(prompt_core::policy::LoadedPolicy::ignore_warnings));
    });
    let result = receive
        .recv_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("loading a FIFO blocked"));
    match result {
        Err(LoadError::Input(InputError::NotRegular { kind, .. })) => assert_eq!(kind, "a FIFO"),
        other => panic!("expected NotRegular, got {other:?}"),
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn load_agent_toml_refuses_a_file_over_the_limit_and_loads_a_good_one() {
    let dir = temp_dir("size");
    let big = dir.join("big.toml");
    let limit = usize::try_from(CONFIG_LIMIT).unwrap_or(usize::MAX);
    fs::write(&big, "#".repeat(limit + 1)).unwrap_or_else(|e| panic!("{e}"));
    match PromptPolicy::load_agent_toml(&big, &components()) {
        Err(LoadError::Input(InputError::TooLarge { limit, .. })) => {
            assert_eq!(limit, CONFIG_LIMIT);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    let good = dir.join("agent.toml");
    fs::write(&good, "[prompt]\nprefix_allow = [\"tool_schemas\"]\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let loaded =
        PromptPolicy::load_agent_toml(&good, &components()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        loaded
            .clone()
            .ignore_warnings()
            .resolve(&component("tool_schemas"))
            .placement,
        Placement::Prefix
    );
    let bad = dir.join("bad.toml");
    fs::write(&bad, "[prompt]\ndefault = 1\n").unwrap_or_else(|e| panic!("{e}"));
    match PromptPolicy::load_agent_toml(&bad, &components()) {
        Err(LoadError::Invalid(Diagnostics(errs))) => {
            assert!(
                errs[0]
                    .to_string()
                    .starts_with(&format!("{}:2:11: invalid type", bad.display())),
                "{errs:?}"
            );
        }
        other => panic!("expected a policy error, got {other:?}"),
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn syntax_errors_keep_the_toml_error() {
    let Err(Diagnostics(errs)) = try_load("[prompt]\nprefix_allow = [\"a\"\n") else {
        panic!("must not load")
    };
    let PolicyProblem::Syntax(toml) = &errs[0].problem else {
        panic!("{errs:?}")
    };
    assert_eq!(toml.span().map(|s| s.start), Some(28));
    // The message is printed once, and is not also returned as a source.
    assert!(std::error::Error::source(&errs[0].problem).is_none());
    assert_eq!(errs[0].problem.to_string(), toml.message().trim());
}
