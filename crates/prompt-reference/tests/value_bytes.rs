//! Defect 3 of issue 20, the normal build's side: the bytes the library writes from
//! `serde_json::Value`s equal the fixture that `tests/preserve-order` (serde_json with
//! `preserve_order`) checks too. `CACHELINE_WRITE_FIXTURES=1` rewrites the fixture, from a
//! normal build only.

#[path = "../../../tests/preserve-order/src/lib.rs"]
mod cases;

use std::path::Path;

/// Defect 3: this build, a normal host's (serde_json without `preserve_order`: the crate
/// that enables it is a workspace of its own), writes the bytes of the fixture.
#[test]
fn defect3_value_bytes_of_this_build_equal_the_fixture() {
    assert!(
        !cases::preserve_order_enabled(),
        "the main workspace must build serde_json as a normal host does"
    );
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(cases::FIXTURE);
    let rendered = cases::render().unwrap();
    if std::env::var_os("CACHELINE_WRITE_FIXTURES").is_some_and(|v| v == "1") {
        assert!(
            !cases::preserve_order_enabled(),
            "the fixture is the normal build's: run `cargo test -p prompt-reference --test value_bytes`"
        );
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &rendered).unwrap();
    }
    let fixture = std::fs::read_to_string(&path).unwrap();
    for (ours, normal) in rendered.lines().zip(fixture.lines()) {
        assert_eq!(ours, normal);
    }
    assert_eq!(rendered, fixture);
}
