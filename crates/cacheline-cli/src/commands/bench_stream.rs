//! `cacheline bench-live --stream`: the scripted session (compact size) through the wire's
//! bodies with `"stream": true` on llama.cpp's `/v1/chat/completions`, `/v1/responses` and
//! `/v1/messages`, every reply streamed through the async client and recorded when its
//! stream ends (the script's tool rounds stay scripted: `ScenarioSize::play_live`); one
//! table per endpoint, request by request.

use std::error::Error;
use std::io::Write;
use std::time::Duration;

use prompt_client::{Client, Endpoint, RetryPolicy, StreamTiming};
use prompt_llama::{LlamaClient, NewTokens};
use prompt_reference::scenario::{self, RequestLabels};
use prompt_registry::wire::{Next, Reply};
use prompt_registry::{ApiKind, Conversation, PromptPolicy, Registry};
use serde::Serialize;

use super::bench_live::SIZE;

/// The endpoints measured, by the name `--api` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StreamApi {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/responses`.
    Responses,
    /// `/v1/messages` (Anthropic's shape).
    Messages,
}

impl StreamApi {
    fn api(self) -> ApiKind {
        match self {
            StreamApi::Chat => ApiKind::LlamaCpp,
            StreamApi::Responses => ApiKind::OpenAiResponses,
            StreamApi::Messages => ApiKind::Anthropic,
        }
    }
}

/// One streamed request.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StreamedRequest {
    label: String,
    /// Prompt tokens, as the API's usage reports them.
    tokens: u64,
    /// Tokens the server re-processed (uncached input).
    reprocessed: u64,
    /// Tokens served from its cache.
    cached: u64,
    /// Tokens beyond the previous body's stable part (all of them for the first request).
    new: u64,
    /// Client wall time from sending to the first event.
    ttft_ms: f64,
    /// Client wall time to the recorded reply.
    total_ms: f64,
    /// Bytes of the assistant message recorded.
    recorded_bytes: usize,
}

/// One endpoint's requests.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct StreamedSession {
    path: String,
    requests: Vec<StreamedRequest>,
}

/// Sends `next` streamed and records its reply; the reply and the time to its first event.
fn stream_one(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    conversation: &mut Conversation,
    body: Vec<u8>,
) -> Result<(Reply, StreamTiming), Box<dyn Error>> {
    let stream = client.stream_body(conversation, body)?;
    Ok(runtime.block_on(stream.finish_timed())?)
}

/// Plays `turns` turns of the script through `api`'s endpoint on `llama`'s server.
pub(crate) fn measure(
    llama: &LlamaClient,
    registry: &Registry,
    policy: &PromptPolicy,
    api: ApiKind,
    turns: u64,
    max_tokens: u32,
) -> Result<StreamedSession, Box<dyn Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let endpoint = Endpoint::new(format!("{}/v1", llama.base_url()));
    let path = endpoint.url(api, "", true);
    let client = Client::new(endpoint)?.retry(RetryPolicy::NONE);
    let options = scenario::llama_cpp_wire_options(api, max_tokens, true);
    let mut conversation = SIZE.conversation(registry, policy, api, options)?;
    let mut labels = RequestLabels::default();
    let mut new_tokens = NewTokens::new(api);
    let mut requests = Vec::new();
    SIZE.play_live(
        &mut conversation,
        1..=turns,
        &mut |step, conversation, next| {
            let label = labels.next(step.turn, matches!(next, Next::Continuation { .. }));
            let body = conversation.compose(next)?;
            let (bytes, stable) = (body.to_bytes(), body.stable_body());
            // Counted before it is sent: the server's tokenizer, not its slot.
            let count = new_tokens.count(llama, &bytes, &stable)?;
            let (reply, timing) = stream_one(&runtime, &client, conversation, bytes)?;
            let figures = reply
                .figures()?
                .ok_or_else(|| format!("request {label}: the stream carried no usage"))?;
            let ms = |d: Option<Duration>| d.unwrap_or_default().as_secs_f64() * 1000.0;
            requests.push(StreamedRequest {
                label,
                tokens: figures.prompt,
                reprocessed: figures.reprocessed,
                cached: figures.cached,
                new: count.new,
                ttft_ms: ms(timing.first_token.or(timing.total)),
                total_ms: ms(timing.total),
                recorded_bytes: reply.message.len(),
            });
            Ok::<(), Box<dyn Error>>(())
        },
    )?;
    Ok(StreamedSession { path, requests })
}

/// Measures each of `apis`.
pub(crate) fn run(
    llama: &LlamaClient,
    registry: &Registry,
    policy: &PromptPolicy,
    apis: &[StreamApi],
    turns: u64,
    max_tokens: u32,
) -> Result<Vec<StreamedSession>, Box<dyn Error>> {
    apis.iter()
        .map(|a| measure(llama, registry, policy, a.api(), turns, max_tokens))
        .collect()
}

/// Writes one table per endpoint.
pub(crate) fn write_tables(
    sessions: &[StreamedSession],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    for session in sessions {
        writeln!(out, "{} (streamed, each reply recorded):", session.path)?;
        writeln!(
            out,
            "request  tokens  re-processed  cached  new  TTFT ms  total ms  recorded B"
        )?;
        for r in &session.requests {
            writeln!(
                out,
                "{:>7}  {:>6}  {:>12}  {:>6}  {:>3}  {:>7.0}  {:>8.0}  {:>10}",
                r.label,
                r.tokens,
                r.reprocessed,
                r.cached,
                r.new,
                r.ttft_ms,
                r.total_ms,
                r.recorded_bytes
            )?;
        }
        let later = session.requests.get(1..).unwrap_or_default();
        let (reprocessed, new) = later
            .iter()
            .fold((0u64, 0u64), |(p, n), r| (p + r.reprocessed, n + r.new));
        writeln!(
            out,
            "requests 2+: re-processed {reprocessed} tokens, {new} new\n"
        )?;
    }
    writeln!(
        out,
        "tokens, re-processed, cached = the API's usage read from the stream; new = tokens beyond the previous body's stable part (the server's own counters); TTFT = client wall time to the first token (the first event with content); recorded B = the assistant message recorded from the stream."
    )
}
