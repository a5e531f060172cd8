//! A warm container's memory of recently COMPLETED keys: a replayed record
//! found here costs no store request at all. Bounded (LRU, and results
//! over [`CACHED_RESULT_BYTES`] are not kept: those keys are read again), and
//! an entry counts only until the item's own `expires_at`, like the table.
//!
//! Optionally backed by a [`SharedCache`] that every container reads (e.g.
//! Redis in front of DynamoDB, `DUPLICATE_CACHE=redis`): written only with
//! what the durable store said COMPLETED, after it said so; read before the
//! durable store, and trusted only for the same payload hash before the
//! item's `expires_at`. Either cache is a hint for speed, never a decision:
//! a key not found goes through the durable store.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use lru::LruCache;

use crate::clock::ms_to_s;

/// Keys whose stored result is larger than this are not cached, so that the
/// cache holds at most `capacity` x 4 KiB of results.
pub const CACHED_RESULT_BYTES: usize = 4096;

/// What is known of a COMPLETED key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completed {
    /// The payload hash it was completed with.
    pub payload_hash: String,
    /// The result stored with it.
    pub result: Option<Arc<str>>,
}

impl Completed {
    /// A key completed with `payload_hash`, its stored `result`.
    pub fn new(payload_hash: &str, result: Option<&str>) -> Self {
        Self {
            payload_hash: payload_hash.to_owned(),
            result: result.map(Arc::from),
        }
    }
}

/// A COMPLETED key and its `expires_at` (epoch seconds).
pub type Entry = (Completed, u64);

/// A cache of COMPLETED keys shared by every container. Its calls never
/// fail: an error or a slow answer (past the cache's own timeout) is a miss
/// or a write skipped, so that the cache changes the speed of a decision,
/// never the decision.
pub trait SharedCache: Send + Sync + 'static {
    /// What it holds of `keys` (idempotency keys), by key.
    fn get<'a>(&'a self, keys: &'a [&'a str]) -> BoxFuture<'a, HashMap<String, Entry>>;

    /// Remembers `entries`: keys the durable store holds COMPLETED.
    fn put(&self, entries: Vec<(String, Entry)>) -> BoxFuture<'_, ()>;
}

pub struct CompletedCache {
    entries: Option<Mutex<LruCache<String, Entry>>>,
    shared: Option<Arc<dyn SharedCache>>,
    /// Entries learned from the durable store, not yet put in `shared`.
    unshared: Mutex<Vec<(String, Entry)>>,
}

impl CompletedCache {
    /// A cache of `capacity` keys; 0 disables it.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: NonZeroUsize::new(capacity).map(|cap| Mutex::new(LruCache::new(cap))),
            shared: None,
            unshared: Mutex::default(),
        }
    }

    /// Also backed by `shared`.
    pub fn with_shared(mut self, shared: Arc<dyn SharedCache>) -> Self {
        self.shared = Some(shared);
        self
    }

    /// The entries of `keys` in the shared cache, if there is one.
    pub async fn shared_get(&self, keys: &[&str]) -> HashMap<String, Entry> {
        match &self.shared {
            Some(shared) if !keys.is_empty() => shared.get(keys).await,
            _ => HashMap::new(),
        }
    }

    /// Puts what the durable store said COMPLETED since the last call in
    /// the shared cache (one call).
    pub async fn share(&self) {
        let Some(shared) = &self.shared else { return };
        let entries = std::mem::take(
            &mut *self
                .unshared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if !entries.is_empty() {
            shared.put(entries).await;
        }
    }

    /// What `key` was completed with, if known and not expired at `now_ms`
    /// (the store's clock, which judges the table's items too).
    pub fn get(&self, key: &str, now_ms: u64) -> Option<Completed> {
        let mut entries = self
            .entries
            .as_ref()?
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (completed, expires_at_s) = entries.get(key)?.clone();
        if expires_at_s < ms_to_s(now_ms) {
            entries.pop(key);
            return None;
        }
        Some(completed)
    }

    /// Remembers a key the durable store holds COMPLETED (and, with a
    /// shared cache, queues it for [`Self::share`]).
    pub fn insert(&self, key: &str, completed: Completed, expires_at_s: u64) {
        if self.shared.is_some() {
            let entry = (key.to_owned(), (completed.clone(), expires_at_s));
            self.unshared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(entry);
        }
        self.insert_local(key, completed, expires_at_s);
    }

    /// Remembers a key in this container only (one the shared cache gave).
    pub fn insert_local(&self, key: &str, completed: Completed, expires_at_s: u64) {
        let too_large = completed
            .result
            .as_ref()
            .is_some_and(|r| r.len() > CACHED_RESULT_BYTES);
        if let Some(entries) = self.entries.as_ref().filter(|_| !too_large) {
            entries
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .put(key.to_owned(), (completed, expires_at_s));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_count_until_their_expiry_and_the_oldest_go_first() {
        let now = crate::clock::now_ms();
        let now_s = ms_to_s(now);
        let done = |hash: &str| Completed::new(hash, Some("reply"));
        let cache = CompletedCache::new(2);
        cache.insert("a", done("h-a"), now_s + 60);
        cache.insert("old", done("h-old"), now_s - 1);
        assert_eq!(cache.get("a", now), Some(done("h-a")));
        assert_eq!(cache.get("old", now), None, "past its expires_at");
        cache.insert("b", done("h-b"), now_s + 60);
        cache.insert("c", done("h-c"), now_s + 60);
        assert_eq!(cache.get("a", now), None, "evicted: capacity 2");
        assert_eq!(cache.get("c", now), Some(done("h-c")));
        let disabled = CompletedCache::new(0);
        disabled.insert("a", done("h-a"), now_s + 60);
        assert_eq!(disabled.get("a", now), None);
    }

    #[test]
    fn large_results_are_not_cached() {
        let now = crate::clock::now_ms();
        let now_s = ms_to_s(now);
        let cache = CompletedCache::new(10);
        let large = "x".repeat(CACHED_RESULT_BYTES + 1);
        cache.insert("large", Completed::new("h", Some(&large)), now_s + 60);
        assert_eq!(cache.get("large", now), None);
        let small = Completed::new("h", Some(&large[..CACHED_RESULT_BYTES]));
        cache.insert("small", small.clone(), now_s + 60);
        assert_eq!(cache.get("small", now), Some(small));
    }
}
