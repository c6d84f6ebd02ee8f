//! Streamed replies on a real llama.cpp server, through the async client (`prompt-client`)
//! on the three endpoints it speaks: `/v1/chat/completions`, `/v1/responses` and
//! `/v1/messages`, every body the one `prompt-wire` writes with `"stream": true`.
//!
//! Unlike the whole-reply tests of `live_wire`, which record the script's replies, these
//! record **the server's own streamed replies**: each request's reply is streamed through
//! `Client::stream_body` and recorded by the client when its stream ends, as an agent does.
//! The script's tool rounds stay scripted (SmolLM2-135M does not call tools reliably):
//! after the reply to a request the script answers with tool calls, the script's call and
//! its results follow the model's reply, and the continuation is sent
//! (`ScenarioSize::play_live`). What each test asserts is in its own comment.

use std::error::Error;

use prompt_client::{Client, Endpoint, RetryPolicy};
use prompt_llama::{ChatOptions, LlamaClient, NewTokens, TokenCount};
use prompt_reference::scenario::{self, RequestLabels, ScenarioSize};
use prompt_registry::wire::{Next, Reply, WireOptions, read_reply};
use prompt_registry::{ApiKind, Conversation};
use serde_json::Value;

use crate::live_llama::{SLACK, TURNS, say, server};
use crate::live_wire::{
    Sender, Sent, Setup, assert_reprocesses_only_new_tokens, endpoint, print_table,
};

/// Turns of the script the stream-against-whole comparison plays (tool rounds in turns 2
/// and 3).
const COMPARED_TURNS: u64 = 3;

/// The whole-reply tests' options with `"stream": true` (llama.cpp sends its `timings` on
/// the last chunk without `stream_options`).
fn stream_options(api: ApiKind) -> WireOptions {
    scenario::llama_cpp_wire_options(api, 4, true)
}

/// Tokens each reply of the stream-against-whole comparison generates: enough for the
/// replies to differ from request to request.
const COMPARED_TOKENS: u32 = 24;

/// The async client for the server, on a single-threaded runtime of the test's own. No
/// retries: a failure on loopback is a failure.
fn async_client(llama: &LlamaClient) -> (tokio::runtime::Runtime, Client) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"));
    let endpoint = Endpoint::new(format!("{}/v1", llama.base_url()));
    let client = Client::new(endpoint)
        .unwrap_or_else(|e| panic!("{e}"))
        .retry(RetryPolicy::NONE);
    (runtime, client)
}

/// Composes `next`, counts its new tokens by the server's tokenizer (`NewTokens`), streams
/// its reply through the client, which records it; returns the reply, the body's stable part
/// and the count.
fn stream_next(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    counter: (&LlamaClient, &mut NewTokens),
    conversation: &mut Conversation,
    next: Next,
) -> Result<(Reply, Vec<u8>, TokenCount), Box<dyn Error>> {
    let body = conversation.compose(next)?;
    let (bytes, stable) = (body.to_bytes(), body.stable_body());
    let (llama, new_tokens) = counter;
    let count = new_tokens.count(llama, &bytes, &stable)?;
    let stream = client.stream_body(conversation, bytes)?;
    let (reply, timing) = runtime.block_on(stream.finish_timed())?;
    // The client's clock: the response before the first token, the first token before the
    // end (a reply of only empty deltas has no first token).
    let (response, total) = (timing.response, timing.total);
    assert!(response.is_some() && total.is_some(), "{timing:?}");
    assert!(
        timing
            .first_token
            .is_none_or(|t| response <= Some(t) && Some(t) <= total),
        "{timing:?}"
    );
    Ok((reply, stable, count))
}

