//! A provider's reply read back: the message the next request must carry, the tool calls to
//! run, the usage to meter.

use std::borrow::Cow;

use prompt_core::hash::Digest128;
use prompt_core::profile::Provider;
use prompt_core::{ApiKind, Session};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::error::WireError;
use crate::raw::{self, Object, push_quoted};
use crate::wire::Wire;
use prompt_core::input::{EXCERPT_BYTES, excerpt};

/// The largest reply body read; a longer one is refused before parsing.
pub const MAX_REPLY_BYTES: usize = 16 << 20;

/// Most bytes of a provider's error message kept in [`WireError::ProviderError`].
const MAX_ERROR_MESSAGE: usize = 512;

/// A tool call the agent must run, then answer with
/// [`Session::record_tool`](prompt_core::Session::record_tool) under the same id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCall {
    /// The call id (Gemini calls without one get a deterministic id, `gemini-…`).
    pub id: String,
    /// The function name.
    pub name: String,
    /// The arguments, as the JSON text the model wrote.
    pub arguments: String,
}

/// Whose usage shape [`UsageReport::json`] is: the workspace's one provider identity
/// (`prompt_core::profile::Provider`), once an enum of this crate's own.
#[deprecated(note = "use prompt_core::profile::Provider")]
pub type UsageProvider = Provider;

/// A reply's usage object, raw, for `prompt_measure::Usage::from_provider`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageReport {
    /// Its shape.
    pub provider: Provider,
    /// The object, as the provider sent it.
    pub json: String,
}

/// A reply, read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reply {
    /// The assistant message as the history stores it (what the next request carries).
    pub message: String,
    /// The tool calls to run, in order.
    pub tool_calls: Vec<ToolCall>,
    /// The reply's text (thinking excluded), joined.
    pub text: String,
    /// Why generation stopped, as the provider says it.
    pub stop_reason: Option<String>,
    /// The usage, when the reply has one.
    pub usage: Option<UsageReport>,
    /// The reply's `id` (Gemini's `responseId`), read from a whole reply: Anthropic's cache
    /// diagnostics name the previous reply by it.
    pub id: Option<String>,
    /// The provider's cache diagnostics object, raw, when the reply has one (Anthropic's
    /// `diagnostics`: `cache_miss_reason` with its `type` and `cache_missed_input_tokens`;
    /// OpenAI Responses' `prompt_cache_diagnostics`, also in a stream's
    /// `response.completed`); read it with
    /// [`ProviderDiagnosis::parse`](crate::ProviderDiagnosis::parse).
    pub diagnostics: Option<String>,
}

impl Wire {
    /// Reads a reply body of this wire's API and records its message into `session`
    /// (byte-for-byte what the provider sent, in the shape the next body carries back).
    /// Returns the tool calls to run and the usage to meter.
    ///
    /// Nothing is recorded when the body is refused.
    pub fn record_reply(&self, session: &mut Session, body: &[u8]) -> Result<Reply, WireError> {
        let reply = record(session, parse(self.api(), body, salt(session))?)?;
        self.remember_reply(reply.id.as_deref());
        Ok(reply)
    }
}

/// What makes the ids of Gemini calls without one unique in `session`: its history length
/// when the reply is recorded.
pub(crate) fn salt(session: &Session) -> u64 {
    u64::try_from(session.history().len()).unwrap_or(u64::MAX)
}

/// The last step of reading a reply, whole or streamed: records its message into `session`
/// (nothing when the session refuses it) and hands the reply back.
pub(crate) fn record(session: &mut Session, reply: Reply) -> Result<Reply, WireError> {
    session
        .record_assistant_raw(&reply.message)
        .map_err(WireError::Record)?;
    Ok(reply)
}

/// Reads a reply body of `api` without recording it (ids made up for Gemini calls without
/// one are unique only when recorded through [`Wire::record_reply`]).
pub fn read_reply(api: ApiKind, body: &[u8]) -> Result<Reply, WireError> {
    parse(api, body, 0)
}

/// The API a reply is read for, named in its errors.
pub(crate) struct Ctx {
    pub(crate) api: &'static str,
}

impl Ctx {
    pub(crate) fn of(api: ApiKind) -> Self {
        Self {
            api: crate::api_name(api),
        }
    }

