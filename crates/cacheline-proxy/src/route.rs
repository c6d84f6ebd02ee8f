//! Which API a request path goes to, and where that API's upstream is.

use std::fmt;

use hyper::Uri;

use crate::ProxyError;

/// An API the proxy routes to an upstream of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// Anthropic's Messages API (`/v1/messages…`).
    Anthropic,
    /// OpenAI's APIs (`/v1/chat/completions`, `/v1/responses…`, `/v1/completions`, any
    /// other `/v1/…`).
    OpenAi,
    /// Google's Gemini API (`/v1beta/…`, `/v1alpha/…`).
    Gemini,
}

impl Api {
    /// Every API, in the order the docs list them.
    pub const ALL: [Api; 3] = [Api::Anthropic, Api::OpenAi, Api::Gemini];

    /// Its name on the command line (`--upstream NAME=URL`).
    pub fn name(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::OpenAi => "openai",
            Api::Gemini => "gemini",
        }
    }

    /// The API named `name` (`anthropic`, `openai`, `gemini`).
    pub fn from_name(name: &str) -> Option<Api> {
        Api::ALL.into_iter().find(|a| a.name() == name)
    }

    /// The provider's own endpoint, the default upstream.
    pub fn default_upstream(self) -> &'static str {
        match self {
            Api::Anthropic => "https://api.anthropic.com",
            Api::OpenAi => "https://api.openai.com",
            Api::Gemini => "https://generativelanguage.googleapis.com",
        }
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The API a request path is routed to: `/v1/messages…` → Anthropic; any other `/v1/…`
/// (Chat Completions, Responses, Completions, models) → OpenAI; `/v1beta/…`, `/v1alpha/…`
/// → Gemini; anything else → `None` (answered 404 by the proxy).
pub fn route(path: &str) -> Option<Api> {
    let under = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?', ':']))
    };
    if under("/v1/messages") {
        Some(Api::Anthropic)
    } else if under("/v1") {
        Some(Api::OpenAi)
    } else if under("/v1beta") || under("/v1alpha") {
        Some(Api::Gemini)
    } else {
        None
    }
}

/// An upstream: scheme, authority and an optional path prefix put before the request's
/// own path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `http` or `https`.
    pub scheme: String,
    /// `host[:port]`, also the `Host` header sent upstream.
    pub authority: String,
    /// A prefix for every path (`""`, or `/proxy` for `http://host/proxy`), no trailing `/`.
    pub prefix: String,
}

impl Upstream {
    /// Reads `http[s]://host[:port][/prefix]`.
    pub fn parse(url: &str) -> Result<Upstream, ProxyError> {
        let shown = if url.contains('@') {
            "(a URL with credentials, not shown)".to_owned()
        } else {
            prompt_core_excerpt(url)
        };
        let bad = |why: &str| ProxyError::Upstream {
            url: shown.clone(),
            why: why.to_owned(),
        };
        let uri: Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| bad(&e.to_string()))?;
        let scheme = match uri.scheme_str() {
            Some(s @ ("http" | "https")) => s.to_owned(),
            Some(_) => return Err(bad("the scheme is not http or https")),
            None => return Err(bad("no scheme: expected http://… or https://…")),
        };
        let authority = uri
            .authority()
            .ok_or_else(|| bad("no host"))?
            .as_str()
            .to_owned();
        if authority.contains('@') {
            return Err(bad("credentials in the URL are not accepted"));
        }
        if uri.query().is_some() {
            return Err(bad("a query is not accepted in an upstream URL"));
        }
        let prefix = uri.path().trim_end_matches('/').to_owned();
        Ok(Upstream {
            scheme,
            authority,
            prefix,
        })
    }

    /// The URL it was read from (without a trailing `/`).
    pub fn url(&self) -> String {
        format!("{}://{}{}", self.scheme, self.authority, self.prefix)
    }
}

