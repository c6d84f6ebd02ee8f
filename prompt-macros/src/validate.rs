//! The rules a component follows, checked against its arguments: prefix text is a
//! `&'static str` constant or a session renderer, a renderer takes one context by shared
//! reference and returns `String` or `Option<String>`, a prefix renderer reads no clock,
//! random numbers, environment or files (`varying`), the id is a valid bare id, there is a
//! one-line description, and a `cleared` text goes with a tail writer that may have nothing
//! to say.
//!
//! Every rule reports to the `Ctxt` and the checks go on, so that independent mistakes are
//! reported together. A rule that cannot be judged because of an earlier mistake (an
//! argument whose value was invalid, an unparsed argument list) is skipped, so no mistake is
//! reported twice or as a consequence of another.

use proc_macro2::Span;
use quote::quote;
use syn::{GenericParam, LitStr, Safety};

use crate::attr::{Args, Persist, Placement};
use crate::ctxt::Ctxt;
use crate::expand::{Registration, Render, Spans};
use crate::id_grammar::{self, IdProblem};
use crate::parse::{Component, Context, Kind, Output, Param, Renderer, Text};
use crate::symbol::{CLEARED, EPHEMERAL, ID, PERSIST, PLACEMENT, TAIL, WHAT};
use crate::text::{first_doc_line, snake_case, suggest_id};
use crate::varying;

const PREFIX_TEXT: &str = "prefix text must be a `&'static str` constant or a session renderer fn";

/// Checks `component` against the rules; the registration to emit if they hold. Mistakes are
/// reported to `cx`, which must be checked before the registration is used.
pub(crate) fn registration(
    cx: &Ctxt,
    args: &Args,
    component: &Component<'_>,
) -> Option<Registration> {
    let placement = args.placement.value;
    let id = args
        .id
        .value
        .as_ref()
        .and_then(|lit| given_id(cx, lit, component));
    let what = args.what.value.as_ref().and_then(|lit| given_what(cx, lit));
    persist_on_prefix(cx, args);
    cleared_misuse(cx, args, component);
    let render = match &component.kind {
        Kind::Text(text) => text_render(cx, placement, text),
        Kind::Renderer(renderer) => renderer_render(cx, placement, renderer),
    };
    // An argument given with an invalid value, or possibly given after malformed syntax, has
    // no default: there is nothing more to report about it.
    let derive = |given: bool| !given && args.complete;
    let id = match id {
        None if derive(args.id.given()) => derived_id(cx, component),
        id => id,
    };
    let what = match what {
        None if derive(args.what.given()) => documented_what(cx, component),
        what => what,
    };
    Some(Registration {
        ident: component.ident.clone(),
        id: id?,
        what: what?,
        placement,
        persist: args.persist.value.unwrap_or_default(),
        cleared: args.cleared.value.clone(),
        render: render?,
    })
}

/// `id = "..."`: a valid id, and bare.
fn given_id(cx: &Ctxt, lit: &LitStr, component: &Component<'_>) -> Option<LitStr> {
    let text = lit.value();
    let (problem, fix) = match id_grammar::check(&text) {
        Ok(()) if !text.contains(':') => return Some(lit.clone()),
        Ok(()) => (
            format!(
                "component id `{text}` is namespaced; the `skill:` and `mcp:` namespaces are for \
                 components registered at run time"
            ),
            bare_fix(&text),
        ),
        Err(error) => {
            let fix = match error.problem {
                IdProblem::Reserved => own_id_fix("an id of its own", component),
                IdProblem::TooLong { .. } => own_id_fix("a shorter id", component),
                _ => bare_fix(&text),
            };
            (error.to_string(), fix)
        }
    };
    cx.error_spanned_by(lit, problem + &fix);
    None
}

/// How to replace an id that is fine in form but cannot be used: with the item's name, when
/// that is a valid id.
fn own_id_fix(another: &str, component: &Component<'_>) -> String {
    let name = snake_case(&component.ident.to_string());
    if id_grammar::check(&name).is_ok() {
        format!(
            "; give the component {another}, such as its name: `{ID} = \"{name}\"` (or remove \
             `{ID}`, which defaults to the name)"
        )
    } else {
        format!("; give the component {another} that says what it holds: `{ID} = \"...\"`")
    }
}

