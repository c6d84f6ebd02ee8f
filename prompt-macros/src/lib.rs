//! The `#[prompt_component]` attribute (being written).
use proc_macro::TokenStream;

/// Declares a prompt component.
#[proc_macro_attribute]
pub fn prompt_component(_args: TokenStream, item: TokenStream) -> TokenStream {
    item
}
