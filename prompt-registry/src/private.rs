//! What `#[prompt_component]` expands to. Not public API: paths here may change at any time.

pub use ::core;
pub use ::inventory;
pub use prompt_core::{Persist, Placement, SessionContext, TurnContext};

/// A renderer as the macro registers it: plain function pointers, so a registration is a
/// constant that `inventory::submit!` can place in a static.
#[derive(Clone, Copy)]
pub enum Render {
    /// Compile-time text.
    Static(&'static str),
    /// Rendered once per session.
    Session(fn(&SessionContext) -> Option<String>),
    /// Rendered each turn.
    Turn(fn(&TurnContext<'_>) -> Option<String>),
}

/// One `#[prompt_component]`, as submitted to inventory.
pub struct Registration {
    /// The id (validated at compile time).
    pub id: &'static str,
    /// The declared placement; `None` when the attribute gives none.
    pub placement: Option<Placement>,
    /// For tail components: whether updates persist in history.
    pub persist: Persist,
    /// For tail components: what the writer says once when it has nothing to say after
    /// having had text (`cleared = "..."`); `None`: its last text stands.
    pub cleared: Option<&'static str>,
    /// One-line description.
    pub what: &'static str,
    /// `file!()` of the item.
    pub file: &'static str,
    /// `line!()` of the item.
    pub line: u32,
    /// The renderer.
    pub render: Render,
}

inventory::collect!(Registration);

/// What a renderer function may return: `String` (always has text) or `Option<String>`
/// (`None`: nothing to say this time).
pub trait IntoRendered {
    /// Normalizes to `Option<String>`.
    fn into_rendered(self) -> Option<String>;
}

impl IntoRendered for String {
    fn into_rendered(self) -> Option<String> {
        Some(self)
    }
}

impl IntoRendered for Option<String> {
    fn into_rendered(self) -> Option<String> {
        self
    }
}
