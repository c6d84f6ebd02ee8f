//! `saved_session`: saved sessions as a file system hands them back: arbitrary bytes, and
//! real documents edited field by field and then resealed (the seals are content-derived,
//! so a program forging a document can recompute them), so the checks behind the seals are
//! reached too.

use std::sync::OnceLock;

use prompt_core::adopt::AdoptOptions;
use prompt_core::delivery::PrefixRole;
use prompt_core::node::Producer;
use prompt_core::placement::Placement;
use prompt_core::session::ToolResult;
use prompt_core::{
    Component, DeliveryStyle, Extensions, PromptPolicy, RestoreMode, Restored, Session,
    SessionContext, SessionOptions, SessionSnapshot,
};
use serde_json::{Value, json};

use crate::shared::{Program, id};

struct Todo(Vec<String>);

fn components() -> Vec<Component> {
    vec![
        Component::constant(id("house_rules"), "Be careful with files.")
            .placement(Placement::Prefix),
        Component::turn(id("todo_addendum"), |t| {
            t.get::<Todo>().map(|todo| todo.0.join("\n"))
        }),
    ]
}

fn policy() -> PromptPolicy {
    match PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"house_rules\"]",
        "agent.toml",
        &components(),
    ) {
        Ok(loaded) => loaded.ignore_warnings(),
        Err(e) => panic!("the fixed policy does not load: {e}"),
    }
}

fn styles() -> [DeliveryStyle; 2] {
    [
        DeliveryStyle::system(),
        DeliveryStyle::merged_into_user("system-reminder").with_prefix(PrefixRole::FirstUser),
    ]
}

fn options(style: &DeliveryStyle) -> SessionOptions {
    SessionOptions::new()
        .with_delivery(style.clone())
        .with_session_id("thread-7")
}

fn todo(items: &[&str]) -> Extensions {
    Extensions::new().with(Todo(items.iter().map(|s| (*s).to_owned()).collect()))
}

fn ok<T, E: std::fmt::Display>(result: Result<T, E>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("building the base documents: {what}: {e}"))
}

/// A saved document, its session's delivery style, and the next request the session that
/// saved it sends: what the document, unedited, must restore into.
struct Base {
    style: DeliveryStyle,
    document: Value,
    next: Option<Vec<u8>>,
}

impl Base {
    fn of(style: &DeliveryStyle, session: &Session) -> Self {
        Self {
            style: style.clone(),
            document: ok(
                serde_json::from_str(&session.save().to_json()),
                "the saved document as a value",
            ),
            next: next_turn(&mut session.clone()),
        }
    }
}

/// The base documents: one per delivery style of a session that did a bit of everything a
/// document records (turns, a tool round, a system prompt change, a removal, a compaction,
/// requests sent and checkpoints); then the shapes fuzzing found lost or refused: a session
/// saved before its first request with a system prompt set (it was saved without it), and
/// an adopted merged-style conversation whose user message is only a reminder (its saved
/// document was refused).
fn base_documents() -> &'static [Base] {
    static DOCUMENTS: OnceLock<Vec<Base>> = OnceLock::new();
    DOCUMENTS.get_or_init(|| {
        let mut bases: Vec<Base> = styles()
            .iter()
            .map(|style| {
                let mut s = ok(
                    Session::start(
                        components(),
                        &policy(),
                        SessionContext::default(),
                        options(style).with_system_prompt("You are a coding agent."),
                    ),
                    "start",
                );
                ok(s.turn(todo(&["a"]), "Read main.rs").map(drop), "turn 1");
                ok(
                    s.record_assistant(&json!({"role": "assistant", "content": null,
                        "tool_calls": [{"id": "call_0", "type": "function",
                        "function": {"name": "read_file", "arguments": "{}"}}]})),
                    "tool call",
                );
                ok(
                    s.record_tool(&ToolResult::text("call_0", "fn main() {}")),
                    "tool result",
                );
                ok(s.continuation(todo(&["a", "b"])).map(drop), "continuation");
                ok(
                    s.record_assistant(&json!({"role": "assistant", "content": "Done."})),
                    "reply",
                );
                s.set_system_prompt("You are a terse coding agent.");
                ok(s.turn(todo(&["b"]), "And lib.rs?").map(drop), "turn 2");
                ok(
                    s.record_assistant(&json!({"role": "assistant", "content": "Empty."})),
                    "reply 2",
                );
                s.remove_by_producer(&Producer::Component(id("todo_addendum")));
                let cut = s.history().safe_cut(0, 3);
                assert!(cut > 0, "the base session has something to compact");
                ok(s.compact(0..cut, "Read main.rs.").map(drop), "compact");
                ok(s.turn(todo(&[]), "Thanks").map(drop), "turn 3");
                Base::of(style, &s)
            })
            .collect();
        let style = DeliveryStyle::system();
        let mut fresh = ok(
            Session::start(
                components(),
                &policy(),
                SessionContext::default(),
                options(&style),
            ),
            "start",
        );
        fresh.set_system_prompt("You are a coding agent.");
        bases.push(Base::of(&style, &fresh));
        let style = DeliveryStyle::merged_into_user("system-reminder");
        let (adopted, _) = ok(
            Session::adopt(
                components(),
                &policy(),
                SessionContext::default(),
                options(&style),
                r#"[{"role":"system","content":"Be careful with files."},{"role":"user","content":"<system-reminder from=\"todo_addendum\">\n- a\n</system-reminder>"},{"role":"user","content":"hi"},{"role":"assistant","content":"Hello."}]"#,
                &AdoptOptions::default(),
            ),
            "adopt",
        );
        bases.push(Base::of(&style, &adopted));
        bases
    })
}