/// A bounded copy of a user-given text for an error message.
fn prompt_core_excerpt(s: &str) -> String {
    let mut end = s.len().min(200);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// The upstream of each API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstreams {
    /// Anthropic's.
    pub anthropic: Upstream,
    /// OpenAI's.
    pub openai: Upstream,
    /// Gemini's.
    pub gemini: Upstream,
}

impl Default for Upstreams {
    fn default() -> Self {
        let parse = |api: Api| Upstream {
            scheme: "https".to_owned(),
            authority: api
                .default_upstream()
                .trim_start_matches("https://")
                .to_owned(),
            prefix: String::new(),
        };
        Upstreams {
            anthropic: parse(Api::Anthropic),
            openai: parse(Api::OpenAi),
            gemini: parse(Api::Gemini),
        }
    }
}

impl Upstreams {
    /// Every API sent to `url` (a test upstream, a local server).
    pub fn all(url: &str) -> Result<Upstreams, ProxyError> {
        let u = Upstream::parse(url)?;
        Ok(Upstreams {
            anthropic: u.clone(),
            openai: u.clone(),
            gemini: u,
        })
    }

    /// The upstream of `api`.
    pub fn of(&self, api: Api) -> &Upstream {
        match api {
            Api::Anthropic => &self.anthropic,
            Api::OpenAi => &self.openai,
            Api::Gemini => &self.gemini,
        }
    }

    /// Sets one from `API=URL` (`--upstream`).
    pub fn set(&mut self, spec: &str) -> Result<(), ProxyError> {
        let (name, url) = spec.split_once('=').ok_or_else(|| ProxyError::Upstream {
            url: prompt_core_excerpt(spec.split('@').next().unwrap_or_default()),
            why: "expected API=URL (anthropic=…, openai=…, gemini=…)".to_owned(),
        })?;
        let api = Api::from_name(name.trim()).ok_or_else(|| ProxyError::Upstream {
            url: prompt_core_excerpt(name),
            why: format!(
                "unknown API `{}`: expected anthropic, openai or gemini",
                prompt_core_excerpt(name)
            ),
        })?;
        let upstream = Upstream::parse(url.trim())?;
        match api {
            Api::Anthropic => self.anthropic = upstream,
            Api::OpenAi => self.openai = upstream,
            Api::Gemini => self.gemini = upstream,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_route_to_their_api() {
        assert_eq!(route("/v1/messages"), Some(Api::Anthropic));
        assert_eq!(route("/v1/messages?beta=true"), Some(Api::Anthropic));
        assert_eq!(route("/v1/messages/count_tokens"), Some(Api::Anthropic));
        assert_eq!(route("/v1/chat/completions"), Some(Api::OpenAi));
        assert_eq!(route("/v1/responses/resp_1"), Some(Api::OpenAi));
        assert_eq!(route("/v1/completions"), Some(Api::OpenAi));
        assert_eq!(route("/v1/models"), Some(Api::OpenAi));
        assert_eq!(
            route("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            Some(Api::Gemini)
        );
        assert_eq!(route("/v1alpha/models"), Some(Api::Gemini));
        assert_eq!(route("/v1messages"), None);
        assert_eq!(route("/"), None);
        assert_eq!(route("/_cacheline/"), None);
    }

    #[test]
    fn upstreams_are_read_and_refused_with_reasons() {
        let mut u = Upstreams::default();
        u.set("gemini=http://127.0.0.1:9/base/").unwrap();
        assert_eq!(u.gemini.authority, "127.0.0.1:9");
        assert_eq!(u.gemini.prefix, "/base");
        let e = u.set("bard=http://x").unwrap_err().to_string();
        assert!(e.contains("unknown API `bard`"), "{e}");
        let e = u.set("openai=ftp://x").unwrap_err().to_string();
        assert!(e.contains("not http or https"), "{e}");
        let e = u.set("openai=http://user:pw@x").unwrap_err().to_string();
        assert!(e.contains("credentials"), "{e}");
    }
}
