//! Sessions and lanes: which earlier requests a request may be compared with.

use std::collections::HashMap;

use prompt_core::input::excerpt;
use serde::{Deserialize, Serialize};

use crate::canon::{Canonical, model_in_path};
use crate::exchange::Exchange;
use crate::headers::SESSION_HEADERS;

/// Where a session's key came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionSource {
    /// The log line's own `session` key.
    Logged,
    /// A header ([`SESSION_HEADERS`]).
    Header,
    /// Anthropic's `metadata.user_id` (Claude Code puts its session in it).
    MetadataUserId,
    /// A Responses `previous_response_id` naming an earlier response's session.
    PreviousResponse,
    /// A Responses `conversation`.
    Conversation,
    /// The `prompt_cache_key`.
    PromptCacheKey,
    /// The `user` field.
    User,
    /// Nothing named one: the lane's requests without a key form one session.
    Inferred,
}

/// A session: its key and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SessionKey {
    /// The key, bounded.
    pub id: String,
    /// Where it came from.
    pub source: SessionSource,
}

fn key(id: &str, source: SessionSource) -> SessionKey {
    SessionKey {
        id: excerpt(id, 256).into_owned(),
        source,
    }
}

/// The session of a request: the log's, a header's, a body field's, or inferred.
pub(crate) fn session_of(
    exchange: &Exchange<'_>,
    canonical: &Canonical<'_>,
    responses: &HashMap<String, SessionKey>,
) -> SessionKey {
    if let Some(id) = exchange.session.filter(|s| !s.is_empty()) {
        return key(id, SessionSource::Logged);
    }
    for name in SESSION_HEADERS {
        if let Some((_, v)) = exchange
            .headers
            .iter()
            .find(|(k, v)| k.eq_ignore_ascii_case(name) && !v.is_empty())
        {
            return key(v, SessionSource::Header);
        }
    }
    let hint = |name: &str| {
        canonical
            .session_hints
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_ref())
    };
    if let Some(user_id) = hint("metadata.user_id") {
        // Claude Code: `user_<hash>_account_<uuid>_session_<uuid>`, or a JSON object with
        // a `session_id`: the session part when there is one.
        let id = user_id
            .find("session_")
            .map(|i| &user_id[i + "session_".len()..])
            .map(|s| s.trim_start_matches(['"', ':', ' ']))
            .map(|s| s.split(['"', ',', '}']).next().unwrap_or(s))
            .unwrap_or(user_id);
        return key(id, SessionSource::MetadataUserId);
    }
    if let Some(previous) = hint("previous_response_id")
        && let Some(session) = responses.get(previous)
    {
        return SessionKey {
            id: session.id.clone(),
            source: SessionSource::PreviousResponse,
        };
    }
    if let Some(conversation) = hint("conversation") {
        return key(conversation, SessionSource::Conversation);
    }
    if let Some(k) = canonical
        .keys
        .iter()
        .find(|k| k.name.as_ref() == "prompt_cache_key")
    {
        return key(k.value.trim_matches('"'), SessionSource::PromptCacheKey);
    }
    if let Some(user) = hint("user") {
        return key(user, SessionSource::User);
    }
    key("", SessionSource::Inferred)
}

/// The lane: the endpoint (its path without query, Gemini's model taken out) and the model.
pub(crate) fn lane_of(path: Option<&str>, canonical: &Canonical<'_>) -> String {
    let endpoint = match path {
        Some(p) => {
            let p = p.split('?').next().unwrap_or(p);
            let p = match model_in_path(p) {
                Some(m) => p.replacen(m, "{model}", 1),
                None => p.to_owned(),
            };
            // Streaming and not are one cache.
            p.replace(":streamGenerateContent", ":generateContent")
        }
        None => crate::body::shape::shape_name(canonical.shape).to_owned(),
    };
    format!(
        "{} {}",
        excerpt(&endpoint, 128),
        canonical.model.as_deref().unwrap_or("?")
    )
}
