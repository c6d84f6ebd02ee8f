//! Append-only history and the `set_system_prompt` helpers.

use prompt_core::{
    DeliveryStyle, History, delivery::UpdateRole, history::SystemPromptChange,
    messages::current_system_prompt, node::NodeKind, node::Producer, set_system_prompt,
};
use serde_json::{Value, json};

fn snapshot(h: &History) -> Vec<String> {
    h.nodes().iter().map(|n| n.bytes().to_owned()).collect()
}

#[test]
fn unchanged_system_prompt_makes_zero_mutations() {
    let mut h = History::new(DeliveryStyle::system());
    h.set_system_prompt("Be brief.");
    h.append_user("hi").unwrap();
    let before = snapshot(&h);
    let epoch = h.epoch();
    assert_eq!(
        h.set_system_prompt("Be brief."),
        SystemPromptChange::Unchanged
    );
    assert_eq!(snapshot(&h), before);
    assert_eq!(h.epoch(), epoch);
}

#[test]
fn changed_system_prompt_is_appended_and_earlier_indices_are_byte_identical() {
    let mut h = History::new(DeliveryStyle::system());
    h.set_system_prompt("Be brief.");
    h.append_user("hi").unwrap();
    h.append_raw(
        Producer::Assistant,
        NodeKind::Assistant,
        r#"{"role":"assistant","content":"hello"}"#,
    )
    .unwrap();
    let before = snapshot(&h);
    assert_eq!(
        h.set_system_prompt("Be very brief."),
        SystemPromptChange::Appended(3)
    );
    let after = snapshot(&h);
    assert_eq!(&after[..3], &before[..]);
    let update: Value = serde_json::from_str(&after[3]).unwrap();
    assert_eq!(update["role"], "system");
    assert_eq!(
        update["content"],
        "<system-update from=\"system_prompt\">\nBe very brief.\n</system-update>"
    );
    assert_eq!(h.system_prompt().as_deref(), Some("Be very brief."));
    // Setting the new prompt again is a no-op; going back to the old one appends again.
    assert_eq!(
        h.set_system_prompt("Be very brief."),
        SystemPromptChange::Unchanged
    );
    assert_eq!(
        h.set_system_prompt("Be brief."),
        SystemPromptChange::Appended(4)
    );
}

#[test]
fn empty_conversation_places_the_prompt_first() {
    let mut h = History::new(DeliveryStyle::user_reminder("system-reminder"));
    assert_eq!(h.set_system_prompt("Be brief."), SystemPromptChange::Placed);
    assert_eq!(
        h.nodes()[0].bytes(),
        r#"{"role":"system","content":"Be brief."}"#
    );
    assert_eq!(h.nodes()[0].kind(), NodeKind::System);
}

#[test]
fn user_reminder_style_delivers_updates_as_user_messages() {
    let mut h = History::new(DeliveryStyle::user_reminder("system-reminder"));
    h.set_system_prompt("A");
    h.append_user("hi").unwrap();
    h.set_system_prompt("B");
    let update: Value = serde_json::from_str(h.nodes()[2].bytes()).unwrap();
    assert_eq!(update["role"], "user");
    assert_eq!(
        update["content"],
        "<system-reminder from=\"system_prompt\">\nB\n</system-reminder>"
    );
    assert_eq!(h.delivery().role, UpdateRole::UserReminder);
}

#[test]
fn compaction_summary_survives_system_prompt_updates_in_history() {
    let mut h = History::new(DeliveryStyle::system());
    h.set_system_prompt("v1");
    for i in 0..4 {
        h.append_user(&format!("q{i}")).unwrap();
    }
    let compaction = h
        .compact(1..4, "Summary: the user asked three questions.")
        .unwrap();
    assert_eq!(compaction.removed.len(), 3);
    let summary_bytes = h.nodes()[1].bytes().to_owned();
    assert!(summary_bytes.contains("\"role\":\"system\""));
    for v in ["v2", "v3", "v4"] {
        h.set_system_prompt(v);
    }
    let summaries: Vec<_> = h
        .nodes()
        .iter()
        .filter(|n| n.producer() == &Producer::Compaction)
        .collect();
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].bytes(), summary_bytes);
    assert_eq!(h.nodes()[1].bytes(), summary_bytes, "summary did not move");
}

