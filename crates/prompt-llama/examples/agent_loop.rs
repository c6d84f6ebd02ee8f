//! The agent loop end to end, async (docs/lifecycle.md): writers declared with the
//! attribute, an agent.toml, a turn whose reply streams and is printed as it arrives, a tool
//! call and its continuation, an edit of the instructions, a compaction, save and restore;
//! against the local llama.cpp server when one is running (`scripts/llama-server.sh
//! start`), through the async client (`prompt-client`), else composing the same requests
//! without sending them.
//!
//! Each request sent prints what the engine did (`Reply::figures`: prompt tokens
//! re-processed and cached, tokens generated), the request's new tokens (`NewTokens`, by the
//! server's tokenizer) and the time to first token (`ReplyStream::finish_timed`). The URL
//! file is read again before each request (`ServerUrl::refresh`): a server restarted
//! meanwhile is found on its new port.
//!
//! `cargo run -p prompt-llama --example agent_loop`

use std::io::Write;

use prompt_client::{Client, Endpoint};
use prompt_llama::{LlamaClient, NewTokens, ServerUrl};
use prompt_registry::wire::stream::StreamEvent;
use prompt_registry::wire::{Next, WireOptions};
use prompt_registry::{
    ApiKind, Conversation, ConversationSnapshot, Extensions, Registry, Report, RestoreMode,
    SessionContext, SessionOptions, SystemPromptChange, ToolSet, TurnContext, prompt_component,
};
use serde_json::json;

/// House rules the program owns.
#[prompt_component(placement = "prefix")]
const HOUSE_RULES: &str = "Answer in one sentence.";

struct Todo(Vec<String>);

/// The open tasks; once the list empties, says so once.
#[prompt_component(placement = "tail", cleared = "No open tasks.")]
fn todo_addendum(turn: &TurnContext) -> Option<String> {
    turn.get::<Todo>()
        .filter(|todo| !todo.0.is_empty())
        .map(|todo| format!("Open tasks: {}", todo.0.join("; ")))
}

const API: ApiKind = ApiKind::LlamaCpp;
const AGENT_TOML: &str = "[prompt]\nprefix_allow = [\"house_rules\"]\n";

fn todo(items: &[&str]) -> Extensions {
    Extensions::new().with(Todo(items.iter().map(|s| (*s).to_owned()).collect()))
}

fn wire_options() -> WireOptions {
    WireOptions::new("smollm2")
        .param("max_tokens", &json!(24))
        .param("temperature", &json!(0))
        .param("stream", &json!(true))
}

fn session_options(instructions: &str) -> SessionOptions {
    prompt_registry::wire::session_options(API, ToolSet::empty()).with_system_prompt(instructions)
}

/// The server, when one is running: its URL (read again before each request), the async
/// client for it, and the counter of new tokens.
struct Server {
    url: ServerUrl,
    client: Client,
    llama: LlamaClient,
}

impl Server {
    /// The server the URL file names, when it answers.
    fn find() -> Result<Option<Self>, Report> {
        let mut url = ServerUrl::locate()?;
        let Ok(base) = url.url() else {
            return Ok(None);
        };
        let llama = LlamaClient::new(base.clone());
        if llama.health().is_err() {
            return Ok(None);
        }
        let client = Client::new(Endpoint::new(format!("{base}/v1")))?;
        Ok(Some(Self { url, client, llama }))
    }

    /// Reads the URL file again: after a restart the server is on another port.
    fn follow_restart(&mut self) -> Result<(), Report> {
        if let Some(base) = self.url.refresh()?
            && base != self.llama.base_url()
        {
            println!("(the server moved to {base})");
            self.llama = LlamaClient::new(base.clone());
            self.client = Client::new(Endpoint::new(format!("{base}/v1")))?;
        }
        Ok(())
    }
}

