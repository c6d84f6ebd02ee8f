//! What the targets share: fixed component ids, a reader of bytes as a little program, and
//! the checks every target reading a positioned file makes of its diagnostics.

use prompt_core::ComponentId;
use prompt_core::policy::SourcePosition;

/// A fixed component id of a target's component set.
pub(crate) fn id(text: &str) -> ComponentId {
    match ComponentId::new(text) {
        Ok(id) => id,
        Err(e) => panic!("fixed component id {text:?} is invalid: {e}"),
    }
}

/// Reads bytes as a little program: single bytes, and short texts.
pub(crate) struct Program<'a> {
    data: &'a [u8],
}

impl<'a> Program<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub(crate) fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.data.split_first()?;
        self.data = rest;
        Some(b)
    }

    /// A short text: a length byte (below `max_len`), then that many bytes (lossy UTF-8).
    pub(crate) fn text(&mut self, max_len: u8) -> String {
        let len = usize::from(self.byte().unwrap_or(0) % max_len.max(1));
        let (text, rest) = self.data.split_at(len.min(self.data.len()));
        self.data = rest;
        String::from_utf8_lossy(text).into_owned()
    }
}

/// Every position is inside `text` (1-based, at most one column past a line's end) and
/// names `origin`.
pub(crate) fn assert_positions<'a>(
    text: &str,
    origin: &str,
    positions: impl IntoIterator<Item = &'a SourcePosition>,
) {
    let widths: Vec<usize> = text.split('\n').map(|line| line.chars().count()).collect();
    for p in positions {
        assert!(p.line >= 1 && p.column >= 1, "position below 1: {p}");
        let Some(&width) = widths.get(p.line - 1) else {
            panic!("line past the end ({} lines): {p}", widths.len());
        };
        assert!(
            p.column <= width + 1,
            "column past the line ({width} chars): {p}"
        );
        assert_eq!(p.origin, origin, "{p}");
    }
}

/// The errors of a file that failed to load: at least one, each inside `text`, in source
/// order.
pub(crate) fn assert_errors<'a>(
    text: &str,
    origin: &str,
    positions: impl IntoIterator<Item = &'a SourcePosition>,
) {
    let positions: Vec<&SourcePosition> = positions.into_iter().collect();
    assert!(!positions.is_empty(), "an error without a diagnostic");
    assert_positions(text, origin, positions.iter().copied());
    let at: Vec<(usize, usize)> = positions.iter().map(|p| (p.line, p.column)).collect();
    assert!(
        at.windows(2).all(|w| w[0] <= w[1]),
        "diagnostics out of order: {at:?}"
    );
}
