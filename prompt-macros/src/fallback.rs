//! The expansion when something is wrong: the item unchanged and the errors, nothing else.
//!
//! No registration is emitted, so the errors are only the reported ones: nothing in the
//! expansion refers to an item that may not have the expected shape, which would add
//! follow-on errors. The item itself is kept, so code using it does not fail too.

use proc_macro2::TokenStream;
use quote::quote;

/// The item unchanged, then one `compile_error!` per reported mistake.
pub(crate) fn expand(item: TokenStream, error: syn::Error) -> TokenStream {
    let errors = error.into_compile_error();
    quote!(#item #errors)
}
