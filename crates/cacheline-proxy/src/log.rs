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
    /// The line being written, kept between lines so that writing one does not map and
    /// unmap a body-sized buffer each time ([`crate::limits::map_large_allocations`]).
    buffer: String,
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
            buffer: String::new(),
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
        let mut line = std::mem::take(&mut self.buffer);
        line.clear();
        exchange.write_json(&mut line);
        line.push('\n');
        let at = self.len;
        let written = self.file.write_all(line.as_bytes());
        let len = line.len() as u64;
        line.clear();
        line.shrink_to(crate::copy::REUSED_BUFFER_BYTES);
        self.buffer = line;
        written?;
        self.len += len;
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
    /// The body's text, when it was read as one JSON object
    /// ([`prompt_core::raw_json::Object::parse`]): only then may the line hold it as JSON.
    pub(crate) request_object: Option<&'a str>,
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
    /// [`LogLine::write_json`] into a string of its own (for the tests).
    #[cfg(test)]
    fn to_json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    /// The line, in the audit's format, written into `out` (empty): one JSON object, its
    /// keys sorted (as serde_json writes a map), the bodies as strings. A body is escaped
    /// once, straight into `out`, never copied into a value first.
    fn write_json(&self, out: &mut String) {
        use prompt_core::input::utf8_lossy;
        use prompt_core::raw_json::push_quoted;
        out.reserve(
            self.request.len()
                + self.response.map_or(0, <[u8]>::len)
                + self.agent_request.map_or(0, <[u8]>::len)
                + 1024,
        );
        let key = |out: &mut String, name: &str| {
            out.push(if out.is_empty() { '{' } else { ',' });
            push_quoted(out, name);
            out.push(':');
        };
        // `--stabilize` sent the provider another body than the agent's: the log's request
        // is what the provider saw (what the audit judges), the agent's own beside it.
        if let Some(agent) = self.agent_request {
            key(out, "agent_request");
            push_quoted(out, &utf8_lossy(agent));
        }
        // `--diagnose` sent the provider the agent's request with the reply it was compared
        // with: the log keeps the agent's own bytes, and names that reply.
        if let Some(against) = self.diagnosed_against {
            key(out, "diagnosed_against");
            push_quoted(out, against);
        }
        key(out, "headers");
        // A name given twice keeps its last value, as a map does.
        let headers: std::collections::BTreeMap<&str, &str> = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        out.push('{');
        for (i, (name, value)) in headers.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_quoted(out, name);
            out.push(':');
            push_quoted(out, value);
        }
        out.push('}');
        key(out, "launch");
        push_quoted(out, self.launch);
        key(out, "path");
        push_quoted(out, self.path);
        if let Some(note) = self.repair
            && let Ok(v) = serde_json::to_value(note)
        {
            key(out, "repair");
            out.push_str(&v.to_string());
        }
        key(out, "request");
        match self.request_object.and_then(one_line_object) {
            Some(object) => out.push_str(object),
            None => push_quoted(out, &utf8_lossy(self.request)),
        }
        key(out, "response");
        match self.response {
            Some(r) => push_quoted(out, &utf8_lossy(r)),
            None => out.push_str("null"),
        }
        if let Some(ts) = serde_json::Number::from_f64(self.ts) {
            key(out, "ts");
            out.push_str(&ts.to_string());
        }
        out.push('}');
    }
}

/// The request body as the line may hold it as JSON: exactly one JSON object (the caller
/// read `text` as one) on one line, nested at most [`MAX_LOGGED_DEPTH`] deep, so a line
/// holding it reads with any JSON reader's default limits (serde_json's `Value` stops at
/// 128, Python's at ~1,000). Nothing to escape, and read back byte for byte (`read_line`
/// takes an object `request` as the body). Any other body is logged as its text, a JSON
/// string: one not JSON, not UTF-8, over lines, or with whitespace around it.
fn one_line_object(text: &str) -> Option<&str> {
    (text.starts_with('{')
        && text.ends_with('}')
        && one_line_nested_at_most(text.as_bytes(), MAX_LOGGED_DEPTH))
    .then_some(text)
}

/// How deep a body logged as JSON may nest (the line adds one level).
const MAX_LOGGED_DEPTH: usize = 100;