/// How to turn a malformed or namespaced id into a bare one.
fn bare_fix(text: &str) -> String {
    match suggest_id(text).filter(|id| id_grammar::check(id).is_ok()) {
        Some(id) => format!("; a #[prompt_component] id is bare: try `{ID} = \"{id}\"`"),
        None => format!("; a #[prompt_component] id is bare, like `{ID} = \"tool_schemas\"`"),
    }
}

/// The id when there is no `id` argument: the item's name in snake_case.
fn derived_id(cx: &Ctxt, component: &Component<'_>) -> Option<LitStr> {
    let ident = component.ident;
    let id = snake_case(&ident.to_string());
    match id_grammar::check(&id) {
        Ok(()) => Some(LitStr::new(&id, ident.span())),
        Err(error) => {
            let fix = match error.problem {
                IdProblem::Reserved => "give the component an id of its own",
                _ => "give one",
            };
            cx.error_at(
                ident.span(),
                format!("cannot derive an id from `{ident}`: {error}; {fix} with `{ID} = \"...\"`"),
            );
            None
        }
    }
}

/// `what = "..."`: one non-empty line, trimmed.
fn given_what(cx: &Ctxt, lit: &LitStr) -> Option<LitStr> {
    let text = lit.value();
    let line = text.trim();
    if line.is_empty() {
        cx.error_spanned_by(
            lit,
            format!("`{WHAT}` is empty; describe the component in one line"),
        );
        None
    } else if line.contains('\n') {
        cx.error_spanned_by(
            lit,
            format!("`{WHAT}` is a one-line description; put the rest in the doc comment"),
        );
        None
    } else {
        Some(LitStr::new(line, lit.span()))
    }
}

/// The description when there is no `what` argument: the doc comment's first line.
fn documented_what(cx: &Ctxt, component: &Component<'_>) -> Option<LitStr> {
    let ident = component.ident;
    match first_doc_line(component.docs.iter().map(String::as_str)) {
        Some(line) => Some(LitStr::new(&line, ident.span())),
        None => {
            cx.error_at(
                ident.span(),
                format!(
                    "prompt component `{ident}` needs a one-line description: add a `///` doc \
                     comment above it, or pass `{WHAT} = \"...\"` to #[prompt_component]"
                ),
            );
            None
        }
    }
}

/// `persist` says what happens to a tail component's updates; a prefix has none.
fn persist_on_prefix(cx: &Ctxt, args: &Args) {
    if let (Some(Placement::Prefix), Some(key)) = (args.placement.value, &args.persist.key) {
        cx.error_spanned_by(
            key,
            format!(
                "`{PERSIST}` only applies to tail components (it says whether their updates are \
                 kept in the history); a prefix component is rendered once per session. Remove \
                 `{PERSIST}`, or declare `{PLACEMENT} = \"{TAIL}\"`"
            ),
        );
    }
}

