//! The error stack of the TOML files prompt-core reads: an `agent.toml`'s `[prompt]` and
//! `[provider]` sections, and a prefix lock. Each file has its own problem enum (what can be
//! wrong in it); everything around the problem is shared, here:
//!
//! - where: a [`SourcePosition`] (`file:line:column`), computed from the TOML span of the
//!   problem, for all the problems of a file in one pass;
//! - the diagnostic: a [`Diagnostic`] (a problem at its position), and [`Diagnostics`], every
//!   error of a file in source order (loading fails closed on any);
//! - warnings: a [`Loaded`] value carries them, and is reached only through a method that
//!   says what happens to them;
//! - the cause chain: [`LoadError`], a file that could not be read (its [`InputError`], whose
//!   message shows its cause, bounded) or that was read and is invalid;
//! - rendering: `file:line:column: message`, one diagnostic a line; values quoted as bounded
//!   excerpts.
//!
//! ```
//! use prompt_core::config::{Diagnostics, LoadError};
//! use prompt_core::profile::{ProviderProblem, ProviderSection};
//! let err = ProviderSection::from_agent_toml("[provider]\nttl = 5\n", "agent.toml").unwrap_err();
//! assert_eq!(err.to_string(), "agent.toml:2:7: invalid type: integer `5`, expected \"5m\" or \"1h\"");
//! let Diagnostics(errors) = &err;
//! assert!(matches!(errors[0].problem, ProviderProblem::WrongType { .. }));
//! let missing = std::path::Path::new("no-such-dir/agent.toml");
//! assert!(matches!(ProviderSection::load_agent_toml(missing), Err(LoadError::Input(_))));
//! ```

use std::borrow::Cow;
use std::error::Error;
use std::fmt;
use std::ops::Range;
use std::path::Path;

use toml::de::DeValue;

use crate::input::{self, InputError};

/// A position in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePosition {
    /// The file name or other origin given to the loader.
    pub origin: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl fmt::Display for SourcePosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.origin, self.line, self.column)
    }
}

/// A problem `P` with its position: `agent.toml:7:17: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic<P> {
    /// Where.
    pub position: SourcePosition,
    /// What.
    pub problem: P,
}

impl<P: fmt::Display> fmt::Display for Diagnostic<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.position, self.problem)
    }
}

impl<P: Error> Error for Diagnostic<P> {
    /// The problem's own cause: the position and the problem are this error's message.
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.problem.source()
    }
}

/// Every error of a config file, in source order, one a line. Loading fails closed: with
/// any of them, nothing is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostics<P>(pub Vec<Diagnostic<P>>);

impl<P: fmt::Display> fmt::Display for Diagnostics<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}

impl<P: fmt::Debug + fmt::Display> Error for Diagnostics<P> {}

/// A value loaded from a config file together with the warnings found while loading it.
///
/// The value is reached only through a method that says what happens to the warnings, so
/// they cannot be lost by accident.
#[derive(Debug, Clone)]
#[must_use = "a loaded config carries its warnings: take it with `into_parts`, `deny_warnings` or `ignore_warnings`"]
pub struct Loaded<T, P> {
    value: T,
    warnings: Vec<Diagnostic<P>>,
}

impl<T, P> Loaded<T, P> {
    pub(crate) fn new(value: T, warnings: Vec<Diagnostic<P>>) -> Self {
        Self { value, warnings }
    }

    /// The warnings, in source order.
    pub fn warnings(&self) -> &[Diagnostic<P>] {
        &self.warnings
    }

    /// The value and the warnings, for a caller that reports them itself.
    pub fn into_parts(self) -> (T, Vec<Diagnostic<P>>) {
        (self.value, self.warnings)
    }

    /// The value, or the warnings as errors when there are any (`check --strict`).
    pub fn deny_warnings(self) -> Result<T, Diagnostics<P>> {
        if self.warnings.is_empty() {
            Ok(self.value)
        } else {
            Err(Diagnostics(self.warnings))
        }
    }

    /// The value; the warnings are dropped, as the caller's code says here.
    pub fn ignore_warnings(self) -> T {
        self.value
    }
}

