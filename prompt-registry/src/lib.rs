//! prompt-registry (work in progress).

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use prompt_core::*;
pub use prompt_macros::prompt_component;
