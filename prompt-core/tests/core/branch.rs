//! Branches (regenerate, edit a user or an assistant message, rewind, fork), the system
//! prompt as the app's data (set every turn, edited, restored), and tool results paired with
//! the call of their own assistant message.

use prompt_core::branch::BranchError;
use prompt_core::delivery::PrefixRole;
use prompt_core::history::SystemPromptChange;
use prompt_core::node::NodeKind;
use prompt_core::snapshot::{PrefixChanges, Restored, SessionSnapshot};
use prompt_core::{
    Component, ComposeError, DeliveryStyle, Extensions, History, Placement, PrefixCheck,
    PromptPolicy, Session, SessionContext, SessionOptions,
};
use serde_json::{Value, json};

use crate::support::{Todo, id, restore_strict};

fn components() -> Vec<Component> {
    vec![
        Component::constant(id("house_rules"), "Answer in English.").placement(Placement::Prefix),
        Component::turn(id("todo_addendum"), |t| {
            t.get::<Todo>().map(|todo| todo.0.join("\n"))
        }),
    ]
}

fn policy() -> PromptPolicy {
    PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"house_rules\"]",
        "agent.toml",
        &components(),
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .ignore_warnings()
}

const STYLES: [fn() -> DeliveryStyle; 4] = [
    DeliveryStyle::system,
    || DeliveryStyle::user_reminder("system-reminder"),
    || DeliveryStyle::merged_into_user("system-reminder"),
    || DeliveryStyle::merged_into_user("system-reminder").with_prefix(PrefixRole::FirstUser),
];

fn options(style: &DeliveryStyle, prompt: &str) -> SessionOptions {
    SessionOptions::new()
        .with_delivery(style.clone())
        .with_session_id("thread-1")
        .with_system_prompt(prompt)
}