/// Why a config file could not be loaded from a path.
#[derive(Debug)]
pub enum LoadError<P> {
    /// The file could not be read (missing, not a regular file, too large, not UTF-8).
    Input(InputError),
    /// The file was read; what it says is invalid.
    Invalid(Diagnostics<P>),
}

impl<P: fmt::Display> fmt::Display for LoadError<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Input(e) => fmt::Display::fmt(e, f),
            LoadError::Invalid(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl<P: fmt::Debug + fmt::Display> Error for LoadError<P> {
    /// As `#[error(transparent)]`: the cause of the error this one wraps.
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            LoadError::Input(e) => e.source(),
            LoadError::Invalid(_) => None,
        }
    }
}

impl<P> From<InputError> for LoadError<P> {
    fn from(error: InputError) -> Self {
        LoadError::Input(error)
    }
}

impl<P> From<Diagnostics<P>> for LoadError<P> {
    fn from(errors: Diagnostics<P>) -> Self {
        LoadError::Invalid(errors)
    }
}

/// Reads the config file at `path` (at most `limit` bytes, a regular file, or `-` for
/// standard input): its text, and its origin as diagnostics name it (`<stdin>` for `-`).
pub fn read_file(path: &Path, limit: u64) -> Result<(String, String), InputError> {
    let text = input::read_text(path, limit)?;
    let origin = if path.as_os_str() == "-" {
        "<stdin>".to_owned()
    } else {
        path.display().to_string()
    };
    Ok((text, origin))
}

/// What every config file's problem enum can say: the file is no TOML (or too large), or a
/// value has the wrong type.
pub(crate) trait FileProblem: Sized {
    /// The file was not read at all.
    fn unreadable(why: Unreadable) -> Self;
    /// A value of the wrong TOML type.
    fn wrong_type(found: String, expected: &'static str) -> Self;
}

/// [`FileProblem`] for a problem enum with the variants `Syntax(toml::de::Error)`,
/// `TooLarge { len, limit }` and `WrongType { found, expected }`, as each file's has.
macro_rules! file_problem {
    ($problem:ident) => {
        impl $crate::config::FileProblem for $problem {
            fn unreadable(why: $crate::config::Unreadable) -> Self {
                match why {
                    $crate::config::Unreadable::TooLarge { len, limit } => {
                        $problem::TooLarge { len, limit }
                    }
                    $crate::config::Unreadable::Syntax(e) => $problem::Syntax(e),
                }
            }

            fn wrong_type(found: String, expected: &'static str) -> Self {
                $problem::WrongType { found, expected }
            }
        }
    };
}
pub(crate) use file_problem;

/// A problem at a byte offset; positions are computed once, for all of them, at the end.
pub(crate) struct Found<P> {
    /// Byte offset into the text.
    pub(crate) offset: usize,
    /// What is wrong there.
    pub(crate) problem: P,
}

/// Sorts by offset (stable: equal offsets keep their order) and turns each offset into a
/// line and a character column in one forward pass over the text: linear in the file plus
/// `d log d` for `d` diagnostics, however many there are and however long the lines.
pub(crate) fn positioned<P>(
    src: &str,
    origin: &str,
    mut found: Vec<Found<P>>,
) -> Vec<Diagnostic<P>> {
    found.sort_by_key(|f| f.offset);
    let bytes = src.as_bytes();
    let (mut at, mut line, mut column) = (0usize, 1usize, 1usize);
    found
        .into_iter()
        .map(|f| {
            let target = src.floor_char_boundary(f.offset);
            for &b in &bytes[at..target] {
                if b == b'\n' {
                    line += 1;
                    column = 1;
                } else if b & 0xC0 != 0x80 {
                    // Not a UTF-8 continuation byte: a new character.
                    column += 1;
                }
            }
            at = target;
            let position = SourcePosition {
                origin: origin.to_owned(),
                line,
                column,
            };
            Diagnostic {
                position,
                problem: f.problem,
            }
        })
        .collect()
}

/// The diagnostics of one load, each at a byte offset: errors (nothing is returned) and
/// warnings (returned beside the result).
pub(crate) struct Findings<P> {
    pub(crate) errors: Vec<Found<P>>,
    pub(crate) warnings: Vec<Found<P>>,
}

impl<P> Default for Findings<P> {
    fn default() -> Self {
        Self {
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }
}

impl<P> Findings<P> {
    pub(crate) fn error(&mut self, span: Range<usize>, problem: P) {
        self.errors.push(Found {
            offset: span.start,
            problem,
        });
    }

