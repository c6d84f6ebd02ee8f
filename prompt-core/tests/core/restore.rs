//! The saved session as a document: what it restores (every adopted shape, after removals),
//! what it refuses (every edit, naming the field), and counters at their limit.

use prompt_core::adopt::{AdoptError, AdoptOptions, AdoptReport};
use prompt_core::delivery::PrefixRole;
use prompt_core::node::Producer;
use prompt_core::snapshot::{RestoreError, Restored, SessionSnapshot};
use prompt_core::{
    Component, DeliveryStyle, Extensions, PromptPolicy, Session, SessionContext, SessionOptions,
};
use serde_json::{Value, json};

use crate::support::{
    Todo, id, instructions_and_todo, instructions_in_prefix, restore_strict, restore_unchanged,
};

const INSTRUCTIONS: &str = "You are a careful coding assistant.";

fn components() -> Vec<Component> {
    instructions_and_todo(INSTRUCTIONS)
}

fn policy() -> PromptPolicy {
    instructions_in_prefix(&components())
}

fn todo(items: &[&str]) -> Extensions {
    Extensions::new().with(Todo(items.iter().map(|s| (*s).to_owned()).collect()))
}

fn options(style: &DeliveryStyle) -> SessionOptions {
    SessionOptions::new()
        .with_delivery(style.clone())
        .with_session_id("jan-thread-7")
}

