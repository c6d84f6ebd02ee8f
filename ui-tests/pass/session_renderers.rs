//! Session renderers returning `String` and `Option<String>`, declared in a module, with
//! every way of spelling the context type.
#![deny(warnings, missing_docs)]

#[path = "../support/registered.rs"]
mod registered;

use prompt_registry::__private::{Persist, Placement, Render};
use prompt_registry::{Extensions, SessionContext};

/// The tools the session has.
pub struct Tools(pub Vec<&'static str>);

/// The components.
pub mod prompts {
    use prompt_registry::{SessionContext, prompt_component};

    use super::Tools;

    /// The tools, sorted so the prefix does not depend on registration order.
    #[prompt_component(placement = "prefix", id = "tool_schemas", what = "tool list, sorted")]
    pub fn tools(session: &SessionContext) -> String {
        let mut tools = session
            .get::<Tools>()
            .map(|tools| tools.0.clone())
            .unwrap_or_default();
        tools.sort_unstable();
        tools.join(", ")
    }

    /// Notes about the project, when there are any.
    #[prompt_component(placement = "prefix")]
    pub fn project_notes(
        _session: &prompt_registry::SessionContext,
    ) -> Option<std::string::String> {
        None
    }

    /// The session's rules, in the tail.
    #[prompt_component(placement = "tail", persist = "history")]
    pub(crate) fn session_rules<'a>(_: &'a SessionContext) -> ::std::option::Option<String> {
        Some("Be kind.".to_owned())
    }
}

fn main() {
    let source = include_str!("session_renderers.rs");
    let session = SessionContext::new(Extensions::new().with(Tools(vec!["grep", "edit"])));
    let ids: Vec<&str> = registered::from(file!())
        .iter()
        .map(|component| component.id)
        .collect();
    assert_eq!(ids, ["project_notes", "session_rules", "tool_schemas"]);

    let tools = registered::get(file!(), "tool_schemas");
    assert_eq!(tools.placement, Some(Placement::Prefix));
    assert_eq!(tools.what, "tool list, sorted");
    assert_eq!(tools.line, registered::line_of(source, "pub fn tools("));
    let Render::Session(render) = tools.render else {
        panic!("not a session renderer")
    };
    assert_eq!(render(&session).as_deref(), Some("edit, grep"));

    let notes = registered::get(file!(), "project_notes");
    assert_eq!(notes.what, "Notes about the project, when there are any.");
    assert_eq!(
        notes.line,
        registered::line_of(source, "pub fn project_notes(")
    );
    let Render::Session(render) = notes.render else {
        panic!("not a session renderer")
    };
    assert_eq!(render(&session), None);

    let rules = registered::get(file!(), "session_rules");
    assert_eq!(rules.placement, Some(Placement::Tail));
    assert_eq!(rules.persist, Persist::History);
    let Render::Session(render) = rules.render else {
        panic!("not a session renderer")
    };
    assert_eq!(render(&session).as_deref(), Some("Be kind."));

    // The functions are unchanged and callable.
    assert_eq!(prompts::tools(&session), "edit, grep");
}
