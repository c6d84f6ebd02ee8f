//! [`Report`]: an error as `main` should show it.
//!
//! `fn main() -> Result<(), E>` prints a returned error with `{:?}`, and a derived `Debug`
//! shows a struct dump (`Policy(PolicyErrors([PolicyDiagnostic { position: … }]))`) instead of
//! the message. A `Report` is what `?` turns any error into; its `Debug` is the error's
//! `Display` followed by the causes that text does not already show, one per line, each
//! excerpted and at most [`MAX_CAUSES`] of them, so a hostile chain cannot flood the terminal.
//!
//! ```
//! use prompt_core::Report;
//!
//! fn load() -> Result<(), Report> {
//!     let file = std::env::temp_dir().join("cacheline-report-doc-no-such-dir/agent.toml");
//!     std::fs::read_to_string(&file)?;
//!     Ok(())
//! }
//! let shown = format!("{:?}", load().unwrap_err());
//! assert!(shown.starts_with("No such file or directory"), "{shown}");
//! ```

use std::error::Error;
use std::fmt;

use crate::input::{EXCERPT_BYTES, excerpt};

/// The most causes a [`Report`] prints below the error itself.
pub const MAX_CAUSES: usize = 8;

/// Any error, boxed, whose `Debug` is meant for a person: the error's `Display` and the
/// causes it does not already name. Return it from `main` (`fn main() -> Result<(), Report>`)
/// so an error that stops the program prints as its message, not as a struct dump.
///
/// It does not implement [`std::error::Error`] itself (so that `?` converts every error into
/// it); reach the error with [`Report::error`] or [`Report::into_inner`].
pub struct Report(Box<dyn Error + Send + Sync + 'static>);

impl Report {
    /// The error it carries.
    pub fn error(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }

    /// The boxed error.
    pub fn into_inner(self) -> Box<dyn Error + Send + Sync + 'static> {
        self.0
    }
}

impl<E: Error + Send + Sync + 'static> From<E> for Report {
    fn from(error: E) -> Self {
        Report(Box::new(error))
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.to_string();
        f.write_str(&shown)?;
        let mut cause = self.0.source();
        let mut printed = 0;
        while let Some(error) = cause {
            if printed == MAX_CAUSES {
                return f.write_str("\n  (further causes not shown)");
            }
            let text = error.to_string();
            // Errors of this workspace already end their message with their cause: print only
            // what the text above does not show.
            if !text.is_empty() && !shown.contains(text.as_str()) {
                let line = excerpt(&text, EXCERPT_BYTES);
                write!(f, "\n  caused by: {line}")?;
                shown.push_str(&text);
                printed += 1;
            }
            cause = error.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(String, Option<Box<Layer>>);
    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(&self.0)
        }
    }
    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as _)
        }
    }

    fn chain(texts: &[&str]) -> Layer {
        texts
            .iter()
            .rev()
            .fold(None, |inner: Option<Layer>, text| {
                Some(Layer((*text).to_owned(), inner.map(Box::new)))
            })
            .unwrap_or_else(|| Layer(String::new(), None))
    }

    #[test]
    fn debug_is_the_message_and_the_causes_it_does_not_already_show() {
        let report = Report::from(chain(&[
            "loading agent.toml: connection refused",
            "connection refused",
            "os error 111",
        ]));
        assert_eq!(
            format!("{report:?}"),
            "loading agent.toml: connection refused\n  caused by: os error 111"
        );
        assert_eq!(report.to_string(), "loading agent.toml: connection refused");
    }

    #[test]
    fn a_long_chain_is_cut_and_each_cause_excerpted() {
        let long = "x".repeat(10_000);
        let texts: Vec<String> = (0..100).map(|i| format!("{i}{long}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let shown = format!("{:?}", Report::from(chain(&refs)));
        assert_eq!(shown.matches("caused by").count(), MAX_CAUSES);
        assert!(shown.ends_with("(further causes not shown)"));
        assert!(shown.len() < 10_000 + (MAX_CAUSES + 1) * 400, "{}", shown.len());
    }
}