/// The compact script's first [`TURNS`] turns through `api`'s endpoint, every reply
/// streamed and recorded by the async client; every request after the first re-processes
/// only its new tokens (+ `SLACK`), the same bound as the whole-reply tests, with the usage
/// read from the stream (`timings` on Chat Completions, `response.completed`'s usage,
/// `message_start` with `message_delta`'s) agreeing with the server's log.
fn stream_reprocesses_only_new_tokens(api: ApiKind, test: &str) {
    let Some((llama, _guard)) = server(test) else {
        return;
    };
    let (runtime, client) = async_client(&llama);
    let mut conversation = Setup::new().conversation(api, stream_options(api));
    let sender = Sender::new(&llama, api);
    let mut labels = RequestLabels::default();
    let mut sent: Vec<Sent> = Vec::new();
    let mut new_tokens = NewTokens::new(api);
    let mut counted: Vec<TokenCount> = Vec::new();
    ScenarioSize::Compact
        .play_live(
            &mut conversation,
            1..=TURNS,
            &mut |step, conversation, next| {
                let label = labels.next(step.turn, matches!(next, Next::Continuation { .. }));
                let before = sender.log_offset();
                let counter = (&llama, &mut new_tokens);
                let (reply, stable, count) =
                    stream_next(&runtime, &client, counter, conversation, next)?;
                let figures = reply.figures()?.ok_or("no usage in the reply")?;
                counted.push(count);
                // `NewTokens` counts what the server's usage says it received.
                assert_eq!(count.prompt, figures.prompt, "{api:?} {label}");
                sent.push(sender.measure(label, &reply, before, &stable));
                Ok::<(), Box<dyn Error>>(())
            },
        )
        .unwrap_or_else(|e| panic!("{api:?}: {e}"));
    print_table(
        &format!("{api:?} through {}, streamed", endpoint(api)),
        &sent,
    );
    assert_reprocesses_only_new_tokens(api, &sent);
    // The same bound with the new tokens `prompt_llama::NewTokens` counted.
    for (s, count) in sent.iter().zip(&counted).skip(1) {
        assert!(
            s.reprocessed <= count.new + SLACK,
            "{api:?} request {}: re-processed {}, NewTokens counted {} new",
            s.label,
            s.reprocessed,
            count.new
        );
    }
}

#[test]
fn live_stream_chat_completions_reprocesses_only_new_tokens() {
    stream_reprocesses_only_new_tokens(
        ApiKind::LlamaCpp,
        "live_stream_chat_completions_reprocesses_only_new_tokens",
    );
}

#[test]
fn live_stream_responses_reprocesses_only_new_tokens() {
    stream_reprocesses_only_new_tokens(
        ApiKind::OpenAiResponses,
        "live_stream_responses_reprocesses_only_new_tokens",
    );
}

#[test]
fn live_stream_anthropic_messages_reprocesses_only_new_tokens() {
    stream_reprocesses_only_new_tokens(
        ApiKind::Anthropic,
        "live_stream_anthropic_messages_reprocesses_only_new_tokens",
    );
}

/// `text` with the value of every `"id"`, `"call_id"` and `"item_id"` string replaced by
/// `<id>`: llama.cpp draws ids at random per request.
fn mask_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = ["\"id\":\"", "\"call_id\":\"", "\"item_id\":\""]
        .iter()
        .filter_map(|key| rest.find(key).map(|i| (i, key.len())))
        .min()
    {
        let (start, key) = at;
        out.push_str(&rest[..start + key]);
        rest = &rest[start + key..];
        let end = rest.find('"').unwrap_or(rest.len());
        out.push_str("<id>");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `body` without its `"stream": true`: the same request, for a whole reply. The parameter
/// is written once, after the stable part.
fn without_stream(body: &[u8], stable_len: usize) -> Vec<u8> {
    let needle = b",\"stream\":true";
    let tail = &body[stable_len.min(body.len())..];
    let found: Vec<usize> = tail
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| stable_len + i)
        .collect();
    assert_eq!(found.len(), 1, "\"stream\":true once after the stable part");
    [&body[..found[0]], &body[found[0] + needle.len()..]].concat()
}

/// Leaves a short unrelated prompt in the slot (as `cacheline bench-live` does between its
/// arms), so the next request is computed from the same cache state whatever came before.
fn clear_slot(llama: &LlamaClient) {
    llama
        .chat(
            br#"[{"role":"user","content":"Hello."}]"#,
            &ChatOptions::greedy_uncached(1),
        )
        .unwrap_or_else(|e| panic!("clearing the slot: {e}"));
}

