//! What the evidence pack never shows: credentials, and (with `--redact-text`) the letters
//! and digits of the excerpts.
//!
//! Headers are already reduced by the log reader to those the proxy keeps
//! ([`prompt_engine::keep_header`]: session, agent and cache-keying headers, never a
//! credential); the path is shown without its query (Gemini's `?key=`), as the proxy
//! drops it. In the bodies, the string value of every field the capture's rule names a
//! credential ([`prompt_engine::names_credential`]: `api_key`, `x-api-key`,
//! `access_token`…) is masked with `*` byte for byte, so that offsets stay those of the
//! bytes as sent, before any excerpt is cut; and the values so found are scrubbed from
//! every sentence the engine wrote (its own excerpts) and, last, from the whole report.

use prompt_engine::names_credential;

/// Credential values remembered per body (a body naming more is masked all the same).
const MAX_SECRETS: usize = 256;
/// The shortest fragment of a credential scrubbed where it appears cut (an excerpt's edge).
const MIN_FRAGMENT: usize = 8;
/// The longest credential value searched for by its fragments (longer ones: whole only).
const MAX_FRAGMENTED: usize = 256;
/// Credential values searched for by their fragments (the others: whole only), so that
/// scrubbing a report stays linear in it whatever a hostile body names.
const MAX_FRAGMENTED_SECRETS: usize = 32;

/// The mask of one body: its bytes with credential values starred, and those values.
#[derive(Debug, Clone, Default)]
pub(super) struct Masked {
    /// The body, each credential value's bytes replaced by `*` (same length).
    pub(super) text: String,
    /// The values hidden (their JSON text), at most [`MAX_SECRETS`].
    pub(super) secrets: Vec<String>,
    /// Values hidden in all.
    pub(super) hidden: usize,
}

/// The end of the JSON string whose content starts at `start`: the index of its closing
/// quote, or the end of the text.
fn string_end(b: &[u8], start: usize) -> usize {
    let mut i = start;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i,
            _ => i += 1,
        }
    }
    b.len()
}

fn skip_space(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// Masks the string value of every object key that names a credential, anywhere in `body`
/// (one pass, linear; a body that is not JSON is masked as far as it reads as JSON).
pub(super) fn mask_credentials(body: &str) -> Masked {
    let b = body.as_bytes();
    let mut out = b.to_vec();
    let mut masked = Masked::default();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i + 1;
        let end = string_end(b, start);
        let colon = skip_space(b, end.saturating_add(1));
        if colon < b.len()
            && b[colon] == b':'
            && names_credential(&String::from_utf8_lossy(&b[start..end]))
        {
            let value = skip_space(b, colon + 1);
            if value < b.len() && b[value] == b'"' {
                let vs = value + 1;
                let ve = string_end(b, vs);
                if ve > vs {
                    out[vs..ve].fill(b'*');
                    masked.hidden += 1;
                    if masked.secrets.len() < MAX_SECRETS {
                        masked
                            .secrets
                            .push(String::from_utf8_lossy(&b[vs..ve]).into_owned());
                    }
                }
                i = ve.saturating_add(1);
                continue;
            }
        }
        i = end.saturating_add(1);
    }
    // Only whole strings' contents were replaced, each at character boundaries.
    masked.text = String::from_utf8_lossy(&out).into_owned();
    masked
}

/// The report's redaction: the credential values of both bodies, and whether excerpts
/// keep their letters and digits.
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    secrets: Vec<String>,
    /// Letters and digits of excerpts replaced (`--redact-text`).
    text: bool,
}

/// Counts the values, never shows them: a debug print of the report is no leak.
impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .field("text", &self.text)
            .finish()
    }
}

