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
use prompt_core::raw_json::{Object, kind_of, string_of};
use prompt_wire::stream::{StreamError, StreamEvent, StreamReader};
use serde_json::Value;
use serde_json::value::RawValue;

use super::audit::LineProblem;
use super::meter::{Provider, Usage};
use super::provider_verdict::diagnostics_api;
use prompt_wire::ProviderDiagnosis;

/// A logged response: as a log line holds it (a JSON value: the whole reply, or the reply's
/// text as a string), or as a proxy copied it (the reply's text: its JSON, or a stream's
/// server-sent events).
#[derive(Debug, Clone)]
pub enum LoggedResponse<'a> {
    /// A log line's `response` value.
    Json(&'a RawValue),
    /// The reply's body as text.
    Text(Cow<'a, str>),
}

/// One exchange as the audit reads it: the request body's text, its response, and what the
/// logger knew of the request besides its body. A log line is read into one
/// ([`read_line`]); the proxy hands its exchanges over as one, with no JSON between.
#[derive(Debug, Default)]
pub struct LoggedExchange<'a> {
    /// The request body's text.
    pub request: Cow<'a, str>,
    /// The response, if one was logged.
    pub response: Option<LoggedResponse<'a>>,
    /// The URL path (Gemini's names the model), bounded ([`recorded_headers`]' bound).
    pub path: Option<String>,
    /// The headers that name a session or an agent or key a cache ([`recorded_headers`]);
    /// every other one (a credential among them) is dropped as it is read.
    pub headers: Vec<(String, String)>,
    /// When it was sent, in seconds since the Unix epoch.
    pub ts: Option<f64>,
    /// A session the logger named.
    pub session: Option<String>,
    /// The reply id the proxy's `--diagnose` asked the provider to compare this request
    /// with (the line's `diagnosed_against`): the logged request is the agent's own.
    pub diagnosed_against: Option<String>,
    /// The launch that saw it (a proxy's process: the line's `launch`), when the logger
    /// said: a request continuing a session another launch saw is a resumed one.
    pub launch: Option<String>,
    /// What `cacheline proxy --stabilize` did to the request (the line's `repair`): the
    /// logged request is then what was sent upstream.
    pub repair: Option<RepairNote>,
    /// The usage the provider reported, when the logger kept its counts instead of the
    /// reply (a session store): read as a reply's usage would be, when no response is
    /// given or it reports none.
    pub usage: Option<(Provider, Usage)>,
    /// The body's top-level object, when the line is a bare body (read once, here).
    pub(crate) top: Option<Object<'a>>,
}

impl<'a> LoggedExchange<'a> {
    /// An exchange of this request body, nothing else known yet (fill in the rest).
    pub fn of(request: Cow<'a, str>) -> Self {
        Self {
            request,
            ..Self::default()
        }
    }

    /// [`LoggedExchange::of`] a body whose top-level object the caller has read already
    /// (`top`, [`Object::parse`] of `request`): the audit does not read it again.
    pub fn of_object(request: &'a str, top: Object<'a>) -> Self {
        Self {
            request: Cow::Borrowed(request),
            top: Some(top),
            ..Self::default()
        }
    }
}

/// The headers an exchange records, from those it was sent with: only the ones that name a
/// session or an agent or key a cache ([`prompt_engine::keep_header`]), at most
/// [`MAX_HEADERS`] of them, lower-case names, values cut at [`MAX_FIELD_BYTES`]. The
/// one filter every header goes through, whether a log line's or the proxy's.
pub fn recorded_headers<'h>(
    headers: impl IntoIterator<Item = (&'h str, Cow<'h, str>)>,
) -> Vec<(String, String)> {
    headers
        .into_iter()
        .filter(|(name, _)| prompt_engine::keep_header(name))
        .take(MAX_HEADERS)
        .map(|(name, value)| {
            (
                name.to_ascii_lowercase(),
                prompt_core::input::excerpt(&value, MAX_FIELD_BYTES).into_owned(),
            )
        })
        .collect()
}

