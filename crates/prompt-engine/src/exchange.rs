//! One request as the engine reads it: its endpoint, the headers that key a cache or name a
//! session, its body, when it was sent and what its reply said the provider read.

use serde::Serialize;

/// What the provider said it read, from the response's usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReportedRead {
    /// Input tokens in all (cached or not, written or not).
    pub input: u64,
    /// Input tokens read from the cache.
    pub cached: u64,
}

/// One request as the engine reads it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Exchange<'a> {
    /// The URL path (and query), if known.
    pub path: Option<&'a str>,
    /// Headers, lower-case names, already without credentials
    /// ([`keep_header`](crate::headers::keep_header)).
    pub headers: &'a [(String, String)],
    /// The request body as sent.
    pub body: &'a [u8],
    /// When it was sent, in seconds since the Unix epoch.
    pub ts: Option<f64>,
    /// A session named by whoever logged the request.
    pub session: Option<&'a str>,
    /// What the response said the provider read.
    pub reported: Option<ReportedRead>,
    /// The response's id (a later `previous_response_id` names it).
    pub response_id: Option<&'a str>,
    /// The launch (a proxy's process, an agent's) that saw it: a request whose predecessor
    /// another launch saw continues its session across launches
    /// ([`Predecessor::earlier_launch`](crate::Predecessor::earlier_launch)).
    pub launch: Option<&'a str>,
}

impl<'a> Exchange<'a> {
    /// A request known by its body alone.
    pub fn body(body: &'a [u8]) -> Self {
        Self {
            body,
            ..Self::default()
        }
    }
}