    pub(crate) fn warning(&mut self, span: Range<usize>, problem: P) {
        self.warnings.push(Found {
            offset: span.start,
            problem,
        });
    }

    /// The errors, positioned in `src`.
    pub(crate) fn into_errors(self, src: &str, origin: &str) -> Diagnostics<P> {
        Diagnostics(positioned(src, origin, self.errors))
    }

    /// `value` is not of the type `expected` there.
    pub(crate) fn wrong_type(&mut self, value: &toml::Spanned<DeValue<'_>>, expected: &'static str)
    where
        P: FileProblem,
    {
        let problem = P::wrong_type(describe_value(value.get_ref()), expected);
        self.error(value.span(), problem);
    }

    /// The table of a top-level section (`[prompt]`, `[provider]`); else `None`, with its
    /// `[[key]]` form reported as `array_of_tables` and any other value as not `expected`.
    /// Every file's section is refused the same way, with its own problem enum.
    pub(crate) fn section_table<'v, 'd>(
        &mut self,
        key: &toml::Spanned<Cow<'_, str>>,
        value: &'v toml::Spanned<DeValue<'d>>,
        array_of_tables: P,
        expected: &'static str,
    ) -> Option<&'v toml::de::DeTable<'d>>
    where
        P: FileProblem,
    {
        match value.get_ref() {
            DeValue::Table(table) => Some(table),
            // `[[key]]`: the array's span is its first header, which starts before the key.
            DeValue::Array(_) if value.span().start < key.span().start => {
                self.error(value.span(), array_of_tables);
                None
            }
            _ => {
                self.wrong_type(value, expected);
                None
            }
        }
    }
}

/// Why a TOML input was not read at all.
pub(crate) enum Unreadable {
    /// Longer than its limit.
    TooLarge { len: usize, limit: u64 },
    /// Not TOML: the parser's first error.
    Syntax(toml::de::Error),
}

/// Parses a TOML input of at most `limit` bytes into spanned values; else the one error
/// that stops it, positioned (a span-less "recursion limit" placed at the key that crosses
/// it).
pub(crate) fn parse_toml<'s, P: FileProblem>(
    src: &'s str,
    origin: &str,
    limit: u64,
) -> Result<toml::Spanned<toml::de::DeTable<'s>>, Diagnostics<P>> {
    parse_toml_at(src, limit).map_err(|(span, why)| {
        let mut findings = Findings::default();
        findings.error(span, P::unreadable(why));
        findings.into_errors(src, origin)
    })
}

/// [`parse_toml`], unpositioned: where it fails and why.
pub(crate) fn parse_toml_at(
    src: &str,
    limit: u64,
) -> Result<toml::Spanned<toml::de::DeTable<'_>>, (Range<usize>, Unreadable)> {
    if src.len() as u64 > limit {
        let at = usize::try_from(limit).unwrap_or(usize::MAX);
        return Err((
            src.floor_char_boundary(at)..src.len(),
            Unreadable::TooLarge {
                len: src.len(),
                limit,
            },
        ));
    }
    toml::de::DeTable::parse(src).map_err(|e| {
        let span = e.span().or_else(|| key_past_the_limit(src)).unwrap_or(0..0);
        (span, Unreadable::Syntax(e))
    })
}

/// The candidate nearest to `name` within edit distance 2 (the first of the nearest), for a
/// "did you mean".
pub(crate) fn nearest<'c, C: AsRef<str> + ?Sized>(
    name: &str,
    candidates: impl IntoIterator<Item = &'c C>,
) -> Option<&'c C> {
    candidates
        .into_iter()
        .filter_map(|c| distance_within(name, c.as_ref()).map(|d| (d, c)))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// At most 64 bytes of a value quoted in a message ([`crate::input::excerpt`]).
