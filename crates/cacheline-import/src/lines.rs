//! Lines of a session file, read in bounded memory: a line longer than the cap is skipped
//! (its length counted, its bytes never held), and a file is read up to the size it had
//! when it was opened, so a file an agent keeps appending to ends where it ended then.

use std::io::{BufRead, BufReader, Read};

/// One line as read.
#[derive(Debug)]
pub enum Line<'a> {
    /// The line's bytes, without the line ending.
    Text(&'a [u8]),
    /// A line over the cap, skipped: its length in bytes.
    TooLong(u64),
}

/// Reads lines from `reader`, at most `limit` bytes a line.
#[derive(Debug)]
pub struct LineReader<R> {
    reader: BufReader<R>,
    limit: usize,
    buf: Vec<u8>,
    line: u64,
    bytes: u64,
}

impl<R: Read> LineReader<R> {
    /// A reader of lines of at most `limit` bytes.
    pub fn new(reader: R, limit: usize) -> Self {
        Self {
            reader: BufReader::with_capacity(256 * 1024, reader),
            limit,
            buf: Vec::new(),
            line: 0,
            bytes: 0,
        }
    }

    /// The number of the line last returned (from 1).
    pub fn line_number(&self) -> u64 {
        self.line
    }

    /// The bytes this reader holds for a line (its buffer's capacity): never much more than
    /// the cap, whatever the input.
    pub fn held(&self) -> usize {
        self.buf.capacity()
    }

    /// The bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.bytes
    }

    /// The text of the line last returned (empty after a line over the cap).
    pub fn text(&self) -> &[u8] {
        &self.buf
    }

    /// The next line; `None` at the end.
    pub fn next_line(&mut self) -> std::io::Result<Option<Line<'_>>> {
        self.buf.clear();
        let mut total: u64 = 0;
        let mut too_long = false;
        let mut any = false;
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(chunk) => chunk,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                break;
            }
            any = true;
            let (take, done) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            total = total.saturating_add(take as u64);
            if !too_long {
                if self.buf.len() + take > self.limit {
                    too_long = true;
                    self.buf = Vec::new();
                } else {
                    self.buf.extend_from_slice(&chunk[..take]);
                }
            }
            let consumed = if done { take + 1 } else { take };
            self.reader.consume(consumed);
            self.bytes = self.bytes.saturating_add(consumed as u64);
            if done {
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        self.line += 1;
        if too_long {
            return Ok(Some(Line::TooLong(total)));
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(Some(Line::Text(&self.buf)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(text: &[u8], limit: usize) -> Vec<Result<Vec<u8>, u64>> {
        let mut r = LineReader::new(text, limit);
        let mut out = Vec::new();
        while let Some(line) = r.next_line().unwrap() {
            out.push(match line {
                Line::Text(t) => Ok(t.to_vec()),
                Line::TooLong(n) => Err(n),
            });
        }
        out
    }

    #[test]
    fn a_long_line_is_skipped_and_the_next_one_read() {
        let text = b"short\nxxxxxxxxxxxxxxxx\nnext";
        assert_eq!(
            all(text, 8),
            vec![Ok(b"short".to_vec()), Err(16), Ok(b"next".to_vec())]
        );
    }

    proptest! {
        /// Lines within the cap read back as `split('\n')` has them; none longer is kept.
        #[test]
        fn lines_are_split_lines(text in proptest::collection::vec(any::<u8>(), 0..600), limit in 1usize..64) {
            let got = all(&text, limit);
            let mut want: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
            if text.last() == Some(&b'\n') || text.is_empty() {
                want.pop();
            }
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                let w = w.strip_suffix(b"\r").unwrap_or(w);
                match g {
                    Ok(g) => prop_assert_eq!(g.as_slice(), w),
                    Err(n) => prop_assert!(*n as usize > limit),
                }
            }
        }
    }
}
