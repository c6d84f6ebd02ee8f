//! The attribute's arguments: `placement`, `id`, `what`, `persist`, `cleared`.
//!
//! Each argument is an [`Attr`] that takes one value and reports a second one; names are
//! [`Symbol`]s. A mistake in one argument is reported and parsing goes on with the next, so
//! that several are reported together; only malformed syntax stops it. What an `id`, a
//! `what` or a `cleared` says is checked later, against the item (see `validate`).

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path, Token};

use crate::ctxt::Ctxt;
use crate::symbol::{
    CLEARED, EPHEMERAL, HISTORY, ID, PERSIST, PLACEMENT, PREFIX, Symbol, TAIL, WHAT,
};

/// Where a component's text lands.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Above the history, rendered once per session.
    Prefix,
    /// After the history.
    Tail,
}

/// Whether a tail component's updates are kept in the history.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Persist {
    /// Appended to the history (the default).
    #[default]
    History,
    /// Sent at the end of one request only.
    Ephemeral,
}

/// One argument after parsing.
pub(crate) struct Arg<T> {
    /// The argument's name where it was given, even with an invalid value.
    pub key: Option<Ident>,
    /// Its value; `None` when absent or invalid (an invalid value has been reported).
    pub value: Option<T>,
}

impl<T> Arg<T> {
    /// Whether the argument was given, valid or not.
    pub(crate) fn given(&self) -> bool {
        self.key.is_some()
    }
}

/// The attribute's arguments.
pub(crate) struct Args {
    /// `placement = "prefix" | "tail"`.
    pub placement: Arg<Placement>,
    /// `id = "..."`, as written.
    pub id: Arg<LitStr>,
    /// `what = "..."`, as written.
    pub what: Arg<LitStr>,
    /// `persist = "history" | "ephemeral"`.
    pub persist: Arg<Persist>,
    /// `cleared = "..."`, as written: what a tail writer says once when it stops having text.
    pub cleared: Arg<LitStr>,
    /// `false` when malformed syntax stopped parsing: arguments after it may have been given.
    pub complete: bool,
}

impl Args {
    /// Parses the attribute's arguments, reporting mistakes to `cx`.
    pub(crate) fn from_tokens(cx: &Ctxt, tokens: TokenStream) -> Self {
        let mut placement = Attr::none(cx, PLACEMENT);
        let mut id = Attr::none(cx, ID);
        let mut what = Attr::none(cx, WHAT);
        let mut persist = Attr::none(cx, PERSIST);
        let mut cleared = Attr::none(cx, CLEARED);
        let parser = syn::meta::parser(|meta| {
            let value = take_value(&meta)?;
            let path = &meta.path;
            if *path == PLACEMENT {
                placement.parse(path, value, placement_value);
            } else if *path == ID {
                id.parse(path, value, |_, lit| Some(lit));
            } else if *path == WHAT {
                what.parse(path, value, |_, lit| Some(lit));
            } else if *path == PERSIST {
                persist.parse(path, value, persist_value);
            } else if *path == CLEARED {
                cleared.parse(path, value, |_, lit| Some(lit));
            } else {
                let name = path.to_token_stream().to_string().replace(' ', "");
                cx.error_spanned_by(
                    path,
                    format!(
                        "unknown argument `{name}`; the arguments are \
                         `{PLACEMENT} = \"{PREFIX}\" | \"{TAIL}\"`, `{ID} = \"...\"`, \
                         `{WHAT} = \"...\"`, `{PERSIST} = \"{HISTORY}\" | \"{EPHEMERAL}\"` \
                         and `{CLEARED} = \"...\"`"
                    ),
                );
            }
            Ok(())
        });
        let complete = match parser.parse2(tokens) {
            Ok(()) => true,
            Err(error) => {
                cx.syn_error(error);
                false
            }
        };
        Args {
            placement: placement.finish(),
            id: id.finish(),
            what: what.finish(),
            persist: persist.finish(),
            cleared: cleared.finish(),
            complete,
        }
    }
}

/// One argument while parsing: remembers where it was first given, and reports it given again.
struct Attr<'c, T> {
    cx: &'c Ctxt,
    name: Symbol,
    key: Option<Ident>,
    value: Option<T>,
}

impl<'c, T> Attr<'c, T> {
    fn none(cx: &'c Ctxt, name: Symbol) -> Self {
        Attr {
            cx,
            name,
            key: None,
            value: None,
        }
    }

