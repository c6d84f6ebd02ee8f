//! The `#[prompt_component]` trybuild suite: `pass/*.rs` compile and run, `fail/*.rs` fail to
//! compile with the reviewed `fail/*.stderr`. Snapshots are for the pinned toolchain.

use std::path::Path;

/// The `.rs` files in `dir` (relative to this package), sorted.
fn cases(dir: &str) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut cases: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs"))
        .map(|path| path.display().to_string())
        .collect();
    cases.sort();
    cases
}

#[test]
fn ui() {
    // trybuild passes when a glob matches nothing; make sure it cannot silently skip.
    let pass = cases("pass");
    let fail = cases("fail");
    assert!(
        pass.len() >= 4,
        "expected the pass cases in ui-tests/pass, found {pass:?}"
    );
    assert!(
        fail.len() >= 30,
        "expected the compile-fail cases in ui-tests/fail, found {fail:?}"
    );
    if std::env::var_os("TRYBUILD").is_none() {
        for case in &fail {
            let stderr = Path::new(case).with_extension("stderr");
            assert!(
                stderr.exists(),
                "{case} has no reviewed {}",
                stderr.display()
            );
        }
    }

    let t = trybuild::TestCases::new();
    t.pass("pass/*.rs");
    t.compile_fail("fail/*.rs");
}

/// The facade's front page lists every compile-fail case: the reference cannot fall behind
/// the attribute.
#[test]
fn every_compile_error_is_in_the_facade_reference() {
    let front = Path::new(env!("CARGO_MANIFEST_DIR")).join("../prompt-registry/src/lib.rs");
    let front = std::fs::read_to_string(&front)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", front.display()));
    for case in cases("fail") {
        let stem = Path::new(&case)
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        assert!(
            front.contains(&format!("`{stem}`")),
            "prompt-registry's front page does not list the compile error `{stem}`"
        );
    }
}
