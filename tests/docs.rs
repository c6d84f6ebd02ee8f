//! The documentation cannot rot: every document's Rust blocks are doctests of the
//! `doc-examples` crate (which depends on the facade alone), and
//! every TOML example is loaded against the registry it describes, with the outcome its
//! text claims asserted.
//!
//! A TOML example is followed by an annotation that says what the text claims:
//!
//! ```text
//! <!-- expect: prefix: assistant_instructions, tool_schemas; tail: date; reason date: tail requested -->
//! <!-- expect: runtime: mcp:github; error 3:1: unknown field -->
//! ```
//!
//! Clauses, separated by `;`: `runtime: ids` (run-time session components registered
//! first, as a skill loader or an MCP client would), `undeclared: ids` (built-in
//! turn-stability components that declare nothing), `ok` (no error, no warning), `prefix:
//! ids`, `tail: ids`, `reason ID: text` (the status reason contains the text), `error L:C:
//! text` and `warning L:C: text` (a diagnostic at that position whose message contains the
//! text), `unresolved: ids` (exactly these run-time ids were named but not registered).
//!
//! `<!-- expect: lock -->` marks a prefix lock instead of an agent.toml: it is read as one
//! and must match the linked registry (the reference components) under
//! `crates/prompt-reference/agent.toml`, with no difference.
//!
//! The `[provider]` section has clauses of its own: `provider: NAME` (the profile's provider,
//! `unknown` for none), `updates: ROLE` (`system`, `user_reminder`, `merged_into_user`),
//! `fallback` (the safe default applies), `risk: NAME` (the forced delivery's
//! `DeliveryRisk`, `none`), `provider error L:C: text` and `provider warning L:C: text`.
//! `ok` also means the `[provider]` section loads without a warning.

use std::path::{Path, PathBuf};

use prompt_registry::ProviderSection;
use prompt_registry::config::Diagnostics;
use prompt_registry::lock::PrefixLock;
use prompt_registry::policy::{LoadedPolicy, PolicyDiagnostic, PolicyErrors};
use prompt_registry::profile::{Extension, PROFILES, ProviderDiagnostic, SAFE_DEFAULT};
use prompt_registry::{Component, ComponentId, Namespace, Placement, PromptPolicy, Registry};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// README.md and every `docs/*.md`, sorted.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap_or_else(|e| panic!("docs/: {e}"))
        .map(|entry| entry.unwrap_or_else(|e| panic!("docs/: {e}")).path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.insert(0, root().join("README.md"));
    docs
}

#[test]
fn every_document_is_compiled_as_doctests() {
    let lib = std::fs::read_to_string(root().join("tests/doc-examples/src/lib.rs"))
        .unwrap_or_else(|e| panic!("tests/doc-examples/src/lib.rs: {e}"));
    for doc in documents() {
        let name = doc
            .strip_prefix(root())
            .unwrap_or(&doc)
            .to_string_lossy()
            .into_owned();
        assert!(
            lib.contains(&format!("include_str!(\"../../../{name}\")")),
            "{name} is not included in tests/doc-examples/src/lib.rs, so its Rust blocks are never compiled"
        );
    }
}

/// The crates a user reaches through the facade, by the name a docs example would use.
/// (`prompt_client` is not one of them: the facade never depends on an HTTP client or an
/// async runtime, so a user adds the async client beside it, and the docs name it so.)
const INNER_CRATES: &[&str] = &[
    "prompt_core",
    "prompt_macros",
    "prompt_wire",
    "prompt_measure",
    "prompt_template_probe",
];

/// The Rust blocks of `text`, each with its first line number.
fn rust_blocks(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let Some(lang) = line.trim_start().strip_prefix("```") else {
            continue;
        };
        let body: Vec<&str> = lines
            .by_ref()
            .take_while(|(_, l)| !l.trim_start().starts_with("```"))
            .map(|(_, l)| l)
            .collect();
        if lang.trim().starts_with("rust") {
            out.push((i + 1, body.join("\n")));
        }
    }
    out
}

