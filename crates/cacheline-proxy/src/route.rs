//! Which API a request path goes to, and where that API's upstream is.

use hyper::Uri;
use prompt_core::input::excerpt;
use prompt_core::profile::Provider;

use crate::error::ProxyError;

/// The providers the proxy routes to an upstream of its own, in the order the docs list
/// them: Anthropic's Messages API (`/v1/messages…`), OpenAI's APIs (`/v1/chat/completions`,
/// `/v1/responses…`, `/v1/completions`, any other `/v1/…`), Google's Gemini API
/// (`/v1beta/…`, `/v1alpha/…`).
pub const ROUTED: [Provider; 3] = [Provider::Anthropic, Provider::OpenAi, Provider::Gemini];

/// The provider's own endpoint, the default upstream of a routed provider.
pub fn default_upstream(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "https://api.anthropic.com",
        Provider::Gemini => "https://generativelanguage.googleapis.com",
        _ => "https://api.openai.com",
    }
}

/// The provider a request path is routed to: `/v1/messages…` → Anthropic; any other `/v1/…`
/// (Chat Completions, Responses, Completions, models) → OpenAI; `/v1beta/…`, `/v1alpha/…`
/// → Gemini; anything else → `None` (answered 404 by the proxy).
pub fn route(path: &str) -> Option<Provider> {
    let under = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?', ':']))
    };
    if under("/v1/messages") {
        Some(Provider::Anthropic)
    } else if under("/v1") {
        Some(Provider::OpenAi)
    } else if under("/v1beta") || under("/v1alpha") {
        Some(Provider::Gemini)
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
            excerpt(url, 200).into_owned()
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
        let parse = |provider: Provider| Upstream {
            scheme: "https".to_owned(),
            authority: default_upstream(provider)
                .trim_start_matches("https://")
                .to_owned(),
            prefix: String::new(),
        };
        Upstreams {
            anthropic: parse(Provider::Anthropic),
            openai: parse(Provider::OpenAi),
            gemini: parse(Provider::Gemini),
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

    /// The upstream of `provider` (OpenAI's for any OpenAI-compatible one).
    pub fn of(&self, provider: Provider) -> &Upstream {
        match provider {
            Provider::Anthropic => &self.anthropic,
            Provider::Gemini => &self.gemini,
            _ => &self.openai,
        }
    }

    /// Sets one from `API=URL` (`--upstream`).
    pub fn set(&mut self, spec: &str) -> Result<(), ProxyError> {
        let (name, url) = spec.split_once('=').ok_or_else(|| ProxyError::Upstream {
            url: excerpt(spec.split('@').next().unwrap_or_default(), 200).into_owned(),
            why: "expected API=URL (anthropic=…, openai=…, gemini=…)".to_owned(),
        })?;
        let name = excerpt(name.trim(), 200);
        let unknown = || ProxyError::Upstream {
            url: name.clone().into_owned(),
            why: format!("unknown API `{name}`: expected anthropic, openai or gemini"),
        };
        let provider = Provider::from_name(&name)
            .filter(|p| ROUTED.contains(p))
            .ok_or_else(unknown)?;
        let upstream = Upstream::parse(url.trim())?;
        match provider {
            Provider::Anthropic => self.anthropic = upstream,
            Provider::Gemini => self.gemini = upstream,
            _ => self.openai = upstream,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_route_to_their_api() {
        assert_eq!(route("/v1/messages"), Some(Provider::Anthropic));
        assert_eq!(route("/v1/messages?beta=true"), Some(Provider::Anthropic));
        assert_eq!(
            route("/v1/messages/count_tokens"),
            Some(Provider::Anthropic)
        );
        assert_eq!(route("/v1/chat/completions"), Some(Provider::OpenAi));
        assert_eq!(route("/v1/responses/resp_1"), Some(Provider::OpenAi));
        assert_eq!(route("/v1/completions"), Some(Provider::OpenAi));
        assert_eq!(route("/v1/models"), Some(Provider::OpenAi));
        assert_eq!(
            route("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
            Some(Provider::Gemini)
        );
        assert_eq!(route("/v1alpha/models"), Some(Provider::Gemini));
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
