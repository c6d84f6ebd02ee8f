//! The registry of every prompt component linked into the binary, plus run-time ones.

use std::collections::BTreeMap;
use std::fmt;

use prompt_core::adopt::{AdoptError, AdoptOptions, AdoptReport};
use prompt_core::snapshot::{RestoreError, RestoreMode, Restored, SessionSnapshot};
use prompt_core::{
    ApiKind, Component, ComponentId, ComposeError, PromptPolicy, Session, SessionContext,
    SessionOptions, component::Content, component::SourceLocation, id::IdError,
    policy::LoadedPolicy, policy::PolicyErrors,
};
use prompt_wire::{
    Conversation, ConversationError, ConversationSnapshot, RestoredConversation, WireOptions,
};

use crate::__private::{Registration, Render};
use crate::status::StatusReport;

/// The namespace of a component registered at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    /// Skills loaded from disk: `skill:<name>`.
    Skill,
    /// Guidance sent by an MCP server: `mcp:<server>`.
    Mcp,
}

impl Namespace {
    /// `"skill"` or `"mcp"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Namespace::Skill => "skill",
            Namespace::Mcp => "mcp",
        }
    }
}

impl fmt::Display for Namespace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a component cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// Two components share an id.
    #[error("duplicate prompt component id `{id}`: defined at {first} and at {second}")]
    Duplicate {
        /// The id.
        id: ComponentId,
        /// The first definition (in registry order).
        first: SourceLocation,
        /// The other definition.
        second: SourceLocation,
    },
    /// A registration whose id is invalid (only possible for hand-written registrations;
    /// the attribute checks ids at compile time).
    #[error("{location}: invalid prompt component id: {}", prompt_core::input::chain(.source))]
    InvalidId {
        /// Where it was registered.
        location: SourceLocation,
        /// Why.
        source: IdError,
    },
    /// A namespaced component given to [`Registry::register`].
    #[error(
        "{location}: `{id}` is a run-time {namespace} component; register it with Registry::register_dynamic(Namespace::{namespace_title}, ..), which drops its own placement so only [prompt] can promote it",
        namespace_title = title(namespace)
    )]
    NamespacedBuiltIn {
        /// The id.
        id: ComponentId,
        /// Its namespace.
        namespace: String,
        /// Where it was registered.
        location: SourceLocation,
    },
    /// A run-time component whose id is not in the namespace it was registered under.
    #[error(
        "{location}: run-time {namespace} component `{id}` must be named `{namespace}:<name>`; it cannot take a built-in id or another namespace's id"
    )]
    WrongNamespace {
        /// The namespace it was registered under.
        namespace: Namespace,
        /// The id it asked for.
        id: ComponentId,
        /// Where it was registered.
        location: SourceLocation,
    },
}

/// `skill` → `Skill`, for the name of the [`Namespace`] variant in messages.
fn title(namespace: &str) -> String {
    let mut chars = namespace.chars();
    chars
        .next()
        .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
        .unwrap_or_default()
}

/// Every prompt component of the program, in a deterministic order (by id).
///
/// Components written with `#[prompt_component]` in any crate linked into the binary are
/// collected by [`Registry::linked`]. A crate is linked only if something uses it: a crate
/// that only defines components needs `use my_components as _;` in the binary.
#[derive(Clone, Debug)]
pub struct Registry {
    components: BTreeMap<ComponentId, Component>,
}

impl Registry {
    /// Collects every `#[prompt_component]` linked into this binary.
    pub fn linked() -> Result<Self, RegistryError> {
        Self::from_registrations(inventory::iter::<Registration>)
    }

