//! Messages read before, remembered by their bytes: a history is re-sent with every request,
//! and each message of it is read once.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

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
}

impl MessageMemo {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
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

/// A message's key in a [`MessageMemo`]: its bytes in a body of its class (a Gemini
/// content's blocks are its `parts`, others' their `content`).
pub(crate) fn memo_key(raw_hash: u64, class: Class) -> u64 {
    let mut h = FxHasher::default();
    (raw_hash, class as u8).hash(&mut h);
    h.finish()
}
