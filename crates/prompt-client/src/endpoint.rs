//! Where each API's requests go and how they authenticate.

use std::fmt;

use prompt_core::ApiKind;

/// OpenAI's base URL (Chat Completions and Responses).
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";
/// Anthropic's base URL.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";
/// Gemini's base URL (the Generative Language API).
pub const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta";
/// The `anthropic-version` header sent unless [`Endpoint::anthropic_version`] says otherwise.
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

/// A server and its key: the base URL every API's path is joined to (`…/v1`, as OpenAI
/// SDKs take it), the API key, and Anthropic's version header. One endpoint serves every
/// API the server speaks (llama.cpp's serves Chat Completions, Responses and Messages):
/// each request's API is its conversation's.
///
/// | API | path | key header |
/// |---|---|---|
/// | OpenAI Chat Completions, llama.cpp | `/chat/completions` | `Authorization: Bearer` |
/// | OpenAI Responses | `/responses` | `Authorization: Bearer` |
/// | Anthropic Messages | `/messages` | `x-api-key`, with `anthropic-version` |
/// | Gemini | `/models/{model}:generateContent`, streamed `:streamGenerateContent?alt=sse` | `x-goog-api-key` |
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    base_url: String,
    key: Option<String>,
    anthropic_version: String,
}

impl fmt::Debug for Endpoint {
    /// The key is never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("key", &self.key.as_ref().map(|_| "<set>"))
            .field("anthropic_version", &self.anthropic_version)
            .finish()
    }
}

impl Endpoint {
    /// A server at `base_url` (e.g. `http://127.0.0.1:8080/v1`), without a key.
    pub fn new(base_url: impl Into<String>) -> Self {
        let base_url = base_url.into().trim_end_matches('/').to_owned();
        Self {
            base_url,
            key: None,
            anthropic_version: DEFAULT_ANTHROPIC_VERSION.to_owned(),
        }
    }

    /// OpenAI's API with `key`.
    pub fn openai(key: impl Into<String>) -> Self {
        Self::new(OPENAI_BASE_URL).key(key)
    }

    /// Anthropic's API with `key`.
    pub fn anthropic(key: impl Into<String>) -> Self {
        Self::new(ANTHROPIC_BASE_URL).key(key)
    }

    /// Gemini's API with `key`.
    pub fn gemini(key: impl Into<String>) -> Self {
        Self::new(GEMINI_BASE_URL).key(key)
    }

    /// Sends `key` in the API's key header.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// Sends another `anthropic-version`.
    pub fn anthropic_version(mut self, version: impl Into<String>) -> Self {
        self.anthropic_version = version.into();
        self
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The URL of `api`'s requests for `model` (Gemini takes the model in the path),
    /// streamed or not.
    pub fn url(&self, api: ApiKind, model: &str, stream: bool) -> String {
        let base = &self.base_url;
        match api {
            ApiKind::OpenAi | ApiKind::LlamaCpp => format!("{base}/chat/completions"),
            ApiKind::OpenAiResponses => format!("{base}/responses"),
            ApiKind::Anthropic => format!("{base}/messages"),
            ApiKind::Gemini => {
                let model = model.strip_prefix("models/").unwrap_or(model);
                let method = if stream {
                    "streamGenerateContent?alt=sse"
                } else {
                    "generateContent"
                };
                format!("{base}/models/{}:{method}", path_segment(model))
            }
        }
    }

    /// The headers that carry the key and the API's version for `api`: name and value.
    pub(crate) fn auth_headers(&self, api: ApiKind) -> Vec<(&'static str, String)> {
        let mut headers = Vec::new();
        if let Some(key) = &self.key {
            match api {
                ApiKind::OpenAi | ApiKind::OpenAiResponses | ApiKind::LlamaCpp => {
                    headers.push(("authorization", format!("Bearer {key}")));
                }
                ApiKind::Anthropic => headers.push(("x-api-key", key.clone())),
                ApiKind::Gemini => headers.push(("x-goog-api-key", key.clone())),
            }
        }
        if api == ApiKind::Anthropic {
            headers.push(("anthropic-version", self.anthropic_version.clone()));
        }
        headers
    }
}

/// `text` as one URL path segment: unreserved characters as they are, every other byte
/// percent-encoded (a model name never moves the path).
fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_api_has_its_path_and_gemini_the_model_and_method_in_it() {
        let e = Endpoint::new("http://127.0.0.1:8080/v1/");
        assert_eq!(
            e.url(ApiKind::LlamaCpp, "m", true),
            "http://127.0.0.1:8080/v1/chat/completions"
        );
        assert_eq!(
            e.url(ApiKind::OpenAiResponses, "m", false),
            "http://127.0.0.1:8080/v1/responses"
        );
        assert_eq!(
            e.url(ApiKind::Anthropic, "m", true),
            "http://127.0.0.1:8080/v1/messages"
        );
        let g = Endpoint::gemini("k");
        assert_eq!(
            g.url(ApiKind::Gemini, "models/gemini-2.5-flash", true),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            g.url(ApiKind::Gemini, "a/b?c", false),
            "https://generativelanguage.googleapis.com/v1beta/models/a%2Fb%3Fc:generateContent"
        );
    }

    #[test]
    fn the_key_goes_in_each_apis_header_and_is_never_printed() {
        let e = Endpoint::new("http://x/v1").key("sk-secret");
        assert_eq!(
            e.auth_headers(ApiKind::OpenAi),
            [("authorization", "Bearer sk-secret".to_owned())]
        );
        assert_eq!(
            e.auth_headers(ApiKind::Anthropic),
            [
                ("x-api-key", "sk-secret".to_owned()),
                ("anthropic-version", DEFAULT_ANTHROPIC_VERSION.to_owned())
            ]
        );
        assert_eq!(
            e.auth_headers(ApiKind::Gemini),
            [("x-goog-api-key", "sk-secret".to_owned())]
        );
        assert!(
            Endpoint::new("http://x")
                .auth_headers(ApiKind::LlamaCpp)
                .is_empty()
        );
        assert!(!format!("{e:?}").contains("sk-secret"));
    }
}
