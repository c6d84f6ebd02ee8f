//! The values renderers read: session-frozen and per-turn.
//!
//! The core cannot know an agent's own types, so both contexts carry the application's values
//! in a typed map keyed by type, in the manner of `http::Extensions`. A session renderer gets
//! a [`SessionContext`] only, so per-turn data is unreachable from it: the type system, not a
//! convention, keeps turn values out of the prefix.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// A map from a type to one value of that type.
///
/// ```
/// use prompt_core::Extensions;
/// struct Today(&'static str);
/// let mut values = Extensions::new();
/// values.insert(Today("2026-11-30"));
/// assert_eq!(values.get::<Today>().map(|t| t.0), Some("2026-11-30"));
/// // Cloning shares the values (they are held behind `Arc`), whatever their own type.
/// let again = values.clone();
/// assert_eq!(again.get::<Today>().map(|t| t.0), Some("2026-11-30"));
/// ```
#[derive(Default, Clone)]
pub struct Extensions {
    map: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl Extensions {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts a value, returning the previous value of the same type (`None` when there
    /// was none, or when a clone of this map still shares it).
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) -> Option<T> {
        self.map
            .insert(TypeId::of::<T>(), Arc::new(value))
            .and_then(|old| old.downcast::<T>().ok())
            .and_then(|old| Arc::try_unwrap(old).ok())
    }

    /// Builder form of [`Extensions::insert`].
    pub fn with<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.insert(value);
        self
    }

    /// The value of type `T`, if present.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.map
            .get(&TypeId::of::<T>())
            .and_then(|b| b.downcast_ref::<T>())
    }

    /// Whether a value of type `T` is present.
    pub fn contains<T: Send + Sync + 'static>(&self) -> bool {
        self.map.contains_key(&TypeId::of::<T>())
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.map.len())
            .finish()
    }
}

/// Session-frozen values: project root, OS, tool list, loaded skills.
///
/// Built once from an [`Extensions`] and then immutable: it has no method that takes
/// `&mut self`, and a started session owns it. Cloning it shares the values, so the same
/// context can start a session and, later, restore one.
#[derive(Debug, Default, Clone)]
pub struct SessionContext {
    values: Extensions,
}

impl SessionContext {
    /// Freezes the given values.
    pub fn new(values: Extensions) -> Self {
        Self { values }
    }

    /// The value of type `T`, if present.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.values.get::<T>()
    }
}

/// Per-turn values (date, todo list, plan mode, memory recall) plus read access to the
/// session's values.
#[derive(Debug)]
pub struct TurnContext<'s> {
    session: &'s SessionContext,
    values: &'s Extensions,
    turn: u64,
}

impl<'s> TurnContext<'s> {
    /// A turn context over a session's values. `turn` counts from 1.
    pub fn new(session: &'s SessionContext, values: &'s Extensions, turn: u64) -> Self {
        Self {
            session,
            values,
            turn,
        }
    }

    /// The per-turn value of type `T`, if present.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.values.get::<T>()
    }

    /// The session's values.
    pub fn session(&self) -> &SessionContext {
        self.session
    }

    /// The turn number, counting from 1.
    pub fn turn(&self) -> u64 {
        self.turn
    }
}
