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
