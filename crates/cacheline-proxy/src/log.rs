//! `--log`: each exchange appended as one line of the audit's log format, for `cacheline
//! audit` and `cacheline evidence` to read later. The analysis never reads these lines: it
//! is handed each exchange as it is ([`prompt_measure::logged::LoggedExchange`]).
//!
//! Crash-safe as far as one process can make it: a line is one `write(2)` of a buffer built
//! first (JSON and newline), so a kill leaves at most the end of one line unwritten; a log
//! that does not end in a newline when opened (a process killed mid-write) gets one before
//! the first new line, so that fragment stays one line the audit skips and every new line
//! is whole. A write that fails is reported once, on standard error and in `/metrics`, and
//! nothing more is written: a later line could land after a partial one.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::state::ProxyState;

/// The log file, opened for appending, with the number of lines it holds: a line's number is
/// its place in the file, whichever launch (earlier, or running beside this one) wrote the
/// lines before it.
#[derive(Debug)]
pub(crate) struct ExchangeLog {
    file: File,
    /// The path as canonicalised at open: how the session state names this log.
    path: PathBuf,
    /// Lines (newlines) in the file's first `len` bytes.
    lines: u64,
    /// Bytes counted.
    len: u64,
    /// Whether a write failed: nothing more is written.
    failed: bool,
}

impl ExchangeLog {
    /// Opens (or creates) `path` for appending, and counts its lines; a log whose last line
    /// was cut (a crash mid-write) gets a newline first, so its next line is whole (the cut
    /// one stays a line the audit skips).
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
        let mut log = Self {
            file,
            path,
            lines: 0,
            len: 0,
            failed: false,
        };
        log.sync()?;
        Ok(log)
    }

    /// The path, as the session state names it.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Counts the lines appended since last counted (by another launch writing the same
    /// log: call it holding the session state's lock), and ends a cut last line.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        let metadata = self.file.metadata()?;
        // A FIFO or a device (`--log /dev/stdout`) is written, never read back or counted.
        if !metadata.is_file() {
            return Ok(());
        }
        let len = metadata.len();
        if len > self.len {
            self.file.seek(SeekFrom::Start(self.len))?;
            let mut last = 0u8;
            let mut buf = vec![0u8; 64 << 10];
            let mut rest = (&self.file).take(len - self.len);
            loop {
                let n = rest.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                self.lines += memchr::memchr_iter(b'\n', &buf[..n]).count() as u64;
                last = buf[n - 1];
            }
            self.len = len;
            if last != b'\n' {
                self.file.write_all(b"\n")?;
                self.lines += 1;
                self.len += 1;
            }
        }
        Ok(())
    }

    /// Appends the exchange's line: its JSON and the newline in one `write` of a buffer
    /// built first, so a line is never left without its end by a write split in two.
    /// Returns its number (from 1) and where it starts.
    pub(crate) fn write(&mut self, exchange: &LogLine<'_>) -> io::Result<(u64, u64)> {
        self.sync()?;
        let mut line = exchange.to_json();
        line.push('\n');
        let at = self.len;
        self.file.write_all(line.as_bytes())?;
        self.len += line.len() as u64;
        self.lines += 1;
        Ok((self.lines, at))
    }

    /// [`ExchangeLog::write`], a failure reported once (on standard error when `print`, to
    /// [`ProxyState::subscribe_warnings`] always) and counted in `/metrics`; after it, every
    /// exchange is counted as a line not written. The line's number and offset when written.
    pub(crate) fn write_or_report(
        &mut self,
        exchange: &LogLine<'_>,
        state: &ProxyState,
        print: bool,
    ) -> Option<(u64, u64)> {
        if self.failed {
            state.log_line_not_written();
            return None;
        }
        match self.write(exchange) {
            Ok(at) => Some(at),
            Err(e) => {
                self.failed = true;
                let path = self.path.display().to_string();
                let warning = format!(
                    "writing the log {} failed ({e}): no more lines are written to it",
                    prompt_core::input::escape_controls(&prompt_core::input::excerpt(&path, 200))
                );
                if print {
                    eprintln!("cacheline proxy: warning: {warning}");
                }
                state.log_failed(warning);
                None
            }
        }
    }

    /// The request body of the line starting at `offset` (another launch's, for excerpts),
    /// when it is there and readable: at most the audit's line cap is read.
    pub(crate) fn request_at(&self, offset: u64) -> Option<String> {
        let mut file = File::open(&self.path).ok()?;
        file.seek(SeekFrom::Start(offset)).ok()?;
        let mut line = Vec::new();
        let cap = prompt_measure::audit::DEFAULT_MAX_LINE_BYTES as u64;
        std::io::BufRead::read_until(
            &mut std::io::BufReader::new(file.take(cap + 1)),
            b'\n',
            &mut line,
        )
        .ok()?;
        let text = std::str::from_utf8(&line).ok()?;
        let logged = prompt_measure::logged::read_line(text.trim_end()).ok()?;
        Some(logged.request.into_owned())
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
    /// The launch that saw it.
    pub(crate) launch: &'a str,
    /// `--stabilize`: what it did (the request above is then what was sent upstream).
    pub(crate) repair: Option<&'a crate::stabilize::RepairNote>,
    /// `--stabilize`: the agent's own body, when it was repaired.
    pub(crate) agent_request: Option<&'a [u8]>,
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
        o.insert("launch".to_owned(), Value::String(self.launch.to_owned()));
        if let Some(against) = self.diagnosed_against {
            o.insert(
                "diagnosed_against".to_owned(),
                Value::String(against.to_owned()),
            );
        }
        // `--stabilize` sent the provider another body than the agent's: the log's request
        // is what the provider saw (what the audit judges), the agent's own beside it.
        if let Some(note) = self.repair
            && let Ok(v) = serde_json::to_value(note)
        {
            o.insert("repair".to_owned(), v);
        }
        if let Some(agent) = self.agent_request {
            o.insert(
                "agent_request".to_owned(),
                Value::String(String::from_utf8_lossy(agent).into_owned()),
            );
        }
        Value::Object(o).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(request: &[u8]) -> LogLine<'_> {
        LogLine {
            path: "/v1/messages",
            headers: &[],
            ts: 1.5,
            request,
            response: Some(b"{}"),
            diagnosed_against: None,
            launch: "1-2",
            repair: None,
            agent_request: None,
        }
    }

    #[test]
    fn a_log_left_mid_line_gets_its_newline_and_lines_are_numbered_by_their_place() {
        let dir = std::env::temp_dir().join(format!("cacheline-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("killed.jsonl");
        // Two whole lines, then what a kill mid-write leaves.
        std::fs::write(&path, b"{\"request\":\"a\"}\n{\"request\":\"b\"}\n{\"requ").unwrap();
        let mut log = ExchangeLog::open(&path).unwrap();
        let (first, at) = log.write(&line(b"{\"x\":1}")).unwrap();
        assert_eq!(first, 4, "the fragment, ended, is line 3");
        assert!(log.request_at(at).is_some_and(|r| r == "{\"x\":1}"));
        assert_eq!(log.write(&line(b"{\"x\":2}")).unwrap().0, 5);
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert_eq!(lines[2], "{\"requ", "the fragment stays a line of its own");
        for l in &lines[3..] {
            serde_json::from_str::<Value>(l).unwrap();
        }
        let mut log = ExchangeLog::open(&path).unwrap();
        assert_eq!(log.write(&line(b"{}")).unwrap().0, 6);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