#[test]
fn compaction_summary_survives_system_prompt_updates_in_vec_helper() {
    let style = DeliveryStyle::system();
    let mut messages = vec![
        json!({"role": "system", "content": "v1"}),
        json!({"role": "system", "content": "Summary of turns 1-20: refactored the parser."}),
        json!({"role": "user", "content": "next"}),
    ];
    let summary = messages[1].clone();
    for (i, v) in ["v2", "v3", "v2"].into_iter().enumerate() {
        let before = messages.clone();
        assert_eq!(
            set_system_prompt(&mut messages, v, &style),
            SystemPromptChange::Appended(3 + i)
        );
        assert_eq!(
            &messages[..before.len()],
            &before[..],
            "earlier indices rewritten"
        );
    }
    assert_eq!(messages[1], summary);
    assert_eq!(
        current_system_prompt(&messages, &style).as_deref(),
        Some("v2")
    );
    let before = messages.clone();
    assert_eq!(
        set_system_prompt(&mut messages, "v2", &style),
        SystemPromptChange::Unchanged
    );
    assert_eq!(messages, before);
}

#[test]
fn vec_helper_places_first_in_empty_conversation_and_never_inserts_at_zero_later() {
    let style = DeliveryStyle::user_reminder("system-reminder");
    let mut messages: Vec<Value> = Vec::new();
    assert_eq!(
        set_system_prompt(&mut messages, "v1", &style),
        SystemPromptChange::Placed
    );
    assert_eq!(messages, vec![json!({"role": "system", "content": "v1"})]);
    // A conversation that started without a system prompt gets it appended, not inserted.
    let mut no_system = vec![json!({"role": "user", "content": "hi"})];
    assert_eq!(
        set_system_prompt(&mut no_system, "v1", &style),
        SystemPromptChange::Appended(1)
    );
    assert_eq!(no_system[0], json!({"role": "user", "content": "hi"}));
    assert_eq!(no_system[1]["role"], "user");
}

#[test]
fn nothing_is_removed_by_role_alone() {
    let mut h = History::new(DeliveryStyle::system());
    h.set_system_prompt("v1");
    h.append_user("q").unwrap();
    h.compact(1..2, "summary").unwrap();
    h.set_system_prompt("v2");
    // Removing the system prompt's nodes keeps the other role:"system" node.
    let removed = h.remove_by_producer(&Producer::SystemPrompt);
    assert_eq!(removed.len(), 2);
    assert_eq!(h.len(), 1);
    assert_eq!(h.nodes()[0].producer(), &Producer::Compaction);
    assert!(h.nodes()[0].bytes().contains("\"role\":\"system\""));
}

#[test]
fn remove_by_id_removes_exactly_one_node_even_with_identical_content() {
    let mut h = History::new(DeliveryStyle::system());
    let a = h.append_user("yes").unwrap();
    let b = h.append_user("yes").unwrap();
    assert_ne!(a, b, "chained ids distinguish identical messages");
    assert_eq!(h.nodes()[0].content_hash(), h.nodes()[1].content_hash());
    let removed = h.remove(a).unwrap();
    assert_eq!(removed.id(), a);
    assert_eq!(h.len(), 1);
    // The node after the removal sits on a new prefix: its id is renewed, and names the
    // prefix it ends now (the same one `a` named: one "yes" message).
    assert_eq!(h.nodes()[0].id(), a);
    assert!(h.remove(b).is_none(), "the old id names no node any more");
}

#[test]
fn compaction_starts_a_new_epoch_and_returns_what_it_removed() {
    let mut h = History::new(DeliveryStyle::system());
    for i in 0..5 {
        h.append_user(&format!("m{i}")).unwrap();
    }
    let originals = snapshot(&h);
    let c = h.compact(0..3, "sum").unwrap();
    assert_eq!(c.epoch, 1);
    assert_eq!(h.epoch(), 1);
    let removed: Vec<_> = c.removed.iter().map(|n| n.bytes().to_owned()).collect();
    assert_eq!(removed, originals[..3]);
    assert_eq!(
        snapshot(&h)[1..],
        originals[3..],
        "kept tail is byte-identical"
    );
    assert!(h.nodes().iter().all(|n| n.epoch() == 1));
    assert!(h.compact(2..9, "x").is_err());
}