    pub(crate) fn bad(&self, at: impl Into<String>, problem: impl Into<String>) -> WireError {
        WireError::Reply {
            api: self.api,
            at: at.into(),
            problem: problem.into(),
        }
    }

    fn object<'a>(&self, raw: &'a RawValue, at: &str) -> Result<Object<'a>, WireError> {
        Object::of(raw).map_err(|p| self.bad(at, p.to_string()))
    }

    fn array<'a>(&self, raw: &'a RawValue, at: &str) -> Result<Vec<&'a RawValue>, WireError> {
        raw::array_of(raw)
            .ok_or_else(|| self.bad(at, format!("{}, not an array", raw::kind_of(raw))))
    }

    fn string<'a>(&self, o: &Object<'a>, key: &str, at: &str) -> Result<Cow<'a, str>, WireError> {
        o.str(key)
            .ok_or_else(|| self.bad(format!("{at}.{key}"), "missing or not a string"))
    }

    /// Refuses an error body: `{"error": {...}}` (`type: "error"` for Anthropic).
    fn refuse_error(&self, top: &Object<'_>) -> Result<(), WireError> {
        let Some(error) = top.get("error").filter(|e| !raw::is_null(e)) else {
            return Ok(());
        };
        Err(WireError::ProviderError {
            api: self.api,
            message: provider_message(error),
        })
    }
}

/// The message of a provider's error value (`{"message": …}`, a string, or the value
/// itself), at most [`MAX_ERROR_MESSAGE`] bytes of it.
pub(crate) fn provider_message(error: &RawValue) -> String {
    let message = Object::of(error)
        .ok()
        .and_then(|e| e.str("message").map(Cow::into_owned))
        .or_else(|| raw::string_of(error).map(Cow::into_owned))
        .unwrap_or_else(|| error.get().to_owned());
    excerpt(&message, MAX_ERROR_MESSAGE).into_owned()
}

/// Reads a whole reply body of `api`.
pub(crate) fn parse(api: ApiKind, body: &[u8], salt: u64) -> Result<Reply, WireError> {
    let ctx = Ctx::of(api);
    if body.len() > MAX_REPLY_BYTES {
        return Err(WireError::ReplyTooLarge {
            api: ctx.api,
            len: body.len(),
            max: MAX_REPLY_BYTES,
        });
    }
    let text =
        std::str::from_utf8(body).map_err(|e| ctx.bad("body", format!("not UTF-8 ({e})")))?;
    let top = Object::parse(text).map_err(|p| ctx.bad("body", p.to_string()))?;
    ctx.refuse_error(&top)?;
    let mut reply = match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => chat(&ctx, &top, api),
        ApiKind::OpenAiResponses => responses(&ctx, &top),
        ApiKind::Anthropic => anthropic(&ctx, &top),
        ApiKind::Gemini => gemini(&ctx, &top, salt),
    }?;
    // What every shape names alike, read from the whole reply.
    reply.id = top
        .str(if api == ApiKind::Gemini {
            "responseId"
        } else {
            "id"
        })
        .map(Cow::into_owned);
    // The provider's cache diagnostics: Anthropic's `diagnostics`, OpenAI Responses'
    // `prompt_cache_diagnostics` (read with `ProviderDiagnosis::parse`).
    reply.diagnostics = top
        .get(prompt_engine::provider::reply_key(api))
        .filter(|d| d.get().starts_with('{'))
        .map(|d| d.get().to_owned());
    Ok(reply)
}

fn usage(top: &Object<'_>, key: &str, provider: Provider) -> Option<UsageReport> {
    top.get(key)
        .and_then(|u| UsageReport::of(provider, u.get()))
}

impl UsageReport {
    /// `json` as the usage of `provider`, when it is an object. DeepSeek's cache counts ride
    /// in an OpenAI-shaped usage: with `prompt_cache_hit_tokens` it is DeepSeek's.
    pub(crate) fn of(provider: Provider, json: &str) -> Option<Self> {
        let deepseek = provider == Provider::OpenAi
            && Object::parse(json).is_ok_and(|o| o.has("prompt_cache_hit_tokens"));
        json.starts_with('{').then(|| Self {
            provider: if deepseek {
                Provider::DeepSeek
            } else {
                provider
            },
            json: json.to_owned(),
        })
    }
}

