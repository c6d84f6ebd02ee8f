//! `wire_bodies`: arbitrary bytes as two request bodies for the guard, and as a reply of
//! every API, recorded into a session whose next body must still compose and extend the
//! previous one.

use prompt_core::profile::Profile;
use prompt_core::session::ToolResult;
use prompt_core::{ApiKind, Extensions, PromptPolicy, Session, SessionContext, SessionOptions};
use prompt_wire::{Verdict, Wire, WireOptions, compare, read_reply};
use serde_json::json;

/// Separates the two bodies given to the guard: a control character, which valid JSON never
/// holds unescaped.
const SEPARATOR: u8 = 0x1e;

const APIS: [ApiKind; 5] = [
    ApiKind::OpenAi,
    ApiKind::OpenAiResponses,
    ApiKind::Anthropic,
    ApiKind::Gemini,
    ApiKind::LlamaCpp,
];

/// Invariants: no panic; a body compared with itself extends it; a break's offset lies in
/// the later body; an error's message stays short. A reply accepted by the parser is
/// recorded, and the next body composes, is JSON, and extends the previous body's stable
/// part (for Anthropic, ignoring breakpoints).
pub fn wire_bodies(data: &[u8]) {
    let (earlier, later) = match data.iter().position(|&b| b == SEPARATOR) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, data),
    };
    for body in [earlier, later] {
        match compare(body, body) {
            Ok(verdict) => assert!(
                verdict.extends(),
                "a body does not extend itself: {verdict:?}"
            ),
            Err(e) => short(&e.to_string()),
        }
    }
    match compare(earlier, later) {
        Ok(Verdict::Breaks(b)) => {
            assert!(b.divergence.byte_offset <= later.len(), "{b:?}");
            short(&b.to_string());
        }
        Ok(Verdict::Extends { .. }) => {}
        Err(e) => short(&e.to_string()),
    }
    for api in APIS {
        match read_reply(api, data) {
            Ok(_) => record(api, data, None),
            Err(e) => short(&e.to_string()),
        }
    }
    // The profiles that change the layout: Opus 4.8's system messages, DeepSeek's later
    // system messages as user messages, Gemini 3's signatures; with diagnostics on.
    for (api, model) in [
        (ApiKind::Anthropic, "claude-opus-4-8"),
        (ApiKind::OpenAi, "deepseek-chat"),
        (ApiKind::Gemini, "gemini-3-pro-preview"),
    ] {
        if read_reply(api, data).is_ok() {
            let profile = Profile::lookup(api, model, None).with_cache_diagnostics();
            record(api, data, Some(&profile));
        }
    }
}

fn short(message: &str) {
    assert!(
        message.len() <= 2048,
        "a {}-byte diagnostic: {message:.200}",
        message.len()
    );
}

/// Records `reply` into a fresh session of `api` (under `profile`), answers its tool calls,
/// and checks the next body.
fn record(api: ApiKind, reply: &[u8], profile: Option<&Profile>) {
    let (mut session, mut wire, first) = fresh_with(api, profile);
    let Ok(read) = wire.record_reply(&mut session, reply) else {
        // The session may refuse what the parser accepts (a role it does not take).
        return;
    };
    next_body_extends(api, &mut session, &mut wire, &first, &read.tool_calls);
}

/// A fresh session of `api` after its first turn, its wire, and that turn's stable body.
pub(crate) fn fresh(api: ApiKind) -> (Session, Wire, Vec<u8>) {
    fresh_with(api, None)
}

/// [`fresh`], under `profile` when one is given.
fn fresh_with(api: ApiKind, profile: Option<&Profile>) -> (Session, Wire, Vec<u8>) {
    let (options, session_options) = match profile {
        Some(p) => (WireOptions::for_profile(p), SessionOptions::for_profile(p)),
        None => (
            WireOptions::new("m"),
            prompt_wire::session_options(api, prompt_core::tools::ToolSet::empty()),
        ),
    };
    let Ok(mut wire) = Wire::new(api, options.param("max_tokens", &json!(16))) else {
        panic!("valid options refused");
    };
    let Ok(mut session) = Session::start(
        Vec::new(),
        &PromptPolicy::default(),
        SessionContext::default(),
        session_options,
    ) else {
        panic!("an empty session refused");
    };
    let first = match session.turn(Extensions::new(), "hi") {
        Ok(request) => match wire.body(&request) {
            Ok(body) => body.stable_body(),
            Err(e) => panic!("{api:?}: the first body: {e}"),
        },
        Err(e) => panic!("{api:?}: the first turn: {e}"),
    };
    (session, wire, first)
}

/// After a recorded reply: answers its `calls`, and checks that the next body composes, is
/// JSON, and extends `first` (for Anthropic, ignoring breakpoints).
pub(crate) fn next_body_extends(
    api: ApiKind,
    session: &mut Session,
    wire: &mut Wire,
    first: &[u8],
    calls: &[prompt_wire::ToolCall],
) {
    for call in calls {
        let _ = session.record_tool(&ToolResult::text(&call.id, "ok"));
    }
    let request = if session.open_tool_calls().is_empty() && !calls.is_empty() {
        session.continuation(Extensions::new())
    } else {
        session.turn(Extensions::new(), "next")
    };
    let Ok(request) = request else {
        return;
    };
    let next = match wire.body(&request) {
        Ok(body) => body.to_bytes(),
        Err(e) => panic!("{api:?}: a recorded reply breaks the next body: {e}"),
    };
    if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&next) {
        panic!("{api:?}: the next body is not JSON ({e})");
    }
    match compare(first, &next) {
        Ok(verdict) => assert!(verdict.extends(), "{api:?}: {verdict:?}"),
        Err(e) => panic!("{api:?}: the guard refuses library bodies: {e}"),
    }
}
