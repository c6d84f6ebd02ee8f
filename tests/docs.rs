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
//! `prompt-reference/agent.toml`, with no difference.

use std::path::{Path, PathBuf};

use prompt_registry::lock::PrefixLock;
use prompt_registry::policy::{LoadedPolicy, PolicyDiagnostic, PolicyErrors};
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
    let (position, text) = spec.split_once(": ").unwrap_or((spec, ""));
    let found = diagnostics.iter().any(|d| {
        format!("{}:{}", d.position.line, d.position.column) == position.trim()
            && d.problem.to_string().contains(text.trim())
    });
    let listed: Vec<String> = diagnostics.iter().map(ToString::to_string).collect();
    assert!(
        found,
        "{}: the text claims {kind} {spec}; the loader said: {listed:#?}",
        example.at
    );
}

/// A lock example: read, and compared with the reference components under their agent.toml.
fn check_lock_example(example: &Example) {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let agent_toml = root().join("prompt-reference/agent.toml");
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

fn check(example: &Example) {
    if example.expect == "lock" {
        check_lock_example(example);
        return;
    }
    let registry = registry_for(example);
    let loaded: Result<LoadedPolicy, PolicyErrors> =
        registry.load_policy(&example.toml, "agent.toml");
    for clause in example.expect.split(';').map(str::trim) {
        if let Some(spec) = clause.strip_prefix("error ") {
            let errors = match &loaded {
                Err(PolicyErrors(errors)) => errors,
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
/// reference components (`prompt-reference/tests/prefix_lock.rs`), word for word.
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
    let ours = std::fs::read_to_string(root().join("prompt-reference/tests/prefix_lock.rs"))
        .unwrap_or_else(|e| panic!("prompt-reference/tests/prefix_lock.rs: {e}"));
    assert!(
        ours.contains(&test.join("\n")),
        "prompt-reference/tests/prefix_lock.rs does not run docs/ci.md's test:\n{}",
        test.join("\n")
    );
}
