//! A blocking OpenAI-compatible client for llama.cpp's server.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use prompt_core::Request;
use serde::{Deserialize, Serialize};

/// The largest response [`LlamaClient::post_body`] reads: 64 MiB.
pub const MAX_RESPONSE_BYTES: u64 = 64 << 20;

/// Why a call to the server failed. Every variant names the URL it was talking to.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The connection or the transfer failed (refused, reset, timed out).
    #[error("{url}: transport failed: {}", prompt_core::input::chain(.source))]
    Transport {
        /// The endpoint.
        url: String,
        /// What ureq reported.
        source: Box<ureq::Error>,
    },
    /// The server answered with an error status.
    #[error("{url}: HTTP {status}: {body}")]
    Status {
        /// The endpoint.
        url: String,
        /// The status code.
        status: u16,
        /// The start of the response body (llama.cpp puts its error message there).
        body: String,
    },
    /// The response is not the JSON this client expects.
    #[error("{url}: unexpected response ({}); it starts {excerpt:?}", prompt_core::input::chain(.source))]
    Parse {
        /// The endpoint.
        url: String,
        /// The parser's error.
        source: serde_json::Error,
        /// The first bytes of the offending text.
        excerpt: String,
    },
    /// The response lacks a field this client needs (e.g. `timings`: not a llama.cpp server).
    #[error("{url}: the response has no `{field}` (is this a llama.cpp server?)")]
    Missing {
        /// The endpoint.
        url: String,
        /// The missing field.
        field: &'static str,
    },
    /// Reading a streamed response failed.
    #[error("{url}: reading the event stream: {}", prompt_core::input::chain(.source))]
    Stream {
        /// The endpoint.
        url: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The URL file exists but cannot be read.
    #[error("cannot read the server URL file {path}: {}", prompt_core::input::chain(.source))]
    UrlFile {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A request could not be composed.
    #[error(transparent)]
    Compose(#[from] prompt_core::ComposeError),
    /// A request composed here is not the JSON array of messages it should be.
    #[error("the composed {what} is not valid JSON: {}", prompt_core::input::chain(.source))]
    Composed {
        /// Which request.
        what: &'static str,
        /// The parser's error.
        source: serde_json::Error,
    },
    /// A built-in policy did not load.
    #[error(transparent)]
    Policy(#[from] prompt_core::policy::PolicyErrors),
    /// A built-in component id is invalid.
    #[error(transparent)]
    Id(#[from] prompt_core::id::IdError),
}

/// Sampling and caching options of one chat request (llama.cpp's names).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ChatOptions {
    /// Tokens to generate at most.
    pub max_tokens: u32,
    /// 0 for greedy decoding.
    pub temperature: f32,
    /// 1 with temperature 0: greedy, independent of the sampler chain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    /// Sampler seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Whether the server may reuse the slot's cached prefix (llama.cpp's `cache_prompt`).
    pub cache_prompt: bool,
    /// Stream the reply; the client then measures the time to the first token.
    pub stream: bool,
}

impl ChatOptions {
    /// The same, with `max_tokens` (tokens to generate at most).
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// The same, with `temperature` (0 for greedy decoding).
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = temperature;
        self
    }

    /// The same, with `top_k` ().
    pub fn with_top_k(mut self, top_k: Option<u32>) -> Self {
        self.top_k = top_k;
        self
    }

    /// The same, with `seed` ().
    pub fn with_seed(mut self, seed: Option<u64>) -> Self {
        self.seed = seed;
        self
    }

    /// The same, with `cache_prompt` (whether the server may reuse the slot's cached prefix (llama.cpp's `cache_prompt`)).
    pub fn with_cache_prompt(mut self, cache_prompt: bool) -> Self {
        self.cache_prompt = cache_prompt;
        self
    }

    /// The same, with `stream` (stream the reply; the client then measures the time to the first token).
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }
}

impl ChatOptions {
    /// Prompt cache on, greedy, streamed, a few tokens: what the cache measurements send.
    pub fn cached(max_tokens: u32) -> Self {
        Self {
            max_tokens,
            temperature: 0.0,
            top_k: Some(1),
            seed: Some(42),
            cache_prompt: true,
            stream: true,
        }
    }

    /// Prompt cache off, greedy, fixed seed, not streamed: deterministic behaviour probes.
    pub fn greedy_uncached(max_tokens: u32) -> Self {
        Self {
            max_tokens,
            temperature: 0.0,
            top_k: Some(1),
            seed: Some(42),
            cache_prompt: false,
            stream: false,
        }
    }
}

/// `timings` of a llama.cpp response: what the server did for this request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    /// Prompt tokens evaluated (re-processed) for this request.
    pub prompt_n: u64,
    /// Prompt tokens reused from the slot's cache.
    #[serde(default)]
    pub cache_n: u64,
    /// Time spent evaluating the `prompt_n` tokens, in milliseconds.
    pub prompt_ms: f64,
    /// Tokens generated.
    #[serde(default)]
    pub predicted_n: u64,
    /// Time spent generating, in milliseconds.
    #[serde(default)]
    pub predicted_ms: f64,
}

