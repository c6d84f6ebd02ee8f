//! Token counts: a trait, and tiktoken's `o200k_base` behind it.

use std::sync::OnceLock;

/// Turns text into token ids. The simulator and the audit take one as a parameter.
pub trait Tokenizer: Send + Sync {
    /// A short name for reports, such as `o200k_base`.
    fn name(&self) -> &str;
    /// The token ids of `text`, special-token spellings treated as plain text.
    fn encode(&self, text: &str) -> Vec<u32>;
}

/// Why a tokenizer could not be built.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot load the {name} tokenizer: {reason}")]
pub struct TokenizerError {
    /// The tokenizer.
    pub name: &'static str,
    /// What failed.
    pub reason: String,
}

/// tiktoken's `o200k_base` (GPT-4o, GPT-4.1, GPT-5 and the `o` series), embedded in the
/// crate: no network, no files.
///
/// Text longer than 16 KiB is encoded in pieces cut just before a space that follows a
/// non-space character and precedes an ASCII letter or digit: the pre-tokenizer splits there
/// anyway, so the tokens are those of the whole text. (Only a 16 KiB stretch with no such
/// point is cut at a plain character boundary.) No piece is long enough to reach the regex
/// engine's backtracking limit, which would panic inside tiktoken-rs.
pub struct O200kBase {
    bpe: tiktoken_rs::CoreBPE,
}

const PIECE: usize = 16 * 1024;

impl O200kBase {
    /// Builds the tokenizer (parses the embedded vocabulary: a few hundred milliseconds).
    pub fn new() -> Result<Self, TokenizerError> {
        tiktoken_rs::o200k_base()
            .map(|bpe| Self { bpe })
            .map_err(|e| TokenizerError {
                name: "o200k_base",
                reason: e.to_string(),
            })
    }

    /// A process-wide instance, built on first use.
    pub fn shared() -> Result<&'static Self, TokenizerError> {
        static SHARED: OnceLock<Result<O200kBase, TokenizerError>> = OnceLock::new();
        SHARED.get_or_init(Self::new).as_ref().map_err(Clone::clone)
    }
}

impl std::fmt::Debug for O200kBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("O200kBase")
    }
}

impl Tokenizer for O200kBase {
    fn name(&self) -> &str {
        "o200k_base"
    }

    fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 4 + 1);
        let mut rest = text;
        while !rest.is_empty() {
            let cut = piece_end(rest);
            out.extend(self.bpe.encode_ordinary(&rest[..cut]));
            rest = &rest[cut..];
        }
        out
    }
}

/// Where the next piece of `text` ends: all of it when short, else just before the last
/// " x" (a space after a non-space, before an ASCII letter or digit) within the first [`PIECE`] bytes, else at
/// the last character boundary within them.
fn piece_end(text: &str) -> usize {
    if text.len() <= PIECE {
        return text.len();
    }
    let bytes = text.as_bytes();
    let window = &bytes[..PIECE];
    let split = (1..PIECE - 1).rev().find(|&i| {
        window[i] == b' '
            && !window[i - 1].is_ascii_whitespace()
            && window[i + 1].is_ascii_alphanumeric()
    });
    match split {
        Some(i) => i,
        None => prompt_core::input::head(text, PIECE).len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_before_a_word_and_keeps_every_byte() {
        let text = "word ".repeat(10_000);
        let end = piece_end(&text);
        assert!(end <= PIECE);
        assert_eq!(&text[end..end + 1], " ");
        let tok = O200kBase::shared().unwrap_or_else(|e| panic!("{e}"));
        let ids = tok.encode(&text);
        let back = tok.bpe.decode(&ids).unwrap_or_default();
        assert_eq!(back, text);
        // The cut is where the pre-tokenizer splits anyway: same tokens as in one piece.
        assert_eq!(ids, tok.bpe.encode_ordinary(&text));
        let json = format!(
            "{{\"content\":\"{}\"}}",
            "fn main() { let x = 42; } // ok\\n".repeat(900)
        );
        assert!(json.len() > PIECE);
        assert_eq!(tok.encode(&json), tok.bpe.encode_ordinary(&json));
    }

    #[test]
    fn a_long_run_of_one_character_is_cut_on_a_char_boundary() {
        let text = "é".repeat(20_000);
        let end = piece_end(&text);
        assert!(text.is_char_boundary(end) && end <= PIECE && end > 0);
        let tok = O200kBase::shared().unwrap_or_else(|e| panic!("{e}"));
        assert!(!tok.encode(&text).is_empty());
    }
}
