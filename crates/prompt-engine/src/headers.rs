//! The one header policy: which headers belong to one connection (never forwarded), which are
//! recorded in a log and read by the engine (they name a session or an agent, or key a
//! cache), and which may hold a credential (never written anywhere). Every other header is
//! forwarded as it came and never recorded. The proxy, the audit, `cacheline evidence` and
//! the capture scripts (`scripts/agents/upstream.py`, `scripts/agents/relay.py`, held to this
//! table by a test) all ask it.

/// Headers that belong to one connection and are never forwarded (RFC 9110 §7.6.1, as Go's
/// `httputil.ReverseProxy` lists them), besides those a `Connection` header names and any
/// `proxy-*` ([`is_hop_by_hop`]).
pub const HOP_BY_HOP: [&str; 6] = [
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Headers agents send to name a session, in the order they are read: Claude Code's, then
/// Codex's (`session_id`, `conversation_id`, `thread-id`), then routers' affinity headers.
pub const SESSION_HEADERS: [&str; 7] = [
    "x-claude-code-session-id",
    "session_id",
    "session-id",
    "conversation_id",
    "thread-id",
    "x-session-affinity",
    "x-session-id",
];

/// Headers that key Anthropic's cache beside the body: a changed beta or version is a
/// changed cache key.
pub const CACHE_HEADERS: [&str; 2] = ["anthropic-beta", "anthropic-version"];

/// Headers that say which agent sent a request (Codex names itself in `originator`).
pub const AGENT_HEADERS: [&str; 4] = ["user-agent", "originator", "x-app", "version"];

/// Names that are credentials whatever they are part of: the capture's own list
/// (`REDACT_EXACT` of `scripts/agents/upstream.py`, which writes them as `[redacted]`).
pub const CREDENTIAL_NAMES: [&str; 6] = [
    "authorization",
    "x-api-key",
    "x-goog-api-key",
    "api-key",
    "cookie",
    "proxy-authorization",
];

/// A name containing one of these is taken for a credential (`REDACT_PARTS` of
/// `scripts/agents/upstream.py`): `api_key`, `access_token`, `client_secret`, `x-auth`.
pub const CREDENTIAL_PARTS: [&str; 4] = ["key", "token", "secret", "auth"];

/// What the policy does with a header, by its name alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderRole {
    /// One connection's: never forwarded ([`HOP_BY_HOP`], `proxy-*`).
    HopByHop,
    /// May hold a credential: forwarded, never recorded, starred wherever shown.
    Credential,
    /// Names a session ([`SESSION_HEADERS`]): forwarded and recorded.
    Session,
    /// Keys a cache ([`CACHE_HEADERS`]): forwarded and recorded.
    CacheKey,
    /// Names the agent ([`AGENT_HEADERS`]): forwarded and recorded.
    Agent,
    /// Anything else: forwarded as it came, never recorded.
    Forwarded,
}

/// The role of a header of this name (any case). A credential's name wins over every other
/// role but hop-by-hop: `proxy-authorization` is both, and never forwarded.
pub fn role_of(name: &str) -> HeaderRole {
    let name = name.to_ascii_lowercase();
    let name = name.as_str();
    if HOP_BY_HOP.contains(&name) || name.starts_with("proxy-") {
        HeaderRole::HopByHop
    } else if SESSION_HEADERS.contains(&name) {
        // A session id is no secret, though `session_id` would not match the parts anyway.
        HeaderRole::Session
    } else if CACHE_HEADERS.contains(&name) {
        HeaderRole::CacheKey
    } else if names_credential(name) {
        HeaderRole::Credential
    } else if AGENT_HEADERS.contains(&name) {
        HeaderRole::Agent
    } else {
        HeaderRole::Forwarded
    }
}

/// Whether a header is one connection's and never forwarded: [`HOP_BY_HOP`], any `proxy-*`,
/// or one the request's `Connection` header names (`connection_named`, lower-case).
pub fn is_hop_by_hop(name: &str, connection_named: &[&str]) -> bool {
    role_of(name) == HeaderRole::HopByHop
        || connection_named
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
}

/// What a proxy does with one header of a message it forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarding {
    /// Sent on as it came.
    Keep,
    /// Not sent on.
    Drop,
    /// Sent on with this value instead.
    Replace(&'static str),
}