/// The compact script's first [`COMPARED_TURNS`] turns through `api`'s endpoint: each
/// request is streamed through the async client (and recorded), then sent again as a whole
/// reply (the same body without `"stream": true`), each from a cleared slot so that both
/// are computed alike (greedy decoding gives another text from another cache state:
/// `crates/prompt-wire/tests/fixtures/llama_cpp/stream/README.md`).
///
/// What holds: on `/v1/chat/completions` and `/v1/messages` the streamed reply records the
/// bytes the whole reply records, ids masked (llama.cpp draws them at random per request).
/// On `/v1/responses` the server writes the completed response of a stream in another key
/// order than its whole reply (`docs/wire.md`, "Streaming"), so the bytes differ; what
/// holds there is the same message as JSON (ids masked), the same text, the same calls and
/// the same stop reason.
fn stream_records_what_the_whole_reply_records(api: ApiKind, test: &str) {
    let Some((llama, _guard)) = server(test) else {
        return;
    };
    let (runtime, client) = async_client(&llama);
    let mut conversation = Setup::new().conversation(
        api,
        scenario::llama_cpp_wire_options(api, COMPARED_TOKENS, true),
    );
    let mut labels = RequestLabels::default();
    let mut compared = Vec::new();
    ScenarioSize::Compact
        .play_live(
            &mut conversation,
            1..=COMPARED_TURNS,
            &mut |step, conversation, next| {
                let label = labels.next(step.turn, matches!(next, Next::Continuation { .. }));
                clear_slot(&llama);
                let body = conversation.compose(next)?;
                let (bytes, stable_len) = (body.to_bytes(), body.stable_len());
                let streamed =
                    runtime.block_on(client.stream_body(conversation, bytes.clone())?.finish())?;
                let recorded = conversation
                    .session()
                    .history()
                    .nodes()
                    .last()
                    .map(|n| n.bytes().to_owned())
                    .ok_or("nothing recorded")?;
                clear_slot(&llama);
                let path = endpoint(api);
                let answer = llama.post_body(path, &without_stream(&bytes, stable_len))?;
                let whole = read_reply(api, &answer)?;
                compared.push((label, recorded, streamed, whole));
                Ok::<(), Box<dyn Error>>(())
            },
        )
        .unwrap_or_else(|e| panic!("{api:?}: {e}"));
    assert!(compared.len() > COMPARED_TURNS as usize, "tool rounds too");
    let mut table = format!(
        "{api:?} through {}, streamed against whole:\n  request  bytes  text\n",
        endpoint(api)
    );
    for (label, recorded, streamed, whole) in &compared {
        table.push_str(&format!(
            "  {label:>7}  {:>5}  {:?}\n",
            recorded.len(),
            streamed.text
        ));
        assert_eq!(
            recorded, &streamed.message,
            "{label}: the stream's reply is recorded"
        );
        assert_eq!(streamed.text, whole.text, "{api:?} {label}: the text");
        assert_eq!(streamed.stop_reason, whole.stop_reason, "{api:?} {label}");
        let calls = |r: &Reply| -> Vec<(String, String)> {
            r.tool_calls
                .iter()
                .map(|c| (c.name.clone(), c.arguments.clone()))
                .collect()
        };
        assert_eq!(calls(streamed), calls(whole), "{api:?} {label}: the calls");
        let (stream_bytes, whole_bytes) = (mask_ids(recorded), mask_ids(&whole.message));
        if api == ApiKind::OpenAiResponses {
            let value = |text: &str| -> Value {
                serde_json::from_str(text).unwrap_or_else(|e| panic!("{label}: {e}: {text}"))
            };
            assert_eq!(
                value(&stream_bytes),
                value(&whole_bytes),
                "{label}: the same items, ids masked"
            );
        } else {
            assert_eq!(
                stream_bytes, whole_bytes,
                "{api:?} {label}: the stream records the whole reply's bytes, ids masked"
            );
        }
    }
    say(&table);
}

#[test]
fn live_stream_chat_completions_records_the_bytes_of_the_whole_reply() {
    stream_records_what_the_whole_reply_records(
        ApiKind::LlamaCpp,
        "live_stream_chat_completions_records_the_bytes_of_the_whole_reply",
    );
}

#[test]
fn live_stream_responses_records_the_items_of_the_whole_reply() {
    stream_records_what_the_whole_reply_records(
        ApiKind::OpenAiResponses,
        "live_stream_responses_records_the_items_of_the_whole_reply",
    );
}

#[test]
fn live_stream_anthropic_messages_records_the_bytes_of_the_whole_reply() {
    stream_records_what_the_whole_reply_records(
        ApiKind::Anthropic,
        "live_stream_anthropic_messages_records_the_bytes_of_the_whole_reply",
    );
}

#[test]
fn mask_ids_masks_every_id_and_only_ids() {
    assert_eq!(
        mask_ids(r#"{"id":"a1","x":"id","call_id":"c","item_id":"","n":{"id":"zz"}}"#),
        r#"{"id":"<id>","x":"id","call_id":"<id>","item_id":"<id>","n":{"id":"<id>"}}"#
    );
    assert_eq!(
        without_stream(br#"{"a":[1],"max_tokens":4,"stream":true,"t":0}"#, 9),
        br#"{"a":[1],"max_tokens":4,"t":0}"#
    );
}
