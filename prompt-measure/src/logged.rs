//! A log line as proxies and loggers write it: the request body of any API the wire's guard
//! knows, and the response whole or streamed.
//!
//! | the line | the request | the response |
//! |---|---|---|
//! | a request body | the line | its `response` key, if any (LiteLLM's spend logs and `StandardLoggingPayload` keep `messages` and `response` side by side) |
//! | `{"request": …, "response": …}` | `request`: the body, or its JSON as a string | `response` |
//!
//! A response is the whole reply (an object, read by [`Usage::detect`]), or the response body
//! as text (a string): the whole reply's JSON, or the server-sent events of a streamed reply
//! (what Helicone keeps as the raw response body), read by the wire's stream reader of the
//! request's API. The usage a stream reports is the usage its whole reply reports.

use std::borrow::Cow;

use prompt_core::ApiKind;
use prompt_core::raw_json::{kind_of, string_of};
use prompt_wire::Shape;
use prompt_wire::stream::{StreamError, StreamEvent, StreamReader};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::audit::LineProblem;
use super::meter::{Provider, Usage};

/// The keys of a line the audit reads itself; the guard reads the body.
#[derive(Deserialize)]
struct Keys<'a> {
    #[serde(borrow, default)]
    request: Option<&'a RawValue>,
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
}

/// One line: the request body's text and the logged response.
pub(crate) struct Logged<'a> {
    pub(crate) request: Cow<'a, str>,
    pub(crate) response: Option<&'a RawValue>,
}

/// Splits a line into its request body and its response.
pub(crate) fn read_line(text: &str) -> Result<Logged<'_>, LineProblem> {
    let keys: Keys<'_> = serde_json::from_str(text).map_err(LineProblem::Json)?;
    let request = match keys.request {
        None => Cow::Borrowed(text),
        Some(body) if body.get().starts_with('{') => Cow::Borrowed(body.get()),
        // A body logged as the text it was sent as.
        Some(body) => string_of(body).ok_or(LineProblem::NotABody(kind_of(body)))?,
    };
    Ok(Logged {
        request,
        response: keys.response,
    })
}

/// Pieces a logged stream is fed in: what the reader holds of its events between two
/// pieces stays small, whatever the stream's length.
const STREAM_PIECE: usize = 64 << 10;

/// The usage a logged response reports: `None` for a null response, an error (a sentence)
/// when it reports none that can be read.
pub(crate) fn reported_usage(
    shape: Shape,
    response: &RawValue,
) -> Result<Option<(Provider, Usage)>, String> {
    let raw = response.get();
    if raw == "null" {
        return Ok(None);
    }
    if raw.starts_with('{') {
        return whole(raw).map(Some);
    }
    let Some(text) = string_of(response) else {
        return Err(format!(
            "the response is {}: expected the whole reply (an object) or the response body as text (a string: the reply's JSON, or a stream's server-sent events)",
            kind_of(response)
        ));
    };
    if text.trim_start().starts_with('{') {
        whole(&text).map(Some)
    } else {
        streamed(shape, text).map(Some)
    }
}

/// A whole reply's usage, any provider's shape.
fn whole(text: &str) -> Result<(Provider, Usage), String> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("response is not JSON: {e}"))?;
    Usage::detect(&value).map_err(|e| e.to_string())
}

/// The API whose stream reader reads a stream logged with a request of `shape`.
fn stream_api(shape: Shape, sse: &str) -> ApiKind {
    match shape {
        Shape::Responses => ApiKind::OpenAiResponses,
        Shape::Gemini => ApiKind::Gemini,
        Shape::Anthropic => ApiKind::Anthropic,
        Shape::ChatCompletions => {
            // A Messages body with nothing only Anthropic sends reads as Chat Completions;
            // Anthropic's stream says whose it is from its first event on.
            let head = &sse.as_bytes()[..sse.len().min(512)];
            if head.windows(13).any(|w| w == b"message_start") {
                ApiKind::Anthropic
            } else if sse.contains("\"timings\"") {
                // llama.cpp's server: its `timings` are the usage, as in its whole reply.
                ApiKind::LlamaCpp
            } else {
                ApiKind::OpenAi
            }
        }
    }
}

/// A streamed reply's usage: the stream read to its end by the wire's reader. The text is
/// let go once read, before the reply it amounts to is made.
fn streamed(shape: Shape, sse: Cow<'_, str>) -> Result<(Provider, Usage), String> {
    let api = stream_api(shape, &sse);
    let mut reader = StreamReader::new(api);
    let mut last = None;
    for piece in sse.as_bytes().chunks(STREAM_PIECE) {
        let fed = reader.feed(piece);
        while let Some(event) = reader.next_event() {
            if let StreamEvent::Usage(usage) = event {
                last = Some(usage);
            }
        }
        fed.map_err(|e| format!("the response stream: {e}"))?;
    }
    drop(sse);
    let usage = match reader.into_reply() {
        Ok(reply) => reply.usage,
        // A stream that ended as its API ends one but holds no message to record (a prompt
        // blocked) still reports what it cost, as its whole reply does.
        Err(StreamError::Reply { .. }) => last,
        Err(e) => return Err(format!("the response stream: {e}")),
    };
    let Some(usage) = usage else {
        return Err(match api {
            ApiKind::OpenAi => "the response stream carries no usage (Chat Completions streams it only with `stream_options: {\"include_usage\": true}`)".to_owned(),
            _ => "the response stream carries no usage".to_owned(),
        });
    };
    whole(&usage.json)
}
