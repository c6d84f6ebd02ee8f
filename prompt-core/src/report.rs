//! [`Report`]: an error as `main` should show it.
//!
//! `fn main() -> Result<(), E>` prints a returned error with `{:?}`, and a derived `Debug`
//! shows a struct dump (`Invalid(Diagnostics([Diagnostic { position: … }]))`) instead of
//! the message. A `Report` is what `?` turns any error into; its `Debug` is the error's
//! message followed by the causes that message does not already show, as
//! [`input::report`] writes them (bounded).
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

use crate::input;

/// Any error, boxed, whose `Debug` is meant for a person: the error's `Display` and the
/// causes it does not already name. Return it from `main` (`fn main() -> Result<(), Report>`)
/// so an error that stops the program prints as its message, not as a struct dump.
///
/// It does not implement [`std::error::Error`] itself (so that `?` converts every error into
/// it); reach the error with [`Report::error`] or [`Report::into_inner`].
pub struct Report(Box<dyn Error + Send + Sync + 'static>);

/// The error of [`Report::msg`]: a message and nothing under it.
#[derive(Debug)]
struct Message(String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Error for Message {}

impl Report {
    /// A report of a message alone, for a condition that is not an error value
    /// (`.ok_or(Report::msg("no usage in the reply"))?`).
    pub fn msg(message: impl Into<String>) -> Self {
        Report(Box::new(Message(message.into())))
    }

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
        f.write_str(&input::report(self.0.as_ref()))
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
            "loading agent.toml: connection refused: os error 111"
        );
        assert_eq!(report.to_string(), "loading agent.toml: connection refused");
        let missing: Result<(), Report> = None.ok_or(Report::msg("no usage in the reply"));
        assert_eq!(
            format!("{:?}", missing.unwrap_err()),
            "no usage in the reply"
        );
    }

    #[test]
    fn a_long_chain_is_cut_and_each_cause_excerpted() {
        let long = "x".repeat(10_000);
        let texts: Vec<String> = (0..100).map(|i| format!("{i}{long}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        let shown = format!("{:?}", Report::from(chain(&refs)));
        // The head whole, then at most CHAIN_LINKS - 1 causes of at most EXCERPT_BYTES each.
        let bound = texts[0].len() + (input::CHAIN_LINKS - 1) * (input::EXCERPT_BYTES + 8);
        assert!(shown.len() <= bound, "{} > {bound}", shown.len());
        assert!(
            shown.contains("1xxx") && !shown.contains("9xxx"),
            "{}",
            &shown[..64]
        );
    }
}
