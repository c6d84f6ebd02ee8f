//! The registration of a valid component: the tokens after the unchanged item.

use proc_macro2::{Ident, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::LitStr;

use crate::attr::{Persist, Placement};

/// A component that passed every check: what to register.
pub(crate) struct Registration {
    /// The item's name, which the registration refers to.
    pub ident: Ident,
    /// The validated id.
    pub id: LitStr,
    /// The one-line description.
    pub what: LitStr,
    /// The declared placement.
    pub placement: Option<Placement>,
    /// The persistence, defaulted.
    pub persist: Persist,
    /// What a tail writer says once when it stops having text.
    pub cleared: Option<LitStr>,
    /// How the item renders.
    pub render: Render,
}

/// How the item renders.
pub(crate) enum Render {
    /// A `const`/`static` of type `&'static str`.
    Static,
    /// `fn(&SessionContext) -> String | Option<String>`.
    Session(Spans),
    /// `fn(&TurnContext) -> String | Option<String>`.
    Turn(Spans),
}

/// Where a renderer's wrapper locates its parts, so that type errors point at the user's code.
#[derive(Clone, Copy)]
pub(crate) struct Spans {
    /// The context type's name.
    pub context: Span,
    /// The return type.
    pub output: Span,
}

/// The item unchanged, then its registration.
pub(crate) fn expand(item: TokenStream, registration: &Registration) -> TokenStream {
    let registration = registration.tokens();
    quote!(#item #registration)
}

impl Registration {
    fn tokens(&self) -> TokenStream {
        let Registration {
            ident,
            id,
            what,
            placement,
            persist,
            cleared,
            render,
        } = self;
        let private = quote!(::prompt_registry::__private);
        let placement = match placement {
            None => quote!(#private::core::option::Option::None),
            Some(Placement::Prefix) => {
                quote!(#private::core::option::Option::Some(#private::Placement::Prefix))
            }
            Some(Placement::Tail) => {
                quote!(#private::core::option::Option::Some(#private::Placement::Tail))
            }
        };
        let persist = match persist {
            Persist::History => quote!(#private::Persist::History),
            Persist::Ephemeral => quote!(#private::Persist::Ephemeral),
        };
        let cleared = match cleared {
            None => quote!(#private::core::option::Option::None),
            Some(text) => quote!(#private::core::option::Option::Some(#text)),
        };
        // Written out (not `#private`) so that every token of the call carries the item's
        // span: `line!()` then reports the item's line, not the attribute's.
        let file = quote_spanned!(ident.span()=> ::prompt_registry::__private::core::file!());
        let line = quote_spanned!(ident.span()=> ::prompt_registry::__private::core::line!());
        let render = match render {
            Render::Static => quote!(#private::Render::Static(#ident)),
            Render::Session(spans) => {
                let wrapper = wrapper(ident, *spans);
                quote!(#private::Render::Session(#wrapper))
            }
            Render::Turn(spans) => {
                let wrapper = wrapper(ident, *spans);
                quote!(#private::Render::Turn(#wrapper))
            }
        };
        quote! {
            const _: () = {
                #private::inventory::submit! {
                    #private::Registration {
                        id: #id,
                        placement: #placement,
                        persist: #persist,
                        cleared: #cleared,
                        what: #what,
                        file: #file,
                        line: #line,
                        render: #render,
                    }
                }
            };
        }
    }
}

/// The closure with the signature `Render` requires. The argument is located at the user's
/// parameter type and the conversion at the return type, so a context type or a return type
/// smuggled past the syntactic checks (an alias, a shadowing `String`) fails there, as a type
/// error.
fn wrapper(ident: &Ident, spans: Spans) -> TokenStream {
    let param = Ident::new("__prompt_context", Span::mixed_site());
    let arg = Ident::new(
        "__prompt_context",
        Span::mixed_site().located_at(spans.context),
    );
    let convert = quote_spanned!(Span::mixed_site().located_at(spans.output)=>
        ::prompt_registry::__private::IntoRendered::into_rendered(#ident(#arg))
    );
    quote!(|#param| #convert)
}
