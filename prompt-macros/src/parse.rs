//! Classifies the annotated item: fixed text (`const`/`static`) or a renderer fn, and for a
//! renderer, which context it takes and what it returns. Only an item of another kind is an
//! error here; whether the item follows the rules is for `validate` to say.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::spanned::Spanned;
use syn::{
    Attribute, Block, Expr, ExprLit, FnArg, GenericArgument, Generics, Ident, Item, Lit, Meta,
    PathArguments, PathSegment, Receiver, ReturnType, Signature, StaticMutability, Token, Type,
};

use crate::ctxt::Ctxt;
use crate::symbol::{DOC, OPTION, SESSION_CONTEXT, STATIC, STR, STRING, TURN_CONTEXT};

/// The annotated item, classified.
pub(crate) struct Component<'a> {
    /// The item's name.
    pub ident: &'a Ident,
    /// The values of its `#[doc = "..."]` attributes, in order.
    pub docs: Vec<String>,
    /// What it is.
    pub kind: Kind<'a>,
}

/// What the annotated item is.
pub(crate) enum Kind<'a> {
    /// A `const` or `static`.
    Text(Text<'a>),
    /// A fn.
    Renderer(Renderer<'a>),
}

/// A `const` or `static`.
pub(crate) struct Text<'a> {
    /// A generic `const`'s generics.
    pub generics: Option<&'a Generics>,
    /// The `mut` of a `static mut`.
    pub mutability: Option<&'a Token![mut]>,
    /// Its type.
    pub ty: &'a Type,
    /// Whether the type is `&str` or `&'static str`.
    pub is_str: bool,
}

/// A fn.
pub(crate) struct Renderer<'a> {
    /// Its signature.
    pub sig: &'a Signature,
    /// Its body.
    pub body: &'a Block,
    /// A leading `self` parameter.
    pub receiver: Option<&'a Receiver>,
    /// The parameter after the receiver, if any, which should be the context.
    pub param: Param<'a>,
    /// The parameters after that one.
    pub extra: Vec<&'a FnArg>,
    /// What it returns.
    pub output: Output<'a>,
}

/// A renderer's (first non-`self`) parameter.
pub(crate) enum Param<'a> {
    /// None.
    Missing,
    /// A second `self` parameter (rustc reports it).
    Receiver,
    /// A typed parameter.
    Typed {
        /// Its type.
        ty: &'a Type,
        /// Which context it is.
        context: Context<'a>,
    },
}

/// Which context a renderer's parameter is, judged by the name of its type.
pub(crate) enum Context<'a> {
    /// `&SessionContext` (any path, any lifetime), with the span of `SessionContext`.
    Session(Span),
    /// `&TurnContext` (any path, any lifetimes), with the span of `TurnContext`.
    Turn(Span),
    /// Not a reference.
    ByValue,
    /// `&mut` either context.
    MutRef(&'a Token![mut]),
    /// A reference to something else.
    Unknown,
}

/// What a renderer returns.
pub(crate) enum Output<'a> {
    /// No return type.
    Missing,
    /// `String` or `Option<String>` (any path).
    Text {
        /// The span of the type.
        span: Span,
        /// Whether it is `Option<String>` (the renderer may have nothing to say).
        optional: bool,
    },
    /// Another type.
    Other(&'a Type),
}

impl<'a> Component<'a> {
    /// Classifies `item`, or reports that the attribute cannot go on it.
    pub(crate) fn from_item(cx: &Ctxt, item: &'a Item) -> Option<Self> {
        let (ident, attrs, kind) = match item {
            Item::Const(item) => {
                let generics = (!item.generics.params.is_empty()).then_some(&item.generics);
                (
                    &item.ident,
                    &item.attrs,
                    Kind::Text(Text::new(generics, None, &item.ty)),
                )
            }
            Item::Static(item) => {
                let mutability = match &item.mutability {
                    StaticMutability::Mut(mutability) => Some(mutability),
                    _ => None,
                };
                let text = Text::new(None, mutability, &item.ty);
                (&item.ident, &item.attrs, Kind::Text(text))
            }
            Item::Fn(item) => (
                &item.sig.ident,
                &item.attrs,
                Kind::Renderer(Renderer::new(&item.sig, &item.block)),
            ),
            other => {
                let (tokens, kind) = unsupported(other);
                cx.error_spanned_by(
                    tokens,
                    format!(
                        "#[prompt_component] cannot go on {kind}; it goes on a `const` or \
                         `static` of type `&'static str`, or on a renderer fn taking \
                         `&SessionContext` (rendered once per session) or `&TurnContext` \
                         (rendered each turn)"
                    ),
                );
                return None;
            }
        };
        Some(Component {
            ident,
            docs: docs(attrs),
            kind,
        })
    }
}

impl<'a> Text<'a> {
    fn new(
        generics: Option<&'a Generics>,
        mutability: Option<&'a Token![mut]>,
        ty: &'a Type,
    ) -> Self {
        Text {
            generics,
            mutability,
            ty,
            is_str: is_str_ref(ty),
        }
    }
}

