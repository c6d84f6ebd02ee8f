//! The import benchmark's history (docs/benchmarks.md, "cacheline import"), at a small size:
//! every copy is a session of its own, and `cacheline import` reads each whole.

use cacheline_benches::import_history::write_history;
use cacheline_import::{Options, discover, import};

#[test]
fn the_generated_history_imports_every_copy_as_a_session_of_its_own() {
    let dir = std::env::temp_dir().join(format!("cacheline-import-history-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (bytes, files) = write_history(&dir, 2 << 20, &[]).unwrap_or_else(|e| panic!("{e}"));
    assert!(bytes >= 2 << 20);
    let sources = discover::in_home(&dir, &[]);
    assert_eq!(sources.len() as u64, files);
    let report = import(&sources, &Options::default(), &mut |_| {});
    assert_eq!(report.totals.sessions, files);
    assert_eq!(report.totals.requests, files * 6);
    assert_eq!(report.bytes, bytes);
    assert_eq!(report.skipped.malformed_total(), 0);
    assert!(
        report.totals.exact > 0,
        "Claude Code 2.1.332 copies are rebuilt"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
