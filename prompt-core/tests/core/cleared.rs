//! A tail writer that stops having something to say: with a `cleared` text it says so once
//! (and again only after it has had text again); without one its last text stands. The
//! state survives save and restore.

use prompt_core::delivery::PrefixRole;
use prompt_core::node::Producer;
use prompt_core::snapshot::SessionSnapshot;
use prompt_core::{
    Component, DeliveryStyle, Extensions, Persist, Placement, Session, SessionContext,
    SessionOptions,
};
use serde_json::json;

use crate::support::{Todo, id, instructions_in_prefix, restore_unchanged};

const CLEARED: &str = "No open todo items.";

/// The todo writer: its items, `None` when there are none; `cleared` as given.
fn components(cleared: Option<&'static str>, persist: Persist) -> Vec<Component> {
    let todo = Component::turn(id("todo_addendum"), |t| {
        t.get::<Todo>()
            .filter(|todo| !todo.0.is_empty())
            .map(|todo| format!("Open todo items: {}", todo.0.join(", ")))
    })
    .placement(Placement::Tail)
    .persist(persist)
    .describe("open todo items");
    vec![
        Component::constant(id("assistant_instructions"), "You are Jan.")
            .placement(Placement::Prefix)
            .describe("who the assistant is"),
        match cleared {
            Some(text) => todo.cleared(text),
            None => todo,
        },
    ]
}

fn options(style: &DeliveryStyle) -> SessionOptions {
    SessionOptions::new()
        .with_delivery(style.clone())
        .with_session_id("jan-todo")
}

fn start(style: &DeliveryStyle, cleared: Option<&'static str>, persist: Persist) -> Session {
    let components = components(cleared, persist);
    let policy = instructions_in_prefix(&components);
    Session::start(
        components,
        &policy,
        SessionContext::default(),
        options(style),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn todo(items: &[&str]) -> Extensions {
    Extensions::new().with(Todo(items.iter().map(|s| (*s).to_owned()).collect()))
}

/// Every text the todo writer delivered into the history, in order (own nodes and texts
/// merged into user messages).
fn delivered(s: &Session) -> Vec<String> {
    let producer = Producer::Component(id("todo_addendum"));
    let mut out = Vec::new();
    for node in s.history().nodes() {
        if node.producer() == &producer {
            out.extend(node.text().map(str::to_owned));
        }
        out.extend(
            node.merged_updates()
                .iter()
                .filter(|(p, _)| p == &producer)
                .map(|(_, text)| text.to_string()),
        );
    }
    out
}

/// A user turn with these todo items, answered.
fn turn(s: &mut Session, items: &[&str]) {
    s.turn(todo(items), "next?")
        .unwrap_or_else(|e| panic!("{e}"));
    s.record_assistant(&json!({"role": "assistant", "content": "ok"}))
        .unwrap_or_else(|e| panic!("{e}"));
}

const STYLES: [fn() -> DeliveryStyle; 4] = [
    DeliveryStyle::system,
    || DeliveryStyle::user_reminder("system-reminder"),
    || DeliveryStyle::merged_into_user("system-reminder"),
    || DeliveryStyle::merged_into_user("system-reminder").with_prefix(PrefixRole::FirstUser),
];

#[test]
fn a_tail_writer_that_stops_having_text_delivers_its_cleared_text_once() {
    for style in STYLES.map(|s| s()) {
        let mut s = start(&style, Some(CLEARED), Persist::History);
        // Nothing to say from the start: nothing to clear.
        turn(&mut s, &[]);
        assert!(delivered(&s).is_empty(), "{style:?}");
        turn(&mut s, &["buy milk"]);
        turn(&mut s, &[]);
        turn(&mut s, &[]);
        turn(&mut s, &[]);
        assert_eq!(
            delivered(&s),
            ["Open todo items: buy milk", CLEARED],
            "{style:?}: the cleared text once, then nothing"
        );
        // Text again, then none again: cleared again, once.
        turn(&mut s, &["call mum"]);
        turn(&mut s, &[]);
        turn(&mut s, &[]);
        assert_eq!(
            delivered(&s),
            [
                "Open todo items: buy milk",
                CLEARED,
                "Open todo items: call mum",
                CLEARED
            ],
            "{style:?}"
        );
    }
}

#[test]
fn without_cleared_a_tail_writer_that_returns_none_leaves_its_last_text_standing() {
    for style in STYLES.map(|s| s()) {
        let mut s = start(&style, None, Persist::History);
        turn(&mut s, &["buy milk"]);
        turn(&mut s, &[]);
        turn(&mut s, &[]);
        assert_eq!(delivered(&s), ["Open todo items: buy milk"], "{style:?}");
    }
}

#[test]
fn an_ephemeral_tail_writer_has_no_last_text_to_clear() {
    let style = DeliveryStyle::system();
    let mut s = start(&style, Some(CLEARED), Persist::Ephemeral);
    let first = s
        .turn(todo(&["buy milk"]), "next?")
        .unwrap_or_else(|e| panic!("{e}"))
        .to_bytes();
    assert!(String::from_utf8_lossy(&first).contains("buy milk"));
    s.record_assistant(&json!({"role": "assistant", "content": "ok"}))
        .unwrap_or_else(|e| panic!("{e}"));
    let second = s
        .turn(todo(&[]), "next?")
        .unwrap_or_else(|e| panic!("{e}"))
        .to_bytes();
    assert!(!String::from_utf8_lossy(&second).contains(CLEARED));
}

/// Saves `s` as JSON text and restores it Strict.
fn round_trip(s: &Session, style: &DeliveryStyle) -> Session {
    let snapshot =
        SessionSnapshot::from_json(s.save().to_json().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let components = components(Some(CLEARED), Persist::History);
    let policy = instructions_in_prefix(&components);
    restore_unchanged(&snapshot, components, &policy, options(style))
}

#[test]
fn whether_a_tail_writer_had_text_survives_save_and_restore() {
    for style in STYLES.map(|s| s()) {
        // Saved while the writer had text: restored, it clears.
        let mut s = start(&style, Some(CLEARED), Persist::History);
        turn(&mut s, &["buy milk"]);
        let mut restored = round_trip(&s, &style);
        turn(&mut restored, &[]);
        assert_eq!(
            delivered(&restored),
            ["Open todo items: buy milk", CLEARED],
            "{style:?}"
        );
        // Saved after it cleared: restored, it says nothing more.
        let mut again = round_trip(&restored, &style);
        turn(&mut again, &[]);
        assert_eq!(
            delivered(&again),
            ["Open todo items: buy milk", CLEARED],
            "{style:?}"
        );
        // And the restored sessions send what the original would have.
        turn(&mut s, &[]);
        turn(&mut s, &[]);
        let next = |s: &mut Session| {
            s.turn(todo(&[]), "done?")
                .unwrap_or_else(|e| panic!("{e}"))
                .to_bytes()
        };
        assert_eq!(next(&mut s), next(&mut again), "{style:?}");
    }
}
