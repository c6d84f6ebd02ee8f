//! The attribute's arguments: `placement`, `id`, `what`, `persist`.

use std::collections::HashSet;

use crate::id_grammar;
use crate::text::suggest_id;
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::parse::Parser;
use syn::{Expr, ExprLit, Lit, LitStr, Token};

const VALID: &str = "the arguments are `placement = \"prefix\" | \"tail\"`, `id = \"...\"`, \
                     `what = \"...\"` and `persist = \"history\" | \"ephemeral\"`";

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

/// The parsed arguments. Each field is `None` when the argument is absent or invalid; invalid
/// arguments have already been reported.
#[derive(Default)]
pub(crate) struct Args {
    /// The declared placement.
    pub placement: Option<Placement>,
    /// A validated id.
    pub id: Option<LitStr>,
    /// A non-empty one-line description.
    pub what: Option<LitStr>,
    /// The declared persistence.
    pub persist: Option<Persist>,
    /// Names seen so far, for duplicate detection.
    seen: HashSet<String>,
}

impl Args {
    /// Whether the argument `name` was given, valid or not.
    pub(crate) fn given(&self, name: &str) -> bool {
        self.seen.contains(name)
    }

    /// Parses the attribute's arguments. Mistakes in values are pushed to `errors` so that
    /// several of them are reported together; only malformed syntax stops parsing.
    pub(crate) fn parse(tokens: TokenStream, errors: &mut Vec<syn::Error>) -> Args {
        let mut args = Args::default();
        let mut persist_key = None;
        let parser = syn::meta::parser(|meta| args.parse_one(&meta, &mut persist_key, errors));
        if let Err(err) = parser.parse2(tokens) {
            errors.push(err);
        }
        if let (Some(Placement::Prefix), Some(key)) = (args.placement, persist_key) {
            errors.push(syn::Error::new(
                key,
                "`persist` only applies to tail components (it says whether their updates are \
                 kept in the history); a prefix component is rendered once per session. Remove \
                 `persist`, or declare `placement = \"tail\"`",
            ));
        }
        args
    }

    fn parse_one(
        &mut self,
        meta: &ParseNestedMeta<'_>,
        persist_key: &mut Option<Span>,
        errors: &mut Vec<syn::Error>,
    ) -> syn::Result<()> {
        // Consume the value first, whatever the name, so parsing can go on after a mistake.
        let value: Option<Expr> = if meta.input.peek(Token![=]) {
            Some(meta.value()?.parse()?)
        } else {
            if !meta.input.is_empty() && !meta.input.peek(Token![,]) {
                meta.input.parse::<TokenTree>()?;
            }
            None
        };
        let name = meta.path.to_token_stream().to_string().replace(' ', "");
        if !matches!(name.as_str(), "placement" | "id" | "what" | "persist") {
            errors.push(syn::Error::new_spanned(
                &meta.path,
                format!("unknown argument `{name}`; {VALID}"),
            ));
            return Ok(());
        }
        if !self.seen.insert(name.clone()) {
            errors.push(syn::Error::new_spanned(
                &meta.path,
                format!("duplicate argument `{name}`; give each argument once"),
            ));
            return Ok(());
        }
        let lit = match value.as_ref().map(strip_groups) {
            Some(Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            })) => lit.clone(),
            Some(other) => {
                errors.push(syn::Error::new_spanned(
                    other,
                    format!("`{name}` takes a string literal: `{name} = \"...\"`"),
                ));
                return Ok(());
            }
            None => {
                errors.push(syn::Error::new_spanned(
                    &meta.path,
                    format!("`{name}` needs a value: `{name} = \"...\"`"),
                ));
                return Ok(());
            }
        };
        let text = lit.value();
        match name.as_str() {
            "placement" => match text.as_str() {
                "prefix" => self.placement = Some(Placement::Prefix),
                "tail" => self.placement = Some(Placement::Tail),
                _ => errors.push(syn::Error::new(
                    lit.span(),
                    format!(
                        "unknown placement `{text}`; use `placement = \"prefix\"` (above the \
                         history, rendered once per session) or `placement = \"tail\"` (after \
                         the history)"
                    ),
                )),
            },
            "persist" => {
                *persist_key = Some(meta.path.segments[0].ident.span());
                match text.as_str() {
                    "history" => self.persist = Some(Persist::History),
                    "ephemeral" => self.persist = Some(Persist::Ephemeral),
                    _ => errors.push(syn::Error::new(
                        lit.span(),
                        format!(
                            "unknown persist `{text}`; use `persist = \"history\"` (updates are \
                             appended to the history, the default) or `persist = \"ephemeral\"` \
                             (sent at the end of this request only)"
                        ),
                    )),
                }
            }
            "id" => {
                let problem = match id_grammar::check(&text) {
                    Ok(()) if text.contains(':') => format!(
                        "component id `{text}` is namespaced; the `skill:` and `mcp:` namespaces \
                         are for components registered at run time"
                    ),
                    Ok(()) => {
                        self.id = Some(lit);
                        return Ok(());
                    }
                    Err(err) => err.to_string(),
                };
                let fix = match suggest_id(&text) {
                    Some(id) => format!("; a #[prompt_component] id is bare: try `id = \"{id}\"`"),
                    None => "; a #[prompt_component] id is bare, like `id = \"tool_schemas\"`"
                        .to_owned(),
                };
                errors.push(syn::Error::new(lit.span(), problem + &fix));
            }
            _ => {
                if text.trim().is_empty() {
                    errors.push(syn::Error::new(
                        lit.span(),
                        "`what` is empty; describe the component in one line",
                    ));
                } else if text.trim().contains('\n') {
                    errors.push(syn::Error::new(
                        lit.span(),
                        "`what` is a one-line description; put the rest in the doc comment",
                    ));
                } else {
                    self.what = Some(LitStr::new(text.trim(), lit.span()));
                }
            }
        }
        Ok(())
    }
}

/// Looks through the invisible groups a `macro_rules!` fragment leaves around a value.
fn strip_groups(expr: &Expr) -> &Expr {
    match expr {
        Expr::Group(group) => strip_groups(&group.expr),
        other => other,
    }
}
