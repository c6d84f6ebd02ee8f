//! The accuracy benchmark's table in docs/benchmarks.md is what the benchmark produces with
//! its published seed (never written by hand), and the run meets the issue's minimums.

use cacheline_benches::accuracy::{self, Config};

#[test]
fn the_accuracy_table_in_the_docs_is_what_the_benchmark_produces() {
    let root = accuracy::workspace_root();
    let config = Config::published(1);
    let report = accuracy::run(&root, config).unwrap();
    let table = accuracy::markdown(&report, &config);

    // The issue's minimums: 2,000 injected changes, 3,000 append-only turns, every cause of
    // the enum injected on at least one API.
    let total = report.total();
    assert!(total.injected >= 2_000, "{total:?}");
    let (turns, _) = report.append_only_total();
    assert!(turns >= 3_000, "{turns}");
    for kind in prompt_wire::engine::CauseKind::ALL {
        assert!(
            report.injected.keys().any(|(_, k)| *k == kind),
            "{kind} was never injected"
        );
    }
    // Five agents, four APIs, each with its append-only turns.
    assert_eq!(report.append_only.len(), 4);
    assert!(report.concurrency.0.requests > 0);
    // Sessions continued by a new launch: every API, append-only turns without a false break
    // and compared with their own conversation's request of the earlier launch, beside a
    // side call of another lane too; tokens lost held against the provider's column.
    let l = &report.launches;
    for rows in [&l.resumed, &l.beside_side_call] {
        assert_eq!(rows.len(), 4, "{rows:?}");
        for r in rows.values() {
            assert!(
                r.turns > 0 && r.false_breaks == 0 && r.wrong_predecessor == 0,
                "{r:?}"
            );
        }
    }
    assert_eq!(l.injected.len(), 4);
    let checked: u64 = report.tokens_lost.values().map(|c| c.0).sum();
    assert!(checked >= 1_000, "{checked} breaks' tokens lost checked");

    let doc = std::fs::read_to_string(root.join("docs/benchmarks.md")).unwrap();
    let in_doc = accuracy::table_in(&doc).expect("docs/benchmarks.md has the accuracy markers");
    assert_eq!(
        in_doc,
        table.trim_matches('\n'),
        "docs/benchmarks.md's accuracy table is stale: paste the output of \
         `cargo run --release -p cacheline-benches --bin accuracy -- --seed 1 --markdown`"
    );
}

#[test]
fn the_same_seed_gives_the_same_benchmark_and_another_seed_another() {
    let root = accuracy::workspace_root();
    let small = |seed| Config {
        seed,
        episodes: 1,
        turns: 6,
        injections_per_three: 3,
        concurrent_sessions: 1,
    };
    let run = |seed| {
        let config = small(seed);
        accuracy::markdown(&accuracy::run(&root, config).unwrap(), &config)
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn a_verdict_is_named_right_only_with_the_injected_cause_at_the_injected_place() {
    use accuracy::{Expected, Outcome, score};
    use prompt_wire::engine::{Cause, CauseKind, Engine, EngineConfig, Exchange, Place};
    let mut engine = Engine::new(EngineConfig::default());
    let count =
        &mut |_: &prompt_wire::engine::Canonical<'_>, b: &prompt_wire::engine::Block| b.len / 4;
    let e = br#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}"#;
    let l = br#"{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"B"},{"role":"user","content":"c"},{"role":"assistant","content":"d"}]}"#;
    engine.analyze(&Exchange::body(e), 1, count).unwrap();
    let v = engine.analyze(&Exchange::body(l), 2, count).unwrap();
    assert_eq!(v.cause, Some(Cause::EditInPlace));
    let at = |index| Place::Message { index, block: None };
    let expect = |kind, place| Expected {
        kind,
        place,
        how: String::new(),
    };
    assert_eq!(
        score(&expect(CauseKind::EditInPlace, at(1)), &v).0,
        Outcome::Right
    );
    assert_eq!(
        score(&expect(CauseKind::EditInPlace, at(2)), &v).0,
        Outcome::Misnamed
    );
    assert_eq!(
        score(&expect(CauseKind::Removed, at(1)), &v).0,
        Outcome::Misnamed
    );
    assert_eq!(
        score(&expect(CauseKind::SerializationOnly, at(1)), &v).0,
        Outcome::Misnamed
    );
    let same = engine.analyze(&Exchange::body(l), 3, count).unwrap();
    assert_eq!(
        score(&expect(CauseKind::EditInPlace, at(1)), &same).0,
        Outcome::Missed
    );
}