/// Reads bytes as a small program of edits.
struct Edits<'a>(Program<'a>);

impl Edits<'_> {
    fn byte(&mut self) -> Option<u8> {
        self.0.byte()
    }

    fn text(&mut self) -> String {
        self.0.text(64)
    }

    /// A value a counter, index, string or message field might be given.
    fn value(&mut self) -> Value {
        match self.byte().unwrap_or(0) % 12 {
            0 => json!(0),
            1 => json!(1),
            2 => json!(u64::MAX),
            3 => json!(u64::MAX - 1),
            4 => json!(u64::from(self.byte().unwrap_or(0))),
            5 => json!(1u64 << 40),
            6 => Value::Null,
            7 => json!(self.text()),
            8 => json!(format!(
                r#"{{"role":"user","content":{}}}"#,
                Value::from(self.text())
            )),
            9 => json!(format!(
                r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":{},"type":"function","function":{{"name":"f","arguments":"{{}}"}}}}]}}"#,
                Value::from(self.text())
            )),
            10 => json!([]),
            _ => json!(true),
        }
    }

    /// Walks from the root to a value the next bytes pick, and edits it.
    fn apply(&mut self, root: &mut Value) {
        // The walk reads; its end, a JSON pointer, is then edited.
        let mut pointer = String::new();
        let mut at = &*root;
        while let Some(step) = self.byte() {
            // A set high bit stops the walk here.
            if step & 0x80 != 0 {
                break;
            }
            let pick = usize::from(step);
            let (segment, next) = match at {
                Value::Object(map) if !map.is_empty() => {
                    let Some((key, next)) = map.iter().nth(pick % map.len()) else {
                        break;
                    };
                    (key.replace('~', "~0").replace('/', "~1"), next)
                }
                Value::Array(items) if !items.is_empty() => {
                    let index = pick % items.len();
                    (index.to_string(), &items[index])
                }
                _ => break,
            };
            pointer.push('/');
            pointer.push_str(&segment);
            at = next;
        }
        let Some(at) = root.pointer_mut(&pointer) else {
            panic!("the walk's own pointer {pointer:?} names nothing");
        };
        let op = self.byte().unwrap_or(0);
        match (op % 4, at) {
            (1, Value::Array(items)) if !items.is_empty() => {
                let i = usize::from(self.byte().unwrap_or(0)) % items.len();
                items.remove(i);
            }
            (2, Value::Array(items)) if !items.is_empty() => {
                let i = usize::from(self.byte().unwrap_or(0)) % items.len();
                let j = usize::from(self.byte().unwrap_or(0)) % (items.len() + 1);
                let copy = items[i].clone();
                items.insert(j, copy);
            }
            (3, Value::Array(items)) if items.len() > 1 => {
                let i = usize::from(self.byte().unwrap_or(0)) % items.len();
                let j = usize::from(self.byte().unwrap_or(0)) % items.len();
                items.swap(i, j);
            }
            (_, at) => *at = self.value(),
        }
    }
}

fn restore(
    snapshot: &SessionSnapshot,
    style: &DeliveryStyle,
    mode: RestoreMode,
) -> Option<Restored> {
    Session::restore(
        snapshot,
        components(),
        &policy(),
        SessionContext::default(),
        options(style),
        mode,
    )
    .ok()
}

/// What the next turn sends (the unanswered request again, while the last one has no
/// reply), or that it was refused.
fn next_turn(session: &mut Session) -> Option<Vec<u8>> {
    let request = if session.unanswered_request().is_some() {
        session.resend(todo(&["c"]))
    } else {
        session.turn(todo(&["c"]), "next")
    };
    request
        .ok()
        .map(|request| request.chunks().flatten().copied().collect())
}

