//! A session carried across launches: what one engine keeps of a request
//! ([`Engine::last_record`]) restored into the engine of a later launch ([`Engine::restore`]).

use prompt_engine::{Analysis, Block, Canonical, CauseKind, Engine, EngineConfig, Exchange};

/// A Chat Completions request of session `s-1` in `launch` with this system prompt and
/// these user turns (each answered by `ok`).
fn turn(system: &str, users: &[&str]) -> String {
    let mut messages = vec![serde_json::json!({"role": "system", "content": system})];
    for (i, u) in users.iter().enumerate() {
        if i > 0 {
            messages.push(serde_json::json!({"role": "assistant", "content": "ok"}));
        }
        messages.push(serde_json::json!({"role": "user", "content": u}));
    }
    serde_json::json!({"model": "gpt-4o", "messages": messages}).to_string()
}

fn exchange<'a>(body: &'a str, launch: &'a str, ts: f64) -> Exchange<'a> {
    Exchange {
        path: Some("/v1/chat/completions"),
        session: Some("s-1"),
        launch: Some(launch),
        ts: Some(ts),
        ..Exchange::body(body.as_bytes())
    }
}

fn count(c: &Canonical<'_>, b: &Block) -> u32 {
    u32::try_from(c.compared_text(b).len() / 4).unwrap_or(u32::MAX)
}

/// Launch 1 analyses `first` and keeps its record; launch 2, a new engine, restores it and
/// analyses `resumed`.
fn across_launches(first: &str, resumed: &str) -> Analysis {
    let mut one = Engine::new(EngineConfig::default());
    let seen = one
        .analyze(&exchange(first, "launch-1", 1_796_400_000.0), 1, &mut count)
        .unwrap_or_else(|e| panic!("{e}"));
    let record = one
        .last_record(&seen, None)
        .unwrap_or_else(|| panic!("launch 1 keeps a record of its request"));
    let mut two = Engine::new(EngineConfig::default());
    two.restore(record, 1, true, None);
    two.analyze(
        &exchange(resumed, "launch-2", 1_796_400_060.0),
        2,
        &mut count,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_resumed_request_is_compared_with_its_session_s_request_of_the_earlier_launch() {
    let system = "You are a careful coding agent. ".repeat(200);
    let first = turn(&system, &["list the files"]);
    let resumed = turn(&system, &["list the files", "now read notes.txt"]);
    let v = across_launches(&first, &resumed);
    let p = v
        .predecessor
        .as_ref()
        .unwrap_or_else(|| panic!("a predecessor: {v:?}"));
    assert_eq!(p.tag, 1);
    assert!(p.earlier_launch, "{p:?}");
    assert_eq!(v.cause, None, "append-only across launches: {v:?}");
    assert_eq!(v.tokens_lost, 0);
}

#[test]
fn a_resumed_request_whose_candidates_share_nothing_is_not_a_break() {
    // The same session, a new process, a request sharing no element with the one held: a
    // new conversation (another system prompt, another first message), never a break
    // blamed on the earlier launch's request.
    let first = turn(
        &"You are a careful coding agent. ".repeat(200),
        &["list the files"],
    );
    let resumed = turn(
        &"You summarise conversations into titles. ".repeat(150),
        &["title for: fix the build"],
    );
    let v = across_launches(&first, &resumed);
    assert!(v.predecessor.is_none(), "{:?}", v.predecessor);
    assert!(v.session_seen, "its session was seen in the earlier launch");
    assert!(
        v.cause
            .as_ref()
            .is_none_or(|c| c.kind() == CauseKind::ColdStart),
        "{:?}",
        v.cause
    );
    assert_eq!(v.tokens_lost, 0);
    // The same pair where one element is shared is compared (the test can fail).
    let resumed_sharing = turn(
        &"You are a careful coding agent. ".repeat(200),
        &["title for: fix the build"],
    );
    let v = across_launches(&first, &resumed_sharing);
    assert!(
        v.predecessor.as_ref().is_some_and(|p| p.earlier_launch),
        "{:?}",
        v.predecessor
    );
}
