//! The agent loop end to end (docs/lifecycle.md): a turn, a tool call and its continuation,
//! a compaction, save and resume; against the local llama.cpp server when one is running
//! (`scripts/llama-server.sh start`), else composing the same requests without sending them.
//!
//! `cargo run -p prompt-llama --example agent_loop`

use std::error::Error;

use prompt_core::snapshot::{RestoreMode, SessionSnapshot};
use prompt_core::{
    Component, ComponentId, Extensions, Placement, PromptPolicy, Request, Session, SessionContext,
    SessionOptions,
};
use prompt_llama::{ChatOptions, LlamaClient, ServerLocation, locate_server};
use serde_json::json;

struct Todo(Vec<String>);

fn components() -> Result<Vec<Component>, Box<dyn Error>> {
    Ok(vec![
        Component::constant(
            ComponentId::new("assistant_instructions")?,
            "You are a careful coding assistant. Answer in one sentence.",
        )
        .placement(Placement::Prefix),
        Component::turn(ComponentId::new("todo_addendum")?, |turn| {
            turn.get::<Todo>()
                .map(|todo| format!("Open tasks: {}", todo.0.join("; ")))
        }),
    ])
}

fn todo(items: &[&str]) -> Extensions {
    Extensions::new().with(Todo(items.iter().map(|s| (*s).to_owned()).collect()))
}

/// Sends `request` when a server is running; returns the reply and what the server reused.
fn send(
    server: Option<&LlamaClient>,
    label: &str,
    request: &Request<'_>,
) -> Result<String, Box<dyn Error>> {
    let bytes = request.to_bytes();
    let Some(client) = server else {
        println!("{label}: {} B composed (no server: not sent)", bytes.len());
        return Ok("(no server)".to_owned());
    };
    let reply = client.chat(&bytes, &ChatOptions::cached(24))?;
    println!(
        "{label}: {} prompt tokens, {} re-processed, {} reused from the cache",
        reply.usage.prompt_tokens, reply.timings.prompt_n, reply.timings.cache_n
    );
    Ok(reply.content)
}

fn main() -> Result<(), Box<dyn Error>> {
    let server = match locate_server()? {
        ServerLocation::Found { url, .. } => {
            let client = LlamaClient::new(url);
            client.health().ok().map(|()| client)
        }
        ServerLocation::Absent { .. } => None,
    };
    let policy = PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"assistant_instructions\"]\n",
        "agent.toml",
        &components()?,
    )?
    .deny_warnings()?;
    let mut session = Session::start(
        components()?,
        &policy,
        SessionContext::default(),
        SessionOptions::default(),
    )?;

    // 1. A user turn.
    let request = session.turn(todo(&["fix the test"]), "Which test fails?")?;
    let reply = send(server.as_ref(), "turn 1", &request)?;
    // 2. The assistant calls a tool (scripted: a 135M model does not call tools reliably).
    session.record_assistant(&json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]}))?;
    session.record_tool_result("call_1", "test deny_wins ... FAILED")?;
    // 3. The continuation carries the result; the todo list changed meanwhile.
    let request = session.continuation(todo(&["fix the test", "explain the fix"]))?;
    let reply = send(server.as_ref(), "turn 1, continuation", &request).map(|r| r + &reply)?;
    session.record_assistant(&json!({"role": "assistant", "content": reply}))?;
    // 4. A second turn, then a compaction that keeps the last two messages.
    let request = session.turn(todo(&["explain the fix"]), "Fix it.")?;
    let reply = send(server.as_ref(), "turn 2", &request)?;
    session.record_assistant(&json!({"role": "assistant", "content": reply}))?;
    let cut = session.history().safe_cut(0, 2);
    session.compact(
        0..cut,
        "The user asked which test fails: deny_wins; it was fixed.",
    )?;
    // 5. Save at exit, resume at the next start: the next request is the same either way.
    let file = serde_json::to_string(&session.save())?;
    let snapshot: SessionSnapshot = serde_json::from_str(&file)?;
    let (mut resumed, changes) = Session::restore(
        &snapshot,
        components()?,
        &policy,
        SessionContext::default(),
        SessionOptions::default(),
        RestoreMode::Strict,
    )?;
    assert!(changes.is_none(), "nothing changed");
    let expected = session
        .turn(todo(&["explain the fix"]), "Thanks.")?
        .to_bytes();
    let request = resumed.turn(todo(&["explain the fix"]), "Thanks.")?;
    assert_eq!(
        request.to_bytes(),
        expected,
        "a resumed session sends the same bytes"
    );
    send(server.as_ref(), "turn 3, after a save and resume", &request)?;
    println!(
        "saved session: {} bytes of JSON, {} history nodes",
        file.len(),
        resumed.history().len()
    );
    Ok(())
}