impl<'a> Renderer<'a> {
    fn new(sig: &'a Signature, body: &'a Block) -> Self {
        let mut inputs = sig.inputs.iter().peekable();
        let receiver = match inputs.next_if(|input| matches!(input, FnArg::Receiver(_))) {
            Some(FnArg::Receiver(receiver)) => Some(receiver),
            _ => None,
        };
        let param = match inputs.next() {
            None => Param::Missing,
            Some(FnArg::Receiver(_)) => Param::Receiver,
            Some(FnArg::Typed(param)) => Param::Typed {
                ty: &param.ty,
                context: context(&param.ty),
            },
        };
        Renderer {
            sig,
            body,
            receiver,
            param,
            extra: inputs.collect(),
            output: output(&sig.output),
        }
    }
}

/// The token to point at on an item the attribute cannot go on, and what to call the item.
fn unsupported(item: &Item) -> (TokenStream, &'static str) {
    match item {
        Item::Struct(item) => (item.struct_token.to_token_stream(), "a struct"),
        Item::Enum(item) => (item.enum_token.to_token_stream(), "an enum"),
        Item::Union(item) => (item.union_token.to_token_stream(), "a union"),
        Item::Impl(item) => (item.impl_token.to_token_stream(), "an impl block"),
        Item::Trait(item) => (item.trait_token.to_token_stream(), "a trait"),
        Item::TraitAlias(item) => (item.trait_token.to_token_stream(), "a trait alias"),
        Item::Type(item) => (item.type_token.to_token_stream(), "a type alias"),
        Item::Mod(item) => (item.mod_token.to_token_stream(), "a module"),
        Item::Use(item) => (item.use_token.to_token_stream(), "a `use`"),
        Item::ExternCrate(item) => (item.extern_token.to_token_stream(), "an `extern crate`"),
        Item::ForeignMod(item) => (item.abi.to_token_stream(), "an `extern` block"),
        Item::Macro(item) => (item.mac.path.to_token_stream(), "a macro"),
        other => (other.to_token_stream(), "this item"),
    }
}

/// The values of the `#[doc = "..."]` attributes (one per `///` line).
fn docs(attrs: &[Attribute]) -> Vec<String> {
    attrs
        .iter()
        .filter_map(|attr| match &attr.meta {
            Meta::NameValue(nv) if nv.path == DOC => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(lit), ..
                }) => Some(lit.value()),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// `&str` or `&'static str`.
fn is_str_ref(ty: &Type) -> bool {
    let Type::Reference(reference) = strip_type_groups(ty) else {
        return false;
    };
    let lifetime_ok = reference
        .lifetime
        .as_ref()
        .is_none_or(|lifetime| lifetime.ident == STATIC);
    let Type::Path(path) = strip_type_groups(&reference.elem) else {
        return false;
    };
    lifetime_ok && reference.mutability.is_none() && path.qself.is_none() && path.path == STR
}

fn context(ty: &Type) -> Context<'_> {
    let Type::Reference(reference) = strip_type_groups(ty) else {
        return Context::ByValue;
    };
    if let Some(mutability) = &reference.mutability {
        return Context::MutRef(mutability);
    }
    match last_segment(&reference.elem) {
        Some(segment) if segment.ident == SESSION_CONTEXT => Context::Session(segment.ident.span()),
        Some(segment) if segment.ident == TURN_CONTEXT => Context::Turn(segment.ident.span()),
        _ => Context::Unknown,
    }
}

fn output(output: &ReturnType) -> Output<'_> {
    let ReturnType::Type(_, ty) = output else {
        return Output::Missing;
    };
    let is_string = |ty: &Type| {
        last_segment(ty)
            .is_some_and(|segment| segment.ident == STRING && segment.arguments.is_none())
    };
    let is_option_string = |segment: &PathSegment| {
        segment.ident == OPTION
            && match &segment.arguments {
                PathArguments::AngleBracketed(args) if args.args.len() == 1 => {
                    matches!(args.args.first(), Some(GenericArgument::Type(inner)) if is_string(inner))
                }
                _ => false,
            }
    };
    match last_segment(ty) {
        Some(segment) if segment.ident == STRING && segment.arguments.is_none() => Output::Text {
            span: ty.span(),
            optional: false,
        },
        Some(segment) if is_option_string(segment) => Output::Text {
            span: ty.span(),
            optional: true,
        },
        _ => Output::Other(ty),
    }
}

fn last_segment(ty: &Type) -> Option<&PathSegment> {
    match strip_type_groups(ty) {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last(),
        _ => None,
    }
}

/// Looks through parentheses and the invisible groups of `macro_rules!` fragments.
fn strip_type_groups(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => strip_type_groups(&group.elem),
        Type::Paren(paren) => strip_type_groups(&paren.elem),
        other => other,
    }
}
