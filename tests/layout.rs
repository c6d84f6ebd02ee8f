//! Issue 8's layout, checked with `cargo tree` (offline: the lock file and the crates a
//! build has fetched): the proc-macro crate needs no JSON, TOML or hashing, prompt-core's
//! tests build none of the heavy crates other concerns use, and the facade, with every
//! feature, has no async runtime or HTTP client (the async client is a crate of its own).

use std::path::Path;
use std::process::Command;

/// The crates `cargo tree -p package -e edges` lists (names only).
fn tree(package: &str, edges: &str) -> Vec<String> {
    tree_with(package, edges, &[])
}

/// [`tree`] with more arguments (`--all-features`).
fn tree_with(package: &str, edges: &str, more: &[&str]) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--prefix",
            "none",
            "-e",
            edges,
            "-p",
            package,
        ])
        .args(more)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .output()
        .unwrap_or_else(|e| panic!("cargo tree: {e}"));
    assert!(
        output.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

#[test]
fn the_proc_macro_crate_depends_on_syn_quote_and_proc_macro2_only() {
    let crates = tree("prompt-macros", "normal");
    assert!(crates.iter().any(|c| c == "syn"), "{crates:?}");
    for heavy in ["serde_json", "toml", "sha2", "prompt-core", "serde"] {
        assert!(!crates.iter().any(|c| c == heavy), "{heavy} in {crates:?}");
    }
}

#[test]
fn prompt_core_tests_build_none_of_the_other_concerns_crates() {
    let crates = tree("prompt-core", "normal,dev,build");
    assert!(crates.iter().any(|c| c == "proptest"), "{crates:?}");
    for heavy in [
        "tiktoken-rs",
        "minijinja",
        "ureq",
        "clap",
        "inventory",
        "prompt-registry",
    ] {
        assert!(!crates.iter().any(|c| c == heavy), "{heavy} in {crates:?}");
    }
}

#[test]
fn the_facade_with_every_feature_has_no_async_runtime_or_http_client() {
    for package in [
        "prompt-registry",
        "prompt-core",
        "prompt-macros",
        "prompt-wire",
    ] {
        let crates = tree_with(package, "normal", &["--all-features"]);
        assert!(crates.iter().any(|c| c == package), "{crates:?}");
        for runtime in ["tokio", "reqwest", "hyper", "ureq", "prompt-client"] {
            assert!(
                !crates.iter().any(|c| c == runtime),
                "{package} --all-features depends on {runtime}: {crates:?}"
            );
        }
    }
    // The check itself sees such crates where they are.
    let client = tree("prompt-client", "normal");
    for runtime in ["tokio", "reqwest", "hyper"] {
        assert!(
            client.iter().any(|c| c == runtime),
            "{runtime} in {client:?}"
        );
    }
}

/// The modules of a crate's `src/`, each by its path from the crate root (`body::parse`),
/// and the files they live in.
fn modules(src: &Path) -> Vec<(Vec<String>, std::path::PathBuf)> {
    fn walk(dir: &Path, prefix: &[String], out: &mut Vec<(Vec<String>, std::path::PathBuf)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect();
        entries.sort();
        for path in entries {
            let name = path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_owned();
            if path.is_dir() {
                let mut inner = prefix.to_vec();
                inner.push(name);
                walk(&path, &inner, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut module = prefix.to_vec();
                if !matches!(name.as_str(), "lib" | "main" | "mod") {
                    module.push(name);
                }
                out.push((module, path));
            }
        }
    }
    let mut out = Vec::new();
    walk(src, &[], &mut out);
    out
}

/// A file's text without comments and without its inline test module (whose `super` is
/// the file itself).
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = match text.find("#[cfg(test)]\nmod ") {
        Some(at) => &text[..at],
        None => &text[..],
    };
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The files of a crate's `src/` each file uses (`crate::…`, `super::…`, a child module's
/// path), and any circle among them.
fn circles_of_files(crate_dir: &str) -> Vec<Vec<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir);
    let src = root.join("src");
    let mods = modules(&src);
    let file_of = |module: &[String]| {
        mods.iter()
            .filter(|(m, _)| module.starts_with(m))
            .max_by_key(|(m, _)| m.len())
            .map(|(_, f)| f.clone())
    };
    let path_re = |code: &str, from: &[String], is_mod_file: bool| {
        let mut targets = Vec::new();
        for (i, _) in code.match_indices("::") {
            // The path this `::` belongs to: back to its start.
            let start = code[..i]
                .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(0, |s| s + 1);
            if start + 1 > i || code[start..i].contains("::") {
                continue;
            }
            let end = code[i..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| i + e);
            let segments: Vec<&str> = code[start..end].split("::").collect();
            // The module a file's `super` names: a `mod.rs` or `lib.rs` is its own folder.
            let here: Vec<String> = from.to_vec();
            let resolved: Option<Vec<String>> = match segments[0] {
                "crate" => Some(segments[1..].iter().map(|s| s.to_string()).collect()),
                "super" => {
                    let mut base = here.clone();
                    let mut rest = &segments[..];
                    if !is_mod_file {
                        base.pop();
                    }
                    while rest.first() == Some(&"super") {
                        rest = &rest[1..];
                        if rest.first() == Some(&"super") {
                            base.pop();
                        }
                    }
                    base.extend(rest.iter().map(|s| s.to_string()));
                    Some(base)
                }
                "self" => {
                    let mut base = here.clone();
                    base.extend(segments[1..].iter().map(|s| s.to_string()));
                    Some(base)
                }
                first if is_mod_file => {
                    // A child module named by its bare name (`pub use child::Item`).
                    let mut child = here.clone();
                    child.push(first.to_owned());
                    mods.iter().any(|(m, _)| *m == child).then(|| {
                        let mut p = here.clone();
                        p.extend(segments.iter().map(|s| s.to_string()));
                        p
                    })
                }
                _ => None,
            };
            if let Some(target) = resolved.and_then(|m| file_of(&m)) {
                targets.push(target);
            }
        }
        targets
    };
    let mut edges: std::collections::BTreeMap<
        std::path::PathBuf,
        std::collections::BTreeSet<std::path::PathBuf>,
    > = Default::default();
    for (module, file) in &mods {
        let is_mod_file = matches!(
            file.file_stem().and_then(|s| s.to_str()),
            Some("lib" | "main" | "mod")
        );
        let code = code_of(file);
        let targets = path_re(&code, module, is_mod_file);
        let set = edges.entry(file.clone()).or_default();
        for t in targets {
            if &t != file {
                set.insert(t);
            }
        }
    }
    // Every circle found by a depth-first search (each reported once, from its smallest file).
    let mut circles = Vec::new();
    let files: Vec<_> = edges.keys().cloned().collect();
    for start in &files {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    if path.iter().all(|p| p >= start) {
                        circles.push(
                            path.iter()
                                .map(|p| p.strip_prefix(&root).unwrap_or(p).display().to_string())
                                .collect(),
                        );
                    }
                } else if !path.contains(next) && next > start {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    circles
}

#[test]
fn no_circle_of_files_in_the_engine_or_the_proxy() {
    for crate_dir in ["crates/prompt-engine", "crates/cacheline-proxy"] {
        let circles = circles_of_files(crate_dir);
        assert!(
            circles.is_empty(),
            "{crate_dir}: files that use each other: {circles:#?}"
        );
    }
    // The check sees a circle where there is one: prompt-wire's stream reader and its
    // per-API readers use each other.
    assert!(!circles_of_files("crates/prompt-wire").is_empty());
}

#[test]
fn the_proxy_hands_each_exchange_to_the_audit_without_json() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/cacheline-proxy/src");
    let analysis = code_of(&root.join("analysis.rs"));
    assert!(
        analysis.contains("push_exchange("),
        "the analysis feeds the audit directly"
    );
    for banned in ["serde_json", "push_line", "read_line", "to_string()"] {
        assert!(
            !analysis.contains(banned),
            "analysis.rs uses `{banned}`: its exchanges go to the audit as they are, the log line is log.rs's alone"
        );
    }
}
