//! A map of at most `cap` entries that drops the least recently used one to take a new
//! key: what the lifetime economics and the proxy's `--diagnose` keep per session. Lookups
//! and insertions are `O(log n)`: the order of use is an index, not a scan.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// At most `cap` entries, the least recently used dropped first.
#[derive(Debug, Clone)]
pub struct RecentMap<K, V> {
    cap: usize,
    entries: HashMap<K, (V, u64)>,
    /// Keys by when they were last used.
    order: BTreeMap<u64, K>,
    clock: u64,
}

impl<K: Eq + Hash + Clone, V> RecentMap<K, V> {
    /// An empty map holding at most `cap` entries (at least 1).
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            entries: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn tick(&mut self) -> u64 {
        // 2^64 uses do not happen; wrapping keeps the arithmetic total.
        self.clock = self.clock.wrapping_add(1);
        self.clock
    }

    /// The entry of `key`, marked as just used.
    pub fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Eq + Hash + ?Sized,
    {
        let now = self.tick();
        let (value, used) = self.entries.get_mut(key)?;
        let key = self.order.remove(used)?;
        *used = now;
        self.order.insert(now, key);
        Some(value)
    }

    /// Puts `value` under `key` (a new key is the most recently used), and returns the
    /// least recently used entry it dropped to make room, if any.
    pub fn insert(&mut self, key: K, value: V) -> Option<(K, V)> {
        if let Some(held) = self.get_mut(&key) {
            *held = value;
            return None;
        }
        let dropped = if self.entries.len() >= self.cap {
            self.order
                .pop_first()
                .and_then(|(_, oldest)| self.entries.remove(&oldest).map(|(v, _)| (oldest, v)))
        } else {
            None
        };
        let now = self.tick();
        self.order.insert(now, key.clone());
        self.entries.insert(key, (value, now));
        dropped
    }

    /// Every value, the least recently used first.
    pub fn values_by_use(&self) -> impl Iterator<Item = &V> {
        self.order
            .values()
            .filter_map(|k| self.entries.get(k).map(|(v, _)| v))
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.entries.iter().map(|(k, (v, _))| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::RecentMap;

    #[test]
    fn the_least_recently_used_entry_is_dropped_to_take_a_new_key() {
        let mut m = RecentMap::new(2);
        assert_eq!(m.insert("a", 1), None);
        assert_eq!(m.insert("b", 2), None);
        // Using "a" makes "b" the least recently used.
        assert_eq!(m.get_mut(&"a").copied(), Some(1));
        assert_eq!(m.insert("c", 3), Some(("b", 2)));
        assert_eq!(m.len(), 2);
        // Replacing a held key drops nothing.
        assert_eq!(m.insert("a", 10), None);
        assert_eq!(m.insert("d", 4), Some(("c", 3)));
        let mut held: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
        held.sort();
        assert_eq!(held, vec![("a", 10), ("d", 4)]);
        assert_eq!(m.values_by_use().copied().collect::<Vec<_>>(), vec![10, 4]);
        assert!(m.get_mut(&"b").is_none());
    }

    #[test]
    fn a_cap_of_zero_holds_one() {
        let mut m = RecentMap::new(0);
        assert_eq!(m.insert(1, ()), None);
        assert_eq!(m.insert(2, ()), Some((1, ())));
        assert_eq!(m.len(), 1);
    }
}