/// `usage` of an OpenAI-compatible response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
    /// `prompt_tokens_details.cached_tokens` (llama.cpp: equal to `timings.cache_n`).
    pub cached_tokens: Option<u64>,
}

/// One chat completion, with what the server reported and what the client measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatReply {
    /// The generated text.
    pub content: String,
    /// `stop` or `length`.
    pub finish_reason: Option<String>,
    /// The server's timings.
    pub timings: Timings,
    /// The usage block.
    pub usage: Usage,
    /// Streamed requests only: wall time from sending the request to the first streamed
    /// chunk (llama.cpp sends it once the first token is decoded), measured by the client.
    pub ttft: Option<Duration>,
    /// Wall time of the whole request, measured by the client.
    pub elapsed: Duration,
}

#[derive(Deserialize)]
struct RawUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<RawDetails>,
}

#[derive(Deserialize)]
struct RawDetails {
    cached_tokens: Option<u64>,
}

impl From<RawUsage> for Usage {
    fn from(raw: RawUsage) -> Self {
        Self {
            prompt_tokens: raw.prompt_tokens,
            completion_tokens: raw.completion_tokens,
            cached_tokens: raw.prompt_tokens_details.and_then(|d| d.cached_tokens),
        }
    }
}

#[derive(Deserialize, Default)]
struct RawMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct RawChoice {
    #[serde(default)]
    message: Option<RawMessage>,
    #[serde(default)]
    delta: Option<RawMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct RawResponse {
    #[serde(default)]
    choices: Vec<RawChoice>,
    #[serde(default)]
    usage: Option<RawUsage>,
    #[serde(default)]
    timings: Option<Timings>,
}

#[derive(Deserialize)]
struct RawTokens {
    tokens: Vec<i64>,
}

#[derive(Deserialize)]
struct RawInputTokens {
    input_tokens: u64,
}

#[derive(Deserialize)]
struct RawPrompt {
    prompt: String,
}

/// A client for one llama.cpp server.
///
/// ```no_run
/// use prompt_llama::{ChatOptions, LlamaClient};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let client = LlamaClient::new("http://127.0.0.1:8080");
/// client.health()?;
/// let reply = client.chat(br#"[{"role":"user","content":"hi"}]"#, &ChatOptions::cached(8))?;
/// println!("re-processed {} tokens, reused {}", reply.timings.prompt_n, reply.timings.cache_n);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct LlamaClient {
    base: String,
    agent: ureq::Agent,
}

