//! Who may read the proxy's own routes (`/metrics`, the page, `/_cacheline/state` and
//! `/_cacheline/events`): they show prompt excerpts and counts, so a page of another site
//! must not read them through the browser of the proxy's user (DNS rebinding: a name of the
//! attacker's that resolves to 127.0.0.1 sends its own `Host`).

use std::fmt;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};

use hyper::header::{AUTHORIZATION, HOST};
use hyper::{Request, StatusCode};

/// Who may read the proxy's own routes.
#[derive(Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LocalRoutes {
    /// Answered to a request whose `Host` is a loopback name or address (`localhost`,
    /// `*.localhost`, `127.0.0.0/8`, `[::1]`) or the listen address, any port; any other
    /// `Host` gets `403`. The default.
    #[default]
    Loopback,
    /// Answered to a request that carries the token, as `Authorization: Bearer TOKEN` or in
    /// the query (`?token=TOKEN`: the page passes its own on), whatever its `Host`; without
    /// it, `401`. What `--allow-remote` uses, with a token printed at start
    /// ([`new_token`]).
    Token(String),
    /// Not answered: `404`, as any path that is not routed.
    Off,
}

impl fmt::Debug for LocalRoutes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalRoutes::Loopback => f.write_str("Loopback"),
            // The token is a credential: never in a debug print.
            LocalRoutes::Token(_) => f.write_str("Token(…)"),
            LocalRoutes::Off => f.write_str("Off"),
        }
    }
}

/// A fresh token for [`LocalRoutes::Token`]: 128 bits from the system's random source, as
/// 32 hexadecimal digits.
pub fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `host` (a `Host` header's value: a name or address, maybe a port) names this
/// machine's loopback interface, or the address the proxy listens on.
pub(crate) fn is_loopback_host(host: &str, listen: SocketAddr) -> bool {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        // `[::1]:8790`
        match rest.split_once(']') {
            Some((ip, _)) => ip,
            None => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host,
        }
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    match name.parse::<IpAddr>() {
        Ok(ip) => {
            let ip = match ip {
                IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
                v4 => v4,
            };
            ip.is_loopback() || ip == listen.ip()
        }
        Err(_) => false,
    }
}

/// The token a request carries: `Authorization: Bearer TOKEN`, or `token=TOKEN` in its
/// query.
fn token_of<B>(req: &Request<B>) -> Option<&str> {
    let header = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    header.or_else(|| {
        req.uri()
            .query()?
            .split('&')
            .find_map(|pair| pair.strip_prefix("token="))
    })
}

/// Compares in time that does not depend on where the two differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

/// Why a request to one of the proxy's own routes is not answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// [`LocalRoutes::Off`].
    Off,
    /// A `Host` that is not loopback.
    Host,
    /// No token, or not the proxy's.
    Token,
}

/// Whether a request to one of the proxy's own routes is answered.
pub(crate) fn check<B>(
    routes: &LocalRoutes,
    listen: SocketAddr,
    req: &Request<B>,
) -> Result<(), Refused> {
    match routes {
        LocalRoutes::Off => Err(Refused::Off),
        LocalRoutes::Token(token) => match token_of(req) {
            Some(t) if same(t, token) => Ok(()),
            _ => Err(Refused::Token),
        },
        LocalRoutes::Loopback => {
            // An absolute-form target names its host itself; otherwise the `Host` header.
            let host = req
                .uri()
                .authority()
                .map(|a| a.as_str())
                .or_else(|| req.headers().get(HOST).and_then(|v| v.to_str().ok()));
            match host {
                Some(h) if is_loopback_host(h, listen) => Ok(()),
                _ => Err(Refused::Host),
            }
        }
    }
}

impl Refused {
    /// The status and the text a refused request is answered with (never more than why).
    pub(crate) fn answer(self) -> (StatusCode, &'static str) {
        match self {
            Refused::Off => (
                StatusCode::NOT_FOUND,
                "cacheline proxy: its own routes are off\n",
            ),
            Refused::Host => (
                StatusCode::FORBIDDEN,
                "cacheline proxy: its own routes answer only a loopback Host (localhost, 127.0.0.1, [::1]) or the listen address\n",
            ),
            Refused::Token => (
                StatusCode::UNAUTHORIZED,
                "cacheline proxy: its own routes need the token printed at start (Authorization: Bearer TOKEN, or ?token=TOKEN)\n",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listen() -> SocketAddr {
        "127.0.0.1:8790".parse().unwrap()
    }

    #[test]
    fn loopback_names_and_addresses_and_the_listen_address_are_loopback_hosts() {
        for h in [
            "localhost",
            "LOCALHOST:8790",
            "localhost.",
            "app.localhost:1",
            "127.0.0.1",
            "127.8.9.10:8790",
            "[::1]:8790",
            "[::ffff:127.0.0.1]",
        ] {
            assert!(is_loopback_host(h, listen()), "{h}");
        }
        for h in [
            "attacker.example",
            "attacker.example:8790",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "10.0.0.1",
            "",
            "[::1",
        ] {
            assert!(!is_loopback_host(h, listen()), "{h}");
        }
        let lan: SocketAddr = "192.168.1.5:8790".parse().unwrap();
        assert!(is_loopback_host("192.168.1.5:8790", lan));
    }

    #[test]
    fn a_token_is_read_from_the_header_or_the_query_and_compared_whole() {
        let routes = LocalRoutes::Token("abc123".to_owned());
        let req = |uri: &str, auth: Option<&str>| {
            let mut b = Request::builder().uri(uri).header(HOST, "attacker.example");
            if let Some(a) = auth {
                b = b.header(AUTHORIZATION, a);
            }
            b.body(()).unwrap()
        };
        assert_eq!(
            check(&routes, listen(), &req("/metrics", Some("Bearer abc123"))),
            Ok(())
        );
        assert_eq!(
            check(&routes, listen(), &req("/metrics?a=1&token=abc123", None)),
            Ok(())
        );
        for (uri, auth) in [
            ("/metrics", None),
            ("/metrics", Some("Bearer abc12")),
            ("/metrics", Some("Basic abc123")),
            ("/metrics?token=abc1234", None),
        ] {
            assert_eq!(
                check(&routes, listen(), &req(uri, auth)),
                Err(Refused::Token),
                "{uri} {auth:?}"
            );
        }
        assert_eq!(format!("{routes:?}"), "Token(…)");
        let t = new_token().unwrap();
        assert_eq!(t.len(), 32);
        assert_ne!(t, new_token().unwrap());
    }
}
