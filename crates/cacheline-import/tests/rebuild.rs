//! Claude Code 2.1.332+: each request rebuilt from the session file alone is the body the
//! upstream received, byte for byte (with the home's `~/.claude.json` beside it, which
//! names the device in `metadata`).

use std::path::{Path, PathBuf};

use cacheline_import::agents::{Limits, ReadContext, claude};
use cacheline_import::store::Skips;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/import/claude-code-2.1.332")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The captured request bodies, in order.
fn captured() -> Vec<String> {
    std::fs::read_to_string(fixture().join("capture.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["request"].as_str().unwrap().to_owned()
        })
        .collect()
}

fn rebuilt(home: &Path) -> Vec<Option<String>> {
    let file =
        std::fs::read_dir(home.join(".claude/projects/-tmp-cacheline-capture-claude-code-project"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
    let mut skips = Skips::default();
    let mut cx = ReadContext {
        limits: Limits::default(),
        skips: &mut skips,
        home: Some(home),
    };
    let device = claude::device_of(home);
    let sessions = claude::read(&file, &mut cx, &device).unwrap();
    sessions[0]
        .requests
        .iter()
        .map(|r| r.body.clone())
        .collect()
}

#[test]
fn a_claude_code_2_1_332_request_is_rebuilt_byte_for_byte() {
    let captured = captured();
    let device = {
        let body: serde_json::Value = serde_json::from_str(&captured[0]).unwrap();
        let user: serde_json::Value =
            serde_json::from_str(body["metadata"]["user_id"].as_str().unwrap()).unwrap();
        user["device_id"].as_str().unwrap().to_owned()
    };
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    copy_dir(&fixture().join("home"), &home);
    std::fs::write(
        home.join(".claude.json"),
        format!(r#"{{"numStartups":3,"userID":"{device}"}}"#),
    )
    .unwrap();
    let bodies = rebuilt(&home);
    assert_eq!(bodies.len(), captured.len());
    for (i, (body, wire)) in bodies.iter().zip(&captured).enumerate() {
        let body = body
            .as_deref()
            .unwrap_or_else(|| panic!("request {} not rebuilt", i + 1));
        assert!(
            body == wire,
            "request {}: {} vs {} bytes",
            i + 1,
            body.len(),
            wire.len()
        );
    }
}

/// Without `~/.claude.json` the only difference is the device id, empty in `metadata`.
#[test]
fn without_the_device_id_only_metadata_differs() {
    let captured = captured();
    let bodies = rebuilt(&fixture().join("home"));
    for (i, (body, wire)) in bodies.iter().zip(&captured).enumerate() {
        let mut body: serde_json::Value = serde_json::from_str(body.as_deref().unwrap()).unwrap();
        let mut wire: serde_json::Value = serde_json::from_str(wire).unwrap();
        let user: serde_json::Value =
            serde_json::from_str(body["metadata"]["user_id"].as_str().unwrap()).unwrap();
        assert_eq!(user["device_id"], "", "request {}", i + 1);
        body["metadata"] = serde_json::Value::Null;
        wire["metadata"] = serde_json::Value::Null;
        assert_eq!(body, wire, "request {}", i + 1);
    }
}
