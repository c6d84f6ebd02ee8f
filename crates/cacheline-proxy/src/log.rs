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
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::state::ProxyState;

/// The log file, opened for appending.
#[derive(Debug)]
pub(crate) struct ExchangeLog<W = File> {
    file: W,
    path: PathBuf,
    /// Complete lines (`\n`s) the file held when opened.
    lines_at_open: u64,
    /// Whether the file ended in a fragment of a line when opened: a newline goes before the
    /// first new line.
    ended_mid_line: bool,
    /// Whether a write failed: nothing more is written.
    failed: bool,
}

/// Counts the `\n`s of `file` from its start, `buf` at a time, and says whether its last byte
/// is one: the whole file is never held.
fn count_lines(file: &mut impl Read) -> io::Result<(u64, Option<u8>)> {
    let mut buf = vec![0u8; 256 << 10];
    let mut lines = 0u64;
    let mut last = None;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => return Ok((lines, last)),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let read = &buf[..n];
        lines = lines.saturating_add(memchr::memchr_iter(b'\n', read).count() as u64);
        last = read.last().copied();
    }
}

impl ExchangeLog {
    /// Opens (or creates) `path` for appending, counting the complete lines it holds (a
    /// regular file's; another kind of file, a FIFO or a device, is not read).
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        let (lines_at_open, ended_mid_line) = if file.metadata()?.is_file() {
            let (lines, last) = count_lines(&mut file)?;
            (lines, last.is_some_and(|b| b != b'\n'))
        } else {
            (0, false)
        };
        Ok(Self {
            file,
            path: path.to_owned(),
            lines_at_open,
            ended_mid_line,
            failed: false,
        })
    }
}

impl<W: Write> ExchangeLog<W> {
    /// The complete lines the file held when it was opened (a fragment at its end is not
    /// one). The first line written is numbered `lines_at_open() + 1`, or
    /// `lines_at_open() + 2` when [`ExchangeLog::ended_mid_line`]: the fragment, ended by a
    /// newline, is a line of its own (one the audit skips).
    #[allow(dead_code)] // read by the session state that numbers lines across launches
    pub(crate) fn lines_at_open(&self) -> u64 {
        self.lines_at_open
    }

    /// Whether the file ended in a fragment of a line when it was opened.
    #[allow(dead_code)] // read by the session state that numbers lines across launches
    pub(crate) fn ended_mid_line(&self) -> bool {
        self.ended_mid_line
    }

    /// Appends the exchange's line: its JSON and the newline (after the newline a fragment
    /// left needs) in one `write` of a buffer built first, so a line is never left without
    /// its end by a write split in two.
    pub(crate) fn write(&mut self, exchange: &LogLine<'_>) -> io::Result<()> {
        let json = exchange.to_json();
        let mut line = Vec::with_capacity(json.len() + 2);
        if self.ended_mid_line {
            line.push(b'\n');
        }
        line.extend_from_slice(json.as_bytes());
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.ended_mid_line = false;
        Ok(())
    }

    /// [`ExchangeLog::write`], a failure reported once (on standard error when
    /// `print`, to [`ProxyState::subscribe_warnings`] always) and counted in `/metrics`; after
    /// it, every exchange is counted as a line not written.
    pub(crate) fn write_or_report(
        &mut self,
        exchange: &LogLine<'_>,
        state: &ProxyState,
        print: bool,
    ) {
        if self.failed {
            state.log_line_not_written();
            return;
        }
        if let Err(e) = self.write(exchange) {
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
        }
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
        }
    }

    /// Every `write` call a writer gets.
    #[derive(Default)]
    struct Calls(Vec<Vec<u8>>);

    impl Write for Calls {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn each_line_is_one_write_of_its_json_and_newline() {
        let mut log = ExchangeLog {
            file: Calls::default(),
            path: PathBuf::from("calls"),
            lines_at_open: 0,
            ended_mid_line: true,
            failed: false,
        };
        let big = vec![b'a'; 1 << 20];
        for body in [&b"{}"[..], &big] {
            log.write(&line(body)).unwrap();
        }
        let calls = &log.file.0;
        assert_eq!(calls.len(), 2, "one write per line");
        assert!(
            calls[0].starts_with(b"\n{"),
            "the fragment's newline goes first, in the same write"
        );
        assert!(calls[1].starts_with(b"{"), "only before the first line");
        for c in calls {
            assert!(c.ends_with(b"}\n"));
            assert_eq!(memchr::memchr_iter(b'\n', &c[1..]).count(), 1);
        }
    }

    #[test]
    fn a_log_left_mid_line_gets_its_newline_and_its_complete_lines_are_counted() {
        let dir = std::env::temp_dir().join(format!("cacheline-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("killed.jsonl");
        // Two whole lines, then what a kill mid-write leaves.
        std::fs::write(&path, b"{\"request\":\"a\"}\n{\"request\":\"b\"}\n{\"requ").unwrap();
        let mut log = ExchangeLog::open(&path).unwrap();
        assert_eq!((log.lines_at_open(), log.ended_mid_line()), (2, true));
        log.write(&line(b"{\"x\":1}")).unwrap();
        log.write(&line(b"{\"x\":2}")).unwrap();
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5, "{text}");
        assert_eq!(lines[2], "{\"requ", "the fragment stays a line of its own");
        for l in &lines[3..] {
            serde_json::from_str::<Value>(l).unwrap();
        }
        let log = ExchangeLog::open(&path).unwrap();
        assert_eq!((log.lines_at_open(), log.ended_mid_line()), (5, false));
        let empty = dir.join("empty.jsonl");
        let _ = std::fs::remove_file(&empty);
        let log = ExchangeLog::open(&empty).unwrap();
        assert_eq!((log.lines_at_open(), log.ended_mid_line()), (0, false));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lines_are_counted_across_reads() {
        let text = "x\n".repeat(300_000) + "tail";
        let (lines, last) = count_lines(&mut text.as_bytes()).unwrap();
        assert_eq!((lines, last), (300_000, Some(b'l')));
        assert_eq!(count_lines(&mut &b""[..]).unwrap(), (0, None));
    }
}