/// The value of a text that holds one JSON value, raw.
fn raw_value<'a>(ctx: &Ctx, text: &'a str, at: &str) -> Result<&'a RawValue, WireError> {
    serde_json::from_str(text).map_err(|e| ctx.bad(at, format!("not JSON ({e})")))
}

/// Reads the array `text` holds (`at` names it): each element, an object, is handed to
/// `each` with its index and its place (`at[i]`).
fn each_object<'a>(
    ctx: &Ctx,
    text: &'a str,
    at: &str,
    mut each: impl FnMut(usize, &str, Object<'a>) -> Result<(), WireError>,
) -> Result<(), WireError> {
    for (i, item) in ctx
        .array(raw_value(ctx, text, at)?, at)?
        .into_iter()
        .enumerate()
    {
        let at = format!("{at}[{i}]");
        each(i, &at, ctx.object(item, &at)?)?;
    }
    Ok(())
}

impl Reply {
    /// A reply read from a whole body or a stream's end: no id nor diagnostics yet.
    fn read(
        message: String,
        tool_calls: Vec<ToolCall>,
        text: String,
        stop_reason: Option<String>,
        usage: Option<UsageReport>,
    ) -> Self {
        Self {
            message,
            tool_calls,
            text,
            stop_reason,
            usage,
            id: None,
            diagnostics: None,
        }
    }
}

