//! The agent loop beyond "user message → request": continuations after tool results, tool
//! results in every shape, save and resume, adopting a conversation, refreshing what was
//! frozen, and compaction helpers. docs/lifecycle.md describes each step.

use prompt_core::adopt::AdoptOptions;
use prompt_core::delivery::PrefixRole;
use prompt_core::history::SystemPromptChange;
use prompt_core::node::{NodeKind, Producer};
use prompt_core::refresh::Refresh;
use prompt_core::session::ToolResult;
use prompt_core::snapshot::{RestoreError, RestoreMode, Restored, SessionSnapshot};
use prompt_core::tools::{ToolSet, ToolSource};
use prompt_core::{
    ComposeError, DeliveryStyle, Extensions, PrefixCheck, PromptPolicy, Session, SessionContext,
    SessionOptions,
};
use serde_json::{Value, json};

use crate::support::{Todo, id, instructions_and_todo, instructions_in_prefix, restore_unchanged};

const INSTRUCTIONS: &str = "You are a careful coding assistant.";

fn policy() -> PromptPolicy {
    instructions_in_prefix(&instructions_and_todo(INSTRUCTIONS))
}

fn tools(names: &[&str]) -> ToolSet {
    let listing = Value::Array(
        names
            .iter()
            .map(|n| json!({"type": "function", "function": {"name": n, "description": "", "parameters": {"type": "object"}}}))
            .collect(),
    );
    ToolSet::from_openai(&[(ToolSource::builtin(), &listing)]).unwrap()
}

const STYLES: [fn() -> DeliveryStyle; 4] = [
    DeliveryStyle::system,
    || DeliveryStyle::user_reminder("system-reminder"),
    || DeliveryStyle::merged_into_user("system-reminder"),
    || DeliveryStyle::merged_into_user("system-reminder").with_prefix(PrefixRole::FirstUser),
];

fn options(style: DeliveryStyle) -> SessionOptions {
    SessionOptions::new()
        .with_delivery(style)
        .with_tools(tools(&["read_file", "run_tests"]))
}

fn session(style: DeliveryStyle) -> Session {
    Session::start(
        instructions_and_todo(INSTRUCTIONS),
        &policy(),
        SessionContext::default(),
        options(style),
    )
    .unwrap()
}

fn todo(items: &[&str]) -> Extensions {
    Extensions::new().with(Todo(items.iter().map(|s| (*s).to_owned()).collect()))
}

