//! Components: the independent writers that compose a prompt.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use crate::context::{SessionContext, TurnContext};
use crate::id::ComponentId;
use crate::placement::{Persist, Placement, Stability};

/// Where a component is defined.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SourceLocation {
    /// Source file, as `file!()` gives it.
    pub file: Cow<'static, str>,
    /// 1-based line.
    pub line: u32,
}

impl SourceLocation {
    /// A location from a file and line.
    pub fn new(file: impl Into<Cow<'static, str>>, line: u32) -> Self {
        Self {
            file: file.into(),
            line,
        }
    }

    /// The location of the caller of a `#[track_caller]` function.
    #[track_caller]
    pub fn caller() -> Self {
        let at = std::panic::Location::caller();
        Self::new(at.file(), at.line())
    }
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file, self.line)
    }
}

/// Renders a session-stability component once, from session-frozen values.
pub type SessionRenderer = Arc<dyn Fn(&SessionContext) -> Option<String> + Send + Sync>;
/// Renders a turn-stability component every turn.
pub type TurnRenderer = Arc<dyn Fn(&TurnContext<'_>) -> Option<String> + Send + Sync>;

/// A component's content and, through its variant, its [`Stability`].
#[derive(Clone)]
pub enum Content {
    /// Compile-time text.
    Static(Cow<'static, str>),
    /// Rendered once per session. `None` means the component has nothing to say.
    Session(SessionRenderer),
    /// Rendered each turn. `None` means the component has nothing to say this turn.
    Turn(TurnRenderer),
}

impl Content {
    /// The stability this content implies.
    pub fn stability(&self) -> Stability {
        match self {
            Content::Static(_) => Stability::Static,
            Content::Session(_) => Stability::Session,
            Content::Turn(_) => Stability::Turn,
        }
    }
}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Content::Static(text) => f.debug_tuple("Static").field(&text.len()).finish(),
            Content::Session(_) => f.write_str("Session(..)"),
            Content::Turn(_) => f.write_str("Turn(..)"),
        }
    }
}

/// One writer of prompt text.
///
/// ```
/// use prompt_core::{Component, ComponentId, Placement, Persist};
/// let id = ComponentId::new("todo_addendum").unwrap();
/// let todo = Component::turn(id, |turn| turn.get::<Vec<String>>().map(|items| items.join("\n")))
///     .describe("open todo items")
///     .persist(Persist::History);
/// assert_eq!(todo.declared(), None); // declares nothing: resolves to the policy default
/// ```
#[derive(Clone, Debug)]
pub struct Component {
    id: ComponentId,
    declared: Option<Placement>,
    description: Cow<'static, str>,
    source: SourceLocation,
    content: Content,
    persist: Persist,
    cleared: Option<Cow<'static, str>>,
}

impl Component {
    /// A component with the given content. The source location is the caller's.
    #[track_caller]
    pub fn new(id: ComponentId, content: Content) -> Self {
        Self {
            id,
            declared: None,
            description: Cow::Borrowed(""),
            source: SourceLocation::caller(),
            content,
            persist: Persist::History,
            cleared: None,
        }
    }

    /// A component with compile-time text.
    #[track_caller]
    pub fn constant(id: ComponentId, text: impl Into<Cow<'static, str>>) -> Self {
        Self::new(id, Content::Static(text.into()))
    }

    /// A component rendered once per session.
    #[track_caller]
    pub fn session<F>(id: ComponentId, render: F) -> Self
    where
        F: Fn(&SessionContext) -> Option<String> + Send + Sync + 'static,
    {
        Self::new(id, Content::Session(Arc::new(render)))
    }

    /// A component rendered every turn.
    #[track_caller]
    pub fn turn<F>(id: ComponentId, render: F) -> Self
    where
        F: Fn(&TurnContext<'_>) -> Option<String> + Send + Sync + 'static,
    {
        Self::new(id, Content::Turn(Arc::new(render)))
    }

    /// Declares where the component wants to land.
    pub fn placement(mut self, placement: Placement) -> Self {
        self.declared = Some(placement);
        self
    }

    /// Drops the declared placement, so the component resolves to the policy's default.
    /// The registry applies it to components registered at run time: a skill or an MCP
    /// server reaches the prefix only through the operator's `[prompt]` section.
    pub fn without_declaration(mut self) -> Self {
        self.declared = None;
        self
    }

    /// Sets the one-line description.
    pub fn describe(mut self, description: impl Into<Cow<'static, str>>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets whether tail output persists in history. Ignored for components that land in
    /// the prefix.
    pub fn persist(mut self, persist: Persist) -> Self {
        self.persist = persist;
        self
    }

    /// Sets the text a persisting tail writer delivers, once, when it has nothing to say
    /// (renders `None`) after a turn on which it had text: without it the writer's last
    /// text stands in the history as its last word ("Open todo items: buy milk" after the
    /// list emptied). Delivered again only after the writer has had text again. Unused in
    /// the prefix and by [`Persist::Ephemeral`] writers, whose text is in one request only.
    ///
    /// ```
    /// use prompt_core::{Component, ComponentId};
    /// let id = ComponentId::new("todo_addendum").unwrap();
    /// let todo = Component::turn(id, |turn| turn.get::<Vec<String>>().map(|items| items.join("\n")))
    ///     .describe("open todo items")
    ///     .cleared("No open todo items.");
    /// assert_eq!(todo.cleared_text(), Some("No open todo items."));
    /// ```
    pub fn cleared(mut self, text: impl Into<Cow<'static, str>>) -> Self {
        self.cleared = Some(text.into());
        self
    }

    /// Overrides the source location (the macro passes `file!()` and `line!()`).
    pub fn located_at(mut self, source: SourceLocation) -> Self {
        self.source = source;
        self
    }

    /// The id.
    pub fn id(&self) -> &ComponentId {
        &self.id
    }

    /// The declared placement, `None` when the component declares nothing.
    pub fn declared(&self) -> Option<Placement> {
        self.declared
    }

    /// The one-line description.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Where it is defined.
    pub fn source(&self) -> &SourceLocation {
        &self.source
    }

    /// Its content.
    pub fn content(&self) -> &Content {
        &self.content
    }

    /// Its stability, implied by its content.
    pub fn stability(&self) -> Stability {
        self.content.stability()
    }

    /// Whether tail output persists in history.
    pub fn persist_mode(&self) -> Persist {
        self.persist
    }

    /// The text delivered once when the writer stops having something to say (see
    /// [`Component::cleared`]); `None`: its last text stands.
    pub fn cleared_text(&self) -> Option<&str> {
        self.cleared.as_deref()
    }
}
