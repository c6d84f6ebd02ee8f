//! The caller's part of a body: the model and the extra parameters, in a fixed order.

use std::collections::BTreeMap;

use prompt_core::ApiKind;
use prompt_core::profile::Profile;
use serde_json::Value;

use crate::error::WireError;
use crate::raw::canonical;

/// The model and the extra parameters (`max_tokens`, `temperature`, `stream`, …) of every
/// body of a session.
///
/// Parameters are written after the messages (`contents`, `input`) array, so a change to one
/// never moves a byte of the stable part, in the order of their names (a `BTreeMap`): the
/// same parameters give the same bytes whatever order they were set in.
///
/// ```
/// use prompt_wire::WireOptions;
/// let options = WireOptions::new("claude-sonnet-4-5")
///     .param("temperature", &serde_json::json!(0.2))
///     .param("max_tokens", &serde_json::json!(1024));
/// let names: Vec<&str> = options.params().map(|(k, _)| k).collect();
/// assert_eq!(names, ["max_tokens", "temperature"]);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WireOptions {
    model: String,
    params: BTreeMap<String, String>,
    tail_in_own_message: bool,
    routing_header: Option<String>,
    profile: Option<Profile>,
}

/// The routing header sglang-router's `manual` policy pins a request by.
pub const DEFAULT_ROUTING_HEADER: &str = "X-SMG-Routing-Key";

impl WireOptions {
    /// Options for `model` (written as the body's `model`, first; Gemini takes the model in
    /// the URL, so its bodies carry none).
    pub fn new(model: impl Into<String>) -> Self {
        Self {
            model: model.into(),
            params: BTreeMap::new(),
            tail_in_own_message: false,
            routing_header: None,
            profile: None,
        }
    }

    /// Options for the profile's model, the profile applied ([`WireOptions::profile`]).
    pub fn for_profile(profile: &Profile) -> Self {
        Self::new(profile.model()).profile(profile.clone())
    }

    /// Applies a provider profile to the bodies: a later `role: "system"` message the
    /// provider would move or refuse is sent as a user message (`<system-reminder>` for
    /// Chat Completions and Responses); on Anthropic models that accept them, system
    /// messages go inside `messages` after the user message of their turn, never with a
    /// breakpoint; Anthropic's `"ttl": "1h"` on the prefix breakpoints and OpenAI's
    /// `prompt_cache_retention` are written in the frozen part of the body; Anthropic's
    /// cache diagnostics are asked for ([`Wire::cache_diagnostics_header`](crate::Wire::cache_diagnostics_header));
    /// a Gemini 3 function call without its signature is refused. Without a profile the
    /// bodies are the API's own, as before.
    pub fn profile(mut self, profile: Profile) -> Self {
        self.profile = Some(profile);
        self
    }

    /// The provider profile, if one applies.
    pub fn provider_profile(&self) -> Option<&Profile> {
        self.profile.as_ref()
    }

    /// The name of the header [`Wire::routing_header`](crate::Wire::routing_header) gives
    /// (default [`DEFAULT_ROUTING_HEADER`]), for a router that pins requests by another.
    pub fn routing_header(mut self, name: impl Into<String>) -> Self {
        self.routing_header = Some(name.into());
        self
    }

    /// The routing header's name.
    pub fn routing_header_name(&self) -> &str {
        self.routing_header
            .as_deref()
            .unwrap_or(DEFAULT_ROUTING_HEADER)
    }

    /// Anthropic and Gemini: sends the per-request tail as a user message of its own instead
    /// of merging it into the open user message. Both APIs combine consecutive user turns,
    /// so the body means the same. Use it for an engine that turns such bodies into chat
    /// messages and puts a message's text before its tool results, as llama.cpp's
    /// `/v1/messages` does: there a tail merged after tool results comes before them in the
    /// prompt, and the next request, without that tail, re-processes the tool results.
    pub fn tail_in_own_message(mut self) -> Self {
        self.tail_in_own_message = true;
        self
    }

    /// Whether the per-request tail is sent as a user message of its own.
    pub fn tail_is_own_message(&self) -> bool {
        self.tail_in_own_message
    }

    /// Sets a parameter to `value`, serialized once, compactly, object keys sorted whatever
    /// the host's serde_json features ([`prompt_core::raw_json::canonical`]).
    pub fn param(mut self, key: impl Into<String>, value: &Value) -> Self {
        self.params.insert(key.into(), canonical(value));
        self
    }

    /// Sets a parameter to a JSON text, kept byte-for-byte.
    pub fn param_raw(mut self, key: impl Into<String>, json: &str) -> Result<Self, WireError> {
        let key = key.into();
        if let Err(source) = serde_json::from_str::<&serde_json::value::RawValue>(json) {
            return Err(WireError::InvalidParameter { key, source });
        }
        self.params.insert(key, json.trim().to_owned());
        Ok(self)
    }

    /// The model.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The parameters, as written: name and JSON text, in name order.
    pub fn params(&self) -> impl Iterator<Item = (&str, &str)> {
        self.params.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Checks the parameters against the keys the library writes for `api`, and the ones
    /// the API requires.
    pub(crate) fn check(&self, api: ApiKind) -> Result<(), WireError> {
        if let Some(key) = self
            .params
            .keys()
            .find(|k| reserved(api).contains(&k.as_str()) || self.profile_writes(api, k))
        {
            return Err(WireError::ReservedParameter {
                key: key.clone(),
                api: crate::api_name(api),
            });
        }
        if api == ApiKind::Anthropic && !self.params.contains_key("max_tokens") {
            return Err(WireError::MissingParameter {
                key: "max_tokens",
                api: crate::api_name(api),
            });
        }
        Ok(())
    }
}

impl WireOptions {
    /// Whether the profile makes the library write the top-level key `key` for `api`.
    fn profile_writes(&self, api: ApiKind, key: &str) -> bool {
        let Some(profile) = &self.profile else {
            return false;
        };
        match key {
            "prompt_cache_retention" => {
                crate::wire::writes_retention(api) && profile.retention().is_some()
            }
            "diagnostics" => api == ApiKind::Anthropic && profile.cache_diagnostics(),
            _ => false,
        }
    }
}

/// The top-level keys the library writes itself for `api`.
fn reserved(api: ApiKind) -> &'static [&'static str] {
    match api {
        ApiKind::OpenAi => &["model", "tools", "messages", "prompt_cache_key"],
        ApiKind::LlamaCpp => &[
            "model",
            "tools",
            "messages",
            "prompt_cache_key",
            "cache_prompt",
        ],
        ApiKind::OpenAiResponses => &[
            "model",
            "instructions",
            "tools",
            "input",
            "prompt_cache_key",
        ],
        ApiKind::Anthropic => &["model", "tools", "system", "messages"],
        ApiKind::Gemini => &[
            "model",
            "systemInstruction",
            "system_instruction",
            "tools",
            "contents",
        ],
    }
}
