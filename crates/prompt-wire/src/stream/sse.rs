//! The server-sent-events line decoder every stream reader shares: bytes in, events out.
//!
//! As the WHATWG HTML standard defines the `text/event-stream` format: lines end with
//! `\r\n`, `\r` or `\n`; a leading byte-order mark is dropped; a line starting with `:` is
//! a comment; `field: value` lines (one space after the colon dropped) build an event:
//! `event` names it, each `data` line appends to its data, joined by `\n`; a blank line
//! dispatches it (nothing is dispatched without data). An event still open when the
//! bytes end is discarded, as the standard says, so a cut-off stream never yields a
//! half event. A line is complete only at its end-of-line byte, and a newline byte never
//! occurs inside a UTF-8 character, so bytes may be split anywhere: inside a line, a
//! character or a JSON string.

use super::{Limit, StreamError};

/// The UTF-8 byte-order mark.
const BOM: &[u8] = b"\xef\xbb\xbf";

/// One dispatched event.
pub(crate) struct Event<'a> {
    /// Its number in the stream, from 1.
    pub(crate) number: u64,
    /// Its `event` field (empty when it had none).
    pub(crate) kind: &'a str,
    /// Its data lines, joined by `\n`.
    pub(crate) data: &'a str,
}

/// The decoder's state between two pieces of bytes.
#[derive(Debug)]
pub(crate) struct Decoder {
    api: &'static str,
    /// The line begun and not yet ended.
    line: Vec<u8>,
    /// The last piece ended with `\r`: a `\n` opening the next one belongs to it.
    after_cr: bool,
    /// No line has ended yet (where a byte-order mark may be).
    first_line: bool,
    kind: String,
    data: String,
    /// Events dispatched so far.
    events: u64,
    /// Bytes given so far.
    bytes: usize,
}

impl Decoder {
    pub(crate) fn new(api: &'static str) -> Self {
        Self {
            api,
            line: Vec::new(),
            after_cr: false,
            first_line: true,
            kind: String::new(),
            data: String::new(),
            events: 0,
            bytes: 0,
        }
    }

    /// Events dispatched so far.
    pub(crate) fn events(&self) -> u64 {
        self.events
    }

    fn too_large(&self, limit: Limit) -> StreamError {
        StreamError::TooLarge {
            api: self.api,
            event: self.events.saturating_add(1),
            limit,
            max: limit.max(),
        }
    }

    /// Decodes `bytes`, handing each complete event to `on_event` as it ends.
    pub(crate) fn feed(
        &mut self,
        bytes: &[u8],
        on_event: &mut dyn FnMut(Event<'_>) -> Result<(), StreamError>,
    ) -> Result<(), StreamError> {
        self.bytes = self.bytes.saturating_add(bytes.len());
        if self.bytes > Limit::StreamBytes.max() {
            return Err(self.too_large(Limit::StreamBytes));
        }
        let mut rest = bytes;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if rest[0] == b'\n' {
                rest = &rest[1..];
            }
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            let (line, tail) = rest.split_at(end);
            rest = &tail[1..];
            if tail[0] == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
            if self.line.is_empty() {
                self.line_ended(line, on_event)?;
            } else {
                if self.line.len().saturating_add(line.len()) > Limit::EventBytes.max() {
                    return Err(self.too_large(Limit::EventBytes));
                }
                let mut whole = std::mem::take(&mut self.line);
                whole.extend_from_slice(line);
                let result = self.line_ended(&whole, on_event);
                whole.clear();
                self.line = whole;
                result?;
            }
        }
        if self.line.len().saturating_add(rest.len()) > Limit::EventBytes.max() {
            return Err(self.too_large(Limit::EventBytes));
        }
        self.line.extend_from_slice(rest);
        Ok(())
    }

    fn line_ended(
        &mut self,
        line: &[u8],
        on_event: &mut dyn FnMut(Event<'_>) -> Result<(), StreamError>,
    ) -> Result<(), StreamError> {
        let line = if std::mem::take(&mut self.first_line) {
            line.strip_prefix(BOM).unwrap_or(line)
        } else {
            line
        };
        let Ok(line) = std::str::from_utf8(line) else {
            return Err(StreamError::NotUtf8 {
                api: self.api,
                event: self.events.saturating_add(1),
            });
        };
        if line.is_empty() {
            return self.dispatch(on_event);
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.kind),
            "data" => {
                if self.data.len() + value.len() + 1 > Limit::EventBytes.max() {
                    return Err(self.too_large(Limit::EventBytes));
                }
                self.data.push_str(value);
                self.data.push('\n');
            }
            // `id` and `retry` serve reconnection, which a reply stream never does; other
            // fields are ignored, as the standard says.
            _ => {}
        }
        Ok(())
    }

    fn dispatch(
        &mut self,
        on_event: &mut dyn FnMut(Event<'_>) -> Result<(), StreamError>,
    ) -> Result<(), StreamError> {
        if self.data.is_empty() {
            self.kind.clear();
            return Ok(());
        }
        self.data.pop();
        self.events = self.events.saturating_add(1);
        let result = on_event(Event {
            number: self.events,
            kind: &self.kind,
            data: &self.data,
        });
        self.kind.clear();
        self.data.clear();
        result
    }
}