impl Redactor {
    /// A redactor of the values `masks` hid; `text`: `--redact-text`.
    pub(super) fn new<'m>(masks: impl IntoIterator<Item = &'m Masked>, text: bool) -> Self {
        let mut secrets: Vec<String> = masks
            .into_iter()
            .flat_map(|m| m.secrets.iter().cloned())
            .filter(|s| !s.is_empty())
            .collect();
        // Longest first: a value containing another is scrubbed whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Self { secrets, text }
    }

    /// `text` without any credential value, whole or as a fragment of at least
    /// [`MIN_FRAGMENT`] bytes (an excerpt cut inside one).
    pub(super) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (i, secret) in self.secrets.iter().enumerate() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "[redacted]");
            }
            if i >= MAX_FRAGMENTED_SECRETS
                || secret.len() < MIN_FRAGMENT
                || secret.len() > MAX_FRAGMENTED
            {
                continue;
            }
            out = scrub_fragments(&out, secret);
        }
        out
    }

    /// `text` without any credential value whole: the last pass over the whole report
    /// (fragments are scrubbed where they can be cut, in excerpts and sentences, by
    /// [`Redactor::scrub`]), linear in the report per value.
    pub(crate) fn scrub_whole(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "[redacted]");
            }
        }
        out
    }

    /// An excerpt as shown: scrubbed, and with `--redact-text` its letters as `x` and
    /// digits as `0`, JSON's punctuation and escapes kept.
    pub(super) fn excerpt(&self, text: &str) -> String {
        let text = self.scrub(text);
        if !self.text {
            return text;
        }
        let mut out = String::with_capacity(text.len());
        let mut escaped = false;
        for c in text.chars() {
            out.push(if escaped {
                escaped = false;
                c
            } else if c == '\\' {
                escaped = true;
                c
            } else if c.is_alphabetic() {
                'x'
            } else if c.is_numeric() {
                '0'
            } else {
                c
            });
        }
        out
    }
}

/// Replaces in `text` every run of at least [`MIN_FRAGMENT`] bytes that is also a run of
/// `secret`.
fn scrub_fragments(text: &str, secret: &str) -> String {
    let s = secret.as_bytes();
    let t = text.as_bytes();
    let mut hide = vec![false; t.len()];
    let mut any = false;
    for w in s.windows(MIN_FRAGMENT) {
        let Ok(w) = std::str::from_utf8(w) else {
            continue;
        };
        let mut from = 0;
        while let Some(at) = text[from..].find(w) {
            let at = from + at;
            hide[at..at + MIN_FRAGMENT].fill(true);
            any = true;
            from = at + 1;
            while from < t.len() && !text.is_char_boundary(from) {
                from += 1;
            }
        }
    }
    if !any {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut hiding = false;
    for (i, c) in text.char_indices() {
        if hide[i] {
            if !hiding {
                out.push_str("[redacted]");
                hiding = true;
            }
        } else {
            hiding = false;
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_values_are_masked_in_place_at_any_depth() {
        let body = r#"{"model":"m","api_key":"SECRET-1","x":{"client_secret" : "SECRET-2","n":1},"max_tokens":5,"messages":[]}"#;
        let m = mask_credentials(body);
        assert_eq!(m.text.len(), body.len());
        assert!(!m.text.contains("SECRET"), "{}", m.text);
        assert_eq!(m.hidden, 2);
        assert!(m.text.contains(r#""model":"m""#) && m.text.contains(r#""max_tokens":5"#));
    }

    #[test]
    fn a_credential_cut_by_an_excerpt_is_scrubbed_by_its_fragments() {
        let m = mask_credentials(r#"{"token":"abcdefghijklmnopqrstuvwxyz"}"#);
        let r = Redactor::new([&m], false);
        assert_eq!(r.scrub("…mnopqrstuvwxyz\"}"), "…[redacted]\"}");
        assert_eq!(r.scrub("\"abcdefghij…"), "\"[redacted]…");
        assert_eq!(r.scrub("nothing here"), "nothing here");
    }

    #[test]
    fn redact_text_keeps_the_json_punctuation_and_escapes() {
        let r = Redactor {
            secrets: Vec::new(),
            text: true,
        };
        assert_eq!(
            r.excerpt(r#"{"text":"Date 2026-12-04.\n"}"#),
            r#"{"xxxx":"xxxx 0000-00-00.\n"}"#
        );
    }
}