impl LlamaClient {
    /// A client for the server at `base` (e.g. `http://127.0.0.1:8080`), with a five-minute
    /// limit per request.
    pub fn new(base: impl Into<String>) -> Self {
        let base = base.into().trim().trim_end_matches('/').to_owned();
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(5)))
            .timeout_global(Some(Duration::from_secs(300)))
            .build();
        Self {
            base,
            agent: config.into(),
        }
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET /health`: Ok once the model is loaded.
    pub fn health(&self) -> Result<(), LiveError> {
        let url = self.url("/health");
        let response = self
            .agent
            .get(&url)
            .config()
            .timeout_global(Some(Duration::from_secs(5)))
            .build()
            .call()
            .map_err(|e| transport(&url, e))?;
        read_ok(&url, response).map(|_| ())
    }

    /// `POST /v1/chat/completions` with `messages` (a JSON array of chat messages, sent as
    /// given) and `options`.
    pub fn chat(&self, messages: &[u8], options: &ChatOptions) -> Result<ChatReply, LiveError> {
        let url = self.url("/v1/chat/completions");
        let body = chat_body(messages, options);
        self.post_chat(&url, body, options.stream)
    }

    /// Sends a request composed by the library: its bytes go into the body unchanged.
    pub fn chat_request(
        &self,
        request: &Request<'_>,
        options: &ChatOptions,
    ) -> Result<ChatReply, LiveError> {
        self.chat(&request.to_bytes(), options)
    }

    fn post_chat(&self, url: &str, body: Vec<u8>, stream: bool) -> Result<ChatReply, LiveError> {
        let started = Instant::now();
        let response = self
            .agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(&body[..])
            .map_err(|e| transport(url, e))?;
        let status = response.status().as_u16();
        if status >= 400 {
            return Err(status_error(url, response));
        }
        if !stream {
            let text = read_ok(url, response)?;
            let raw: RawResponse = parse(url, &text)?;
            let elapsed = started.elapsed();
            let timings = raw.timings.ok_or_else(|| missing(url, "timings"))?;
            let usage = raw.usage.ok_or_else(|| missing(url, "usage"))?.into();
            let choice = raw.choices.into_iter().next();
            let finish_reason = choice.as_ref().and_then(|c| c.finish_reason.clone());
            let content = choice
                .and_then(|c| c.message)
                .and_then(|m| m.content)
                .unwrap_or_default();
            return Ok(ChatReply {
                content,
                finish_reason,
                timings,
                usage,
                ttft: None,
                elapsed,
            });
        }
        let reader = BufReader::new(response.into_body().into_reader());
        let mut ttft = None;
        let mut content = String::new();
        let mut finish_reason = None;
        let mut timings = None;
        let mut usage = None;
        for line in reader.lines() {
            let line = line.map_err(|source| LiveError::Stream {
                url: url.to_owned(),
                source,
            })?;
            let Some(data) = line.strip_prefix("data:").map(str::trim) else {
                continue;
            };
            if data == "[DONE]" {
                break;
            }
            let chunk: RawResponse = parse(url, data)?;
            for choice in chunk.choices {
                ttft.get_or_insert_with(|| started.elapsed());
                if let Some(text) = choice.delta.and_then(|d| d.content) {
                    content.push_str(&text);
                }
                if choice.finish_reason.is_some() {
                    finish_reason = choice.finish_reason;
                }
            }
            if chunk.timings.is_some() {
                timings = chunk.timings;
            }
            if let Some(u) = chunk.usage {
                usage = Some(u.into());
            }
        }
        Ok(ChatReply {
            content,
            finish_reason,
            timings: timings.ok_or_else(|| missing(url, "timings"))?,
            usage: usage.ok_or_else(|| missing(url, "usage"))?,
            ttft,
            elapsed: started.elapsed(),
        })
    }

    /// `POST path` with `body` sent as given (a request body of any endpoint the server
    /// speaks: `/v1/chat/completions`, `/v1/responses`, `/v1/messages`, their token
    /// counters); the response's bytes, at most [`MAX_RESPONSE_BYTES`].
    pub fn post_body(&self, path: &str, body: &[u8]) -> Result<Vec<u8>, LiveError> {
        self.post_body_with_headers(path, body, &[])
    }

    /// [`LlamaClient::post_body`] with extra request headers (a router's routing key).
    pub fn post_body_with_headers(
        &self,
        path: &str,
        body: &[u8],
        headers: &[(&str, &str)],
    ) -> Result<Vec<u8>, LiveError> {
        let url = self.url(path);
        let mut request = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send(body).map_err(|e| transport(&url, e))?;
        if response.status().as_u16() >= 400 {
            return Err(status_error(&url, response));
        }
        let mut bytes = Vec::new();
        response
            .into_body()
            .into_reader()
            .take(MAX_RESPONSE_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| LiveError::Stream {
                url: url.clone(),
                source,
            })?;
        if bytes.len() as u64 > MAX_RESPONSE_BYTES {
            return Err(LiveError::Stream {
                url,
                source: std::io::Error::other(format!(
                    "the response is over {MAX_RESPONSE_BYTES} bytes"
                )),
            });
        }
        Ok(bytes)
    }

    /// The prompt the server builds from `messages` with the model's chat template
    /// (`POST /apply-template`, generation prompt included).
    pub fn apply_template(&self, messages: &[u8]) -> Result<String, LiveError> {
        let url = self.url("/apply-template");
        let mut body = b"{\"messages\":".to_vec();
        body.extend_from_slice(messages);
        body.push(b'}');
        let raw: RawPrompt = self.post_json(&url, &body)?;
        Ok(raw.prompt)
    }

    /// The model's tokens for `text` (`POST /tokenize`, special tokens parsed, as the chat
    /// endpoint tokenizes a templated prompt).
    pub fn tokenize(&self, text: &str) -> Result<Vec<i64>, LiveError> {
        let url = self.url("/tokenize");
        let body = serde_json::json!({"content": text, "add_special": true, "parse_special": true});
        let raw: RawTokens = self.post_json(&url, body.to_string().as_bytes())?;
        Ok(raw.tokens)
    }

    /// The tokens the server evaluates for a chat request with `messages`.
    pub fn prompt_tokens(&self, messages: &[u8]) -> Result<Vec<i64>, LiveError> {
        let prompt = self.apply_template(messages)?;
        self.tokenize(&prompt)
    }

    /// The server's token count of `body`, a request body of `api` (Chat Completions,
    /// Responses or Anthropic Messages), generation prompt included, as its requests count
    /// it: `/apply-template` + `/tokenize`, `/v1/responses/input_tokens`,
    /// `/v1/messages/count_tokens`.
    pub fn count_tokens(&self, api: prompt_core::ApiKind, body: &[u8]) -> Result<u64, LiveError> {
        use prompt_core::ApiKind;
        let counted = |path: &str| -> Result<u64, LiveError> {
            let url = self.url(path);
            let raw: RawInputTokens = self.post_json(&url, body)?;
            Ok(raw.input_tokens)
        };
        match api {
            ApiKind::OpenAiResponses => counted("/v1/responses/input_tokens"),
            ApiKind::Anthropic => counted("/v1/messages/count_tokens"),
            _ => {
                let url = self.url("/apply-template");
                let raw: RawPrompt = self.post_json(&url, body)?;
                Ok(self.tokenize(&raw.prompt)?.len() as u64)
            }
        }
    }

    /// Tokens the chat template's generation prompt adds after the last message.
    pub fn generation_prompt_tokens(&self) -> Result<u64, LiveError> {
        let tokens = |generation: bool| -> Result<u64, LiveError> {
            let body = serde_json::json!({"messages": [{"role": "user", "content": "x"}],
                                          "add_generation_prompt": generation});
            let url = self.url("/apply-template");
            let raw: RawPrompt = self.post_json(&url, body.to_string().as_bytes())?;
            Ok(self.tokenize(&raw.prompt)?.len() as u64)
        };
        Ok(tokens(true)?.saturating_sub(tokens(false)?))
    }

    fn post_json<T: for<'de> Deserialize<'de>>(
        &self,
        url: &str,
        body: &[u8],
    ) -> Result<T, LiveError> {
        let response = self
            .agent
            .post(url)
            .header("Content-Type", "application/json")
            .send(body)
            .map_err(|e| transport(url, e))?;
        let text = read_ok(url, response)?;
        parse(url, &text)
    }
}

/// `{"messages":<messages>,<options>}` without re-serializing the messages.
fn chat_body(messages: &[u8], options: &ChatOptions) -> Vec<u8> {
    let mut options = serde_json::to_value(options).unwrap_or_default();
    if options.get("stream") == Some(&serde_json::Value::Bool(true))
        && let Some(map) = options.as_object_mut()
    {
        map.insert(
            "stream_options".to_owned(),
            serde_json::json!({"include_usage": true}),
        );
    }
    let options = prompt_core::raw_json::canonical(&options);
    let mut body = Vec::with_capacity(messages.len() + options.len() + 16);
    body.extend_from_slice(b"{\"messages\":");
    body.extend_from_slice(messages);
    match options.strip_prefix('{') {
        Some(rest) if rest != "}" => {
            body.push(b',');
            body.extend_from_slice(rest.as_bytes());
        }
        _ => body.push(b'}'),
    }
    body
}

fn transport(url: &str, source: ureq::Error) -> LiveError {
    LiveError::Transport {
        url: url.to_owned(),
        source: Box::new(source),
    }
}

fn missing(url: &str, field: &'static str) -> LiveError {
    LiveError::Missing {
        url: url.to_owned(),
        field,
    }
}

fn excerpt(text: &str, max: usize) -> String {
    prompt_core::input::excerpt(text, max).into_owned()
}

fn parse<T: for<'de> Deserialize<'de>>(url: &str, text: &str) -> Result<T, LiveError> {
    serde_json::from_str(text).map_err(|source| LiveError::Parse {
        url: url.to_owned(),
        source,
        excerpt: excerpt(text, 200),
    })
}

fn status_error(url: &str, response: ureq::http::Response<ureq::Body>) -> LiveError {
    let status = response.status().as_u16();
    let mut body = String::new();
    let _ = response
        .into_body()
        .into_reader()
        .take(2000)
        .read_to_string(&mut body);
    LiveError::Status {
        url: url.to_owned(),
        status,
        body: excerpt(&body, 500),
    }
}

fn read_ok(url: &str, response: ureq::http::Response<ureq::Body>) -> Result<String, LiveError> {
    if response.status().as_u16() >= 400 {
        return Err(status_error(url, response));
    }
    let mut text = String::new();
    response
        .into_body()
        .into_reader()
        .read_to_string(&mut text)
        .map_err(|source| LiveError::Stream {
            url: url.to_owned(),
            source,
        })?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_wraps_the_messages_bytes_verbatim() {
        let messages = br#"[{"role":"user","content":"a  b"}]"#;
        let body = chat_body(messages, &ChatOptions::greedy_uncached(4));
        let text = String::from_utf8(body).unwrap();
        assert!(text.starts_with(r#"{"messages":[{"role":"user","content":"a  b"}],"#));
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["cache_prompt"], false);
        assert_eq!(value["max_tokens"], 4);
        assert_eq!(value["top_k"], 1);
        assert!(value.get("stream_options").is_none());
        let streamed = chat_body(messages, &ChatOptions::cached(2));
        let value: serde_json::Value = serde_json::from_slice(&streamed).unwrap();
        assert_eq!(value["stream_options"]["include_usage"], true);
        assert_eq!(value["cache_prompt"], true);
    }

    #[test]
    fn parses_llama_cpp_usage_and_timings() {
        let text = r#"{"choices":[{"finish_reason":"length","index":0,"message":{"role":"assistant","content":"Hi"}}],
            "usage":{"completion_tokens":2,"prompt_tokens":30,"total_tokens":32,"prompt_tokens_details":{"cached_tokens":25}},
            "timings":{"cache_n":25,"prompt_n":5,"prompt_ms":12.5,"prompt_per_token_ms":2.5,"prompt_per_second":400.0,
                       "predicted_n":2,"predicted_ms":20.0}}"#;
        let raw: RawResponse = parse("u", text).unwrap();
        let usage: Usage = raw.usage.unwrap().into();
        assert_eq!(usage.cached_tokens, Some(25));
        assert_eq!(raw.timings.unwrap().prompt_n, 5);
    }

    #[test]
    fn errors_name_the_url() {
        let client = LlamaClient::new("http://127.0.0.1:9/");
        let err = client.health().unwrap_err().to_string();
        assert!(err.starts_with("http://127.0.0.1:9/health: "), "{err}");
    }
}