/// Whether valid JSON `text` is on one line and nests at most `limit` arrays and objects
/// deep: only the bytes outside strings are looked at (strings skipped to their closing
/// quote), since valid JSON has a line break only as whitespace between tokens, never raw
/// inside a string.
fn one_line_nested_at_most(text: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut at = 0;
    while let Some(&byte) = text.get(at) {
        match byte {
            b'"' => match prompt_core::raw_json::string_end(text, at + 1) {
                Some(end) => at = end,
                None => return true,
            },
            b'\n' | b'\r' => return false,
            b'{' | b'[' => {
                depth += 1;
                if depth > limit {
                    return false;
                }
                at += 1;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                at += 1;
            }
            _ => at += 1,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value};

    fn line(request: &[u8]) -> LogLine<'_> {
        LogLine {
            path: "/v1/messages",
            headers: &[],
            ts: 1.5,
            request,
            request_object: object_text(request),
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

    /// `body`'s text when the analysis reads it as one JSON object (what lets it be logged
    /// as one).
    fn object_text(body: &[u8]) -> Option<&str> {
        std::str::from_utf8(body)
            .ok()
            .filter(|t| prompt_core::raw_json::Object::parse(t).is_ok())
    }

    /// Request bodies that are JSON: objects on one line or pretty-printed, arrays,
    /// strings, with whitespace around some.
    fn json_bodies() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
        ];
        let value = leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(".{0,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        (value, 0..4u8).prop_map(|(v, form)| {
            let v = match v {
                Value::Object(_) | Value::Array(_) if form != 3 => {
                    serde_json::json!({"model": "m", "messages": [v]})
                }
                v => v,
            };
            match form {
                0 | 3 => serde_json::to_string(&v).unwrap(),
                1 => serde_json::to_string_pretty(&v).unwrap(),
                _ => format!(" {} ", serde_json::to_string(&v).unwrap()),
            }
            .into_bytes()
        })
    }

    #[test]
    fn a_json_body_on_one_line_is_logged_as_itself_and_read_back_byte_for_byte() {
        let nested = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        let (deep, shallow) = (nested(10_000), nested(MAX_LOGGED_DEPTH - 1));
        for (body, raw) in [
            (
                r#"{"model":"m","messages":[{"role":"user","content":"a\"b\nc"}]}"#,
                true,
            ),
            (deep.as_str(), false),
            (shallow.as_str(), true),
            ("{\n  \"model\": \"m\"\n}", false),
            (" {\"model\":\"m\"}", false),
            ("{\"model\":\"m\"", false),
            ("{\"model\":\"m\"}{}", false),
            ("[1,2]", false),
            // A body that would close the line's `request` early and add keys of its own.
            (r#"{"a":1},"session":"forged","x":{"b":2}"#, false),
            ("not json", false),
        ] {
            let line = line(body.as_bytes()).to_json();
            let request = serde_json::from_str::<Value>(&line).unwrap()["request"].clone();
            assert_eq!(request.is_object(), raw, "{body:.60}");
            assert_eq!(
                line.contains(&format!("\"request\":{body}")),
                raw,
                "{body:.60}"
            );
            let read = prompt_measure::logged::read_line(&line).unwrap();
            assert_eq!(read.request, body, "read back as sent");
        }
        let not_utf8 = line(b"{\"a\":\"\xff\"}").to_json();
        let read = prompt_measure::logged::read_line(&not_utf8).unwrap();
        assert_eq!(read.request, "{\"a\":\"\u{fffd}\"}");
    }

    /// The line as a `serde_json` map writes it: what the log's lines were before they
    /// were written straight into one buffer.
    fn through_a_map(l: &LogLine<'_>) -> String {
        let text = |b: &[u8]| Value::String(String::from_utf8_lossy(b).into_owned());
        let mut o = Map::new();
        // A one-line JSON object is written as itself (below, by its key).
        o.insert("request".into(), text(l.request));
        o.insert("response".into(), l.response.map_or(Value::Null, text));
        o.insert("path".into(), Value::String(l.path.to_owned()));
        let headers: Map<String, Value> = l
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        o.insert("headers".into(), Value::Object(headers));
        if let Some(ts) = serde_json::Number::from_f64(l.ts) {
            o.insert("ts".into(), Value::Number(ts));
        }
        o.insert("launch".into(), Value::String(l.launch.to_owned()));
        if let Some(a) = l.diagnosed_against {
            o.insert("diagnosed_against".into(), Value::String(a.to_owned()));
        }
        if let Some(n) = l.repair {
            o.insert("repair".into(), serde_json::to_value(n).unwrap());
        }
        if let Some(a) = l.agent_request {
            o.insert("agent_request".into(), text(a));
        }
        let mut sorted: Vec<(String, Value)> = o.into_iter().collect();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        // Sorted by hand too: the same bytes whether or not serde_json keeps insertion order.
        let mut out = String::from("{");
        for (i, (k, v)) in sorted.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let v = match v {
                Value::Object(m) => {
                    let mut m: Vec<(String, Value)> = m.into_iter().collect();
                    m.sort_by(|a, b| a.0.cmp(&b.0));
                    let inner: Vec<String> = m
                        .iter()
                        .map(|(k, v)| format!("{}:{v}", Value::String(k.clone())))
                        .collect();
                    format!("{{{}}}", inner.join(","))
                }
                _ if k == "request" && l.request_object.and_then(one_line_object).is_some() => {
                    String::from_utf8_lossy(l.request).into_owned()
                }
                v => v.to_string(),
            };
            out.push_str(&format!("{}:{v}", Value::String(k)));
        }
        out.push('}');
        out
    }

    proptest::proptest! {
        #[test]
        fn a_line_is_written_as_a_json_map_of_the_same_fields_would_be(
            request in proptest::prop_oneof![
                proptest::collection::vec(proptest::num::u8::ANY, 0..200),
                json_bodies(),
            ],
            response in proptest::option::of(proptest::collection::vec(proptest::num::u8::ANY, 0..50)),
            agent in proptest::option::of(".{0,20}"),
            against in proptest::option::of("[a-z\\\"\n]{0,10}"),
            headers in proptest::collection::vec(("[a-c]{1,2}", ".{0,8}"), 0..5),
            ts in proptest::num::f64::ANY,
            launch in ".{0,10}",
        ) {
            let headers: Vec<(String, String)> = headers;
            let l = LogLine {
                path: "/v1/messages",
                headers: &headers,
                ts,
                request: &request,
                request_object: object_text(&request),
                response: response.as_deref(),
                diagnosed_against: against.as_deref(),
                launch: &launch,
                repair: None,
                agent_request: agent.as_deref().map(str::as_bytes),
            };
            let line = l.to_json();
            proptest::prop_assert_eq!(&line, &through_a_map(&l));
            serde_json::from_str::<Value>(&line).unwrap();
            let read = prompt_measure::logged::read_line(&line).unwrap();
            proptest::prop_assert_eq!(read.request.as_ref(), String::from_utf8_lossy(&request));
        }
    }
}
