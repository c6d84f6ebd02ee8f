//! Collects the errors of one expansion, so that independent mistakes are reported together.

use std::cell::Cell;
use std::fmt::Display;

use proc_macro2::Span;
use quote::ToTokens;

/// The errors found so far.
///
/// Every phase (arguments, item, rules) reports into the same `Ctxt` through a shared
/// reference and goes on, so one compilation shows every independent mistake. [`Ctxt::check`]
/// consumes it: nothing is expanded past a `Ctxt` that holds an error.
#[derive(Default)]
pub(crate) struct Ctxt {
    // A `Cell`, not a `RefCell`: reporting moves the list out and back, so no borrow can fail.
    errors: Cell<Vec<syn::Error>>,
}

impl Ctxt {
    /// An empty collector.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Reports `msg` on the span of `tokens` (their first to last token).
    pub(crate) fn error_spanned_by(&self, tokens: impl ToTokens, msg: impl Display) {
        self.syn_error(syn::Error::new_spanned(tokens.into_token_stream(), msg));
    }

    /// Reports `msg` at `span`.
    pub(crate) fn error_at(&self, span: Span, msg: impl Display) {
        self.syn_error(syn::Error::new(span, msg));
    }

    /// Reports an error from syn's parsers.
    pub(crate) fn syn_error(&self, error: syn::Error) {
        let mut errors = self.errors.take();
        errors.push(error);
        self.errors.set(errors);
    }

    /// All the errors, combined in the order they were reported, or `Ok` if there were none.
    pub(crate) fn check(self) -> syn::Result<()> {
        let mut errors = self.errors.into_inner().into_iter();
        let Some(mut combined) = errors.next() else {
            return Ok(());
        };
        for error in errors {
            combined.combine(error);
        }
        Err(combined)
    }

    /// The messages of every error reported, in order: what the tests compare.
    #[cfg(test)]
    pub(crate) fn messages(self) -> Vec<String> {
        self.check()
            .err()
            .into_iter()
            .flatten()
            .map(|error| error.to_string())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_errors_checks_ok() {
        assert!(Ctxt::new().check().is_ok());
    }

    #[test]
    fn errors_are_combined_in_order() {
        let cx = Ctxt::new();
        cx.error_at(Span::call_site(), "first");
        cx.error_spanned_by(quote::quote!(a b), "second");
        cx.syn_error(syn::Error::new(Span::call_site(), "third"));
        assert_eq!(cx.messages(), ["first", "second", "third"]);
    }
}