/// A path or logged field cut at [`MAX_FIELD_BYTES`].
pub fn bounded_field(text: &str) -> String {
    prompt_core::input::excerpt(text, MAX_FIELD_BYTES).into_owned()
}

/// The most headers read from one exchange.
pub const MAX_HEADERS: usize = 64;
/// The longest path, header value or session read (longer ones are cut).
pub const MAX_FIELD_BYTES: usize = 1024;

fn bounded_string(raw: Option<&RawValue>) -> Option<String> {
    Some(bounded_field(&string_of(raw?)?))
}

/// A timestamp: seconds since the epoch as a number, or an RFC 3339 string
/// (`2026-12-04T23:58:00Z`, `…+01:00`, fractions of a second).
fn timestamp(raw: &RawValue) -> Option<f64> {
    if let Ok(n) = serde_json::from_str::<f64>(raw.get()) {
        return n.is_finite().then_some(n);
    }
    rfc3339(&string_of(raw)?)
}

fn rfc3339(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut frac = 0.0;
    if let Some(r) = rest.strip_prefix('.') {
        let digits = r.bytes().take_while(u8::is_ascii_digit).count();
        frac = format!("0.{}", &r[..digits.min(9)])
            .parse::<f64>()
            .unwrap_or(0.0);
        rest = &r[digits..];
    }
    let offset = match rest {
        "Z" | "z" | "" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return None,
            };
            let oh = rest.get(1..3)?.parse::<i64>().ok()?;
            let om = rest.get(4..6)?.parse::<i64>().ok()?;
            sign * (oh * 3600 + om * 60)
        }
    };
    let days = prompt_core::calendar::days_from_civil(y, mo, d);
    Some((days * 86_400 + h * 3600 + mi * 60 + sec - offset) as f64 + frac)
}

/// Splits a line into its request body, its response and what the log says besides.
pub fn read_line(text: &str) -> Result<LoggedExchange<'_>, LineProblem> {
    let line = match Object::parse(text) {
        Ok(line) => line,
        Err(problem) => {
            // Not JSON: serde_json's account of where. JSON but not one object of unique
            // keys: the body reader's, as for a bare body.
            serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(LineProblem::Json)?;
            return Err(LineProblem::Request(prompt_wire::GuardError::NotAnObject {
                body: prompt_wire::Which::Request,
                problem: problem.to_string(),
            }));
        }
    };
    let Some(body) = line.get("request") else {
        // A bare body: its own keys (a Responses `user`…) are not the log's, and it was
        // read once, here.
        return Ok(LoggedExchange {
            request: Cow::Borrowed(text),
            response: line.get("response").map(LoggedResponse::Json),
            top: Some(line),
            ..LoggedExchange::default()
        });
    };
    let request = if body.get().starts_with('{') {
        Cow::Borrowed(body.get())
    } else {
        // A body logged as the text it was sent as.
        string_of(body).ok_or(LineProblem::NotABody(kind_of(body)))?
    };
    let headers = match line.get("headers").and_then(|h| Object::of(h).ok()) {
        Some(object) => recorded_headers(object.fields.iter().map(|(name, value)| {
            // A header sent several times is logged as an array: its values joined.
            let value = match string_of(value) {
                Some(v) => v,
                None => Cow::Owned(
                    prompt_core::raw_json::array_of(value)
                        .unwrap_or_default()
                        .into_iter()
                        .filter_map(|v| string_of(v).map(Cow::into_owned))
                        .collect::<Vec<_>>()
                        .join(", "),
                ),
            };
            (name.as_ref(), value)
        })),
        None => Vec::new(),
    };
    Ok(LoggedExchange {
        request,
        response: line.get("response").map(LoggedResponse::Json),
        path: bounded_string(line.get("path")),
        headers,
        ts: line.get("ts").and_then(timestamp),
        session: bounded_string(line.get("session")),
        diagnosed_against: bounded_string(line.get("diagnosed_against")),
        launch: bounded_string(line.get("launch")),
        repair: line.get("repair").and_then(RepairNote::read),
        ..LoggedExchange::default()
    })
}

