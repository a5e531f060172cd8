//! A warm container's memory of recently COMPLETED keys: a replayed record
//! found here costs no DynamoDB request at all. Bounded (LRU), and an entry
//! counts only until the item's own `expires_at`, like the table.

use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;

use crate::clock::{ms_to_s, now_ms};

/// Payload hash and `expires_at` (epoch seconds) of a COMPLETED key.
type Entry = (String, u64);

pub struct CompletedCache {
    entries: Option<Mutex<LruCache<String, Entry>>>,
}

impl CompletedCache {
    /// A cache of `capacity` keys; 0 disables it.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: NonZeroUsize::new(capacity).map(|cap| Mutex::new(LruCache::new(cap))),
        }
    }

    /// The payload hash `key` was completed with, if known and not expired.
    pub fn get(&self, key: &str) -> Option<String> {
        let mut entries = self
            .entries
            .as_ref()?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (hash, expires_at_s) = entries.get(key)?.clone();
        if expires_at_s < ms_to_s(now_ms()) {
            entries.pop(key);
            return None;
        }
        Some(hash)
    }

    pub fn insert(&self, key: &str, payload_hash: &str, expires_at_s: u64) {
        if let Some(entries) = &self.entries {
            entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .put(key.to_owned(), (payload_hash.to_owned(), expires_at_s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_count_until_their_expiry_and_the_oldest_go_first() {
        let now_s = ms_to_s(now_ms());
        let cache = CompletedCache::new(2);
        cache.insert("a", "h-a", now_s + 60);
        cache.insert("old", "h-old", now_s - 1);
        assert_eq!(cache.get("a").as_deref(), Some("h-a"));
        assert_eq!(cache.get("old"), None, "past its expires_at");
        cache.insert("b", "h-b", now_s + 60);
        cache.insert("c", "h-c", now_s + 60);
        assert_eq!(cache.get("a"), None, "evicted: capacity 2");
        assert_eq!(cache.get("c").as_deref(), Some("h-c"));
        let disabled = CompletedCache::new(0);
        disabled.insert("a", "h-a", now_s + 60);
        assert_eq!(disabled.get("a"), None);
    }
}
