//! The `main` built from README.md's second `[dependencies]` snippet (the facade and the
//! async client without TLS): a streamed reply from a loopback server, recorded, with the
//! client's timing and the engine's figures.

use prompt_client::{Client, Endpoint, ScriptedResponse, ScriptedServer};
use prompt_registry::wire::stream::StreamEvent;
use prompt_registry::wire::{Next, WireOptions};
use prompt_registry::{ApiKind, Conversation, Extensions, PromptPolicy, Report, SessionContext, ToolSet};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Report> {
    let server = ScriptedServer::start(vec![ScriptedResponse::sse(concat!(
        r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"},"finish_reason":null}]}"#, "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"content":"."},"finish_reason":"stop"}],"timings":{"prompt_n":9,"cache_n":0,"prompt_ms":3.5,"predicted_n":2,"predicted_ms":1.0}}"#, "\n\n",
        "data: [DONE]\n\n"))])?;
    let client = Client::new(Endpoint::new(format!("{}/v1", server.url())))?;
    let api = ApiKind::LlamaCpp;
    let mut chat = Conversation::start(vec![], &PromptPolicy::default(), SessionContext::default(),
        prompt_registry::wire::session_options(api, ToolSet::empty()), api,
        WireOptions::new("smollm2").param("stream", &json!(true)))?;
    let mut stream = client.stream(&mut chat, Next::turn(Extensions::new(), "Hi."))?;
    let mut shown = String::new();
    while let Some(event) = stream.next_event().await {
        if let StreamEvent::TextDelta { text } = event? {
            shown.push_str(&text);
        }
    }
    let (reply, timing) = stream.finish_timed().await?;
    assert_eq!((shown.as_str(), reply.text.as_str()), ("Hello.", "Hello."));
    assert!(timing.first_token.is_some());
    let figures = reply.figures()?.ok_or(Report::msg("no usage"))?;
    assert_eq!((figures.reprocessed, figures.cached, figures.generated), (9, 0, 2));
    assert_eq!(chat.session().history().len(), 2);
    println!("client: ok");
    Ok(())
}
