//! Reading input that comes from users and downloads: bounded, and from regular files only;
//! and quoting it back, bounded.
//!
//! A config, a log or a template is hostile until read. Every reader in the workspace goes
//! through here, so none of them can be made to allocate without bound (`/dev/zero`), or to
//! block forever (a FIFO nobody writes to). Every diagnostic that quotes input quotes an
//! [`excerpt`], so none of them can be made to repeat a megabyte; an error that shows its
//! cause shows a bounded [`chain`].

use std::borrow::Cow;
use std::error::Error;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The most an `agent.toml` may hold: 4 MiB. A real one is a few KiB.
pub const CONFIG_LIMIT: u64 = 4 << 20;

/// The most bytes of one piece of input a diagnostic quotes, unless it says less: well
/// under docs/wire.md's 2 KiB per diagnostic, with room for the words around it.
pub const EXCERPT_BYTES: usize = 256;

/// At most `max` bytes of `text`, cut at a character boundary, `…` marking the cut: what a
/// diagnostic quotes of input. The text is borrowed when it is short enough.
///
/// ```
/// use prompt_core::input::excerpt;
/// assert_eq!(excerpt("role", 8), "role");
/// assert_eq!(excerpt("assistant", 4), "assi…");
/// assert_eq!(excerpt("né", 2), "n…"); // `é` is two bytes: the cut stays on a boundary
/// ```
pub fn excerpt(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    Cow::Owned(format!("{}…", head(text, max)))
}

