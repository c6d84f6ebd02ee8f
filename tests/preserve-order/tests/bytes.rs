//! Defect 3 of issue 20: the bytes do not depend on the host's serde_json features.

use cacheline_preserve_order::{FIXTURE, preserve_order_enabled, render};

/// Defect 3: in a program that enables serde_json's `preserve_order`, tool schemas, messages
/// and parameters given as values, bodies and the reference session are the bytes of the
/// normal build (the fixture it wrote).
#[test]
fn defect3_value_bytes_under_preserve_order_equal_the_normal_build() {
    assert!(
        preserve_order_enabled(),
        "this test must run with serde_json's preserve_order"
    );
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(FIXTURE);
    let fixture = std::fs::read_to_string(&path).unwrap();
    let rendered = render().unwrap();
    for (ours, normal) in rendered.lines().zip(fixture.lines()) {
        assert_eq!(ours, normal);
    }
    assert_eq!(rendered, fixture);
}