fn call(ids: &[&str]) -> Value {
    let calls: Vec<Value> = ids
        .iter()
        .map(|id| json!({"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}))
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls})
}

fn roles(bytes: &[u8]) -> Vec<String> {
    let messages: Vec<Value> = serde_json::from_slice(bytes).unwrap();
    messages
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn a_continuation_puts_changed_tail_updates_after_the_tool_results() {
    for style in STYLES {
        let style = style();
        let mut s = session(style.clone());
        let first = s
            .turn(todo(&["a"]), "Read the file.")
            .unwrap()
            .stable_bytes();
        s.record_assistant(&call(&["c1", "c2"])).unwrap();
        s.record_tool_result("c1", "one").unwrap();
        s.record_tool_result("c2", "two").unwrap();
        // The tool changed the todo list: its update must come after both results.
        let request = s.continuation(todo(&["a", "b"])).unwrap();
        assert_eq!(request.extends(&first), PrefixCheck::Prefix, "{style:?}");
        assert!(request.is_continuation());
        let new: Vec<(NodeKind, &str)> = request
            .new_nodes()
            .iter()
            .map(|n| (n.kind(), n.bytes()))
            .collect();
        let kinds: Vec<NodeKind> = new.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            &kinds[..3],
            &[NodeKind::Assistant, NodeKind::Tool, NodeKind::Tool],
            "{style:?}"
        );
        let update = "b";
        if style.role == prompt_core::delivery::UpdateRole::MergedIntoUser {
            // No message of its own: written into the last result, after it.
            assert_eq!(kinds.len(), 3, "{style:?}");
            let last: Value = serde_json::from_str(new[2].1).unwrap();
            let content = last["content"].as_str().unwrap();
            assert!(
                content.starts_with("two\n\n<system-reminder from=\"todo_addendum\">"),
                "{content}"
            );
            assert!(
                content.ends_with(&format!("\n{update}\n</system-reminder>")),
                "{content}"
            );
        } else {
            assert_eq!(kinds[3], NodeKind::Update, "{style:?}");
            assert!(new[3].1.contains(update));
        }
    }
}

#[test]
fn nothing_may_come_between_a_tool_call_and_its_results() {
    let mut s = session(DeliveryStyle::system());
    s.turn(todo(&[]), "Read it.").unwrap();
    s.record_assistant(&call(&["c1"])).unwrap();
    let len = s.history().len();
    assert!(matches!(
        s.turn(todo(&[]), "Never mind."),
        Err(ComposeError::UnansweredToolCalls { open }) if open == ["c1"]
    ));
    assert!(matches!(
        s.continuation(todo(&[])),
        Err(ComposeError::UnansweredToolCalls { .. })
    ));
    assert!(
        s.record_assistant(&json!({"role": "assistant", "content": "hm"}))
            .is_err()
    );
    assert!(matches!(
        s.record_tool_result("c9", "?"),
        Err(ComposeError::UnknownToolCall { call_id, .. }) if call_id == "c9"
    ));
    // A system prompt set meanwhile is held, then appended after the results.
    assert_eq!(
        s.set_system_prompt("Be terse."),
        SystemPromptChange::Deferred
    );
    assert_eq!(s.system_prompt().as_deref(), Some("Be terse."));
    assert_eq!(s.history().len(), len, "nothing was appended");
    s.record_tool_result("c1", "body").unwrap();
    let request = s.continuation(todo(&[])).unwrap();
    let kinds: Vec<(NodeKind, Producer)> = request
        .new_nodes()
        .iter()
        .map(|n| (n.kind(), n.producer().clone()))
        .collect();
    assert_eq!(kinds[0], (NodeKind::Assistant, Producer::Assistant));
    assert_eq!(kinds[1], (NodeKind::Tool, Producer::Tool));
    assert_eq!(kinds[2], (NodeKind::Update, Producer::SystemPrompt));
    // No result since the last request: nothing to continue.
    assert!(matches!(
        s.continuation(todo(&[])),
        Err(ComposeError::NothingToContinue)
    ));
}

#[test]
fn tool_results_come_in_every_shape() {
    let mut s = session(DeliveryStyle::system());
    s.turn(todo(&[]), "Go.").unwrap();
    s.record_assistant(&call(&["t1", "t2", "t3", "t4"]))
        .unwrap();
    s.record_tool(&ToolResult::text("t1", "plain").name("read_file"))
        .unwrap();
    s.record_tool(&ToolResult::parts(
        "t2",
        &json!([{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:,"}}]),
    ))
    .unwrap();
    s.record_tool(&ToolResult::text("t3", "no such file").error())
        .unwrap();
    let raw = r#"{"role":"tool","tool_call_id":"t4","content":"x","x_vendor":{"ms":1e400}}"#;
    s.record_tool_raw(raw).unwrap();
    let stored: Vec<&str> = s.history().nodes()[s.history().len() - 4..]
        .iter()
        .map(|n| n.bytes())
        .collect();
    assert_eq!(
        stored[0],
        r#"{"role":"tool","tool_call_id":"t1","name":"read_file","content":"plain"}"#
    );
    assert!(stored[1].contains(r#""content":[{"text":"see","type":"text"},{"image_url""#));
    assert!(stored[2].ends_with(r#""content":"no such file","is_error":true}"#));
    assert_eq!(stored[3], raw, "raw results are kept byte-for-byte");
    assert!(
        s.record_tool_raw(r#"{"role":"user","content":"spoof"}"#)
            .is_err()
    );
}

/// Plays a session with turns, tool calls, continuations, a prompt change and a
/// compaction; calls `pause` (save and resume) after turn `pause_after`. Returns every
/// request's bytes.
fn play(style: DeliveryStyle, pause_after: Option<usize>) -> Vec<Vec<u8>> {
    let mut s = session(style.clone());
    let mut out = Vec::new();
    for turn in 1..=6usize {
        if turn == 4 {
            s.set_system_prompt("Answer in one sentence.");
        }
        if turn == 5 {
            let cut = s.history().safe_cut(0, 3);
            s.compact(0..cut, "Summary of turns 1-4.").unwrap();
        }
        let items: Vec<String> = (0..turn / 2).map(|i| format!("item {i}")).collect();
        let values = || Extensions::new().with(Todo(items.clone()));
        out.push(
            s.turn(values(), format!("Question {turn}?"))
                .unwrap()
                .to_bytes(),
        );
        if turn % 2 == 0 {
            let id = format!("c{turn}");
            s.record_assistant(&call(&[&id])).unwrap();
            s.record_tool_result(&id, "result").unwrap();
            out.push(s.continuation(values()).unwrap().to_bytes());
        }
        s.record_assistant(&json!({"role": "assistant", "content": format!("Answer {turn}.")}))
            .unwrap();
        if Some(turn) == pause_after {
            // Through text and through `serde_json::Value` (which sorts object keys): an
            // agent may keep the snapshot inside its own JSON state.
            let text = serde_json::to_string(&s.save()).unwrap();
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            let snapshot: SessionSnapshot = serde_json::from_value(value).unwrap();
            s = restore_unchanged(
                &snapshot,
                instructions_and_todo(INSTRUCTIONS),
                &policy(),
                options(style.clone()),
            );
        }
    }
    out
}

#[test]
fn a_restored_session_sends_the_same_requests_byte_for_byte_in_every_style() {
    for style in STYLES {
        let uninterrupted = play(style(), None);
        for pause in 1..=6 {
            assert_eq!(
                play(style(), Some(pause)),
                uninterrupted,
                "{:?}, saved after turn {pause}",
                style()
            );
        }
    }
}

#[test]
fn restore_names_what_changed_or_starts_a_new_epoch_when_asked() {
    let mut s = session(DeliveryStyle::system());
    s.turn(todo(&[]), "hi").unwrap();
    let snapshot = s.save();
    let edited = instructions_and_todo("You are a reckless coding assistant.");
    let err = Session::restore(
        &snapshot,
        edited.clone(),
        &policy(),
        SessionContext::default(),
        options(DeliveryStyle::system()).with_tools(tools(&["read_file", "write_file"])),
        RestoreMode::Strict,
    )
    .err()
    .unwrap();
    let text = err.to_string();
    assert!(text.contains("changed: assistant_instructions"), "{text}");
    assert!(text.contains("tools added: builtin/write_file"), "{text}");
    assert!(text.contains("tools removed: builtin/run_tests"), "{text}");
    let Restored {
        session: mut resumed,
        changes,
        ..
    } = Session::restore(
        &snapshot,
        edited,
        &policy(),
        SessionContext::default(),
        options(DeliveryStyle::system()),
        RestoreMode::NewEpoch,
    )
    .unwrap();
    let changes = changes.unwrap();
    assert_eq!(changes.changed, [id("assistant_instructions")]);
    assert_ne!(changes.old_fingerprint, changes.new_fingerprint);
    assert_eq!(resumed.history().epoch(), s.history().epoch() + 1);
    let request = resumed.turn(todo(&[]), "again").unwrap();
    assert!(String::from_utf8_lossy(&request.to_bytes()).contains("reckless"));
    // A damaged history is refused, never resumed.
    let mut damaged = serde_json::to_value(&snapshot).unwrap();
    damaged["history"]["nodes"][0]["id"] = json!("00000000000000000000000000000000");
    let damaged: SessionSnapshot = serde_json::from_value(damaged).unwrap();
    match Session::restore(
        &damaged,
        instructions_and_todo(INSTRUCTIONS),
        &policy(),
        SessionContext::default(),
        options(DeliveryStyle::system()),
        RestoreMode::Strict,
    ) {
        Err(RestoreError::Edited { field, .. }) => assert_eq!(field, "history.nodes[0].message"),
        other => panic!("expected Edited, got {other:?}"),
    }
}

/// A conversation as a Jan-style desktop agent stores it: the system prompt first, tool
/// calls with reasoning, a compaction summary as a marked system message.
const JAN_CONVERSATION: &str = r#"[
{"role":"system","content":"You are a careful coding assistant."},
{"role":"user","content":"Fix the failing test."},
{"role":"assistant","content":null,"reasoning_content":"I should run the tests first.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"run_tests","arguments":"{\"filter\": \"core\"}"}}]},
{"role":"tool","tool_call_id":"call_1","content":"1 failed"},
{"role":"system","content":"[conversation summary] The user asked to fix a test; one test fails."},
{"role":"assistant","content":"One test fails: `deny_wins`. Shall I fix it?"},
{"role":"system","content":"<system-update from=\"todo_addendum\">\nfix deny_wins\n</system-update>"}
]"#;

#[test]
fn a_jan_shaped_conversation_is_adopted_without_rewriting_a_byte() {
    let adopt = AdoptOptions::new().with_compaction_marker("[conversation summary]");
    let (mut s, report) = Session::adopt(
        instructions_and_todo(INSTRUCTIONS),
        &policy(),
        SessionContext::default(),
        options(DeliveryStyle::system()),
        JAN_CONVERSATION,
        &adopt,
    )
    .unwrap();
    assert!(report.prefix_frozen);
    assert!(!report.prefix_appended);
    assert_eq!((report.summaries, report.foreign), (1, 0));
    assert_eq!(report.updates, ["todo_addendum"]);
    let producers: Vec<Producer> = s
        .history()
        .nodes()
        .iter()
        .map(|n| n.producer().clone())
        .collect();
    assert_eq!(
        producers,
        [
            Producer::User,
            Producer::Assistant,
            Producer::Tool,
            Producer::Compaction,
            Producer::Assistant,
            Producer::Component(id("todo_addendum"))
        ]
    );
    // The next request carries every adopted message exactly as it was, and the todo list,
    // unchanged, is not repeated.
    let request = s
        .turn(todo(&["fix deny_wins"]), "Yes, fix it.")
        .unwrap()
        .to_bytes();
    let sent: Vec<&serde_json::value::RawValue> = serde_json::from_slice(&request).unwrap();
    let adopted: Vec<&serde_json::value::RawValue> =
        serde_json::from_str(JAN_CONVERSATION).unwrap();
    for (i, message) in adopted.iter().enumerate() {
        assert_eq!(sent[i].get(), message.get(), "message {i}");
    }
    assert_eq!(
        sent.len(),
        adopted.len() + 1,
        "only the user message is new"
    );
}

#[test]
fn an_adopted_leading_prompt_that_differs_stays_and_the_prefix_is_appended() {
    let conversation = r#"[{"role":"system","content":"You are an old assistant."},{"role":"user","content":"hi"},{"role":"assistant","content":"Hello."}]"#;
    let (mut s, report) = Session::adopt(
        instructions_and_todo(INSTRUCTIONS),
        &policy(),
        SessionContext::default(),
        options(DeliveryStyle::system()),
        conversation,
        &AdoptOptions::default(),
    )
    .unwrap();
    assert!(!report.prefix_frozen);
    assert!(report.prefix_appended);
    let request = s.turn(todo(&[]), "Who are you?").unwrap().to_bytes();
    let text = String::from_utf8_lossy(&request);
    assert!(
        text.starts_with(&conversation[..conversation.len() - 1]),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "<system-update from=\\\"prefix\\\">\\n{INSTRUCTIONS}\\n</system-update>"
        )),
        "{text}"
    );
    assert_eq!(roles(&request).last().map(String::as_str), Some("user"));
}

#[test]
fn a_refresh_reports_exactly_what_changed_and_never_happens_silently() {
    let mut s = session(DeliveryStyle::system());
    s.turn(todo(&[]), "hi").unwrap();
    s.record_assistant(&json!({"role": "assistant", "content": "ok"}))
        .unwrap();
    let bytes: Vec<String> = s
        .history()
        .nodes()
        .iter()
        .map(|n| n.bytes().to_owned())
        .collect();
    let fingerprint = s.prefix_fingerprint();
    // Same components, policy and tools: nothing at all changes.
    let unchanged = s
        .refresh(
            instructions_and_todo(INSTRUCTIONS),
            &policy(),
            tools(&["read_file", "run_tests"]),
            None,
        )
        .unwrap();
    assert_eq!(unchanged, Refresh::Unchanged);
    assert_eq!(s.prefix_fingerprint(), fingerprint);
    assert_eq!(s.history().epoch(), 0);
    // An MCP server connects: its tools join; a new epoch starts and says why.
    let mut with_mcp = tools(&["read_file", "run_tests"]).definitions().to_vec();
    with_mcp.push(prompt_core::tools::ToolDefinition {
        name: "search_issues".to_owned(),
        description: "Search GitHub issues.".to_owned(),
        parameters: "{}".to_owned(),
        source: ToolSource::mcp("GitHub"),
    });
    let changed = s
        .refresh(
            instructions_and_todo(INSTRUCTIONS),
            &policy(),
            ToolSet::new(with_mcp.clone()).unwrap(),
            None,
        )
        .unwrap();
    let Refresh::NewEpoch(changes) = changed else {
        panic!("expected a new epoch, got {changed:?}");
    };
    assert_eq!(changes.tools_added, ["mcp:github/search_issues"]);
    assert!(changes.changed.is_empty());
    assert_eq!(changes.old_fingerprint, fingerprint.unwrap().to_string());
    assert_eq!(s.history().epoch(), 1);
    let after: Vec<String> = s
        .history()
        .nodes()
        .iter()
        .map(|n| n.bytes().to_owned())
        .collect();
    assert_eq!(bytes, after, "the history is kept");
    // Deferred: held until the next compaction, which starts an epoch anyway.
    let held = s
        .refresh_at_next_compaction(
            instructions_and_todo("You are a concise coding assistant."),
            &policy(),
            ToolSet::new(with_mcp).unwrap(),
            None,
        )
        .unwrap();
    assert_eq!(held, Refresh::Deferred);
    let before = s.turn(todo(&[]), "more").unwrap().to_bytes();
    assert!(
        !String::from_utf8_lossy(&before).contains("concise"),
        "held until the compaction"
    );
    s.record_assistant(&json!({"role": "assistant", "content": "ok"}))
        .unwrap();
    let cut = s.history().safe_cut(0, 1);
    s.compact(0..cut, "Summary.").unwrap();
    let Some(Refresh::NewEpoch(changes)) = s.take_refresh_report() else {
        panic!("the compaction applies the held refresh");
    };
    assert_eq!(changes.changed, [id("assistant_instructions")]);
    let request = s.turn(todo(&[]), "and now").unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&request).contains("concise"));
}

#[test]
fn compaction_can_keep_chosen_producers() {
    let mut s = session(DeliveryStyle::system());
    s.turn(todo(&["a"]), "one").unwrap();
    s.record_assistant(&json!({"role": "assistant", "content": "1"}))
        .unwrap();
    let len = s.history().len();
    s.compact(0..len, "First summary.").unwrap();
    s.turn(todo(&["a", "b"]), "two").unwrap();
    s.record_assistant(&json!({"role": "assistant", "content": "2"}))
        .unwrap();
    let len = s.history().len();
    // Keep earlier summaries and the todo list's updates; summarize the rest.
    let kept = |p: &Producer| {
        matches!(p, Producer::Compaction) || *p == Producer::Component(id("todo_addendum"))
    };
    let compaction = s.compact_keeping(0..len, "Second summary.", &kept).unwrap();
    assert!(compaction.removed.iter().all(|n| !kept(n.producer())));
    let texts: Vec<Option<&str>> = s.history().nodes().iter().map(|n| n.text()).collect();
    assert_eq!(texts[0], Some("Second summary."));
    assert_eq!(texts[1], Some("First summary."));
    assert!(texts.contains(&Some("a\nb")), "{texts:?}");
}

/// Issue 12: the routing key is per session: two sessions of one agent (one prefix) never
/// share it, nor do two sessions with no prefix at all; it holds for every request of the
/// session and after a save and restore into a process whose options carry no id.
#[test]
fn the_routing_key_is_one_per_session_stable_across_requests_and_a_restore() {
    let key = |s: &mut Session, q: &str| s.turn(todo(&[q]), q).unwrap().routing_key();
    let mut a = session(DeliveryStyle::system());
    let mut b = session(DeliveryStyle::system());
    let first = key(&mut a, "one");
    assert_ne!(a.session_id(), b.session_id());
    assert_ne!(
        first,
        key(&mut b, "one"),
        "one prefix, two sessions: two keys"
    );
    a.record_assistant(&json!({"role": "assistant", "content": "ok"}))
        .unwrap();
    assert_eq!(key(&mut a, "two"), first, "the key holds across turns");

    let snapshot: SessionSnapshot =
        serde_json::from_str(&serde_json::to_string(&a.save()).unwrap()).unwrap();
    let Restored {
        session: mut restored,
        ..
    } = Session::restore(
        &snapshot,
        instructions_and_todo(INSTRUCTIONS),
        &policy(),
        SessionContext::default(),
        options(DeliveryStyle::system()),
        RestoreMode::Strict,
    )
    .unwrap();
    assert_eq!(restored.session_id(), a.session_id());
    restored
        .record_assistant(&json!({"role": "assistant", "content": "ok"}))
        .unwrap();
    assert_eq!(
        key(&mut restored, "three"),
        first,
        "the key survives a restore"
    );

    // No prefix at all: the fingerprint is the same for everyone, the key is not.
    let bare = || {
        Session::start(
            Vec::new(),
            &PromptPolicy::default(),
            SessionContext::default(),
            SessionOptions::default(),
        )
        .unwrap()
    };
    let (mut c, mut d) = (bare(), bare());
    let (rc, rd) = (
        c.turn(Extensions::new(), "hi").unwrap().routing_key(),
        d.turn(Extensions::new(), "hi").unwrap().routing_key(),
    );
    assert_ne!(rc, rd, "empty prefixes must not share a key");

    // A given id is the agent's own conversation id: the same id, the same key.
    let named = |id: &str| {
        let mut s = Session::start(
            instructions_and_todo(INSTRUCTIONS),
            &policy(),
            SessionContext::default(),
            options(DeliveryStyle::system()).with_session_id(id),
        )
        .unwrap();
        key(&mut s, "one")
    };
    assert_eq!(named("conversation-7"), named("conversation-7"));
    assert_ne!(named("conversation-7"), named("conversation-8"));
}