    /// Builds a registry from registrations (what the attribute submits).
    pub fn from_registrations<'a>(
        registrations: impl IntoIterator<Item = &'a Registration>,
    ) -> Result<Self, RegistryError> {
        // inventory's iteration order depends on link order; sort so errors are stable.
        let mut regs: Vec<&Registration> = registrations.into_iter().collect();
        regs.sort_by_key(|r| (r.id, r.file, r.line));
        let mut registry = Self {
            components: BTreeMap::new(),
        };
        for reg in regs {
            registry.insert(component_of(reg)?)?;
        }
        Ok(registry)
    }

    fn insert(&mut self, component: Component) -> Result<(), RegistryError> {
        if let Some(first) = self.components.get(component.id()) {
            return Err(RegistryError::Duplicate {
                id: component.id().clone(),
                first: first.source().clone(),
                second: component.source().clone(),
            });
        }
        self.components.insert(component.id().clone(), component);
        Ok(())
    }

    /// Adds a built-in component given as a plain value (for agents that build some
    /// components at run time but own their ids). Duplicate ids are rejected, and so are
    /// namespaced ids: a `skill:` or `mcp:` component enters only through
    /// [`Registry::register_dynamic`], which applies the run-time rules.
    pub fn register(&mut self, component: Component) -> Result<(), RegistryError> {
        if let Some(namespace) = component.id().namespace() {
            return Err(RegistryError::NamespacedBuiltIn {
                id: component.id().clone(),
                namespace: namespace.to_owned(),
                location: component.source().clone(),
            });
        }
        self.insert(component)
    }

    /// Adds a component discovered at run time (a skill, an MCP server's guidance).
    ///
    /// Its id must be `<namespace>:<name>`: it can never take a built-in id or another
    /// namespace's id, and an id already taken is rejected, never shadowed. Its declared
    /// placement is dropped: it reaches the prefix only through `[prompt]`, like everyone.
    pub fn register_dynamic(
        &mut self,
        namespace: Namespace,
        component: Component,
    ) -> Result<(), RegistryError> {
        if component.id().namespace() != Some(namespace.as_str()) {
            return Err(RegistryError::WrongNamespace {
                namespace,
                id: component.id().clone(),
                location: component.source().clone(),
            });
        }
        self.insert(component.without_declaration())
    }

    /// The components, by id.
    pub fn components(&self) -> impl ExactSizeIterator<Item = &Component> + Clone {
        self.components.values()
    }

    /// The component with this id.
    pub fn get(&self, id: &str) -> Option<&Component> {
        self.components.values().find(|c| c.id().as_str() == id)
    }

    /// Number of components.
    pub fn len(&self) -> usize {
        self.components.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.components.is_empty()
    }

    /// Loads the `[prompt]` section of an agent.toml against these components.
    pub fn load_policy(&self, src: &str, origin: &str) -> Result<LoadedPolicy, PolicyErrors> {
        PromptPolicy::from_agent_toml(src, origin, self.components.values())
    }

    /// Where every component lands under `policy`, and why.
    pub fn status(&self, policy: &PromptPolicy) -> StatusReport {
        StatusReport::new(self.components(), policy)
    }

    /// Starts a composing session over every component.
    pub fn start_session(
        &self,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
    ) -> Result<Session, ComposeError> {
        Session::start(
            self.components().cloned().collect(),
            policy,
            context,
            options,
        )
    }

    fn owned(&self) -> Vec<Component> {
        self.components().cloned().collect()
    }

    /// Adopts an existing conversation (a JSON array of messages, each kept byte-for-byte)
    /// as a session over every component: [`Session::adopt`].
    pub fn adopt_session(
        &self,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        conversation: &str,
        adopt: &AdoptOptions,
    ) -> Result<(Session, AdoptReport), AdoptError> {
        Session::adopt(self.owned(), policy, context, options, conversation, adopt)
    }

    /// Resumes a saved session over every component: [`Session::restore`].
    pub fn restore_session(
        &self,
        snapshot: &SessionSnapshot,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        mode: RestoreMode,
    ) -> Result<Restored, RestoreError> {
        Session::restore(snapshot, self.owned(), policy, context, options, mode)
    }

    /// Starts a conversation (a session and its wire to `api`) over every component:
    /// [`Conversation::start`].
    pub fn start_conversation(
        &self,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        api: ApiKind,
        wire: WireOptions,
    ) -> Result<Conversation, ConversationError> {
        Conversation::start(self.owned(), policy, context, options, api, wire)
    }

    /// Adopts an existing conversation and goes on with it over `api`:
    /// [`Conversation::adopt`].
    #[allow(clippy::too_many_arguments)]
    pub fn adopt_conversation(
        &self,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        api: ApiKind,
        wire: WireOptions,
        conversation: &str,
        adopt: &AdoptOptions,
    ) -> Result<(Conversation, AdoptReport), ConversationError> {
        Conversation::adopt(
            self.owned(),
            policy,
            context,
            options,
            api,
            wire,
            conversation,
            adopt,
        )
    }

    /// Resumes a saved conversation over every component: [`Conversation::restore`].
    pub fn restore_conversation(
        &self,
        snapshot: &ConversationSnapshot,
        policy: &PromptPolicy,
        context: SessionContext,
        options: SessionOptions,
        wire: WireOptions,
        mode: RestoreMode,
    ) -> Result<RestoredConversation, ConversationError> {
        Conversation::restore(snapshot, self.owned(), policy, context, options, wire, mode)
    }
}

fn component_of(reg: &Registration) -> Result<Component, RegistryError> {
    let location = SourceLocation::new(reg.file, reg.line);
    let id = ComponentId::new(reg.id).map_err(|source| RegistryError::InvalidId {
        location: location.clone(),
        source,
    })?;
    let content = match reg.render {
        Render::Static(text) => Content::Static(text.into()),
        Render::Session(f) => Content::Session(std::sync::Arc::new(f)),
        Render::Turn(f) => Content::Turn(std::sync::Arc::new(f)),
    };
    let mut component = Component::new(id, content)
        .describe(reg.what)
        .persist(reg.persist)
        .located_at(location);
    if let Some(p) = reg.placement {
        component = component.placement(p);
    }
    if let Some(text) = reg.cleared {
        component = component.cleared(text);
    }
    Ok(component)
}