/// What `cacheline proxy --stabilize` did to one request: the catalogue entry whose change
/// it repaired (the element sent as the provider last saw it, the new line appended as an
/// update), or why it forwarded the request unchanged.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RepairNote {
    /// The catalogue entry (`*` when the body could not be looked at).
    pub entry: String,
    /// Repaired, or refused (forwarded unchanged).
    pub outcome: RepairOutcome,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The line the appended update delivers (the newest, when there are several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update: Option<String>,
}

/// Whether a request was repaired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RepairOutcome {
    /// Sent with the element as the provider last saw it and the update appended.
    Repaired,
    /// Forwarded unchanged.
    Refused,
}

impl RepairNote {
    /// A refusal for `entry`, for `reason`.
    pub fn refused(entry: &str, reason: impl Into<String>) -> Self {
        RepairNote {
            entry: entry.to_owned(),
            outcome: RepairOutcome::Refused,
            reason: Some(reason.into()),
            update: None,
        }
    }

    /// A log line's `repair`, its texts bounded; `None` when it is not one.
    fn read(raw: &RawValue) -> Option<RepairNote> {
        let note: RepairNote = serde_json::from_str(raw.get()).ok()?;
        Some(RepairNote {
            entry: bounded_field(&note.entry),
            outcome: note.outcome,
            reason: note.reason.as_deref().map(bounded_field),
            update: note.update.as_deref().map(bounded_field),
        })
    }
}

/// The request body of a log line: the line itself, or its `request` (an object, or its
/// JSON as a string): what `audit --guard` compares.
pub fn request_body(text: &str) -> Result<Cow<'_, str>, LineProblem> {
    read_line(text).map(|l| l.request)
}

/// What a log line says of its request, as the audit reads it: the body, and the path,
/// headers and time a wrapped line logs beside it. Only the headers that name a session or
/// an agent or key a cache are kept ([`prompt_wire::engine::keep_header`]): a credential
/// never is. The path is as logged, its query included (Gemini's `?key=`): a caller that
/// shows it drops the query.
#[derive(Debug, Clone)]
pub struct LoggedRequest<'a> {
    /// The request body's text.
    pub body: Cow<'a, str>,
    /// The URL path, as logged (bounded).
    pub path: Option<String>,
    /// The headers kept, lower-case names, values bounded.
    pub headers: Vec<(String, String)>,
    /// When it was sent, in seconds since the Unix epoch.
    pub ts: Option<f64>,
}

/// The request of a log line (see [`LoggedRequest`]): what `cacheline evidence` reads a
/// request's bytes again with, as the audit read them.
pub fn read_request(text: &str) -> Result<LoggedRequest<'_>, LineProblem> {
    let logged = read_line(text)?;
    Ok(LoggedRequest {
        body: logged.request,
        path: logged.path,
        headers: logged.headers,
        ts: logged.ts,
    })
}

/// Pieces a logged stream is fed in: what the reader holds of its events between two
/// pieces stays small, whatever the stream's length.
const STREAM_PIECE: usize = 64 << 10;

/// What a logged response says: the usage it reports (`None` for a null response, an error
/// sentence when it reports none that can be read), and its id (a later
/// `previous_response_id` names it), whole or streamed.
pub(crate) struct Response {
    pub(crate) usage: Result<Option<(Provider, Usage)>, String>,
    pub(crate) id: Option<String>,
    /// The provider's cache diagnostics, when the reply carries an object of them
    /// (Anthropic's `diagnostics`, OpenAI Responses' `prompt_cache_diagnostics`), read.
    pub(crate) diagnostics: Option<Result<ProviderDiagnosis, String>>,
}

impl Response {
    fn of(usage: Result<Option<(Provider, Usage)>, String>, id: Option<String>) -> Self {
        Self {
            usage,
            id: id.map(|id| prompt_core::input::excerpt(&id, MAX_FIELD_BYTES).into_owned()),
            diagnostics: None,
        }
    }

    fn with_diagnostics(mut self, shape: ApiKind, raw: Option<&str>) -> Self {
        if let (Some(api), Some(raw)) = (diagnostics_api(shape), raw) {
            self.diagnostics = Some(ProviderDiagnosis::parse(api, raw).map_err(|e| e.to_string()));
        }
        self
    }
}

