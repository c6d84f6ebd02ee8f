//! Messages read before, remembered by their bytes: a history is re-sent with every request,
//! and each message of it is read once.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rustc_hash::{FxBuildHasher, FxHasher};

use super::element::Form;
use super::shape::{Class, Evidence};

/// What reading a message once said: its hash as compared, its role and the evidence of
/// the API it gave.
#[derive(Debug, Clone)]
pub(crate) struct Memoized {
    pub(crate) norm: u64,
    pub(crate) role: Box<str>,
    pub(crate) evidence: Evidence,
}

/// Messages read before, by the hash of their bytes and the body's class: bounded to two
/// generations of `capacity` entries (the older dropped when the newer is full).
#[derive(Debug, Default)]
pub(crate) struct MessageMemo {
    current: HashMap<u64, Memoized, FxBuildHasher>,
    previous: HashMap<u64, Memoized, FxBuildHasher>,
    capacity: usize,
    /// The names requests share.
    pub(crate) names: Names,
}

impl MessageMemo {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            names: Names::new(NAMES_PER_GENERATION),
            ..Self::default()
        }
    }

    /// The entry of `key`, moved to the newer generation when found in the older.
    pub(crate) fn get(&mut self, key: u64) -> Option<&Memoized> {
        if !self.current.contains_key(&key) {
            let hit = self.previous.remove(&key)?;
            self.insert(key, hit);
        }
        self.current.get(&key)
    }

    pub(crate) fn insert(&mut self, key: u64, value: Memoized) {
        if self.current.len() >= self.capacity {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(key, value);
    }

    /// The hash as compared of an element (a tool, a system block) whose bytes hash to
    /// `raw_hash`, compared in `form`: remembered, or `norm()` now.
    pub(crate) fn element(&mut self, raw_hash: u64, form: Form, norm: impl FnOnce() -> u64) -> u64 {
        let mut h = FxHasher::default();
        (raw_hash, form).hash(&mut h);
        let key = h.finish();
        if let Some(hit) = self.get(key) {
            return hit.norm;
        }
        let hash = norm();
        self.insert(
            key,
            Memoized {
                norm: hash,
                role: Box::default(),
                evidence: Evidence::default(),
            },
        );
        hash
    }

    /// Entries held.
    pub(crate) fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }
}

/// Names held per generation of [`Names`]: at most twice this many, each at most
/// `prompt_core::input::EXCERPT_BYTES` long (~2.4 MB at worst).
pub(crate) const NAMES_PER_GENERATION: usize = 4096;

/// Names many requests share (tools', roles, models), one copy each: the engine holds
/// every session's last request, and the sessions of one agent name the same tools.
/// Bounded like the messages: two generations of `capacity` names (a name of the dropped
/// generation stays with the requests holding it, and is copied anew when named again).
#[derive(Debug, Default)]
pub(crate) struct Names {
    current: HashSet<Arc<str>, FxBuildHasher>,
    previous: HashSet<Arc<str>, FxBuildHasher>,
    capacity: usize,
}

impl Names {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            ..Self::default()
        }
    }

    /// The shared copy of `name`.
    pub(crate) fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.current.get(name) {
            return Arc::clone(known);
        }
        let interned = self.previous.take(name).unwrap_or_else(|| Arc::from(name));
        if self.current.len() >= self.capacity {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(Arc::clone(&interned));
        interned
    }
}

/// Roles (and Responses item types) a remembered message names without a copy.
pub(crate) const COMMON_ROLES: [&str; 10] = [
    "user",
    "assistant",
    "system",
    "developer",
    "tool",
    "model",
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
];

/// A tool's key in a [`MessageMemo`]: its bytes in a body of its class, apart from any
/// message of the same bytes.
pub(crate) fn tool_memo_key(raw_hash: u64, class: Class) -> u64 {
    memo_key(raw_hash, class) ^ 0x746f_6f6c_6e61_6d65
}

/// A message's key in a [`MessageMemo`]: its bytes in a body of its class (a Gemini
/// content's blocks are its `parts`, others' their `content`).
pub(crate) fn memo_key(raw_hash: u64, class: Class) -> u64 {
    let mut h = FxHasher::default();
    (raw_hash, class as u8).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_named_again_is_the_same_copy_and_the_names_held_stay_bounded() {
        let mut names = Names::new(4);
        let first = names.intern("Bash");
        assert!(Arc::ptr_eq(&first, &names.intern("Bash")));
        for i in 0..1000 {
            names.intern(&format!("tool-{i}"));
        }
        assert!(names.current.len() + names.previous.len() <= 8);
        // Dropped from both generations: a new copy, equal, and the old one still whole.
        let again = names.intern("Bash");
        assert_eq!((&*again, &*first), ("Bash", "Bash"));
        assert!(!Arc::ptr_eq(&first, &again));
        // Found in the older generation: moved to the newer, the same copy.
        names.intern("a");
        let a = names.intern("a");
        for i in 0..4 {
            names.intern(&format!("b{i}"));
        }
        assert!(Arc::ptr_eq(&a, &names.intern("a")));
    }
}
