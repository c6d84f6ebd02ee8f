//! Checks the annotated item and expands to the item plus its registration.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{
    Expr, ExprLit, FnArg, GenericArgument, GenericParam, Item, ItemConst, ItemFn, ItemStatic, Lit,
    LitStr, Meta, PathArguments, ReturnType, Safety, StaticMutability, Type,
};

use crate::args::{Args, Persist, Placement};
use crate::id_grammar;
use crate::text::{first_doc_line, snake_case};

const PREFIX_TEXT: &str = "prefix text must be a `&'static str` constant or a session renderer fn";

/// How the item renders.
enum Renderer {
    /// A `const`/`static` of type `&'static str`.
    Static,
    /// `fn(&SessionContext) -> String | Option<String>`. The spans are the context type's
    /// name and the return type's first token.
    Session { context: Span, output: Span },
    /// `fn(&TurnContext) -> String | Option<String>`.
    Turn { context: Span, output: Span },
}

/// The context type a renderer takes.
#[derive(Clone, Copy, PartialEq)]
enum Context {
    Session,
    Turn,
}

/// The whole expansion: the item unchanged, then its registration, or the errors instead of
/// the registration.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Vec::new();
    let args = Args::parse(args, &mut errors);
    let registration = match syn::parse2::<Item>(item.clone()) {
        Ok(parsed) => check(&args, &parsed, &mut errors),
        Err(err) => {
            errors.push(err);
            None
        }
    };
    let mut errors = errors.into_iter();
    match (errors.next(), registration) {
        (None, Some(registration)) => quote!(#item #registration),
        (Some(mut first), _) => {
            first.extend(errors);
            let errors = first.into_compile_error();
            quote!(#item #errors)
        }
        // `check` returns no registration only after pushing an error.
        (None, None) => item,
    }
}

/// Checks the item against the arguments. Returns the registration if nothing was wrong.
fn check(args: &Args, item: &Item, errors: &mut Vec<syn::Error>) -> Option<TokenStream> {
    let placement = args.placement;
    let before = errors.len();
    let (ident, attrs, renderer) = match item {
        Item::Const(item) => (
            &item.ident,
            &item.attrs,
            check_const(item, placement, errors),
        ),
        Item::Static(item) => (
            &item.ident,
            &item.attrs,
            check_static(item, placement, errors),
        ),
        Item::Fn(item) => (
            &item.sig.ident,
            &item.attrs,
            check_fn(item, placement, errors),
        ),
        other => {
            let (tokens, kind) = item_kind(other);
            errors.push(syn::Error::new_spanned(
                tokens,
                format!(
                    "#[prompt_component] cannot go on {kind}; it goes on a `const` or `static` of \
                     type `&'static str`, or on a renderer fn taking `&SessionContext` (rendered \
                     once per session) or `&TurnContext` (rendered each turn)"
                ),
            ));
            return None;
        }
    };
    let id = default_id(args, ident, errors);
    let what = what(args, ident, attrs, errors);
    if errors.len() > before {
        return None;
    }
    Some(registration(args, ident, &id?, &what?, &renderer?))
}

fn item_kind(item: &Item) -> (TokenStream, &'static str) {
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

fn check_const(
    item: &ItemConst,
    placement: Option<Placement>,
    errors: &mut Vec<syn::Error>,
) -> Option<Renderer> {
    if !item.generics.params.is_empty() {
        errors.push(syn::Error::new_spanned(
            &item.generics,
            "a prompt component const cannot be generic; remove the generic parameters",
        ));
        return None;
    }
    check_text_type(&item.ty, placement, errors)
}

fn check_static(
    item: &ItemStatic,
    placement: Option<Placement>,
    errors: &mut Vec<syn::Error>,
) -> Option<Renderer> {
    if let StaticMutability::Mut(mutability) = &item.mutability {
        let msg = if placement == Some(Placement::Prefix) {
            format!(
                "a `static mut` can change at run time, but the prefix must stay byte-identical \
                 for the whole session: remove `mut` ({PREFIX_TEXT})"
            )
        } else {
            "a `static mut` can change at run time, which a prompt component cannot; remove \
             `mut`, or write a renderer fn taking `&SessionContext` (rendered once per session) or \
             `&TurnContext` (rendered each turn)"
                .to_owned()
        };
        errors.push(syn::Error::new_spanned(mutability, msg));
        return None;
    }
    check_text_type(&item.ty, placement, errors)
}

/// A `const`/`static` component holds compile-time text: `&str` or `&'static str`.
fn check_text_type(
    ty: &Type,
    placement: Option<Placement>,
    errors: &mut Vec<syn::Error>,
) -> Option<Renderer> {
    if is_str_ref(ty) {
        return Some(Renderer::Static);
    }
    let msg = if placement == Some(Placement::Prefix) {
        format!(
            "{PREFIX_TEXT}: declare `const NAME: &str = \"...\";`, or compute the text in \
             `fn name(session: &SessionContext) -> String`"
        )
    } else {
        "a `const`/`static` prompt component must have type `&'static str`; for text computed at \
         run time write a renderer fn taking `&SessionContext` (rendered once per session) or \
         `&TurnContext` (rendered each turn)"
            .to_owned()
    };
    errors.push(syn::Error::new_spanned(ty, msg));
    None
}

fn is_str_ref(ty: &Type) -> bool {
    let Type::Reference(reference) = strip_type_groups(ty) else {
        return false;
    };
    let lifetime_ok = reference
        .lifetime
        .as_ref()
        .is_none_or(|lifetime| lifetime.ident == "static");
    let Type::Path(path) = strip_type_groups(&reference.elem) else {
        return false;
    };
    lifetime_ok
        && reference.mutability.is_none()
        && path.qself.is_none()
        && path.path.is_ident("str")
}

fn check_fn(
    item: &ItemFn,
    placement: Option<Placement>,
    errors: &mut Vec<syn::Error>,
) -> Option<Renderer> {
    let sig = &item.sig;
    let before = errors.len();
    if let Some(asyncness) = &sig.asyncness {
        errors.push(syn::Error::new_spanned(
            asyncness,
            "a renderer cannot be `async`: prompts are rendered synchronously; remove `async` and \
             read what you need from the context",
        ));
    }
    if let Safety::Unsafe(unsafety) = &sig.safety {
        errors.push(syn::Error::new_spanned(
            unsafety,
            "a renderer cannot be an `unsafe fn`: the registry calls it as a safe fn; remove \
             `unsafe` (use an `unsafe` block inside if you must)",
        ));
    }
    if let Some(abi) = &sig.abi {
        errors.push(syn::Error::new_spanned(
            abi,
            "a renderer cannot declare an ABI: the registry calls it as a Rust fn; remove the \
             `extern`",
        ));
    }
    for param in &sig.generics.params {
        if !matches!(param, GenericParam::Lifetime(_)) {
            errors.push(syn::Error::new_spanned(
                param,
                "a renderer cannot be generic over types or consts: the registry calls one \
                 concrete fn; remove this parameter (lifetime parameters are fine)",
            ));
        }
    }
    if let Some(variadic) = &sig.variadic {
        errors.push(syn::Error::new_spanned(
            variadic,
            "a renderer takes exactly one parameter, `&SessionContext` or `&TurnContext`; remove \
             the `...`",
        ));
    }

    let mut inputs = sig.inputs.iter().peekable();
    let receiver = inputs.next_if(|input| matches!(input, FnArg::Receiver(_)));
    if let Some(receiver) = receiver {
        errors.push(syn::Error::new_spanned(
            receiver,
            "#[prompt_component] cannot go on a method: the registry calls a free fn; move it \
             out of the `impl` and take `&SessionContext` or `&TurnContext` instead of `self`",
        ));
    }
    let context = match inputs.next() {
        Some(FnArg::Receiver(_)) => None, // A second receiver: rustc reports it.
        Some(FnArg::Typed(param)) => check_context(&param.ty, errors),
        None if sig.variadic.is_some() || receiver.is_some() => None,
        None => {
            errors.push(syn::Error::new(
                sig.paren_token.span.join(),
                "a renderer takes one parameter: `session: &SessionContext` (rendered once per \
                 session) or `turn: &TurnContext` (rendered each turn)",
            ));
            None
        }
    };
    let rest: Vec<&FnArg> = inputs.collect();
    if !rest.is_empty() {
        errors.push(syn::Error::new_spanned(
            quote!(#(#rest),*),
            "a renderer takes exactly one parameter, the context; get other inputs from it with \
             `session.get::<T>()` or `turn.get::<T>()`",
        ));
    }
    let output = check_output(sig, errors);

    if let (Some(Placement::Prefix), Some((Context::Turn, _))) = (placement, context) {
        let ty = match sig
            .inputs
            .iter()
            .find(|input| matches!(input, FnArg::Typed(_)))
        {
            Some(FnArg::Typed(param)) => param.ty.to_token_stream(),
            _ => TokenStream::new(),
        };
        errors.push(syn::Error::new_spanned(
            ty,
            "per-turn content cannot be in the prefix: this fn takes `&TurnContext`, so it renders \
             every turn, while the prefix must stay byte-identical for the whole session; declare \
             `placement = \"tail\"`, or render from `&SessionContext` (session-frozen inputs)",
        ));
    }
    if errors.len() > before {
        return None;
    }
    match (context?, output?) {
        ((Context::Session, context), output) => Some(Renderer::Session { context, output }),
        ((Context::Turn, context), output) => Some(Renderer::Turn { context, output }),
    }
}

/// The parameter must be `&SessionContext` or `&TurnContext` (any path, any lifetimes).
fn check_context(ty: &Type, errors: &mut Vec<syn::Error>) -> Option<(Context, Span)> {
    const EXPECTED: &str =
        "`&SessionContext` (rendered once per session) or `&TurnContext` (rendered each turn)";
    let Type::Reference(reference) = strip_type_groups(ty) else {
        errors.push(syn::Error::new_spanned(
            ty,
            format!("a renderer takes its context by shared reference: {EXPECTED}"),
        ));
        return None;
    };
    if let Some(mutability) = &reference.mutability {
        errors.push(syn::Error::new_spanned(
            mutability,
            "a renderer only reads its context: take `&SessionContext` or `&TurnContext`, not \
             `&mut`; remove `mut`",
        ));
        return None;
    }
    let segment = last_segment(&reference.elem);
    let context = match segment {
        Some(segment) if segment.ident == "SessionContext" => Context::Session,
        Some(segment) if segment.ident == "TurnContext" => Context::Turn,
        _ => {
            errors.push(syn::Error::new_spanned(
                ty,
                format!("a renderer's parameter is {EXPECTED}"),
            ));
            return None;
        }
    };
    Some((context, segment?.ident.span()))
}

/// The return type must be `String` or `Option<String>`.
fn check_output(sig: &syn::Signature, errors: &mut Vec<syn::Error>) -> Option<Span> {
    const EXPECTED: &str = "`-> String`, or `-> Option<String>` when there may be nothing to say";
    let ReturnType::Type(_, ty) = &sig.output else {
        errors.push(syn::Error::new(
            sig.paren_token.span.close(),
            format!("a renderer returns its text: add {EXPECTED}"),
        ));
        return None;
    };
    let ok = last_segment(ty).is_some_and(|segment| match segment.ident.to_string().as_str() {
        "String" => segment.arguments.is_none(),
        "Option" => match &segment.arguments {
            PathArguments::AngleBracketed(args) if args.args.len() == 1 => match &args.args[0] {
                GenericArgument::Type(inner) => last_segment(inner)
                    .is_some_and(|inner| inner.ident == "String" && inner.arguments.is_none()),
                _ => false,
            },
            _ => false,
        },
        _ => false,
    });
    if !ok {
        errors.push(syn::Error::new_spanned(
            ty,
            format!("a renderer returns `String` or `Option<String>`: write {EXPECTED}"),
        ));
        return None;
    }
    Some(ty.span())
}

fn last_segment(ty: &Type) -> Option<&syn::PathSegment> {
    match strip_type_groups(ty) {
        Type::Path(path) if path.qself.is_none() => path.path.segments.last(),
        _ => None,
    }
}

fn strip_type_groups(ty: &Type) -> &Type {
    match ty {
        Type::Group(group) => strip_type_groups(&group.elem),
        Type::Paren(paren) => strip_type_groups(&paren.elem),
        other => other,
    }
}

/// The id: the `id` argument (validated while parsing), else the item's name in snake_case.
fn default_id(args: &Args, ident: &Ident, errors: &mut Vec<syn::Error>) -> Option<LitStr> {
    if args.given("id") {
        return args.id.clone(); // Reported while parsing if invalid.
    }
    let id = snake_case(&ident.to_string());
    match id_grammar::check(&id) {
        Ok(()) => Some(LitStr::new(&id, ident.span())),
        Err(err) => {
            errors.push(syn::Error::new(
                ident.span(),
                format!("cannot derive an id from `{ident}`: {err}; give one with `id = \"...\"`"),
            ));
            None
        }
    }
}

/// The description: the `what` argument, else the first line of the doc comment.
fn what(
    args: &Args,
    ident: &Ident,
    attrs: &[syn::Attribute],
    errors: &mut Vec<syn::Error>,
) -> Option<LitStr> {
    if args.given("what") {
        return args.what.clone(); // Reported while parsing if invalid.
    }
    let docs: Vec<String> = attrs
        .iter()
        .filter_map(|attr| match &attr.meta {
            Meta::NameValue(nv) if nv.path.is_ident("doc") => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(lit), ..
                }) => Some(lit.value()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    match first_doc_line(docs.iter().map(String::as_str)) {
        Some(line) => Some(LitStr::new(&line, ident.span())),
        None => {
            errors.push(syn::Error::new(
                ident.span(),
                format!(
                    "prompt component `{ident}` needs a one-line description: add a `///` doc \
                     comment above it, or pass `what = \"...\"` to #[prompt_component]"
                ),
            ));
            None
        }
    }
}

fn registration(
    args: &Args,
    ident: &Ident,
    id: &LitStr,
    what: &LitStr,
    renderer: &Renderer,
) -> TokenStream {
    let private = quote!(::prompt_registry::__private);
    let placement = match args.placement {
        None => quote!(#private::core::option::Option::None),
        Some(Placement::Prefix) => {
            quote!(#private::core::option::Option::Some(#private::Placement::Prefix))
        }
        Some(Placement::Tail) => {
            quote!(#private::core::option::Option::Some(#private::Placement::Tail))
        }
    };
    let persist = match args.persist.unwrap_or_default() {
        Persist::History => quote!(#private::Persist::History),
        Persist::Ephemeral => quote!(#private::Persist::Ephemeral),
    };
    // Written out (not `#private`) so that every token of the call carries the item's span:
    // `line!()` then reports the item's line, not the attribute's.
    let file = quote_spanned!(ident.span()=> ::prompt_registry::__private::core::file!());
    let line = quote_spanned!(ident.span()=> ::prompt_registry::__private::core::line!());
    // The closure is the wrapper with the signature `Render` requires. The argument is located at
    // the user's parameter type and the conversion at the return type, so a context type or a
    // return type smuggled past the syntactic checks (an alias, a shadowing `String`) fails
    // there, as a type error.
    let render = match renderer {
        Renderer::Static => quote!(#private::Render::Static(#ident)),
        Renderer::Session { context, output } | Renderer::Turn { context, output } => {
            let variant = match renderer {
                Renderer::Session { .. } => quote!(Session),
                _ => quote!(Turn),
            };
            let param = Ident::new("__prompt_context", Span::mixed_site());
            let arg = Ident::new("__prompt_context", Span::mixed_site().located_at(*context));
            let convert = quote_spanned!(Span::mixed_site().located_at(*output)=>
                ::prompt_registry::__private::IntoRendered::into_rendered(#ident(#arg))
            );
            quote!(#private::Render::#variant(|#param| #convert))
        }
    };
    quote! {
        const _: () = {
            #private::inventory::submit! {
                #private::Registration {
                    id: #id,
                    placement: #placement,
                    persist: #persist,
                    what: #what,
                    file: #file,
                    line: #line,
                    render: #render,
                }
            }
        };
    }
}