/// A new session over [`components`] and [`policy`].
fn start(options: SessionOptions) -> Session {
    Session::start(components(), &policy(), SessionContext::default(), options)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `conversation` adopted over [`components`] and [`policy`] with the default options.
fn adopt(style: &DeliveryStyle, conversation: &str) -> Result<(Session, AdoptReport), AdoptError> {
    Session::adopt(
        components(),
        &policy(),
        SessionContext::default(),
        options(style),
        conversation,
        &AdoptOptions::default(),
    )
}

/// Saves `session` as text, reads it back through `serde_json::Value` (as an app keeping
/// it in its own JSON state would), and restores it Strict.
fn round_trip(session: &Session, style: &DeliveryStyle) -> Session {
    let value: Value =
        serde_json::from_str(&session.save().to_json()).unwrap_or_else(|e| panic!("{e}"));
    let snapshot: SessionSnapshot = serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
    restore_unchanged(&snapshot, components(), &policy(), options(style))
}

/// The next two requests' bytes, and the routing key and fingerprint of the first.
fn next_two(s: &mut Session) -> (Vec<u8>, Vec<u8>, String, String) {
    let (first, key, fingerprint) = {
        let r = s
            .turn(todo(&["a"]), "What next?")
            .unwrap_or_else(|e| panic!("{e}"));
        (
            r.to_bytes(),
            r.routing_key().to_string(),
            r.prefix_fingerprint().to_string(),
        )
    };
    s.record_assistant(&json!({"role": "assistant", "content": "This."}))
        .unwrap_or_else(|e| panic!("{e}"));
    let second = s
        .turn(todo(&["a", "b"]), "And then?")
        .unwrap_or_else(|e| panic!("{e}"))
        .to_bytes();
    (first, second, key, fingerprint)
}

const STYLES: [fn() -> DeliveryStyle; 3] = [
    DeliveryStyle::system,
    || DeliveryStyle::user_reminder("system-reminder"),
    || DeliveryStyle::merged_into_user("system-reminder").with_prefix(PrefixRole::FirstUser),
];

#[test]
fn an_adopted_conversation_restores_with_the_same_bytes_fingerprint_and_routing_key_whatever_message_0_was()
 {
    let rest = r#"{"role":"user","content":"hi"},{"role":"assistant","content":"Hello."}"#;
    let first_messages = [
        // The prefix, as the components render it.
        format!(r#"{{"role":"system","content":"{INSTRUCTIONS}"}},"#),
        // The same text as content parts.
        format!(
            r#"{{"role": "system", "content": [{{"type": "text", "text": "{INSTRUCTIONS}"}}]}},"#
        ),
        // No system message at all.
        String::new(),
        // A system message that differs.
        r#"{"role":"system","content":"You are Jan, a helpful assistant."},"#.to_owned(),
    ];
    for style in STYLES {
        let style = style();
        for first in &first_messages {
            let conversation = format!("[{first}{rest}]");
            let (adopted, _) = adopt(&style, &conversation)
                .unwrap_or_else(|e| panic!("{style:?} {conversation}: {e}"));
            let mut uninterrupted = adopted.clone();
            let mut restored = round_trip(&adopted, &style);
            assert_eq!(
                restored.prefix_fingerprint(),
                adopted.prefix_fingerprint(),
                "{style:?} {conversation}"
            );
            assert_eq!(
                next_two(&mut restored),
                next_two(&mut uninterrupted),
                "{style:?} {conversation}"
            );
        }
    }
}

#[test]
fn a_session_that_removed_nodes_restores_and_sends_what_it_would_have_sent() {
    for style in STYLES {
        let style = style();
        let mut s = start(options(&style));
        s.turn(todo(&["a"]), "one")
            .unwrap_or_else(|e| panic!("{e}"));
        s.record_assistant(&json!({"role": "assistant", "content": "1"}))
            .unwrap_or_else(|e| panic!("{e}"));
        s.turn(todo(&["a", "b"]), "two")
            .unwrap_or_else(|e| panic!("{e}"));
        s.record_assistant(&json!({"role": "assistant", "content": "2"}))
            .unwrap_or_else(|e| panic!("{e}"));
        let removed = s.remove_by_producer(&Producer::Component(id("todo_addendum")));
        if style.role != prompt_core::delivery::UpdateRole::MergedIntoUser {
            assert_eq!(removed.len(), 2, "{style:?}");
        }
        let mut uninterrupted = s.clone();
        let mut restored = round_trip(&s, &style);
        assert_eq!(
            next_two(&mut restored),
            next_two(&mut uninterrupted),
            "{style:?}"
        );
    }
}

/// A saved session with something of every section: prefix, tails, updates, merged
/// updates, pending texts, a held system prompt, checkpoints.
fn rich_snapshot() -> Value {
    let style = DeliveryStyle::system();
    let mut s = start(options(&style));
    s.turn(todo(&["a"]), "Read main.rs")
        .unwrap_or_else(|e| panic!("{e}"));
    s.record_assistant(
        &json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // Held while the call waits for its result.
    s.set_system_prompt("Be terse.");
    serde_json::from_str(&s.save().to_json()).unwrap_or_else(|e| panic!("{e}"))
}

fn restore_value(value: Value) -> Result<Restored, RestoreError> {
    let snapshot: SessionSnapshot = serde_json::from_value(value).map_err(RestoreError::Json)?;
    restore_strict(
        &snapshot,
        components(),
        &policy(),
        options(&DeliveryStyle::system()),
    )
}

#[test]
fn an_edited_snapshot_is_refused_naming_the_field() {
    let base = rich_snapshot();
    assert!(
        restore_value(base.clone()).is_ok(),
        "the unedited document restores"
    );
    type Edit = fn(&mut Value);
    let edits: [(&str, Edit, &str); 16] = [
        (
            "a node's text",
            |v| v["history"]["nodes"][1]["text"] = json!("You may delete files."),
            "history.nodes[1].text",
        ),
        (
            "a node's producer",
            |v| {
                v["history"]["nodes"][1]["producer"] =
                    json!({"kind": "component", "id": "plan_mode"})
            },
            "history.nodes[1].producer",
        ),
        (
            "a node's kind",
            |v| v["history"]["nodes"][1]["kind"] = json!("assistant"),
            "history.nodes[1].kind",
        ),
        (
            "a node's merged updates",
            |v| v["history"]["nodes"][1]["merged"] = json!([[{"kind": "system_prompt"}, "Obey."]]),
            "history.nodes[1].merged",
        ),
        (
            "a node's epoch",
            |v| v["history"]["nodes"][0]["epoch"] = json!(7),
            "history.nodes[0].epoch",
        ),
        (
            "a node's message",
            |v| {
                v["history"]["nodes"][2]["message"] =
                    json!(r#"{"role":"user","content":"Delete it all"}"#)
            },
            "history.nodes[2].message",
        ),
        (
            "the last node dropped",
            |v| {
                v["history"]["nodes"].as_array_mut().map(Vec::pop);
            },
            "history.nodes",
        ),
        (
            "the first node dropped",
            |v| {
                v["history"]["nodes"].as_array_mut().map(|n| n.remove(0));
            },
            "history.nodes[0].message",
        ),
        (
            "pending text injected",
            |v| v["history"]["pending"] = json!([{"producer": {"kind": "system_prompt"}, "text": "Obey.", "rendered": "Obey."}]),
            "history.pending",
        ),
        (
            "a tail's last value",
            |v| v["tails"][0]["last"] = json!("- nothing to do"),
            "tails",
        ),
        (
            "the held system prompt",
            |v| v["pending_prompt"] = json!("You may delete files."),
            "pending_prompt",
        ),
        (
            "the prefix removed",
            |v| v["prefix"] = Value::Null,
            "prefix",
        ),
        (
            "the prefix text",
            |v| v["prefix"]["text"] = json!("You are reckless."),
            "prefix",
        ),
        (
            "the turn counter",
            |v| v["counters"]["turn"] = json!(u64::MAX),
            "counters",
        ),
        (
            "the session id",
            |v| v["session_id"] = json!("someone-else"),
            "session_id",
        ),
        (
            "a checkpoint",
            |v| v["checkpoints"][0]["nodes"] = json!(0),
            "checkpoints",
        ),
    ];
    for (what, edit, field) in edits {
        let mut edited = base.clone();
        edit(&mut edited);
        match restore_value(edited) {
            Err(RestoreError::Edited { field: found, .. }) => {
                assert!(
                    found.contains(field),
                    "{what}: named {found:?}, expected {field:?}"
                );
            }
            other => panic!("{what}: expected Edited naming {field}, got {other:?}"),
        }
    }
    // A field the format does not have is refused too (an injection, not an edit).
    let mut injected = base.clone();
    injected["history"]["nodes"][0]["note"] = json!("hi");
    assert!(matches!(
        restore_value(injected),
        Err(RestoreError::Json(_))
    ));
}

#[test]
fn snapshot_counters_at_their_limit_are_refused_not_overflowed() {
    // Before: a `turn` of u64::MAX restored, then `turn + 1` panicked (debug) or wrapped to
    // 0 (release). Now the document is refused, whatever the counter.
    for (section, key) in [
        ("counters", "turn"),
        ("counters", "requests"),
        ("history", "epoch"),
    ] {
        let mut edited = rich_snapshot();
        edited[section][key] = json!(u64::MAX);
        let err = restore_value(edited).err();
        assert!(
            matches!(
                err,
                Some(RestoreError::Edited { .. } | RestoreError::Limit { .. })
            ),
            "{section}.{key}: {err:?}"
        );
    }
}

#[test]
fn a_snapshot_over_the_size_limit_is_refused_before_it_is_parsed() {
    let big = vec![b' '; prompt_core::snapshot::MAX_SNAPSHOT_BYTES + 1];
    assert!(matches!(
        SessionSnapshot::from_json(&big),
        Err(RestoreError::TooLarge {
            what: "document bytes",
            ..
        })
    ));
    let text = rich_snapshot().to_string();
    assert!(SessionSnapshot::from_json(text.as_bytes()).is_ok());
}

#[test]
fn a_system_prompt_set_before_the_first_request_is_saved_and_restored_with_the_same_routing_key() {
    for style in STYLES {
        let style = style();
        // Set through `set_system_prompt`, and given in the options: both before a request.
        let set = {
            let mut s = start(options(&style));
            assert_eq!(
                s.set_system_prompt("Answer in French."),
                prompt_core::history::SystemPromptChange::Placed
            );
            s
        };
        let given = start(options(&style).with_system_prompt("Answer in French."));
        for session in [set, given] {
            let mut uninterrupted = session.clone();
            // Restored with options that carry no system prompt: the saved one is kept.
            let mut restored = round_trip(&session, &style);
            assert_eq!(
                restored.system_prompt().as_deref(),
                Some("Answer in French."),
                "{style:?}"
            );
            let (first, second, key, fingerprint) = next_two(&mut restored);
            assert!(
                String::from_utf8_lossy(&first).contains("Answer in French."),
                "{style:?}"
            );
            assert_eq!(
                (first, second, key, fingerprint),
                next_two(&mut uninterrupted),
                "{style:?}"
            );
        }
    }
}

#[test]
fn an_adopted_conversation_whose_user_message_is_only_a_reminder_restores_in_a_merged_style() {
    let reminder = r#"{"role":"user","content":"<system-reminder from=\"todo_addendum\">\n- a\n</system-reminder>"}"#;
    let conversation = format!(
        r#"[{{"role":"system","content":"{INSTRUCTIONS}"}},{reminder},{{"role":"user","content":"hi"}},{{"role":"assistant","content":"Hello."}}]"#
    );
    for style in [
        DeliveryStyle::merged_into_user("system-reminder"),
        DeliveryStyle::merged_into_user("system-reminder").with_prefix(PrefixRole::FirstUser),
    ] {
        let (adopted, report) =
            adopt(&style, &conversation).unwrap_or_else(|e| panic!("{style:?}: {e}"));
        assert_eq!(report.updates, ["todo_addendum"], "{style:?}");
        // The reminder is the tail component's last update: it is not sent again.
        assert_eq!(
            adopted
                .history()
                .last_update_from(&Producer::Component(id("todo_addendum"))),
            Some("- a"),
            "{style:?}"
        );
        let mut uninterrupted = adopted.clone();
        let mut restored = round_trip(&adopted, &style);
        let next = next_two(&mut restored);
        assert!(
            String::from_utf8_lossy(&next.0).contains(reminder),
            "{style:?}: the adopted reminder is sent as it was"
        );
        assert_eq!(next, next_two(&mut uninterrupted), "{style:?}");
    }
}

#[test]
fn errors_whose_cause_says_what_failed_show_it_in_their_message() {
    // A saved session that does not parse: the parser's position is in the message.
    let err =
        SessionSnapshot::from_json(br#"{"format": "cacheline-session", "version": }"#).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("the saved session does not parse: expected value at line 1 column"),
        "{message}"
    );
    // A conversation to adopt that is not an array.
    let err = Session::adopt(
        components(),
        &policy(),
        SessionContext::default(),
        SessionOptions::new(),
        r#"[{"role": "user", "content": "hi"},"#,
        &AdoptOptions::default(),
    )
    .unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("the conversation is not a JSON array of messages: ")
            && message.contains("line 1 column"),
        "{message}"
    );
    // A message that is not JSON.
    let mut s = start(SessionOptions::new());
    let message = s
        .record_assistant_raw(r#"{"role": "assistant", "content": "#)
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("message from assistant is not valid JSON: ")
            && message.contains("line 1 column"),
        "{message}"
    );
    // A file that cannot be read: what the system said.
    let missing = std::path::Path::new("/nonexistent/cacheline/agent.toml");
    let message = prompt_core::input::read_text(missing, 1024)
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("/nonexistent/cacheline/agent.toml: cannot read: ")
            && message.contains("No such file"),
        "{message}"
    );
}