/// What a proxy does with a header of a message it forwards, as Go's `httputil.ReverseProxy`
/// does: a hop-by-hop header ([`is_hop_by_hop`]) is dropped, but for `TE` naming `trailers`
/// (sent on as `TE: trailers` alone: the recipient may send trailers) and `Trailer` (the
/// names of the trailer fields after the body, which the next hop's chunked framing sends
/// on); a `Content-Length` in a message that also has a `Transfer-Encoding`
/// (`has_transfer_encoding`) is dropped (RFC 9112 §6.3: the transfer coding frames the
/// message, the length is wrong). Everything else is kept.
pub fn forwarding(
    name: &str,
    value: &str,
    connection_named: &[&str],
    has_transfer_encoding: bool,
) -> Forwarding {
    if name.eq_ignore_ascii_case("te") {
        let trailers = value.split(',').any(|t| {
            t.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case("trailers"))
        });
        return if trailers {
            Forwarding::Replace("trailers")
        } else {
            Forwarding::Drop
        };
    }
    if name.eq_ignore_ascii_case("trailer") {
        return Forwarding::Keep;
    }
    if is_hop_by_hop(name, connection_named)
        || (has_transfer_encoding && name.eq_ignore_ascii_case("content-length"))
    {
        return Forwarding::Drop;
    }
    Forwarding::Keep
}

/// Whether a header is kept in a log or a verdict: it names a session or an agent, or keys
/// a cache. Credentials (`authorization`, `x-api-key`, `cookie`, …) never are.
pub fn keep_header(name: &str) -> bool {
    matches!(
        role_of(name),
        HeaderRole::Session | HeaderRole::CacheKey | HeaderRole::Agent
    )
}

/// Whether a header, query parameter or body field of this name may hold a credential: the
/// capture's rule ([`CREDENTIAL_NAMES`], [`CREDENTIAL_PARTS`]), case-insensitive. It errs
/// on the safe side (`max_tokens`, `author` match too): what matches is hidden, not read.
pub fn names_credential(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    CREDENTIAL_NAMES.contains(&name.as_str()) || CREDENTIAL_PARTS.iter().any(|p| name.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_header_has_the_role_its_list_gives_it() {
        for h in HOP_BY_HOP {
            assert_eq!(role_of(h), HeaderRole::HopByHop, "{h}");
        }
        for h in SESSION_HEADERS {
            assert_eq!(role_of(h), HeaderRole::Session, "{h}");
            assert!(keep_header(h));
        }
        for h in CACHE_HEADERS {
            assert_eq!(role_of(h), HeaderRole::CacheKey, "{h}");
            assert!(keep_header(h));
        }
        for h in AGENT_HEADERS {
            assert_eq!(role_of(h), HeaderRole::Agent, "{h}");
            assert!(keep_header(h));
        }
        for h in CREDENTIAL_NAMES {
            assert!(!keep_header(h), "{h}");
            assert!(names_credential(&h.to_ascii_uppercase()), "{h}");
        }
        assert_eq!(role_of("Proxy-Authorization"), HeaderRole::HopByHop);
        assert_eq!(role_of("X-Goog-Api-Key"), HeaderRole::Credential);
        assert_eq!(role_of("content-type"), HeaderRole::Forwarded);
        assert!(is_hop_by_hop("X-Trace", &["x-trace"]));
        assert!(!is_hop_by_hop("x-trace", &[]));
    }

    #[test]
    fn a_proxy_drops_hop_by_hop_headers_but_trailers_and_a_length_beside_a_coding() {
        use Forwarding::{Drop, Keep, Replace};
        let f = |name, value, named: &[&str], te| forwarding(name, value, named, te);
        assert_eq!(f("Connection", "close", &[], false), Drop);
        assert_eq!(f("Keep-Alive", "timeout=5", &[], false), Drop);
        assert_eq!(f("X-Hop", "1", &["x-hop"], false), Drop);
        assert_eq!(f("Proxy-Authorization", "Basic eA==", &[], false), Drop);
        assert_eq!(f("Transfer-Encoding", "chunked", &[], true), Drop);
        assert_eq!(
            f("TE", "trailers, deflate;q=0.5", &["te"], false),
            Replace("trailers")
        );
        assert_eq!(f("te", "gzip", &[], false), Drop);
        assert_eq!(f("Trailer", "x-checksum", &[], true), Keep);
        assert_eq!(f("Content-Length", "3", &[], true), Drop);
        assert_eq!(f("Content-Length", "3", &[], false), Keep);
        assert_eq!(f("Authorization", "Bearer sk", &[], false), Keep);
    }
}