pub(crate) fn excerpt(text: &str) -> Cow<'_, str> {
    crate::input::excerpt(text, 64)
}

/// A TOML value as a message names it: ``integer `1` ``, `string "x"`, `table`.
pub(crate) fn describe_value(value: &DeValue<'_>) -> String {
    match value {
        DeValue::String(s) => format!("string {:?}", excerpt(s)),
        DeValue::Integer(i) => format!("integer `{}`", excerpt(i.as_str())),
        DeValue::Float(x) => format!("floating point `{}`", excerpt(x.as_str())),
        DeValue::Boolean(b) => format!("boolean `{b}`"),
        DeValue::Datetime(d) => format!("datetime `{d}`"),
        DeValue::Array(_) => "array".to_owned(),
        DeValue::Table(_) => "table".to_owned(),
    }
}

/// The most parts a dotted key (`a.b.c`, in a key/value line, a table header or an inline
/// table) may have: toml 1.x refuses a key with 80 parts or more before its last one (its
/// `LIMIT`) as a "recursion limit".
const TOML_KEY_PARTS: usize = 80;

/// Where the first key of too many dotted parts crosses toml's limit: the span of its part
/// after the [`TOML_KEY_PARTS`]th. toml reports that error without a span; the file is
/// lexed again with toml's own parser (linear), so quoted parts and spacing count as toml
/// counts them.
pub(crate) fn key_past_the_limit(src: &str) -> Option<Range<usize>> {
    use toml_parser::parser::{Event, EventKind};
    let source = toml_parser::Source::new(src);
    let tokens = source.lex().into_vec();
    let (mut parts, mut continued, mut found) = (0usize, false, None);
    let mut receiver = |event: Event| match event.kind() {
        EventKind::SimpleKey => {
            parts = if continued { parts + 1 } else { 1 };
            continued = false;
            if parts == TOML_KEY_PARTS + 1 && found.is_none() {
                found = Some(event.span().start()..event.span().end());
            }
        }
        EventKind::KeySep => continued = true,
        EventKind::Whitespace => {}
        _ => (parts, continued) = (0, false),
    };
    toml_parser::parser::parse_document(&tokens, &mut receiver, &mut ());
    found
}

/// The edit distance between `a` and `b` if it is at most 2, in `O(len)`: only the band of
/// the dynamic-programming table within 2 of the diagonal is computed.
pub(crate) fn distance_within(a: &str, b: &str) -> Option<usize> {
    const K: usize = 2;
    const FAR: usize = usize::MAX / 2;
    // Byte lengths bound character counts from above; a long input is rejected unread.
    if a.len().abs_diff(b.len()) > K * 4 || a.len().min(b.len()) > 4 * 1024 {
        return None;
    }
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > K {
        return None;
    }
    let n = b.len();
    let mut prev = vec![FAR; n + 1];
    let mut cur = vec![FAR; n + 1];
    for (j, slot) in prev.iter_mut().enumerate().take(K.min(n) + 1) {
        *slot = j;
    }
    for i in 1..=a.len() {
        let lo = i.saturating_sub(K).max(1);
        let hi = (i + K).min(n);
        cur[lo - 1] = if lo == 1 { i } else { FAR };
        for j in lo..=hi {
            let substitute = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            cur[j] = substitute.min(prev[j] + 1).min(cur[j - 1] + 1);
        }
        if hi < n {
            cur[hi + 1] = FAR;
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    (prev[n] <= K).then_some(prev[n])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_count_characters_in_one_pass() {
        let src = "ab\néé x\n\nz";
        let found = [8, 0, 4, 11, 2, 99]
            .into_iter()
            .map(|offset| Found {
                offset,
                problem: (),
            })
            .collect();
        let got: Vec<(usize, usize)> = positioned(src, "f", found)
            .iter()
            .map(|d| (d.position.line, d.position.column))
            .collect();
        // offsets 0, 2, 4 (inside `é`: floored to 3), 8, 11, 99 (clamped to the end)
        assert_eq!(got, [(1, 1), (1, 3), (2, 1), (2, 4), (4, 1), (4, 2)]);
    }
}
