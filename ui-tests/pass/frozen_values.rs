//! A prefix writer reads what was frozen into the `SessionContext` when the session started
//! (and values fixed when the program was built); writers in the tail may read the clock.
#![deny(warnings, missing_docs)]

#[path = "../support/registered.rs"]
mod registered;

use std::time::{SystemTime, UNIX_EPOCH};

use prompt_registry::__private::Render;
use prompt_registry::{Extensions, SessionContext, TurnContext, prompt_component};

/// The date, read once by the agent when the session starts.
pub struct SessionDate(pub String);

/// The date the session started.
#[prompt_component(placement = "prefix")]
fn session_date(session: &SessionContext) -> Option<String> {
    let date = session.get::<SessionDate>()?;
    Some(format!(
        "The session started on {} ({} {}).",
        date.0,
        env!("CARGO_PKG_NAME"),
        option_env!("NO_SUCH_VARIABLE_AT_BUILD").unwrap_or("-")
    ))
}

/// Seconds since the epoch, each turn.
#[prompt_component(placement = "tail", persist = "ephemeral")]
fn clock(_turn: &TurnContext) -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or_default();
    format!("{seconds}")
}

/// When the session was rendered, in the tail.
#[prompt_component(placement = "tail")]
fn rendered_at(_session: &SessionContext) -> String {
    format!("{:?}", std::time::Instant::now())
}

fn main() {
    let session = SessionContext::new(Extensions::new().with(SessionDate("2026-12-04".into())));
    let date = registered::get(file!(), "session_date");
    let Render::Session(render) = date.render else {
        panic!("not a session renderer")
    };
    let expected = format!(
        "The session started on 2026-12-04 ({} -).",
        env!("CARGO_PKG_NAME")
    );
    assert_eq!(render(&session), Some(expected));

    let values = Extensions::new();
    let turn = TurnContext::new(&session, &values, 1);
    let Render::Turn(clock) = registered::get(file!(), "clock").render else {
        panic!("not a turn renderer")
    };
    assert!(clock(&turn).is_some_and(|seconds| !seconds.is_empty()));
    assert!(matches!(
        registered::get(file!(), "rendered_at").render,
        Render::Session(_)
    ));
}
