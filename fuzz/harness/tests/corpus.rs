//! Replays every checked-in corpus input and every minimized crash of every fuzz target, on
//! stable: what once crashed a target fails this test if it crashes again.

use std::path::Path;

use cacheline_fuzz_harness::TARGETS;

#[test]
fn every_corpus_input_and_crash_replays_without_a_panic() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut replayed = 0;
    for target in TARGETS {
        let mut seeds = 0;
        for folder in ["corpus", "artifacts"] {
            let dir = fuzz.join(folder).join(target.name);
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut files: Vec<_> = entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect();
            files.sort();
            for file in files {
                let data =
                    std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                let outcome = std::panic::catch_unwind(|| (target.run)(&data));
                assert!(
                    outcome.is_ok(),
                    "{} panics on {}",
                    target.name,
                    file.display()
                );
                replayed += 1;
                seeds += usize::from(folder == "corpus");
            }
        }
        assert!(
            seeds > 0,
            "fuzz target {} has no checked-in seed corpus",
            target.name
        );
    }
    assert!(replayed >= TARGETS.len(), "replayed {replayed} inputs");
}

#[test]
fn every_target_has_a_cargo_fuzz_wrapper() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml"))
        .unwrap_or_else(|e| panic!("fuzz/Cargo.toml: {e}"));
    for target in TARGETS {
        let wrapper = fuzz
            .join("fuzz_targets")
            .join(format!("{}.rs", target.name));
        let text = std::fs::read_to_string(&wrapper)
            .unwrap_or_else(|e| panic!("{}: {e}", wrapper.display()));
        assert!(
            text.contains(&format!("cacheline_fuzz_harness::{}", target.name)),
            "{} does not call cacheline_fuzz_harness::{}",
            wrapper.display(),
            target.name
        );
        assert!(
            manifest.contains(&format!("name = \"{}\"", target.name)),
            "fuzz/Cargo.toml lacks the [[bin]] {}",
            target.name
        );
    }
}