/// Reads a logged response: the whole reply (an object, or its JSON as text) or a stream's
/// server-sent events (text).
pub(crate) fn read_response(shape: ApiKind, response: &LoggedResponse<'_>) -> Response {
    let response = match response {
        LoggedResponse::Json(raw) => raw,
        LoggedResponse::Text(text) => return read_text(shape, text.clone()),
    };
    let raw = response.get();
    if raw == "null" {
        return Response::of(Ok(None), None);
    }
    if raw.starts_with('{') {
        return whole(shape, raw);
    }
    let Some(text) = string_of(response) else {
        return Response::of(
            Err(format!(
                "the response is {}: expected the whole reply (an object) or the response body as text (a string: the reply's JSON, or a stream's server-sent events)",
                kind_of(response)
            )),
            None,
        );
    };
    read_text(shape, text)
}

/// A response as text: the whole reply's JSON, or a stream's server-sent events.
fn read_text(shape: ApiKind, text: Cow<'_, str>) -> Response {
    if text.trim_start().starts_with('{') {
        whole(shape, &text)
    } else {
        streamed(shape, text)
    }
}

/// A whole reply's usage, any provider's shape, its id and its cache diagnostics.
fn whole(shape: ApiKind, text: &str) -> Response {
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(e) => return Response::of(Err(format!("response is not JSON: {e}")), None),
    };
    let id = value.get("id").and_then(Value::as_str).map(str::to_owned);
    let diagnostics = diagnostics_api(shape)
        .and_then(|api| value.get(diagnostics_key(api)))
        .filter(|d| !d.is_null())
        .map(Value::to_string);
    Response::of(
        Usage::detect(&value).map(Some).map_err(|e| e.to_string()),
        id,
    )
    .with_diagnostics(shape, diagnostics.as_deref())
}

/// The key a whole reply of `api` carries its cache diagnostics under.
fn diagnostics_key(api: ApiKind) -> &'static str {
    match api {
        ApiKind::OpenAiResponses => "prompt_cache_diagnostics",
        _ => "diagnostics",
    }
}

fn usage_of(json: &str) -> Result<(Provider, Usage), String> {
    let value: Value =
        serde_json::from_str(json).map_err(|e| format!("response is not JSON: {e}"))?;
    Usage::detect(&value).map_err(|e| e.to_string())
}

/// The API whose stream reader reads a stream logged with a request of `shape`.
fn stream_api(shape: ApiKind, sse: &str) -> ApiKind {
    match shape {
        ApiKind::OpenAiResponses => ApiKind::OpenAiResponses,
        ApiKind::Gemini => ApiKind::Gemini,
        ApiKind::Anthropic => ApiKind::Anthropic,
        ApiKind::OpenAi | ApiKind::LlamaCpp => {
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

/// A streamed reply's usage and id: the stream read to its end by the wire's reader. The
/// text is let go once read, before the reply it amounts to is made.
fn streamed(shape: ApiKind, sse: Cow<'_, str>) -> Response {
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
        if let Err(e) = fed {
            return Response::of(Err(format!("the response stream: {e}")), None);
        }
    }
    drop(sse);
    let (usage, id, diagnostics) = match reader.into_reply() {
        Ok(reply) => (reply.usage, reply.id, reply.diagnostics),
        // A stream that ended as its API ends one but holds no message to record (a prompt
        // blocked) still reports what it cost, as its whole reply does.
        Err(StreamError::Reply { .. }) => (last, None, None),
        Err(e) => return Response::of(Err(format!("the response stream: {e}")), None),
    };
    let Some(usage) = usage else {
        let why = match api {
            ApiKind::OpenAi => "the response stream carries no usage (Chat Completions streams it only with `stream_options: {\"include_usage\": true}`)".to_owned(),
            _ => "the response stream carries no usage".to_owned(),
        };
        return Response::of(Err(why), id).with_diagnostics(shape, diagnostics.as_deref());
    };
    Response::of(usage_of(&usage.json).map(Some), id)
        .with_diagnostics(shape, diagnostics.as_deref())
}
