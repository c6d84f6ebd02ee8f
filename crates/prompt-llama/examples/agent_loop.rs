//! The agent loop end to end, async (docs/lifecycle.md): a turn whose reply streams and is
//! printed as it arrives, a tool call and its continuation, a compaction, save and resume;
//! against the local llama.cpp server when one is running (`scripts/llama-server.sh
//! start`), through the async client (`prompt-client`), else composing the same requests
//! without sending them.
//!
//! `cargo run -p prompt-llama --example agent_loop`

use std::error::Error;
use std::io::Write;

use prompt_client::{Client, Endpoint};
use prompt_core::snapshot::RestoreMode;
use prompt_core::tools::ToolSet;
use prompt_core::{
    ApiKind, Component, ComponentId, Extensions, Placement, PromptPolicy, SessionContext,
};
use prompt_llama::{LlamaClient, ServerLocation, Timings, locate_server};
use prompt_wire::stream::StreamEvent;
use prompt_wire::{Conversation, ConversationSnapshot, Next, WireOptions};
use serde_json::json;

struct Todo(Vec<String>);

const API: ApiKind = ApiKind::LlamaCpp;

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

fn wire_options() -> WireOptions {
    WireOptions::new("smollm2")
        .param("max_tokens", &json!(24))
        .param("temperature", &json!(0))
        .param("stream", &json!(true))
}

/// Sends `next` when a server is running, printing the reply as it streams and what the
/// server reused; without one, composes it and records a stand-in reply.
async fn send(
    server: Option<&Client>,
    chat: &mut Conversation,
    label: &str,
    next: Next,
) -> Result<(), Box<dyn Error>> {
    let Some(client) = server else {
        let bytes = chat.compose(next)?.to_bytes();
        println!("{label}: {} B composed (no server: not sent)", bytes.len());
        chat.session_mut()
            .record_assistant(&json!({"role": "assistant", "content": "(no server)"}))?;
        return Ok(());
    };
    print!("{label}: ");
    let mut stream = client.stream(chat, next)?;
    while let Some(event) = stream.next_event().await {
        if let StreamEvent::TextDelta { text } = event? {
            print!("{text}");
            std::io::stdout().flush()?;
        }
    }
    // Recorded into the conversation when the stream ended.
    let reply = stream.finish().await?;
    if let Some(usage) = &reply.usage {
        let timings: Timings = serde_json::from_str(&usage.json)?;
        println!(
            "\n  ({} tokens re-processed, {} reused from the cache)",
            timings.prompt_n, timings.cache_n
        );
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let server = match locate_server()? {
        ServerLocation::Found { url, .. } if LlamaClient::new(url.clone()).health().is_ok() => {
            Some(Client::new(Endpoint::new(format!("{url}/v1")))?)
        }
        _ => None,
    };
    let policy = PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"assistant_instructions\"]\n",
        "agent.toml",
        &components()?,
    )?
    .deny_warnings()?;
    let options = || prompt_wire::session_options(API, ToolSet::empty());
    let mut chat = Conversation::start(
        components()?,
        &policy,
        SessionContext::default(),
        options(),
        API,
        wire_options(),
    )?;

    // 1. A user turn, its reply streamed.
    let question = Next::turn(todo(&["fix the test"]), "Which test fails?");
    send(server.as_ref(), &mut chat, "turn 1", question).await?;
    // 2. The assistant calls a tool (scripted: a 135M model does not call tools reliably).
    chat.session_mut().record_assistant(&json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]}))?;
    chat.session_mut()
        .record_tool_result("call_1", "test deny_wins ... FAILED")?;
    // 3. The continuation carries the result; the todo list changed meanwhile.
    let next = Next::continuation(todo(&["fix the test", "explain the fix"]));
    send(server.as_ref(), &mut chat, "turn 1, continuation", next).await?;
    // 4. A second turn, then a compaction that keeps the last two messages.
    let next = Next::turn(todo(&["explain the fix"]), "Fix it.");
    send(server.as_ref(), &mut chat, "turn 2", next).await?;
    let cut = chat.session().history().safe_cut(0, 2);
    chat.session_mut().compact(
        0..cut,
        "The user asked which test fails: deny_wins; it was fixed.",
    )?;
    // 5. Save at exit, resume at the next start: the next request is the same either way.
    let file = serde_json::to_string(&chat.save())?;
    let snapshot: ConversationSnapshot = serde_json::from_str(&file)?;
    let restored = Conversation::restore(
        &snapshot,
        components()?,
        &policy,
        SessionContext::default(),
        options(),
        wire_options(),
        RestoreMode::Strict,
    )?;
    assert!(restored.changes.is_none(), "nothing changed");
    let mut resumed = restored.conversation;
    let expected = chat
        .compose(Next::turn(todo(&["explain the fix"]), "Thanks."))?
        .to_bytes();
    let next = Next::turn(todo(&["explain the fix"]), "Thanks.");
    let composed = resumed.compose(next)?.to_bytes();
    assert_eq!(
        composed, expected,
        "a resumed conversation sends the same bytes"
    );
    // The turn is composed: a resend sends that same request.
    send(
        server.as_ref(),
        &mut resumed,
        "turn 3, after a save and resume",
        Next::resend(todo(&["explain the fix"])),
    )
    .await?;
    println!(
        "saved conversation: {} bytes of JSON, {} history nodes",
        file.len(),
        resumed.session().history().len()
    );
    Ok(())
}
