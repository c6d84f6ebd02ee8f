//! `--log`: each exchange appended as one line of the audit's log format, for `cacheline
//! audit` and `cacheline evidence` to read later. The analysis never reads these lines: it
//! is handed each exchange as it is ([`prompt_measure::logged::LoggedExchange`]).

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use serde_json::{Map, Value};

use crate::analysis::Job;

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
    pub(crate) fn write(
        &mut self,
        job: &Job,
        request: &[u8],
        response: Option<&[u8]>,
    ) -> io::Result<()> {
        let mut line = line_of(job, request, response);
        line.push('\n');
        self.file.write_all(line.as_bytes())
    }
}

/// The log line of an exchange, in the audit's format.
fn line_of(job: &Job, request: &[u8], response: Option<&[u8]>) -> String {
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
    o.insert("path".to_owned(), Value::String(job.path.clone()));
    let headers: Map<String, Value> = job
        .headers
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    o.insert("headers".to_owned(), Value::Object(headers));
    if let Some(ts) = serde_json::Number::from_f64(job.ts) {
        o.insert("ts".to_owned(), Value::Number(ts));
    }
    // `--diagnose` sent the provider the agent's request with the reply it was compared
    // with: the log keeps the agent's own bytes, and names that reply.
    if let Some(against) = job.diagnose.as_ref().and_then(|d| d.against.as_ref()) {
        o.insert(
            "diagnosed_against".to_owned(),
            Value::String(against.clone()),
        );
    }
    Value::Object(o).to_string()
}