    /// Takes `name = "..."`: reports a second occurrence, a value that is not a string
    /// literal, or (through `convert`) a literal that is not a valid value.
    fn parse(
        &mut self,
        path: &Path,
        value: Option<Expr>,
        convert: impl FnOnce(&Ctxt, LitStr) -> Option<T>,
    ) {
        let name = self.name;
        if self.key.is_some() {
            self.cx.error_spanned_by(
                path,
                format!("duplicate argument `{name}`; give each argument once"),
            );
            return;
        }
        self.key = path.get_ident().cloned();
        let lit = match value.as_ref().map(strip_groups) {
            Some(Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            })) => lit.clone(),
            Some(other) => {
                self.cx.error_spanned_by(
                    other,
                    format!("`{name}` takes a string literal: `{name} = \"...\"`"),
                );
                return;
            }
            None => {
                self.cx
                    .error_spanned_by(path, format!("`{name}` needs a value: `{name} = \"...\"`"));
                return;
            }
        };
        self.value = convert(self.cx, lit);
    }

    fn finish(self) -> Arg<T> {
        Arg {
            key: self.key,
            value: self.value,
        }
    }
}

/// Consumes an argument's value, whatever the argument, so parsing can go on after a mistake:
/// `= <expr>`, or a stray token tree such as `(...)`.
fn take_value(meta: &ParseNestedMeta<'_>) -> syn::Result<Option<Expr>> {
    if meta.input.peek(Token![=]) {
        return Ok(Some(meta.value()?.parse()?));
    }
    if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
        meta.input.parse::<TokenTree>()?;
    }
    Ok(None)
}

fn placement_value(cx: &Ctxt, lit: LitStr) -> Option<Placement> {
    let text = lit.value();
    if *text == PREFIX {
        Some(Placement::Prefix)
    } else if *text == TAIL {
        Some(Placement::Tail)
    } else {
        cx.error_spanned_by(
            &lit,
            format!(
                "unknown {PLACEMENT} `{text}`; use `{PLACEMENT} = \"{PREFIX}\"` (above the \
                 history, rendered once per session) or `{PLACEMENT} = \"{TAIL}\"` (after the \
                 history)"
            ),
        );
        None
    }
}

fn persist_value(cx: &Ctxt, lit: LitStr) -> Option<Persist> {
    let text = lit.value();
    if *text == HISTORY {
        Some(Persist::History)
    } else if *text == EPHEMERAL {
        Some(Persist::Ephemeral)
    } else {
        cx.error_spanned_by(
            &lit,
            format!(
                "unknown {PERSIST} `{text}`; use `{PERSIST} = \"{HISTORY}\"` (updates are \
                 appended to the history, the default) or `{PERSIST} = \"{EPHEMERAL}\"` (sent at \
                 the end of this request only)"
            ),
        );
        None
    }
}

/// Looks through the invisible groups a `macro_rules!` fragment leaves around a value.
fn strip_groups(expr: &Expr) -> &Expr {
    match expr {
        Expr::Group(group) => strip_groups(&group.expr),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn parse(tokens: TokenStream) -> (Args, Vec<String>) {
        let cx = Ctxt::new();
        let args = Args::from_tokens(&cx, tokens);
        (args, cx.messages())
    }

    #[test]
    fn every_argument_once() {
        let (args, errors) = parse(quote!(
            placement = "prefix",
            id = "notes",
            what = "the notes",
            persist = "ephemeral",
            cleared = "No notes."
        ));
        assert!(errors.is_empty(), "{errors:?}");
        assert!(args.placement.value == Some(Placement::Prefix));
        assert_eq!(
            args.id.value.map(|lit| lit.value()).as_deref(),
            Some("notes")
        );
        assert_eq!(
            args.what.value.map(|lit| lit.value()).as_deref(),
            Some("the notes")
        );
        assert!(args.persist.value == Some(Persist::Ephemeral));
        assert_eq!(
            args.cleared.value.map(|lit| lit.value()).as_deref(),
            Some("No notes.")
        );
        assert!(args.complete);
    }

    #[test]
    fn no_arguments() {
        let (args, errors) = parse(TokenStream::new());
        assert!(errors.is_empty(), "{errors:?}");
        assert!(!args.placement.given() && !args.id.given() && !args.what.given());
        assert!(args.persist.value.is_none());
    }

    #[test]
    fn mistakes_are_reported_together_and_invalid_arguments_count_as_given() {
        let (args, errors) = parse(quote!(
            placment = "prefix",
            placement = "top",
            placement = "tail",
            id = 3,
            what
        ));
        assert_eq!(errors.len(), 5, "{errors:?}");
        assert!(errors[0].starts_with("unknown argument `placment`"));
        assert!(errors[1].starts_with("unknown placement `top`"));
        assert!(errors[2].starts_with("duplicate argument `placement`"));
        assert!(errors[3].starts_with("`id` takes a string literal"));
        assert!(errors[4].starts_with("`what` needs a value"));
        assert!(args.placement.given() && args.placement.value.is_none());
        assert!(args.id.given() && args.id.value.is_none());
        assert!(args.what.given() && args.what.value.is_none());
        assert!(args.complete);
    }

    #[test]
    fn malformed_syntax_stops_parsing() {
        let (args, errors) = parse(quote!(placement = "prefix" id = "x"));
        assert_eq!(errors, ["expected `,`"]);
        assert!(args.placement.value == Some(Placement::Prefix));
        assert!(!args.complete);
    }
}
