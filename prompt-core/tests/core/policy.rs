//! The `[prompt]` policy: resolution rules and strict parsing.

use std::fs;
use std::path::Path;

use crate::support::{components, id, known_ids};
use prompt_core::{
    Component, Placement, PromptPolicy, policy::PolicyProblem, policy::Reason,
    policy::RequestSource,
};

fn load(toml: &str) -> PromptPolicy {
    match PromptPolicy::from_agent_toml(toml, "agent.toml", known_ids().iter()) {
        Ok(loaded) => loaded.policy,
        Err(e) => panic!("policy should load: {e}"),
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
    let policy = load("[prompt]\nprefix_allow = [\"assistant_instructions\", \"skill:*\"]\n");
    let r = policy.resolve(&component("skill:pdf"));
    assert_eq!(r.placement, Placement::Prefix);
    assert_eq!(
        r.reason,
        Reason::Allowed {
            source: RequestSource::Declaration,
            pattern: "skill:*".into()
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
    let policy = load("[prompt]\nprefix_allow = [\"mcp:github\"]\nprefix_deny = [\"mcp:*\"]\n");
    let r = policy.resolve(&component("mcp:github"));
    assert_eq!(r.placement, Placement::Tail);
    assert_eq!(
        r.reason,
        Reason::Denied {
            source: RequestSource::Declaration,
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
    let policy = load("[prompt]\ndefault = \"prefix\"\nprefix_allow = [\"date\"]\n");
    assert_eq!(
        policy.resolve(&component("date")).placement,
        Placement::Prefix
    );
    let memory = policy.resolve(&component("project_memory"));
    assert_eq!(memory.placement, Placement::Tail);
    assert_eq!(
        memory.reason,
        Reason::NotAllowed {
            source: RequestSource::Default
        }
    );
}

#[test]
fn glob_matching_nothing_is_a_warning_not_an_error() {
    let src = "[prompt]\nprefix_allow = [\"assistant_instructions\", \"mcp:slack*\"]\n";
    let loaded = PromptPolicy::from_agent_toml(src, "agent.toml", known_ids().iter())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.warnings.len(), 1);
    let w = &loaded.warnings[0];
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
    assert_eq!(loaded.policy.prefix_allow.len(), 2);
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
        let result = std::panic::catch_unwind(|| {
            PromptPolicy::from_agent_toml(&src, &name, known_ids().iter())
        });
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