#[test]
fn bad_messages_are_errors_not_panics() {
    let mut h = History::new(DeliveryStyle::system());
    assert!(
        h.append_raw(Producer::Tool, NodeKind::Tool, "{not json")
            .is_err()
    );
    let err = h
        .append_raw(Producer::Tool, NodeKind::Tool, r#"{"content":"x"}"#)
        .unwrap_err();
    assert!(err.to_string().contains("without \"role\""), "{err}");
    assert!(
        h.append_value(Producer::User, NodeKind::User, &json!([1]))
            .is_err()
    );
    assert!(h.is_empty());
}

/// Messages as agents really send them: tool calls, tool results, reasoning, content parts,
/// vendor fields, odd number spellings and whitespace.
const ROUND_TRIP: &[&str] = &[
    r#"{"role":"assistant","content":null,"reasoning_content":"The user wants the file.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"src/main.rs\"}"}}]}"#,
    r#"{"role":"tool","tool_call_id":"call_1","content":"fn main() {}\n"}"#,
    r#"{"role":"user","content":[{"type":"text","text":"What is in this image?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}}]}"#,
    r#"{"role":"assistant","content":"ok","x_vendor":{"latency_ms":1.50,"big":12345678901234567890,"exp":1e5},"name":"bot"}"#,
    "{ \"role\" : \"user\",\n  \"content\" : \"spaced \\u00e9\" }",
];

/// The producer and kind that take a message of this role.
fn writer_of(raw: &str) -> (Producer, NodeKind) {
    let value: Value = serde_json::from_str(raw).unwrap();
    match value["role"].as_str() {
        Some("user") => (Producer::User, NodeKind::User),
        Some("tool") => (Producer::Tool, NodeKind::Tool),
        _ => (Producer::Assistant, NodeKind::Assistant),
    }
}

#[test]
fn messages_round_trip_byte_identically() {
    let mut h = History::new(DeliveryStyle::system());
    for raw in ROUND_TRIP {
        let (producer, kind) = writer_of(raw);
        h.append_raw(producer, kind, raw).unwrap();
    }
    for (node, raw) in h.nodes().iter().zip(ROUND_TRIP) {
        assert_eq!(node.bytes(), *raw);
    }
    // Through a Value: serialized once, compactly, keys sorted whatever the host's serde_json
    // features (`tests/preserve-order` checks that), and equal as JSON.
    let mut h2 = History::new(DeliveryStyle::system());
    for raw in &ROUND_TRIP[..3] {
        let value: Value = serde_json::from_str(raw).unwrap();
        let (producer, kind) = writer_of(raw);
        h2.append_value(producer, kind, &value).unwrap();
    }
    for (node, raw) in h2.nodes().iter().zip(ROUND_TRIP) {
        assert_eq!(
            node.bytes(),
            prompt_core::raw_json::canonical(&serde_json::from_str::<Value>(raw).unwrap())
        );
        assert_eq!(
            node.message().unwrap(),
            serde_json::from_str::<Value>(raw).unwrap()
        );
    }
}

#[test]
fn open_tool_calls_follow_results_removals_and_compactions() {
    let mut h = History::new(DeliveryStyle::system());
    h.append_user("read both").unwrap();
    let calls = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"read","arguments":"{}"}}]}"#;
    h.append_raw(Producer::Assistant, NodeKind::Assistant, calls)
        .unwrap();
    assert_eq!(h.open_tool_calls(), ["c1", "c2"]);
    assert!(h.has_open_tool_calls() && h.is_open_tool_call("c2"));
    let result = h
        .append_raw(
            Producer::Tool,
            NodeKind::Tool,
            r#"{"role":"tool","tool_call_id":"c2","content":"b"}"#,
        )
        .unwrap();
    assert_eq!(h.open_tool_calls(), ["c1"]);
    assert!(!h.is_open_tool_call("c2") && !h.is_open_tool_call("c9"));
    // Removing the result opens its call again.
    h.remove(result).unwrap();
    assert_eq!(h.open_tool_calls(), ["c1", "c2"]);
    for id in ["c1", "c2"] {
        h.append_raw(
            Producer::Tool,
            NodeKind::Tool,
            &format!(r#"{{"role":"tool","tool_call_id":"{id}","content":"x"}}"#),
        )
        .unwrap();
    }
    assert!(!h.has_open_tool_calls());
    // A compaction that keeps the call and its results keeps them answered; a clone too.
    h.compact(0..1, "summary").unwrap();
    assert!(!h.has_open_tool_calls() && !h.clone().has_open_tool_calls());
    h.append_raw(
        Producer::Assistant,
        NodeKind::Assistant,
        r#"{"role":"assistant","content":"done"}"#,
    )
    .unwrap();
    assert!(h.open_tool_calls().is_empty());
}