/// Whether `c` is escaped by [`escape_controls`]: a control character (C0, DEL, C1), or a
/// character that moves or reorders what a terminal shows (a line or paragraph separator, a
/// bidirectional mark, embedding, override or isolate).
fn is_escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200E}' | '\u{200F}' | '\u{2028}' | '\u{2029}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` as one terminal line can show it: every control character (newlines, carriage
/// returns, tabs, `ESC` and so every escape sequence, C1 controls) and every character that
/// moves or reorders the text shown (line separators, bidirectional overrides) written as an
/// escape (`\n`, `\r`, `\t`, `\x1b`, `\u{9b}`, `\u{202e}`), so input can neither start a line of
/// its own nor drive the terminal. The one escaping function for every value from input a
/// terminal line prints (a verdict line's session, model and verdict, a log's path); it is
/// for display, not reversible (a backslash is left as it is). Borrowed when nothing needs
/// escaping.
///
/// ```
/// use prompt_core::input::escape_controls;
/// assert_eq!(escape_controls("gpt-4o"), "gpt-4o");
/// assert_eq!(escape_controls("m\ncacheline proxy: forged"), "m\\ncacheline proxy: forged");
/// assert_eq!(escape_controls("\u{1b}]0;title\u{7}\u{1b}[2J"), "\\x1b]0;title\\x07\\x1b[2J");
/// assert_eq!(escape_controls("\u{9b}2J \u{202e}txt"), "\\u{9b}2J \\u{202e}txt");
/// ```
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && is_escaped(c) => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if is_escaped(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `bytes` as text, invalid UTF-8 replaced by U+FFFD: [`String::from_utf8_lossy`], with
/// valid text (nearly every body) checked by [`std::str::from_utf8`], several times faster
/// on large ASCII bodies than the lossy decoder's walk.
///
/// ```
/// use prompt_core::input::utf8_lossy;
/// assert_eq!(utf8_lossy(b"{\"a\":1}"), "{\"a\":1}");
/// assert_eq!(utf8_lossy(b"a\xffb"), "a\u{fffd}b");
/// ```
pub fn utf8_lossy(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// The longest start of `text` of at most `max` bytes that ends on a character boundary,
/// unmarked: what a bound on bytes read or kept cuts (an element the catalogue searches, a
/// label, a header value); [`excerpt`] is the same cut, marked, for what is shown.
///
/// ```
/// use prompt_core::input::head;
/// assert_eq!(head("assistant", 4), "assi");
/// assert_eq!(head("né", 2), "n");
/// assert_eq!(head("hi", 8), "hi");
/// ```
pub fn head(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

/// `1234567` → `1,234,567`: how every verdict, summary and report writes a token count.
///
/// ```
/// use prompt_core::input::thousands;
/// assert_eq!(thousands(0), "0");
/// assert_eq!(thousands(1234567), "1,234,567");
/// ```
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The most links of an error's cause chain a message shows ([`chain`], [`report`]).
pub const CHAIN_LINKS: usize = 4;

/// The most causes [`chain`] and [`report`] look at, shown or not (a chain of errors that
/// each repeat their cause's text is walked no further than this).
const CHAIN_WALK: usize = 32;

/// `error`'s message and its causes (its [`Error::source`] chain) joined by `: `: at most
/// [`CHAIN_LINKS`] links, each an [`excerpt`] of at most [`EXCERPT_BYTES`] bytes. A cause
/// whose text a link before it already shows (an error that writes its cause into its own
/// message) is not repeated.
///
/// An error whose cause says what failed (a parser's position, the connection error under
/// an HTTP client's "error sending request") shows it through this, in its own message:
/// `#[error("the saved session does not parse: {}", chain(.0))]`.
///
/// ```
/// use prompt_core::input::chain;
/// #[derive(Debug, thiserror::Error)]
/// #[error("the settings do not parse")]
/// struct Settings(#[source] serde_json::Error);
/// let parse = serde_json::from_str::<serde_json::Value>("{\"a\": }").unwrap_err();
/// assert_eq!(chain(&Settings(parse)), "the settings do not parse: expected value at line 1 column 7");
/// ```
pub fn chain(error: &dyn Error) -> String {
    let text = excerpt(&error.to_string(), EXCERPT_BYTES).into_owned();
    causes(text, error)
}

/// [`chain`], but with `error`'s own message whole: what a program prints for the error it
/// reports (`error: {report}`), whose own message is bounded by its own fields.
pub fn report(error: &dyn Error) -> String {
    causes(error.to_string(), error)
}

/// `text` (the head's message) followed by the causes of `head` it does not show yet.
fn causes(mut text: String, head: &dyn Error) -> String {
    let mut links = 1;
    let mut cause = head.source();
    for _ in 0..CHAIN_WALK {
        let Some(current) = cause else { break };
        if links >= CHAIN_LINKS {
            break;
        }
        let message = current.to_string();
        let quoted = excerpt(&message, EXCERPT_BYTES);
        if !text.contains(quoted.as_ref()) {
            text.push_str(": ");
            text.push_str(&quoted);
            links += 1;
        }
        cause = current.source();
    }
    text
}

/// Why an input could not be read.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Opening or reading failed.
    #[error("{path}: cannot read: {}", chain(.source))]
    Io {
        /// The file (`-` for standard input).
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// A directory, device, FIFO or socket.
    #[error("{path}: not a regular file ({kind}); give a file, or `-` for standard input")]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// More than the limit.
    #[error("{path}: larger than the {limit}-byte limit for this input")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// Not UTF-8.
    #[error("{path}: not UTF-8 text (first bad byte at offset {offset})")]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Offset of the first invalid byte.
        offset: usize,
    },
}

impl InputError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            InputError::Io { path, .. }
            | InputError::NotRegular { path, .. }
            | InputError::TooLarge { path, .. }
            | InputError::NotUtf8 { path, .. } => path,
        }
    }
}

/// Opens `path` for reading if it is a regular file (symlinks are followed); `-` is standard
/// input. The size is not checked here: see [`read_text`].
pub fn open(path: &Path) -> Result<Box<dyn Read>, InputError> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(io::stdin()));
    }
    let io_error = |source| InputError::Io {
        path: path.to_owned(),
        source,
    };
    // Check the kind before opening: opening a FIFO for reading blocks until a writer comes.
    let meta = std::fs::metadata(path).map_err(io_error)?;
    if !meta.is_file() {
        return Err(InputError::NotRegular {
            path: path.to_owned(),
            kind: kind_of(&meta.file_type()),
        });
    }
    Ok(Box::new(File::open(path).map_err(io_error)?))
}

