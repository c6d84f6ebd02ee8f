//! Reproducers for the defects of issue 20 seen at the command line, one test per defect,
//! named after the defect it reproduces.

use crate::cacheline_with_stdin;

/// Defect 4: `audit --guard` over a body whose tool has a 1 MB name writes a few hundred
/// bytes about it, not the name (twice).
#[test]
fn defect4_audit_guard_with_a_megabyte_tool_name_writes_a_bounded_report() {
    let name = "t".repeat(1 << 20);
    let earlier = r#"{"model":"m","tools":[],"messages":[{"role":"user","content":"hi"}]}"#;
    let later = format!(
        r#"{{"model":"m","tools":[{{"type":"function","function":{{"name":"{name}"}}}}],"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let input = format!("{earlier}\n{later}\n");
    for json in [false, true] {
        let mut args = vec!["audit", "--guard", "-"];
        if json {
            args.push("--json");
        }
        let (status, stdout, stderr) = cacheline_with_stdin(&args, input.as_bytes());
        assert_eq!(status, 0, "{stderr}");
        assert!(
            stdout.contains("was added") || stdout.contains("tool_added"),
            "{}",
            &stdout[..stdout.len().min(300)]
        );
        assert!(
            stdout.len() < 4096,
            "--json {json}: {} bytes written",
            stdout.len()
        );
    }
}
