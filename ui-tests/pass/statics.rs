//! `static` and `&'static str` forms, `id`/`what`/`persist` arguments, no placement.
#![deny(warnings, missing_docs)]

#[path = "../support/registered.rs"]
mod registered;

use prompt_registry::__private::{Persist, Placement, Render};
use prompt_registry::prompt_component;

/// How to answer.
#[prompt_component]
static ANSWER_STYLE: &str = "Answer briefly.";

/// Ignored: `what` wins over the doc comment.
#[prompt_component(
    placement = "prefix",
    id = "safety_rules",
    what = "  the safety rules  "
)]
pub static SAFETY: &'static str = "Never run `rm -rf /`.";

#[prompt_component(
    placement = "tail",
    persist = "ephemeral",
    what = "a reminder at the very end"
)]
const REMINDER: &'static str = "Remember to run the tests.";

fn main() {
    let source = include_str!("statics.rs");
    let registered = registered::from(file!());
    let ids: Vec<&str> = registered.iter().map(|component| component.id).collect();
    assert_eq!(ids, ["answer_style", "reminder", "safety_rules"]);

    let style = registered::get(file!(), "answer_style");
    assert_eq!(style.placement, None);
    assert_eq!(style.persist, Persist::History);
    assert_eq!(style.what, "How to answer.");
    assert_eq!(
        style.line,
        registered::line_of(source, "static ANSWER_STYLE:")
    );
    assert!(matches!(style.render, Render::Static("Answer briefly.")));

    let safety = registered::get(file!(), "safety_rules");
    assert_eq!(safety.placement, Some(Placement::Prefix));
    assert_eq!(safety.what, "the safety rules");
    assert_eq!(
        safety.line,
        registered::line_of(source, "pub static SAFETY:")
    );
    assert!(matches!(safety.render, Render::Static(text) if text == SAFETY));

    let reminder = registered::get(file!(), "reminder");
    assert_eq!(reminder.placement, Some(Placement::Tail));
    assert_eq!(reminder.persist, Persist::Ephemeral);
    assert_eq!(reminder.what, "a reminder at the very end");
    assert_eq!(
        reminder.line,
        registered::line_of(source, "const REMINDER:")
    );
    assert!(matches!(reminder.render, Render::Static(text) if text == REMINDER));
    assert_eq!(ANSWER_STYLE, "Answer briefly.");
}