/// The history's message of a reply whose own form is kept under `key` (Responses'
/// `output`, Gemini's `parts`): no content, its tool calls in the OpenAI shape, then `raw`.
fn kept_message(tool_calls: &[ToolCall], key: &str, raw: &str) -> String {
    let mut message = String::from(r#"{"role":"assistant","content":null"#);
    push_tool_calls(&mut message, tool_calls);
    message.push_str(&format!(r#","{key}":"#));
    message.push_str(raw);
    message.push('}');
    message
}

/// `,"tool_calls":[…]` in the OpenAI shape, for the session's bookkeeping of open calls.
fn push_tool_calls(out: &mut String, calls: &[ToolCall]) {
    if calls.is_empty() {
        return;
    }
    out.push_str(r#","tool_calls":["#);
    for (i, call) in calls.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_openai_call(out, &call.id, &call.name, &call.arguments);
    }
    out.push(']');
}

/// One tool call in the OpenAI shape: `{"id":…,"type":"function","function":{"name":…,
/// "arguments":…}}` (the session's bookkeeping, and a streamed OpenAI message).
pub(crate) fn push_openai_call(out: &mut String, id: &str, name: &str, arguments: &str) {
    out.push_str(r#"{"id":"#);
    push_quoted(out, id);
    out.push_str(r#","type":"function","function":{"name":"#);
    push_quoted(out, name);
    out.push_str(r#","arguments":"#);
    push_quoted(out, arguments);
    out.push_str("}}");
}

fn chat(ctx: &Ctx, top: &Object<'_>, api: ApiKind) -> Result<Reply, WireError> {
    let choices = top
        .get("choices")
        .ok_or_else(|| ctx.bad("choices", "missing"))?;
    let choices = ctx.array(choices, "choices")?;
    let Some(first) = choices.first() else {
        return Err(WireError::NoMessage {
            api: ctx.api,
            reason: "no choices".to_owned(),
        });
    };
    let choice = ctx.object(first, "choices[0]")?;
    let raw_message = choice
        .get("message")
        .ok_or_else(|| ctx.bad("choices[0].message", "missing"))?;
    let usage = if api == ApiKind::LlamaCpp {
        usage(top, "timings", Provider::LlamaCpp).or_else(|| usage(top, "usage", Provider::OpenAi))
    } else {
        usage(top, "usage", Provider::OpenAi)
    };
    chat_reply(
        ctx,
        raw_message.get(),
        choice.str("finish_reason").map(Cow::into_owned),
        usage,
    )
}

/// A Chat Completions reply from its message (`choices[0].message`, kept as given), finish
/// reason and usage: what a whole reply and a stream both end with.
pub(crate) fn chat_reply(
    ctx: &Ctx,
    raw_message: &str,
    stop_reason: Option<String>,
    usage: Option<UsageReport>,
) -> Result<Reply, WireError> {
    let message =
        Object::parse(raw_message).map_err(|p| ctx.bad("choices[0].message", p.to_string()))?;
    let role = ctx.string(&message, "role", "choices[0].message")?;
    if role != "assistant" {
        return Err(ctx.bad(
            "choices[0].message.role",
            format!("\"{}\", not \"assistant\"", excerpt(&role, EXCERPT_BYTES)),
        ));
    }
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").filter(|c| !raw::is_null(c)) {
        for (i, call) in ctx
            .array(calls, "choices[0].message.tool_calls")?
            .into_iter()
            .enumerate()
        {
            let at = format!("choices[0].message.tool_calls[{i}]");
            let call = ctx.object(call, &at)?;
            let function = call
                .get("function")
                .ok_or_else(|| ctx.bad(format!("{at}.function"), "missing"))?;
            let function = ctx.object(function, &format!("{at}.function"))?;
            tool_calls.push(ToolCall {
                id: ctx.string(&call, "id", &at)?.into_owned(),
                name: ctx
                    .string(&function, "name", &format!("{at}.function"))?
                    .into_owned(),
                arguments: function
                    .str("arguments")
                    .map_or_else(|| "{}".to_owned(), Cow::into_owned),
            });
        }
    }
    let text = match message.get("content") {
        Some(c) => raw::string_of(c).map(Cow::into_owned).unwrap_or_default(),
        None => String::new(),
    };
    Ok(Reply::read(
        raw_message.to_owned(),
        tool_calls,
        text,
        stop_reason,
        usage,
    ))
}

fn responses(ctx: &Ctx, top: &Object<'_>) -> Result<Reply, WireError> {
    let output = top
        .get("output")
        .ok_or_else(|| ctx.bad("output", "missing"))?;
    if ctx.array(output, "output")?.is_empty() {
        return Err(WireError::NoMessage {
            api: ctx.api,
            reason: top.str("status").map_or_else(
                || "empty output".to_owned(),
                |s| format!("status {}", excerpt(&s, EXCERPT_BYTES)),
            ),
        });
    }
    let stop_reason = top
        .get("incomplete_details")
        .and_then(|d| Object::of(d).ok())
        .and_then(|d| d.str("reason").map(Cow::into_owned))
        .or_else(|| top.str("status").map(Cow::into_owned));
    responses_reply(
        ctx,
        output.get(),
        stop_reason,
        usage(top, "usage", Provider::OpenAi),
    )
}

/// A Responses reply from its `output` items (kept as given), stop reason and usage.
pub(crate) fn responses_reply(
    ctx: &Ctx,
    output: &str,
    stop_reason: Option<String>,
    usage: Option<UsageReport>,
) -> Result<Reply, WireError> {
    let mut tool_calls = Vec::new();
    let mut text = String::new();
    each_object(ctx, output, "output", |_, at, item| {
        match item.str("type").as_deref() {
            Some("function_call") => tool_calls.push(ToolCall {
                id: ctx.string(&item, "call_id", at)?.into_owned(),
                name: ctx.string(&item, "name", at)?.into_owned(),
                arguments: ctx.string(&item, "arguments", at)?.into_owned(),
            }),
            Some("message") => {
                let Some(content) = item.get("content") else {
                    return Ok(());
                };
                for (j, part) in ctx
                    .array(content, &format!("{at}.content"))?
                    .into_iter()
                    .enumerate()
                {
                    let part = ctx.object(part, &format!("{at}.content[{j}]"))?;
                    if part.str("type").as_deref() == Some("output_text")
                        && let Some(t) = part.str("text")
                    {
                        text.push_str(&t);
                    }
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    let message = kept_message(&tool_calls, "output", output);
    Ok(Reply::read(message, tool_calls, text, stop_reason, usage))
}

fn anthropic(ctx: &Ctx, top: &Object<'_>) -> Result<Reply, WireError> {
    if top.str("type").as_deref() == Some("error") {
        return Err(WireError::ProviderError {
            api: ctx.api,
            message: "an error without a message".to_owned(),
        });
    }
    let content = top
        .get("content")
        .ok_or_else(|| ctx.bad("content", "missing"))?;
    ctx.array(content, "content")?;
    anthropic_reply(
        ctx,
        content.get(),
        top.str("stop_reason").map(Cow::into_owned),
        usage(top, "usage", Provider::Anthropic),
    )
}

/// An Anthropic reply from its `content` blocks (kept as given), stop reason and usage.
pub(crate) fn anthropic_reply(
    ctx: &Ctx,
    content: &str,
    stop_reason: Option<String>,
    usage: Option<UsageReport>,
) -> Result<Reply, WireError> {
    let mut tool_calls = Vec::new();
    let mut text = String::new();
    each_object(ctx, content, "content", |_, at, block| {
        match block.str("type").as_deref() {
            Some("tool_use") => {
                let input = block
                    .get("input")
                    .ok_or_else(|| ctx.bad(format!("{at}.input"), "missing"))?;
                tool_calls.push(ToolCall {
                    id: ctx.string(&block, "id", at)?.into_owned(),
                    name: ctx.string(&block, "name", at)?.into_owned(),
                    arguments: input.get().to_owned(),
                });
            }
            Some("text") => {
                if let Some(t) = block.str("text") {
                    text.push_str(&t);
                }
            }
            None => return Err(ctx.bad(format!("{at}.type"), "missing or not a string")),
            Some(_) => {}
        }
        Ok(())
    })?;
    let mut message = String::from(r#"{"role":"assistant","content":"#);
    message.push_str(content);
    push_tool_calls(&mut message, &tool_calls);
    message.push('}');
    Ok(Reply::read(message, tool_calls, text, stop_reason, usage))
}

fn gemini(ctx: &Ctx, top: &Object<'_>, salt: u64) -> Result<Reply, WireError> {
    let no_message = |reason: String| WireError::NoMessage {
        api: ctx.api,
        reason,
    };
    let blocked = || {
        top.get("promptFeedback")
            .and_then(|f| Object::of(f).ok())
            .and_then(|f| {
                f.str("blockReason")
                    .map(|r| format!("prompt blocked: {}", excerpt(&r, EXCERPT_BYTES)))
            })
            .unwrap_or_else(|| "no candidates".to_owned())
    };
    let Some(candidates) = top.get("candidates") else {
        return Err(no_message(blocked()));
    };
    let candidates = ctx.array(candidates, "candidates")?;
    let Some(first) = candidates.first() else {
        return Err(no_message(blocked()));
    };
    let candidate = ctx.object(first, "candidates[0]")?;
    let finish = candidate.str("finishReason").map(Cow::into_owned);
    let Some(content) = candidate.get("content") else {
        return Err(no_message(format!(
            "a candidate without content (finishReason {})",
            excerpt(finish.as_deref().unwrap_or("missing"), EXCERPT_BYTES)
        )));
    };
    let content = ctx.object(content, "candidates[0].content")?;
    let Some(parts) = content.get("parts") else {
        return Err(no_message(format!(
            "a candidate without parts (finishReason {})",
            excerpt(finish.as_deref().unwrap_or("missing"), EXCERPT_BYTES)
        )));
    };
    ctx.array(parts, "candidates[0].content.parts")?;
    gemini_reply(
        ctx,
        parts.get(),
        finish,
        usage(top, "usageMetadata", Provider::Gemini),
        salt,
    )
}

/// A Gemini reply from its first candidate's `content.parts` (kept as given), finish reason
/// and usage; `salt` makes the ids of calls without one unique in the session.
pub(crate) fn gemini_reply(
    ctx: &Ctx,
    parts: &str,
    finish: Option<String>,
    usage: Option<UsageReport>,
    salt: u64,
) -> Result<Reply, WireError> {
    let digest = Digest128::of(&[parts.as_bytes(), &salt.to_le_bytes()]).to_string();
    let mut tool_calls = Vec::new();
    let mut text = String::new();
    each_object(ctx, parts, "candidates[0].content.parts", |i, at, part| {
        if let Some(call) = part.get("functionCall") {
            let at = format!("{at}.functionCall");
            let call = ctx.object(call, &at)?;
            let id = call
                .str("id")
                .map_or_else(|| format!("gemini-{}-{i}", &digest[..16]), Cow::into_owned);
            tool_calls.push(ToolCall {
                id,
                name: ctx.string(&call, "name", &at)?.into_owned(),
                arguments: call
                    .get("args")
                    .map_or_else(|| "{}".to_owned(), |a| a.get().to_owned()),
            });
        } else if part.get("thought").is_none_or(|t| t.get() != "true")
            && let Some(t) = part.str("text")
        {
            text.push_str(&t);
        }
        Ok(())
    })?;
    let message = kept_message(&tool_calls, "parts", parts);
    Ok(Reply::read(message, tool_calls, text, finish, usage))
}