/// Sends `next` when a server is running, printing the reply as it streams and what the
/// server did; without one, composes it and records a stand-in reply.
async fn send(
    server: &mut Option<Server>,
    tokens: &mut NewTokens,
    chat: &mut Conversation,
    label: &str,
    next: Next,
) -> Result<(), Report> {
    let body = chat.compose(next)?;
    let (bytes, stable) = (body.to_bytes(), body.stable_body());
    let Some(server) = server else {
        println!("{label}: {} B composed (no server: not sent)", bytes.len());
        chat.session_mut()
            .record_assistant(&json!({"role": "assistant", "content": "(no server)"}))?;
        return Ok(());
    };
    server.follow_restart()?;
    // New tokens: beyond the previous request's stable part, by the server's tokenizer.
    let count = tokens.count(&server.llama, &bytes, &stable)?;
    print!("{label}: ");
    let mut stream = server.client.stream_body(chat, bytes)?;
    while let Some(event) = stream.next_event().await {
        if let StreamEvent::TextDelta { text } = event? {
            print!("{text}");
            std::io::stdout().flush()?;
        }
    }
    // Recorded into the conversation when the stream ended.
    let (reply, timing) = stream.finish_timed().await?;
    let ttft = timing.first_token.map_or(0, |t| t.as_millis());
    match reply.figures()? {
        Some(f) => println!(
            "\n  ({} prompt tokens, {} new: {} re-processed, {} from the cache; {} generated; first token after {ttft} ms)",
            f.prompt, count.new, f.reprocessed, f.cached, f.generated
        ),
        None => println!("\n  (no usage in the reply; first token after {ttft} ms)"),
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Report> {
    let mut server = Server::find()?;
    if server.is_none() {
        println!("no llama.cpp server answers (scripts/llama-server.sh start): composing only");
    }
    let registry = Registry::linked()?;
    let policy = registry
        .load_policy(AGENT_TOML, "agent.toml")?
        .deny_warnings()?;
    let mut chat = registry.start_conversation(
        &policy,
        SessionContext::default(),
        session_options("You are a careful coding assistant."),
        API,
        wire_options(),
    )?;
    let mut tokens = NewTokens::new(API);

    // 1. A user turn, its reply streamed.
    let question = Next::turn(todo(&["fix the test"]), "Which test fails?");
    send(&mut server, &mut tokens, &mut chat, "turn 1", question).await?;
    // 2. The assistant calls a tool (scripted: a 135M model does not call tools reliably).
    chat.session_mut().record_assistant(&json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "run_tests", "arguments": "{}"}}]}))?;
    chat.session_mut()
        .record_tool_result("call_1", "test deny_wins ... FAILED")?;
    // 3. The continuation carries the result; the todo list changed meanwhile.
    let next = Next::continuation(todo(&["fix the test", "explain the fix"]));
    send(
        &mut server,
        &mut tokens,
        &mut chat,
        "turn 1, continuation",
        next,
    )
    .await?;
    // 4. The user edits the instructions: appended once, the prefix untouched.
    let edit = chat.set_system_prompt("You are a careful, terse coding assistant.");
    assert!(matches!(edit, SystemPromptChange::Appended(_)));
    let next = Next::turn(todo(&["explain the fix"]), "Fix it.");
    send(
        &mut server,
        &mut tokens,
        &mut chat,
        "turn 2 (instructions edited)",
        next,
    )
    .await?;
    // 5. The list empties: its `cleared` text, once. Then a compaction keeping two messages.
    let next = Next::turn(todo(&[]), "Thanks, all done?");
    send(
        &mut server,
        &mut tokens,
        &mut chat,
        "turn 3 (list emptied)",
        next,
    )
    .await?;
    let cut = chat.session().history().safe_cut(0, 2);
    chat.session_mut().compact(
        0..cut,
        "The user asked which test fails: deny_wins; it was fixed.",
    )?;
    tokens.reset(); // a new cache epoch
    // 6. Save at exit, restore at the next start, without instructions: the saved current
    // prompt (the edit) is kept and nothing is appended (docs/lifecycle.md).
    let file = chat.save().to_json();
    let snapshot = ConversationSnapshot::from_json(file.as_bytes())?;
    let restored = registry.restore_conversation(
        &snapshot,
        &policy,
        SessionContext::default(),
        prompt_registry::wire::session_options(API, ToolSet::empty()),
        wire_options(),
        RestoreMode::Strict,
    )?;
    assert!(restored.changes.is_none() && restored.system_prompt.is_none());
    let mut resumed = restored.conversation;
    let expected = chat.compose(Next::turn(todo(&[]), "Bye."))?.to_bytes();
    let composed = resumed.compose(Next::turn(todo(&[]), "Bye."))?.to_bytes();
    assert_eq!(
        composed, expected,
        "a restored conversation sends the same bytes"
    );
    // The turn is composed: a resend sends that same request.
    let next = Next::resend(todo(&[]));
    send(
        &mut server,
        &mut tokens,
        &mut resumed,
        "turn 4, after a save and restore",
        next,
    )
    .await?;
    println!(
        "saved conversation: {} bytes of JSON, {} history nodes",
        file.len(),
        resumed.session().history().len()
    );
    Ok(())
}