/// `cleared` is what a tail writer whose updates are kept in the history says once when it
/// stops having text: it needs such a writer, one that can have nothing to say (a renderer
/// returning `Option<String>`), and a text.
fn cleared_misuse(cx: &Ctxt, args: &Args, component: &Component<'_>) {
    let (Some(key), Some(lit)) = (&args.cleared.key, &args.cleared.value) else {
        // Not given, or given with an invalid value (reported already).
        return;
    };
    if lit.value().trim().is_empty() {
        cx.error_spanned_by(
            lit,
            format!(
                "`{CLEARED}` is empty; write what the writer says once when it has nothing left \
                 to say, like `{CLEARED} = \"No open todo items.\"`"
            ),
        );
    }
    if args.placement.value == Some(Placement::Prefix) {
        cx.error_spanned_by(
            key,
            format!(
                "`{CLEARED}` only applies to tail components (it is what a tail writer says once \
                 when it stops having text); a prefix component is rendered once per session. \
                 Remove `{CLEARED}`, or declare `{PLACEMENT} = \"{TAIL}\"`"
            ),
        );
    }
    if args.persist.value == Some(Persist::Ephemeral) {
        cx.error_spanned_by(
            key,
            format!(
                "`{CLEARED}` only applies to tail components whose updates are kept in the \
                 history; an ephemeral component's text is in one request only, so none of it \
                 stands. Remove `{CLEARED}`, or remove `{PERSIST} = \"{EPHEMERAL}\"`"
            ),
        );
    }
    let always = match &component.kind {
        Kind::Text(_) => Some("a `const`/`static` always has its text"),
        Kind::Renderer(Renderer {
            output: Output::Text {
                optional: false, ..
            },
            ..
        }) => Some("this renderer returns `String`, so it always has text"),
        // `Option<String>`, or a return type reported already.
        Kind::Renderer(_) => None,
    };
    if let Some(always) = always {
        cx.error_spanned_by(
            key,
            format!(
                "`{CLEARED}` is what a writer says once when it returns `None` after having had \
                 text, but {always}; return `Option<String>` from a renderer fn, or remove \
                 `{CLEARED}`"
            ),
        );
    }
}

/// A `const` or `static`: an immutable, non-generic `&'static str`.
fn text_render(cx: &Ctxt, placement: Option<Placement>, text: &Text<'_>) -> Option<Render> {
    let prefix = placement == Some(Placement::Prefix);
    if let Some(generics) = text.generics {
        cx.error_spanned_by(
            generics,
            "a prompt component const cannot be generic; remove the generic parameters",
        );
        return None;
    }
    if let Some(mutability) = text.mutability {
        let msg = if prefix {
            format!(
                "a `static mut` can change at run time, but the prefix must stay byte-identical \
                 for the whole session: remove `mut` ({PREFIX_TEXT})"
            )
        } else {
            "a `static mut` can change at run time, which a prompt component cannot; remove \
             `mut`, or write a renderer fn taking `&SessionContext` (rendered once per session) \
             or `&TurnContext` (rendered each turn)"
                .to_owned()
        };
        cx.error_spanned_by(mutability, msg);
        return None;
    }
    if text.is_str {
        return Some(Render::Static);
    }
    let msg = if prefix {
        format!(
            "{PREFIX_TEXT}: declare `const NAME: &str = \"...\";`, or compute the text in \
             `fn name(session: &SessionContext) -> String`"
        )
    } else {
        "a `const`/`static` prompt component must have type `&'static str`; for text computed \
         at run time write a renderer fn taking `&SessionContext` (rendered once per session) or \
         `&TurnContext` (rendered each turn)"
            .to_owned()
    };
    cx.error_spanned_by(text.ty, msg);
    None
}

