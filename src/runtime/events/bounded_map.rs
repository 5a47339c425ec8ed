//! A map that forgets its oldest-inserted entry beyond a capacity: the
//! event caches' bound (client-go's `maxLruCacheEntries`, 4096, with a
//! simpler policy than its LRU: oldest inserted goes first).
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// client-go's `maxLruCacheEntries`.
pub(super) const CACHE_ENTRIES: usize = 4096;

/// See the module doc.
#[derive(Debug)]
pub(super) struct BoundedMap<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    capacity: usize,
}

impl<K: Clone + Eq + Hash, V> BoundedMap<K, V> {
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            map: HashMap::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    pub(super) fn get_or_insert_with(&mut self, key: &K, make: impl FnOnce() -> V) -> &mut V {
        if !self.map.contains_key(key) {
            while self.map.len() >= self.capacity {
                match self.order.pop_front() {
                    Some(oldest) => {
                        self.map.remove(&oldest);
                    }
                    None => break,
                }
            }
            self.order.push_back(key.clone());
        }
        self.map.entry(key.clone()).or_insert_with(make)
    }

    pub(super) fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    pub(super) fn remove(&mut self, key: &K) {
        if self.map.remove(key).is_some() {
            self.order.retain(|k| k != key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounded_map_evicts_the_oldest_entry() {
        let mut m = BoundedMap::new(2);
        *m.get_or_insert_with(&1, || 0) = 10;
        *m.get_or_insert_with(&2, || 0) = 20;
        *m.get_or_insert_with(&3, || 0) = 30;
        assert!(m.get(&1).is_none());
        assert_eq!(m.get(&2), Some(&20));
        assert_eq!(m.get(&3), Some(&30));
    }
}
