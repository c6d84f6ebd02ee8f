//! Two prompt components in a crate of their own. A binary that wants them registered must
//! link this crate: `use cacheline_fixture_components as _;`.

use prompt_registry::{SessionContext, prompt_component};

/// House style for commit messages.
#[prompt_component(placement = "prefix")]
pub const COMMIT_STYLE: &str = "Commit messages: imperative mood, at most 72 characters.";

/// The reviewer on duty, fixed for the session.
#[prompt_component]
pub fn reviewer_on_duty(_session: &SessionContext) -> Option<String> {
    Some("Reviewer on duty: Ada.".to_owned())
}