/// A fn: a plain, safe, non-generic Rust fn taking one context by shared reference and
/// returning `String` or `Option<String>`; per-turn content never goes in the prefix.
fn renderer_render(
    cx: &Ctxt,
    placement: Option<Placement>,
    renderer: &Renderer<'_>,
) -> Option<Render> {
    let sig = renderer.sig;
    if let Some(asyncness) = &sig.asyncness {
        cx.error_spanned_by(
            asyncness,
            "a renderer cannot be `async`: prompts are rendered synchronously; remove `async` and \
             read what you need from the context",
        );
    }
    if let Safety::Unsafe(unsafety) = &sig.safety {
        cx.error_spanned_by(
            unsafety,
            "a renderer cannot be an `unsafe fn`: the registry calls it as a safe fn; remove \
             `unsafe` (use an `unsafe` block inside if you must)",
        );
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned_by(
            abi,
            "a renderer cannot declare an ABI: the registry calls it as a Rust fn; remove the \
             `extern`",
        );
    }
    for param in &sig.generics.params {
        if !matches!(param, GenericParam::Lifetime(_)) {
            cx.error_spanned_by(
                param,
                "a renderer cannot be generic over types or consts: the registry calls one \
                 concrete fn; remove this parameter (lifetime parameters are fine)",
            );
        }
    }
    if let Some(variadic) = &sig.variadic {
        cx.error_spanned_by(
            variadic,
            "a renderer takes exactly one parameter, `&SessionContext` or `&TurnContext`; remove \
             the `...`",
        );
    }
    if let Some(receiver) = renderer.receiver {
        cx.error_spanned_by(
            receiver,
            "#[prompt_component] cannot go on a method: the registry calls a free fn; move it \
             out of the `impl` and take `&SessionContext` or `&TurnContext` instead of `self`",
        );
    }
    let context = match &renderer.param {
        Param::Typed { ty, context } => context_param(cx, ty, context),
        // A second `self`: rustc reports it.
        Param::Receiver => None,
        // The `...` or the `self` is reported already.
        Param::Missing if sig.variadic.is_some() || renderer.receiver.is_some() => None,
        Param::Missing => {
            cx.error_at(
                sig.paren_token.span.join(),
                "a renderer takes one parameter: `session: &SessionContext` (rendered once per \
                 session) or `turn: &TurnContext` (rendered each turn)",
            );
            None
        }
    };
    if !renderer.extra.is_empty() {
        let extra = &renderer.extra;
        cx.error_spanned_by(
            quote!(#(#extra),*),
            "a renderer takes exactly one parameter, the context; get other inputs from it with \
             `session.get::<T>()` or `turn.get::<T>()`",
        );
    }
    let output = output(cx, renderer);
    if let (
        Some(Placement::Prefix),
        Param::Typed {
            ty,
            context: Context::Turn(_),
        },
    ) = (placement, &renderer.param)
    {
        cx.error_spanned_by(
            ty,
            "per-turn content cannot be in the prefix: this fn takes `&TurnContext`, so it \
             renders every turn, while the prefix must stay byte-identical for the whole \
             session; declare `placement = \"tail\"`, or render from `&SessionContext` \
             (session-frozen inputs)",
        );
    }
    // A `&TurnContext` writer in the prefix is reported above; in the tail, where that error
    // sends it, it may read the clock.
    let turn = matches!(
        renderer.param,
        Param::Typed {
            context: Context::Turn(_),
            ..
        }
    );
    if placement == Some(Placement::Prefix) && !turn {
        varying::check_prefix_body(cx, &sig.ident, renderer.body);
    }
    let ((variant, context), output) = (context?, output?);
    Some(variant(Spans { context, output }))
}

/// A renderer's [`Render`] variant, given the spans of its context and return types.
type RenderWith = fn(Spans) -> Render;

/// The parameter is `&SessionContext` or `&TurnContext` (any path, any lifetimes): the
/// [`Render`] variant for it, and the span of the context type's name.
fn context_param(cx: &Ctxt, ty: &syn::Type, context: &Context<'_>) -> Option<(RenderWith, Span)> {
    const EXPECTED: &str =
        "`&SessionContext` (rendered once per session) or `&TurnContext` (rendered each turn)";
    match context {
        Context::Session(span) => return Some((Render::Session, *span)),
        Context::Turn(span) => return Some((Render::Turn, *span)),
        Context::ByValue => cx.error_spanned_by(
            ty,
            format!("a renderer takes its context by shared reference: {EXPECTED}"),
        ),
        Context::MutRef(mutability) => cx.error_spanned_by(
            mutability,
            "a renderer only reads its context: take `&SessionContext` or `&TurnContext`, not \
             `&mut`; remove `mut`",
        ),
        Context::Unknown => {
            cx.error_spanned_by(ty, format!("a renderer's parameter is {EXPECTED}"));
        }
    }
    None
}

/// The return type is `String` or `Option<String>`; the span of the type.
fn output(cx: &Ctxt, renderer: &Renderer<'_>) -> Option<Span> {
    const EXPECTED: &str = "`-> String`, or `-> Option<String>` when there may be nothing to say";
    match renderer.output {
        Output::Text { span, .. } => return Some(span),
        Output::Missing => cx.error_at(
            renderer.sig.paren_token.span.close(),
            format!("a renderer returns its text: add {EXPECTED}"),
        ),
        Output::Other(ty) => cx.error_spanned_by(
            ty,
            format!("a renderer returns `String` or `Option<String>`: write {EXPECTED}"),
        ),
    }
    None
}