/// A restored session holds: saved again, it restores (a valid document never fails to
/// restore) into a session whose next request is the same bytes; its branches and
/// requests are made or refused, never a panic.
fn check_restored(restored: Restored, style: &DeliveryStyle) {
    let mut session = restored.session;
    let again = session.save();
    let reread = match SessionSnapshot::from_json(again.to_json().as_bytes()) {
        Ok(snapshot) => snapshot,
        Err(e) => panic!("a saved document does not read back: {e}"),
    };
    assert_eq!(reread, again, "a saved document reads back as saved");
    let Some(second) = restore(&again, style, RestoreMode::Strict) else {
        let error = Session::restore(
            &again,
            components(),
            &policy(),
            SessionContext::default(),
            options(style),
            RestoreMode::Strict,
        )
        .err();
        panic!("a document saved from a restored session is refused: {error:?}");
    };
    let mut second = second.session;
    for request in 0..=session.requests().min(4) {
        let _ = session.rewind(request).map(|mut b| next_turn(&mut b));
    }
    let _ = session
        .regenerate()
        .map(|mut b| b.resend(Extensions::new()).is_ok());
    for index in 0..session.history().nodes().len().min(8) {
        let _ = session
            .edit_user_message(index)
            .map(|mut b| next_turn(&mut b));
    }
    assert_eq!(
        next_turn(&mut session),
        next_turn(&mut second),
        "a restored session and its save restored again send the same next request"
    );
    // The other requests a session makes, on the copy restored again.
    let _ = second.continuation(Extensions::new()).is_ok();
    let _ = second.resend(Extensions::new()).is_ok();
}

/// The first byte picks the input: 0, the rest as a document's bytes; 1, the same, resealed
/// before the restore; else edits (the rest of the bytes) to a base document, resealed (no
/// edit: the document must restore into the session that saved it).
pub fn saved_session(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let styles = styles();
    let mut style = &styles[usize::from(mode / 3) % styles.len()];
    let snapshot = match mode % 3 {
        0 | 1 => {
            let Ok(mut snapshot) = SessionSnapshot::from_json(rest) else {
                return;
            };
            if mode % 3 == 1 {
                snapshot.reseal();
            }
            snapshot
        }
        _ => {
            let bases = base_documents();
            let base = &bases[usize::from(mode / 3) % bases.len()];
            style = &base.style;
            if rest.is_empty() {
                check_base(base);
            }
            let mut document = base.document.clone();
            let mut edits = Edits(Program::new(rest));
            while !edits.0.is_empty() {
                edits.apply(&mut document);
            }
            let Ok(mut snapshot) = serde_json::from_value::<SessionSnapshot>(document) else {
                return;
            };
            snapshot.reseal();
            snapshot
        }
    };
    for mode in [RestoreMode::Strict, RestoreMode::NewEpoch] {
        if let Some(restored) = restore(&snapshot, style, mode) {
            check_restored(restored, style);
        }
    }
}

/// A base document, unedited, restores Strict into the session that saved it: the same
/// next request.
fn check_base(base: &Base) {
    let snapshot: SessionSnapshot = match serde_json::from_value(base.document.clone()) {
        Ok(snapshot) => snapshot,
        Err(e) => panic!("a saved document does not read back: {e}"),
    };
    let restored = match Session::restore(
        &snapshot,
        components(),
        &policy(),
        SessionContext::default(),
        options(&base.style),
        RestoreMode::Strict,
    ) {
        Ok(restored) => restored,
        Err(e) => panic!("a saved document is refused: {e}"),
    };
    let mut session = restored.session;
    let text = |bytes: Option<Vec<u8>>| bytes.map(|b| String::from_utf8_lossy(&b).into_owned());
    assert_eq!(
        text(next_turn(&mut session)),
        text(base.next.clone()),
        "a restored session sends the request the session that saved it would have sent"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_documents_restore_and_hold_the_invariants() {
        for (index, base) in base_documents().iter().enumerate() {
            check_base(base);
            let snapshot: SessionSnapshot = serde_json::from_value(base.document.clone())
                .unwrap_or_else(|e| panic!("base document {index}: {e}"));
            let restored = restore(&snapshot, &base.style, RestoreMode::Strict)
                .unwrap_or_else(|| panic!("base document {index} is refused"));
            check_restored(restored, &base.style);
        }
    }

    #[test]
    fn known_inputs_hold_the_invariants() {
        let text = base_documents()[0].document.to_string();
        for input in [
            &b""[..],
            b"\x00{}",
            b"\x01{}",
            b"\x02",
            b"\x02\x05\x80\x02",
            b"\x02\x85\x00\x07\x03abc",
            b"\x05\x06\x01\x80\x01\x00",
            // The base documents unedited: the set-system-prompt-before-the-first-request
            // one and the adopted merged-style one restore into their sessions' requests.
            b"\x08",
            b"\x0b",
            // The same, edited (seeds for the fuzzer to go on from).
            b"\x08\x00\x80\x07\x05Hello",
            b"\x0b\x02\x00\x80\x00",
        ] {
            saved_session(input);
        }
        for mode in [0u8, 1, 3, 4] {
            let mut input = vec![mode];
            input.extend_from_slice(text.as_bytes());
            saved_session(&input);
        }
    }
}