fn kind_of(file_type: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO";
        }
        if file_type.is_char_device() || file_type.is_block_device() {
            return "a device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "not a file"
    }
}

/// Reads at most `limit` bytes from `reader`; more is [`InputError::TooLarge`].
pub fn read_limited(mut reader: impl Read, path: &Path, limit: u64) -> Result<Vec<u8>, InputError> {
    let mut bytes = Vec::new();
    reader
        .by_ref()
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Io {
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(InputError::TooLarge {
            path: path.to_owned(),
            limit,
        });
    }
    Ok(bytes)
}

/// Reads a UTF-8 text file (or `-`, standard input) of at most `limit` bytes.
///
/// ```
/// use prompt_core::input::{read_text, InputError, CONFIG_LIMIT};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let dir = std::env::temp_dir().join(format!("prompt-core-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// assert!(matches!(read_text(&dir, CONFIG_LIMIT), Err(InputError::NotRegular { .. })));
/// let file = dir.join("agent.toml");
/// std::fs::write(&file, "[prompt]\n")?;
/// assert_eq!(read_text(&file, CONFIG_LIMIT)?, "[prompt]\n");
/// assert!(matches!(read_text(&file, 4), Err(InputError::TooLarge { limit: 4, .. })));
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok(()) }
/// ```
pub fn read_text(path: &Path, limit: u64) -> Result<String, InputError> {
    let bytes = read_limited(open(path)?, path, limit)?;
    String::from_utf8(bytes).map_err(|e| InputError::NotUtf8 {
        path: path.to_owned(),
        offset: e.utf8_error().valid_up_to(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link of a test chain: its message, and the next link.
    #[derive(Debug)]
    struct Link(String, Option<Box<Link>>);

    impl std::fmt::Display for Link {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.0)
        }
    }

    impl Error for Link {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|l| l as &(dyn Error + 'static))
        }
    }

    fn links(messages: &[String]) -> Link {
        let mut next = None;
        for m in messages.iter().rev() {
            next = Some(Box::new(Link(m.clone(), next)));
        }
        match next {
            Some(head) => *head,
            None => Link(String::new(), None),
        }
    }

    #[test]
    fn escaped_text_holds_no_control_and_keeps_everything_else() {
        let every: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        let escaped = escape_controls(&every);
        assert!(!escaped.chars().any(is_escaped), "{escaped}");
        assert!(!escaped.contains('\n') && !escaped.contains('\u{1b}'));
        // Everything not escaped is kept, in order.
        let kept: String = every.chars().filter(|c| !is_escaped(*c)).collect();
        let mut rest = escaped.as_ref();
        for c in kept.chars() {
            let at = rest.find(c).unwrap_or_else(|| panic!("{c:?} lost"));
            rest = &rest[at + c.len_utf8()..];
        }
        assert!(matches!(escape_controls("plain é 日本"), Cow::Borrowed(_)));
    }

    #[test]
    fn chain_shows_each_cause_once_at_most_four_links_each_excerpted() {
        let long = "x".repeat(10_000);
        let messages: Vec<String> = ["head", "one", long.as_str(), "three", "four", "five"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let text = chain(&links(&messages));
        let excerpted = format!("{}…", "x".repeat(EXCERPT_BYTES));
        assert_eq!(text, format!("head: one: {excerpted}: three"));
        // A cause an earlier message already shows is not repeated, and does not count.
        let repeating: Vec<String> = ["a: b", "b", "c", "d", "e"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        assert_eq!(chain(&links(&repeating)), "a: b: c: d: e");
        // `report` keeps the head whole.
        let head = vec![long.clone(), "cause".to_owned()];
        assert_eq!(report(&links(&head)), format!("{long}: cause"));
        assert_eq!(chain(&links(&head)), format!("{excerpted}: cause"));
    }

    #[test]
    fn a_long_chain_of_repeated_causes_is_walked_a_bounded_way() {
        let messages = vec!["same".to_owned(); 1_000];
        assert_eq!(chain(&links(&messages)), "same");
    }
}