fn start(style: &DeliveryStyle, prompt: &str) -> Session {
    Session::start(
        components(),
        &policy(),
        SessionContext::default(),
        options(style, prompt),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// `s` saved as JSON text and read back, as an app keeps it between runs.
fn reloaded(s: &Session) -> SessionSnapshot {
    serde_json::from_str(&s.save().to_json()).unwrap_or_else(|e| panic!("{e}"))
}

/// `snapshot` restored Strict over this file's components and policy: the app restarted.
fn restart(snapshot: &SessionSnapshot, style: &DeliveryStyle, options: SessionOptions) -> Restored {
    restore_strict(snapshot, components(), &policy(), options)
        .unwrap_or_else(|e| panic!("{style:?}: {e}"))
}

fn todo(items: &[&str]) -> Extensions {
    Extensions::new().with(Todo(items.iter().map(|s| (*s).to_owned()).collect()))
}

fn reply(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

/// Three turns with replies; returns each request's stable bytes.
fn three_turns(s: &mut Session) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    for (i, items) in [&["a"][..], &["a", "b"], &["b"]].iter().enumerate() {
        sent.push(
            s.turn(todo(items), format!("question {i}").as_str())
                .unwrap_or_else(|e| panic!("{e}"))
                .stable_bytes(),
        );
        s.record_assistant(&reply(&format!("answer {i}")))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    sent
}

/// The node indices of the user messages.
fn user_messages(s: &Session) -> Vec<usize> {
    s.history()
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind() == NodeKind::User)
        .map(|(i, _)| i)
        .collect()
}

fn count(haystack: &[u8], needle: &str) -> usize {
    String::from_utf8_lossy(haystack).matches(needle).count()
}

#[test]
fn a_jan_style_loop_that_sets_the_system_prompt_every_turn_never_sends_it_twice() {
    for style in STYLES {
        let style = style();
        let mut s = start(&style, "You are Jan.");
        let mut previous: Option<Vec<u8>> = None;
        for turn in 0..6 {
            // The user edits the instructions once, before turn 3; the app sets the current
            // text before every turn, as Jan's core does.
            let current = if turn < 3 {
                "You are Jan."
            } else {
                "You are Jan, and terse."
            };
            let change = s.set_system_prompt(current);
            let expected = match turn {
                3 if style.role == prompt_core::delivery::UpdateRole::MergedIntoUser => {
                    SystemPromptChange::Deferred
                }
                3 => SystemPromptChange::Appended(s.history().len() - 1),
                _ => SystemPromptChange::Unchanged,
            };
            assert_eq!(change, expected, "{style:?} turn {turn}");
            assert_eq!(s.system_prompt().as_deref(), Some(current), "{style:?}");
            let request = s
                .turn(todo(&["a"]), format!("turn {turn}").as_str())
                .unwrap_or_else(|e| panic!("{e}"));
            if let Some(previous) = &previous {
                assert_eq!(
                    request.extends(previous),
                    PrefixCheck::Prefix,
                    "{style:?} turn {turn}"
                );
            }
            let bytes = request.to_bytes();
            previous = Some(request.stable_bytes());
            assert_eq!(count(&bytes, "You are Jan."), 1, "{style:?} turn {turn}");
            assert_eq!(
                count(&bytes, "You are Jan, and terse."),
                usize::from(turn >= 3),
                "{style:?} turn {turn}"
            );
            s.record_assistant(&reply("ok"))
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn the_system_prompt_before_the_first_request_is_the_frozen_prefix_for_both_apis() {
    // Through the options, or through set_system_prompt before the first request: the same
    // prefix, and both calls agree on what the current system prompt is.
    let style = DeliveryStyle::system();
    let mut by_option = start(&style, "Be brief.");
    let mut by_call = Session::start(
        components(),
        &policy(),
        SessionContext::default(),
        SessionOptions::new().with_session_id("thread-1"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        by_call.set_system_prompt("Be brief."),
        SystemPromptChange::Placed
    );
    assert_eq!(
        by_call.set_system_prompt("Be brief."),
        SystemPromptChange::Unchanged
    );
    assert_eq!(
        by_option.set_system_prompt("Be brief."),
        SystemPromptChange::Unchanged
    );
    let a = by_option
        .turn(todo(&[]), "hi")
        .unwrap_or_else(|e| panic!("{e}"))
        .to_bytes();
    let b = by_call
        .turn(todo(&[]), "hi")
        .unwrap_or_else(|e| panic!("{e}"))
        .to_bytes();
    assert_eq!(a, b);
    assert!(
        String::from_utf8_lossy(&a)
            .starts_with(r#"[{"role":"system","content":"Be brief.\n\nAnswer in English."}"#)
    );
}

#[test]
fn a_restart_with_an_edited_system_prompt_restores_strict_keeps_the_prefix_and_appends_the_edit() {
    for style in STYLES {
        let style = style();
        let mut s = start(&style, "You are Jan.");
        let sent = three_turns(&mut s);
        let snapshot = reloaded(&s);
        // The user edited the instructions while the app was closed.
        let Restored {
            session: mut restored,
            changes,
            system_prompt,
            ..
        } = restart(
            &snapshot,
            &style,
            options(&style, "You are Jan, and terse."),
        );
        assert_prefix_kept_and_prompt_appended(&style, changes.as_ref(), system_prompt.as_ref());
        assert_eq!(
            restored.prefix_fingerprint(),
            s.prefix_fingerprint(),
            "{style:?}"
        );
        assert_eq!(
            restored.system_prompt().as_deref(),
            Some("You are Jan, and terse.")
        );
        // The app goes on setting the current text every turn: nothing more is appended.
        assert_eq!(
            restored.set_system_prompt("You are Jan, and terse."),
            SystemPromptChange::Unchanged
        );
        let last = sent.last().cloned().unwrap_or_default();
        let next = restored
            .turn(todo(&["b"]), "after the restart")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(next.extends(&last), PrefixCheck::Prefix, "{style:?}");
        let bytes = next.to_bytes();
        assert_eq!(count(&bytes, "You are Jan, and terse."), 1, "{style:?}");
        // The same app restarted with the same text: nothing appended.
        let Restored { system_prompt, .. } =
            restart(&snapshot, &style, options(&style, "You are Jan."));
        assert_eq!(system_prompt, None, "{style:?}");
    }
}

/// Restored with instructions other than the saved ones: the prefix is kept and the new
/// text is appended (or held, in a merged style, for the next user message).
fn assert_prefix_kept_and_prompt_appended(
    style: &DeliveryStyle,
    changes: Option<&PrefixChanges>,
    system_prompt: Option<&SystemPromptChange>,
) {
    assert!(changes.is_none(), "{style:?}: the prefix is kept");
    assert!(
        matches!(
            system_prompt,
            Some(SystemPromptChange::Appended(_) | SystemPromptChange::Deferred)
        ),
        "{style:?}: {system_prompt:?}"
    );
}

/// A session whose instructions were edited ("You are Jan." then "You are Jan, and terse.",
/// appended), saved: the document and the bytes of the last request.
fn edited_and_saved(style: &DeliveryStyle) -> (Session, SessionSnapshot, Vec<u8>) {
    let mut s = start(style, "You are Jan.");
    three_turns(&mut s);
    assert_ne!(
        s.set_system_prompt("You are Jan, and terse."),
        SystemPromptChange::Unchanged
    );
    let last = s
        .turn(todo(&["b"]), "one more")
        .unwrap_or_else(|e| panic!("{e}"))
        .stable_bytes();
    s.record_assistant(&reply("done"))
        .unwrap_or_else(|e| panic!("{e}"));
    let snapshot = reloaded(&s);
    (s, snapshot, last)
}

/// docs/lifecycle.md, "Restoring with and without instructions": restored with no
/// `with_system_prompt`, the session keeps the current prompt it saved (here the edit) and
/// appends nothing; its next body is the one the saved session would send.
#[test]
fn restoring_without_instructions_keeps_the_saved_current_prompt_and_appends_nothing() {
    for style in STYLES {
        let style = style();
        let (mut saved, snapshot, last) = edited_and_saved(&style);
        let no_prompt = SessionOptions::new()
            .with_delivery(style.clone())
            .with_session_id("thread-1");
        let Restored {
            session: mut restored,
            changes,
            system_prompt,
            ..
        } = restart(&snapshot, &style, no_prompt);
        assert!(changes.is_none(), "{style:?}");
        assert_eq!(system_prompt, None, "{style:?}: nothing appended");
        assert_eq!(
            restored.system_prompt().as_deref(),
            Some("You are Jan, and terse."),
            "{style:?}: the saved current prompt"
        );
        let next = restored
            .turn(todo(&["b"]), "after the restart")
            .unwrap_or_else(|e| panic!("{e}"));
        let expected = saved
            .turn(todo(&["b"]), "after the restart")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(next.to_bytes(), expected.to_bytes(), "{style:?}");
        assert_eq!(next.extends(&last), PrefixCheck::Prefix, "{style:?}");
        assert_eq!(
            count(&next.to_bytes(), "You are Jan, and terse."),
            1,
            "{style:?}"
        );
    }
}

/// docs/lifecycle.md, "Restoring with and without instructions": restored with the text the
/// session started with, after an edit, the session takes it as the current instructions
/// and appends it as a new edit (the app must pass the text its user last saved).
#[test]
fn restoring_with_the_old_instructions_after_an_edit_appends_them_as_a_new_edit() {
    for style in STYLES {
        let style = style();
        let (_, snapshot, last) = edited_and_saved(&style);
        let Restored {
            session: mut restored,
            changes,
            system_prompt,
            ..
        } = restart(&snapshot, &style, options(&style, "You are Jan."));
        assert_prefix_kept_and_prompt_appended(&style, changes.as_ref(), system_prompt.as_ref());
        assert_eq!(restored.system_prompt().as_deref(), Some("You are Jan."));
        let next = restored
            .turn(todo(&["b"]), "after the restart")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(next.extends(&last), PrefixCheck::Prefix, "{style:?}");
        // Once frozen at the head, once appended again after the edit.
        assert_eq!(count(&next.to_bytes(), "You are Jan."), 2, "{style:?}");
    }
}

#[test]
fn regenerate_sends_the_last_request_again_byte_for_byte_on_a_branch() {
    for style in STYLES {
        let style = style();
        let mut s = start(&style, "You are Jan.");
        let sent = three_turns(&mut s);
        let mut branch = s.regenerate().unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(branch.session_id(), s.session_id());
        assert_eq!(branch.routing_id(), s.routing_id());
        let again = branch
            .resend(todo(&["b"]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.routing_key(), {
            let mut parent = s.clone();
            parent
                .turn(todo(&["b"]), "x")
                .unwrap_or_else(|e| panic!("{e}"))
                .routing_key()
        });
        assert_eq!(again.stable_bytes(), sent[2], "{style:?}");
        // The parent is as it was: its reply is still there.
        assert_eq!(
            s.history().nodes().last().map(|n| n.kind()),
            Some(NodeKind::Assistant)
        );
        // Resending an answered request needs a branch first.
        assert!(matches!(
            s.resend(todo(&["b"])),
            Err(ComposeError::NothingToResend { .. })
        ));
    }
}

#[test]
fn an_edit_of_user_message_k_branches_with_every_earlier_byte_as_sent() {
    for style in STYLES {
        let style = style();
        let mut s = start(&style, "You are Jan.");
        let sent = three_turns(&mut s);
        let users = user_messages(&s);
        // Edit the second question.
        let k = users[1];
        let mut branch = s.edit_user_message(k).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(branch.history().len(), k);
        assert_eq!(branch.turns(), 1);
        for (a, b) in branch.history().nodes().iter().zip(s.history().nodes()) {
            assert_eq!((a.id(), a.bytes()), (b.id(), b.bytes()), "{style:?}");
        }
        let request = branch
            .turn(todo(&["a", "b"]), "question 1, edited")
            .unwrap_or_else(|e| panic!("{e}"));
        // It extends the first request with its reply: the body sent before message k.
        assert_eq!(request.extends(&sent[0]), PrefixCheck::Prefix, "{style:?}");
        let text = String::from_utf8_lossy(&request.to_bytes()).into_owned();
        assert!(text.contains("question 1, edited"), "{style:?}");
        assert!(!text.contains("answer 1"), "{style:?}");
        assert!(matches!(
            s.edit_user_message(k + 1),
            Err(BranchError::WrongKind {
                expected: "user",
                ..
            })
        ));
    }
}

#[test]
fn an_assistant_message_edited_without_regenerating_is_a_branch_the_next_turn_goes_on_from() {
    let style = DeliveryStyle::system();
    let mut s = start(&style, "You are Jan.");
    let sent = three_turns(&mut s);
    let last = s.history().len() - 1;
    let mut branch = s
        .edit_assistant_message(last, &reply("answer 2, corrected by the user"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(branch.history().len(), s.history().len());
    let request = branch
        .turn(todo(&["b"]), "thanks")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(request.extends(&sent[2]), PrefixCheck::Prefix);
    assert!(String::from_utf8_lossy(&request.to_bytes()).contains("corrected by the user"));
    assert!(matches!(
        s.edit_assistant_message(0, &reply("x")),
        Err(BranchError::WrongKind { .. })
    ));
}

#[test]
fn rewind_to_request_n_branches_with_the_history_it_carried() {
    let style = DeliveryStyle::user_reminder("system-reminder");
    let mut s = start(&style, "You are Jan.");
    let sent = three_turns(&mut s);
    assert_eq!(
        s.checkpoints()
            .iter()
            .map(|c| c.sequence)
            .collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let mut back = s.rewind(2).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(back.checkpoints().len(), 2);
    let again = back
        .resend(todo(&["a", "b"]))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.stable_bytes(), sent[1]);
    assert!(matches!(
        s.rewind(9),
        Err(BranchError::NoSuchRequest { request: 9, .. })
    ));
    // A compaction keeps only the requests before its span.
    let mut compacted = s.clone();
    let cut = compacted.history().safe_cut(2, 2);
    compacted
        .compact(2..cut, "summary")
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(compacted.checkpoints().iter().all(|c| c.nodes <= 2));
}

#[test]
fn a_fork_has_its_own_session_id_keeps_the_routing_key_and_extends_the_parent() {
    let style = DeliveryStyle::system();
    let mut s = start(&style, "You are Jan.");
    let sent = three_turns(&mut s);
    let mut fork = s.fork().with_session_id("sub-agent-1");
    assert_eq!(fork.session_id(), "sub-agent-1");
    assert_eq!(fork.routing_id(), s.routing_id());
    let request = fork
        .turn(todo(&["b"]), "Sub-task: write the tests.")
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(request.extends(&sent[2]), PrefixCheck::Prefix);
    assert_eq!(Some(request.routing_key()), s.routing_key());
}

#[test]
fn branches_are_saved_and_restored_like_any_session() {
    for style in STYLES {
        let style = style();
        let mut s = start(&style, "You are Jan.");
        three_turns(&mut s);
        let users = user_messages(&s);
        let mut branch = s
            .edit_user_message(users[2])
            .unwrap_or_else(|e| panic!("{e}"));
        let snapshot = reloaded(&branch);
        let Restored {
            session: mut restored,
            ..
        } = restart(&snapshot, &style, options(&style, "You are Jan."));
        assert_eq!(restored.session_id(), branch.session_id());
        assert_eq!(restored.routing_id(), s.routing_id());
        assert_eq!(
            restored
                .turn(todo(&["c"]), "edited")
                .unwrap_or_else(|e| panic!("{e}"))
                .to_bytes(),
            branch
                .turn(todo(&["c"]), "edited")
                .unwrap_or_else(|e| panic!("{e}"))
                .to_bytes(),
            "{style:?}"
        );
    }
}

/// An assistant message with tool calls, its ids as given.
fn calls(ids: &[&str]) -> String {
    let calls: Vec<String> = ids
        .iter()
        .map(|id| format!(r#"{{"id":"{id}","type":"function","function":{{"name":"read","arguments":"{{}}"}}}}"#))
        .collect();
    format!(
        r#"{{"role":"assistant","content":null,"tool_calls":[{}]}}"#,
        calls.join(",")
    )
}

fn result(id: &str) -> String {
    format!(r#"{{"role":"tool","tool_call_id":"{id}","content":"ok"}}"#)
}

#[test]
fn tool_results_pair_with_the_call_of_their_own_assistant_message_when_ids_repeat() {
    // Engines that number calls per message reuse `call_0` every turn. Three rounds of
    // user, calls, result, reply: 12 nodes.
    let mut h = History::new(DeliveryStyle::system());
    for round in 0..3 {
        h.append_user(&format!("round {round}"))
            .unwrap_or_else(|e| panic!("{e}"));
        h.append_raw(
            prompt_core::node::Producer::Assistant,
            NodeKind::Assistant,
            &calls(&["call_0"]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        h.append_raw(
            prompt_core::node::Producer::Tool,
            NodeKind::Tool,
            &result("call_0"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        h.append_raw(
            prompt_core::node::Producer::Assistant,
            NodeKind::Assistant,
            r#"{"role":"assistant","content":"done"}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(h.len(), 12);
    // Before: the third result was paired with the first `call_0` (node 1), so every cut
    // after node 1 "separated" it, and safe_cut(0, 5) returned 1.
    assert_eq!(h.safe_cut(0, 5), 7);
    assert_eq!(h.safe_cut(0, 4), 8);
    assert!(h.clone().compact(0..8, "rounds 0 and 1").is_ok());
    // A span that does separate a call from its result is still refused.
    assert!(h.clone().compact(0..6, "x").is_err());
}

#[test]
fn recording_the_results_of_a_thousand_parallel_calls_keeps_them_paired() {
    let mut s = start(&DeliveryStyle::system(), "You are Jan.");
    s.turn(todo(&[]), "run them all")
        .unwrap_or_else(|e| panic!("{e}"));
    let ids: Vec<String> = (0..1000).map(|i| format!("call_{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    s.record_assistant_raw(&calls(&refs))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.open_tool_calls().len(), 1000);
    for id in ids.iter().rev() {
        s.record_tool_raw(&result(id))
            .unwrap_or_else(|e| panic!("{e}"));
    }
    assert!(s.open_tool_calls().is_empty());
    assert!(matches!(
        s.record_tool_raw(&result("call_7")),
        Err(ComposeError::UnknownToolCall { .. })
    ));
    assert!(s.continuation(todo(&[])).is_ok());
}
