//! A prefix `const` whose description comes from its doc comment.
#![deny(warnings, missing_docs)]

#[path = "../support/registered.rs"]
mod registered;

use prompt_registry::__private::{Persist, Placement, Render};
use prompt_registry::prompt_component;

///
/// Who the assistant is.
///
/// The rest of the doc comment is not part of the description.
#[prompt_component(placement = "prefix")]
pub const ASSISTANT_INSTRUCTIONS: &str = "You are a careful coding assistant.";

fn main() {
    let registered = registered::from(file!());
    assert_eq!(registered.len(), 1);
    let component = registered[0];
    assert_eq!(component.id, "assistant_instructions");
    assert_eq!(component.placement, Some(Placement::Prefix));
    assert_eq!(component.persist, Persist::History);
    assert_eq!(component.what, "Who the assistant is.");
    assert_eq!(
        component.line,
        registered::line_of(
            include_str!("const_prefix.rs"),
            "pub const ASSISTANT_INSTRUCTIONS:"
        )
    );
    assert!(
        matches!(component.render, Render::Static(text) if text == "You are a careful coding assistant.")
    );
    // The item itself is unchanged.
    assert_eq!(ASSISTANT_INSTRUCTIONS.len(), 35);
}