/// What a user writes depends on `prompt-registry` alone; the `doc-examples` crate, which
/// compiles these blocks, has no other dependency, so this is also a compile failure there.
#[test]
fn docs_examples_import_from_the_facade_alone() {
    let mut found = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{doc:?}: {e}"));
        for (line, block) in rust_blocks(&text) {
            for inner in INNER_CRATES {
                if block.contains(&format!("{inner}::")) || block.contains(&format!("{inner} as")) {
                    found.push(format!("{}:{line}: names {inner}", doc.display()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "use prompt_registry's re-exports instead:\n{}",
        found.join("\n")
    );
    let blocks =
        rust_blocks("```rust\nuse prompt_core::History;\n```\n```text\nprompt_wire::x\n```\n");
    assert_eq!(blocks, [(1, "use prompt_core::History;".to_owned())]);
}

/// A block is read where it is rendered (GitHub, an editor, a docs site), and only rustdoc
/// hides `# ` lines: every line of an example is shown, so what is copied is what compiles.
/// And a `main` that returns an error returns a `Report`, whose `Debug` (what `main` prints)
/// is the message and its causes, not a struct dump.
#[test]
fn docs_examples_show_every_line_and_main_reports_errors_readably() {
    let mut found = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{doc:?}: {e}"));
        for (line, block) in rust_blocks(&text) {
            for (offset, code) in block.lines().enumerate() {
                let at = format!("{}:{}", doc.display(), line + 1 + offset);
                if code == "#" || code.starts_with("# ") {
                    found.push(format!("{at}: hidden line `{code}`"));
                }
                if code.contains("fn main()") && code.contains("Box<dyn") {
                    found.push(format!("{at}: main returns a boxed error: `{code}`"));
                }
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// What `main` prints when the README's `deny_warnings()?` fails: the diagnostic, as the
/// operator reads it, not a struct dump.
#[test]
fn main_returning_a_report_prints_a_policy_failure_as_its_message() {
    let registry = prompt_registry::Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let toml = "[prompt]\nprefix_allow = [\"skill:*\"]\n";
    let error = registry
        .load_policy(toml, "agent.toml")
        .unwrap_or_else(|e| panic!("{e}"))
        .deny_warnings()
        .expect_err("a glob that matches nothing is a warning, and deny_warnings fails on it");
    let derived = format!("{:?}", Box::<dyn std::error::Error>::from(error.clone()));
    let printed = format!("{:?}", prompt_registry::Report::from(error));
    // `PolicyDiagnostic` is `prompt_core::config::Diagnostic<PolicyProblem>`: a struct dump.
    assert!(
        derived.contains("Diagnostic { position: SourcePosition {"),
        "{derived}"
    );
    assert_eq!(
        printed,
        "agent.toml:2:17: pattern `skill:*` in prefix_allow matches no known component"
    );
}

/// One TOML example and its annotation.
struct Example {
    at: String,
    toml: String,
    expect: String,
}

/// The TOML blocks of `text`, each with the `<!-- expect: ... -->` that follows it.
fn examples(path: &Path, text: &str) -> Vec<Example> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim_start().starts_with("```toml") {
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && !lines[end].trim_start().starts_with("```") {
                end += 1;
            }
            let toml = lines[start..end.min(lines.len())].join("\n");
            let mut next = end + 1;
            while next < lines.len() && lines[next].trim().is_empty() {
                next += 1;
            }
            let at = format!("{}:{}", path.display(), start);
            let expect = lines
                .get(next)
                .and_then(|l| l.trim().strip_prefix("<!-- expect:"))
                .and_then(|l| l.strip_suffix("-->"))
                .map(str::trim)
                .unwrap_or_else(|| panic!("{at}: a TOML example without `<!-- expect: ... -->`"))
                .to_owned();
            out.push(Example { at, toml, expect });
            i = next;
        }
        i += 1;
    }
    out
}

fn ids(list: &str) -> Vec<&str> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

fn registry_for(example: &Example) -> Registry {
    let mut registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    for clause in example.expect.split(';').map(str::trim) {
        if let Some(list) = clause.strip_prefix("runtime:") {
            for id in ids(list) {
                let id = ComponentId::new(id).unwrap_or_else(|e| panic!("{}: {e}", example.at));
                let namespace = match id.namespace() {
                    Some("skill") => Namespace::Skill,
                    _ => Namespace::Mcp,
                };
                let component = Component::session(id, |_| Some("Run-time guidance.".to_owned()));
                registry
                    .register_dynamic(namespace, component)
                    .unwrap_or_else(|e| panic!("{}: {e}", example.at));
            }
        } else if let Some(list) = clause.strip_prefix("undeclared:") {
            for id in ids(list) {
                let id = ComponentId::new(id).unwrap_or_else(|e| panic!("{}: {e}", example.at));
                registry
                    .register(Component::turn(id, |_| Some("It is sunny.".to_owned())))
                    .unwrap_or_else(|e| panic!("{}: {e}", example.at));
            }
        }
    }
    registry
}

/// `error 3:15: text` / `warning 3:15: text` against the diagnostics.
fn find_diagnostic(example: &Example, diagnostics: &[PolicyDiagnostic], spec: &str, kind: &str) {
    let said = diagnostics
        .iter()
        .map(|d| (d.position.line, d.position.column, d.problem.to_string()));
    find_said(example, said, spec, kind);
}

/// `3:15: text` among the diagnostics a loader said, as (line, column, message).
fn find_said(
    example: &Example,
    said: impl Iterator<Item = (usize, usize, String)>,
    spec: &str,
    kind: &str,
) {
    let (position, text) = spec.split_once(": ").unwrap_or((spec, ""));
    let said: Vec<(usize, usize, String)> = said.collect();
    let found = said.iter().any(|(line, column, message)| {
        format!("{line}:{column}") == position.trim() && message.contains(text.trim())
    });
    assert!(
        found,
        "{}: the text claims {kind} {spec}; the loader said: {said:#?}",
        example.at
    );
}

/// A lock example: read, and compared with the reference components under their agent.toml.
fn check_lock_example(example: &Example) {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let agent_toml = root().join("crates/prompt-reference/agent.toml");
    let policy = PromptPolicy::load_agent_toml(&agent_toml, registry.components())
        .map_err(|e| e.to_string())
        .and_then(|loaded| loaded.deny_warnings().map_err(|e| e.to_string()))
        .unwrap_or_else(|e| panic!("{}: {e}", agent_toml.display()));
    let lock = PrefixLock::parse(&example.toml, &example.at)
        .unwrap_or_else(|e| panic!("{}: not a prefix lock:\n{e}", example.at));
    let differences: Vec<String> = lock
        .compare(registry.components(), &policy)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        differences.is_empty(),
        "{}: the lock shown differs from the reference components: {differences:#?}",
        example.at
    );
}

/// `provider error 3:15: text` / `provider warning 3:15: text` against the diagnostics of the
/// `[provider]` section.
fn find_provider_diagnostic(
    example: &Example,
    diagnostics: &[ProviderDiagnostic],
    spec: &str,
    kind: &str,
) {
    let said = diagnostics
        .iter()
        .map(|d| (d.position.line, d.position.column, d.problem.to_string()));
    find_said(example, said, spec, &format!("[provider] {kind}"));
}

/// The `[provider]` clauses of an example; `false` when `clause` is not one of them.
fn check_provider_clause(example: &Example, clause: &str) -> bool {
    let loaded = ProviderSection::from_agent_toml(&example.toml, "agent.toml");
    if let Some(spec) = clause.strip_prefix("provider error ") {
        let errors = match &loaded {
            Err(Diagnostics(errors)) => errors,
            Ok(_) => panic!(
                "{}: the text claims a [provider] error; it loaded",
                example.at
            ),
        };
        find_provider_diagnostic(example, errors, spec, "error");
        return true;
    }
    let is_provider_clause = ["provider warning ", "provider:", "updates:", "risk:"]
        .iter()
        .any(|p| clause.starts_with(p))
        || clause == "fallback"
        || clause == "ok";
    if !is_provider_clause {
        return false;
    }
    let loaded = match loaded {
        Ok(loaded) => loaded,
        Err(e) => panic!("{}: the [provider] section does not load:\n{e}", example.at),
    };
    let profile = loaded.clone().ignore_warnings().operator_profile();
    if clause == "ok" {
        let warnings: Vec<String> = loaded.warnings().iter().map(ToString::to_string).collect();
        assert!(
            warnings.is_empty(),
            "{}: [provider] warnings {warnings:?}",
            example.at
        );
        // `ok` is the [prompt] section's clause too.
        return false;
    }
    if let Some(spec) = clause.strip_prefix("provider warning ") {
        find_provider_diagnostic(example, loaded.warnings(), spec, "warning");
    } else if let Some(name) = clause.strip_prefix("provider:") {
        assert_eq!(
            profile.provider_name(),
            name.trim(),
            "{}: {profile}",
            example.at
        );
    } else if let Some(role) = clause.strip_prefix("updates:") {
        assert_eq!(
            profile.update_role().as_str(),
            role.trim(),
            "{}: {profile}",
            example.at
        );
    } else if let Some(risk) = clause.strip_prefix("risk:") {
        let got = profile
            .delivery_risk()
            .map_or_else(|| "none".to_owned(), |r| format!("{r:?}").to_lowercase());
        assert_eq!(got, risk.trim(), "{}: {profile}", example.at);
    } else if clause == "fallback" {
        assert!(profile.is_fallback(), "{}: {profile}", example.at);
    }
    true
}

fn check(example: &Example) {
    if example.expect.starts_with("dependencies:") {
        // A `[dependencies]` snippet: built as a crate of its own by
        // `every_readme_dependency_snippet_builds_and_runs_a_crate_of_its_own`.
        return;
    }
    if example.expect == "lock" {
        check_lock_example(example);
        return;
    }
    let registry = registry_for(example);
    let loaded: Result<LoadedPolicy, PolicyErrors> =
        registry.load_policy(&example.toml, "agent.toml");
    for clause in example.expect.split(';').map(str::trim) {
        if check_provider_clause(example, clause) {
            continue;
        }
        if let Some(spec) = clause.strip_prefix("error ") {
            let errors = match &loaded {
                Err(Diagnostics(errors)) => errors,
                Ok(_) => panic!("{}: the text claims an error; it loaded", example.at),
            };
            find_diagnostic(example, errors, spec, "error");
            continue;
        }
        if clause.starts_with("runtime:") || clause.starts_with("undeclared:") {
            continue; // used by `registry_for`
        }
        let loaded = match &loaded {
            Ok(loaded) => loaded,
            Err(e) => panic!("{}: the text claims it loads; it did not:\n{e}", example.at),
        };
        let status = registry.status(&loaded.clone().ignore_warnings());
        let row = |id: &str| {
            status
                .component(id)
                .unwrap_or_else(|| panic!("{}: no component `{id}`", example.at))
        };
        if clause == "ok" {
            let warnings: Vec<String> = loaded.warnings().iter().map(ToString::to_string).collect();
            assert!(warnings.is_empty(), "{}: warnings {warnings:?}", example.at);
        } else if let Some(list) = clause.strip_prefix("prefix:") {
            for id in ids(list) {
                assert_eq!(row(id).placement, Placement::Prefix, "{}: {id}", example.at);
            }
        } else if let Some(list) = clause.strip_prefix("tail:") {
            for id in ids(list) {
                assert_eq!(row(id).placement, Placement::Tail, "{}: {id}", example.at);
            }
        } else if let Some(rest) = clause.strip_prefix("reason ") {
            let (id, text) = rest
                .split_once(": ")
                .unwrap_or_else(|| panic!("{}: `reason ID: text`", example.at));
            let reason = &row(id.trim()).reason;
            assert!(
                reason.contains(text.trim()),
                "{}: {id}'s reason is {reason:?}, the text claims {text:?}",
                example.at
            );
        } else if let Some(spec) = clause.strip_prefix("warning ") {
            find_diagnostic(example, loaded.warnings(), spec, "warning");
        } else if let Some(list) = clause.strip_prefix("unresolved:") {
            let got: Vec<&str> = loaded.unresolved().iter().map(|id| id.as_str()).collect();
            assert_eq!(got, ids(list), "{}: unresolved ids", example.at);
        } else {
            panic!("{}: unknown clause {clause:?}", example.at);
        }
    }
}

#[test]
fn every_toml_example_loads_as_its_text_says() {
    let mut checked = 0;
    for doc in documents() {
        let text =
            std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        for example in examples(&doc, &text) {
            check(&example);
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} TOML examples found");
}

/// The body of every fenced block tagged `lang` in `text`.
fn fenced_blocks(text: &str, lang: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() == format!("```{lang}") {
            let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            blocks.push(body.join("\n") + "\n");
        }
    }
    blocks
}

/// Every haproxy configuration in the docs is one haproxy accepts (`haproxy -c`). Without
/// haproxy the test says it is skipped; under `CI=true` it fails instead (`.ci/run`
/// installs Debian's package).
#[test]
fn the_haproxy_example_is_a_valid_configuration() {
    let blocks: Vec<(PathBuf, String)> = documents()
        .into_iter()
        .flat_map(|doc| {
            let text =
                std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
            fenced_blocks(&text, "haproxy")
                .into_iter()
                .map(move |b| (doc.clone(), b))
        })
        .collect();
    assert!(!blocks.is_empty(), "docs/fleet.md has a haproxy example");
    let version = std::process::Command::new("haproxy").arg("-v").output();
    if version.as_ref().map_or(true, |o| !o.status.success()) {
        assert!(
            !crate::live_llama::in_ci(),
            "CI=true and haproxy is not installed"
        );
        crate::live_llama::say("SKIPPED the_haproxy_example_is_a_valid_configuration: no haproxy");
        return;
    }
    let dir = std::env::temp_dir().join(format!("cacheline-haproxy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    for (i, (doc, config)) in blocks.iter().enumerate() {
        let file = dir.join(format!("{i}.cfg"));
        std::fs::write(&file, config).unwrap_or_else(|e| panic!("{e}"));
        let check = std::process::Command::new("haproxy")
            .arg("-c")
            .arg("-f")
            .arg(&file)
            .output()
            .unwrap_or_else(|e| panic!("haproxy: {e}"));
        assert!(
            check.status.success(),
            "{}: haproxy -c refused the example:\n{}{}",
            doc.display(),
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// docs/ci.md's test for an agent's crate is the one this repository runs over the
/// reference components (`crates/prompt-reference/tests/prefix_lock.rs`), word for word.
#[test]
fn the_ci_guide_shows_the_lock_test_this_repository_runs() {
    let guide = std::fs::read_to_string(root().join("docs/ci.md"))
        .unwrap_or_else(|e| panic!("docs/ci.md: {e}"));
    let block = fenced_blocks(&guide, "rust")
        .into_iter()
        .find(|b| b.contains("assert_lock("))
        .unwrap_or_else(|| panic!("docs/ci.md shows no assert_lock test"));
    let test: Vec<&str> = block
        .lines()
        .skip_while(|l| *l != "#[test]")
        .take_while(|l| !l.starts_with('#') || *l == "#[test]")
        .collect();
    assert!(test.len() >= 3, "{block}");
    let ours = std::fs::read_to_string(root().join("crates/prompt-reference/tests/prefix_lock.rs"))
        .unwrap_or_else(|e| panic!("crates/prompt-reference/tests/prefix_lock.rs: {e}"));
    assert!(
        ours.contains(&test.join("\n")),
        "crates/prompt-reference/tests/prefix_lock.rs does not run docs/ci.md's test:\n{}",
        test.join("\n")
    );
}

/// The profile table, as `docs/wire.md` shows it: one row per row of
/// `prompt_core::profile::PROFILES`, and the safe default last.
fn profile_table() -> String {
    let mut out = String::from(
        "| provider | models | a later `role: \"system\"` | updates | shortest cached prefix | cache lifetime | longer on request | also | source |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in PROFILES.iter().chain([&SAFE_DEFAULT]) {
        let provider = row.provider.map_or("(unknown)", |p| p.as_str());
        let has_model_rows = PROFILES
            .iter()
            .any(|r| r.provider == row.provider && !r.family.is_empty());
        let models = if row.family.is_empty() {
            if has_model_rows {
                "every other".to_owned()
            } else {
                "all".to_owned()
            }
        } else {
            format!("`{}`", row.family)
        };
        let min = row
            .min_cache_tokens
            .map_or_else(|| "not documented".to_owned(), |n| format!("{n} tokens"));
        let longer = match row.extension {
            Extension::None => "-",
            Extension::Ttl => "`\"ttl\": \"1h\"`",
            Extension::Retention => "`prompt_cache_retention: \"24h\"`",
        };
        let mut also = Vec::new();
        if row.signatures_required {
            also.push("signatures replayed");
        }
        let diagnostics = row.cache_diagnostics.describe();
        let also: Vec<&str> = also.into_iter().chain(diagnostics.as_deref()).collect();
        let also = if also.is_empty() {
            "-".to_owned()
        } else {
            also.join(", ")
        };
        out.push_str(&format!(
            "| {provider} | {models} | {} | {} | {min} | {} | {longer} | {also} | {} |\n",
            row.later_system.as_str(),
            row.updates.as_str(),
            row.lifetime,
            row.source
        ));
    }
    out
}

#[test]
fn the_profile_table_in_docs_wire_md_is_the_table() {
    let wire = std::fs::read_to_string(root().join("docs/wire.md"))
        .unwrap_or_else(|e| panic!("docs/wire.md: {e}"));
    let table = profile_table();
    assert!(
        wire.contains(&table),
        "docs/wire.md does not show the profile table as prompt_core::profile::PROFILES has it; the table is:\n{table}"
    );
    // Every row cites its source.
    assert!(PROFILES.iter().all(|r| !r.source.is_empty()));
}

/// Every `jsonl` block of the audit guide (`docs/measurements.md`, "Log lines") with the
/// `<!-- audit: PROVIDER input_uncached=N cache_read=N cache_write=N output=N -->` after it.
fn audit_examples(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```jsonl" {
            continue;
        }
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let expect = lines
            .next()
            .and_then(|l| l.trim().strip_prefix("<!-- audit: "))
            .and_then(|l| l.strip_suffix(" -->"))
            .unwrap_or_else(|| panic!("a jsonl block without its <!-- audit: … --> line"));
        out.push((body.join("\n") + "\n", expect.to_owned()));
    }
    out
}

#[test]
fn the_audit_guide_s_log_lines_report_the_usage_it_says() {
    use prompt_measure::audit::{Event, audit_reader};
    use prompt_measure::{AuditConfig, Auditor, O200kBase};

    let path = root().join("docs/measurements.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let examples = audit_examples(&text);
    assert!(examples.len() >= 5, "{} jsonl examples", examples.len());
    let tokenizer = O200kBase::shared().unwrap_or_else(|e| panic!("{e}"));
    for (log, expect) in examples {
        let mut auditor = Auditor::new(tokenizer, AuditConfig::default());
        let mut said = Vec::new();
        audit_reader(log.as_bytes(), &path, &mut auditor, |event| {
            match event {
                Event::Request(r) => said.push(match (&r.reported, &r.reported_error) {
                    (Some(r), _) => format!(
                        "{} input_uncached={} cache_read={} cache_write={} output={}",
                        r.provider,
                        r.usage.input_uncached,
                        r.usage.cache_read,
                        r.usage.cache_write,
                        r.usage.output
                    ),
                    (None, error) => format!("line {}: no usage: {error:?}", r.line),
                }),
                Event::Skipped(e) => said.push(e.to_string()),
            }
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(said.len(), log.lines().count(), "{log}");
        for line in said {
            assert_eq!(line, expect, "{log}");
        }
    }
}

/// A table's header row is printed once: no document repeats it above its separator
/// (docs/wire.md once printed the `ClientError` table's header twice, a blank line apart),
/// and no table is split by a blank line into a second one without a header.
#[test]
fn no_table_in_the_docs_prints_its_header_row_twice_or_is_split() {
    let is_separator = |l: &str| {
        let l = l.trim();
        l.starts_with("|-") && l.chars().all(|c| matches!(c, '|' | '-' | ':' | ' '))
    };
    let mut found = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{doc:?}: {e}"));
        let lines: Vec<&str> = text.lines().collect();
        let mut in_code = false;
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
            }
            if in_code || i < 2 {
                continue;
            }
            let at = format!("{}:{}", doc.display(), i + 1);
            if is_separator(line) {
                let header = lines[i - 1];
                let before = lines[..i - 1]
                    .iter()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .copied();
                if before == Some(header) {
                    found.push(format!("{at}: the header row {header:?} twice"));
                }
            }
            // A row after a blank line that follows a table: the table is split.
            if line.starts_with('|')
                && lines[i - 1].trim().is_empty()
                && lines[i - 2].starts_with('|')
                && !lines.get(i + 1).is_some_and(|next| is_separator(next))
            {
                found.push(format!(
                    "{at}: a table row after a blank line, without a header"
                ));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// The workspace crates a `[dependencies]` snippet may name, and their folders.
const WORKSPACE_CRATES: &[(&str, &str)] = &[
    ("prompt-registry", "prompt-registry"),
    ("prompt-client", "crates/prompt-client"),
    ("prompt-llama", "crates/prompt-llama"),
];

/// README.md's `[dependencies]` snippets, each built as a crate of its own from exactly its
/// lines (plus a `[patch.crates-io]` entry to this checkout for each workspace crate it
/// names, since they are not published), offline, with the workspace's `Cargo.lock` so no
/// version is looked up; each runs a `main` (`tests/dependency-snippets/NAME.rs`) that uses
/// what the text before the snippet promises.
#[test]
fn every_readme_dependency_snippet_builds_and_runs_a_crate_of_its_own() {
    let readme = root().join("README.md");
    let text = std::fs::read_to_string(&readme).unwrap_or_else(|e| panic!("README.md: {e}"));
    let snippets: Vec<(String, String)> = examples(&readme, &text)
        .into_iter()
        .filter_map(|e| {
            let name = e.expect.strip_prefix("dependencies:")?.trim().to_owned();
            Some((name, e.toml))
        })
        .collect();
    let names: Vec<&str> = snippets.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["patch", "facade", "client", "llama"],
        "README.md's patch block and its ways in"
    );
    // The patch block a user copies names each crate's folder in a checkout.
    let patch: Vec<String> = WORKSPACE_CRATES
        .iter()
        .map(|(krate, folder)| format!("{krate} = {{ path = \"../cacheline/{folder}\" }}"))
        .collect();
    assert_eq!(
        snippets[0].1.lines().collect::<Vec<_>>(),
        std::iter::once("[patch.crates-io]")
            .chain(patch.iter().map(String::as_str))
            .collect::<Vec<_>>(),
        "README.md's [patch.crates-io] block"
    );
    let snippets = &snippets[1..];
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    // One target directory for the three, kept between runs, apart from the workspace's
    // own build (which the running `cargo test` may hold locked).
    let target = root().join("target/dependency-snippets");
    let work = std::env::temp_dir().join(format!("cacheline-snippets-{}", std::process::id()));
    let lock =
        std::fs::read(root().join("Cargo.lock")).unwrap_or_else(|e| panic!("Cargo.lock: {e}"));
    for (name, snippet) in snippets {
        assert!(
            snippet.trim_start().starts_with("[dependencies]"),
            "{name}: {snippet}"
        );
        let dir = work.join(name);
        std::fs::create_dir_all(dir.join("src")).unwrap_or_else(|e| panic!("{e}"));
        let mut manifest = format!(
            "[package]\nname = \"snippet-{name}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n[workspace]\n\n{snippet}\n\n[patch.crates-io]\n"
        );
        let mut patched = 0;
        for (krate, folder) in WORKSPACE_CRATES {
            if snippet
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{krate} ")))
            {
                let path = root().join(folder);
                manifest.push_str(&format!(
                    "{krate} = {{ path = {:?} }}\n",
                    path.display().to_string()
                ));
                patched += 1;
            }
        }
        assert!(patched >= 1, "{name}: names no workspace crate");
        std::fs::write(dir.join("Cargo.toml"), manifest).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("Cargo.lock"), &lock).unwrap_or_else(|e| panic!("{e}"));
        // The workspace's toolchain, as a crate beside it would pin it.
        std::fs::copy(
            root().join("rust-toolchain.toml"),
            dir.join("rust-toolchain.toml"),
        )
        .unwrap_or_else(|e| panic!("rust-toolchain.toml: {e}"));
        let main = root().join(format!("tests/dependency-snippets/{name}.rs"));
        std::fs::copy(&main, dir.join("src/main.rs"))
            .unwrap_or_else(|e| panic!("{}: {e}", main.display()));
        let output = std::process::Command::new(&cargo)
            .args(["run", "--offline", "--quiet"])
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", &target)
            // What the snippet builds is only run once: no debuginfo, no incremental state
            // (a cold CI run filled its disk with them).
            .env("CARGO_PROFILE_DEV_DEBUG", "false")
            .env("CARGO_INCREMENTAL", "0")
            .output()
            .unwrap_or_else(|e| panic!("{cargo}: {e}"));
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.trim() == format!("{name}: ok"),
            "README.md's `{name}` snippet did not build and run ({}):\n{manifest}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default()
        );
    }
    let _ = std::fs::remove_dir_all(&work);
}
