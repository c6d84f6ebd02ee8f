//! `--log`: each exchange appended as one line of the audit's log format, for `cacheline
//! audit` and `cacheline evidence` to read later. The analysis never reads these lines: it
//! is handed each exchange as it is ([`prompt_measure::logged::LoggedExchange`]).

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use serde_json::{Map, Value};

/// The log file, opened for appending.
#[derive(Debug)]
pub(crate) struct ExchangeLog {
    file: File,
}

impl ExchangeLog {
    /// Opens (or creates) `path` for appending.
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Self { file })
    }

    /// Appends the exchange's line: its JSON and the newline in one `write` of a buffer
    /// built first, so a line is never left without its end by a write split in two.
    pub(crate) fn write(&mut self, exchange: &LogLine<'_>) -> io::Result<()> {
        let mut line = exchange.to_json();
        line.push('\n');
        self.file.write_all(line.as_bytes())
    }
}

/// What a log line holds of one exchange.
#[derive(Debug)]
pub(crate) struct LogLine<'a> {
    /// The path, without its query.
    pub(crate) path: &'a str,
    /// The headers recorded ([`prompt_measure::logged::recorded_headers`]).
    pub(crate) headers: &'a [(String, String)],
    /// When it was sent, in seconds since the Unix epoch.
    pub(crate) ts: f64,
    /// The request body.
    pub(crate) request: &'a [u8],
    /// The reply's body, decompressed (`None`: it could not be read).
    pub(crate) response: Option<&'a [u8]>,
    /// `--diagnose`: the reply the provider was asked to compare the request with.
    pub(crate) diagnosed_against: Option<&'a str>,
}

impl LogLine<'_> {
    /// The line, in the audit's format.
    fn to_json(&self) -> String {
        let (request, response) = (self.request, self.response);
        let mut o = Map::new();
        o.insert(
            "request".to_owned(),
            Value::String(String::from_utf8_lossy(request).into_owned()),
        );
        o.insert(
            "response".to_owned(),
            response.map_or(Value::Null, |r| {
                Value::String(String::from_utf8_lossy(r).into_owned())
            }),
        );
        o.insert("path".to_owned(), Value::String(self.path.to_owned()));
        let headers: Map<String, Value> = self
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        o.insert("headers".to_owned(), Value::Object(headers));
        if let Some(ts) = serde_json::Number::from_f64(self.ts) {
            o.insert("ts".to_owned(), Value::Number(ts));
        }
        // `--diagnose` sent the provider the agent's request with the reply it was compared
        // with: the log keeps the agent's own bytes, and names that reply.
        if let Some(against) = self.diagnosed_against {
            o.insert(
                "diagnosed_against".to_owned(),
                Value::String(against.to_owned()),
            );
        }
        Value::Object(o).to_string()
    }
}
