//! Before any claim: which keys of the batch are already COMPLETED? From the
//! warm cache first, then the shared cache (if any), then one BatchGetItem
//! per 100 keys. A replayed batch is settled at about one read per 100
//! records and no conditional write (none at all when a cache knows it).

use std::collections::HashMap;

use crate::clock::ms_to_s;
use crate::store::Store;

use super::cache::Completed;
use super::{Engine, Message, RecordHandler};

/// Keys read by the first BatchGetItem call. If none of them is COMPLETED
/// the batch is taken as new and the rest is not read: a new batch costs one
/// read call, not one per 100 records.
const SAMPLE_KEYS: usize = 100;

impl<H, S> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// Keys known COMPLETED, with the payload hash and result they were
    /// completed with. Only a hint for speed: a key not listed still goes
    /// through the conditional claim, which decides.
    pub(super) async fn known_completed(
        &self,
        lanes: &[Vec<Message<H::Record>>],
    ) -> HashMap<String, Completed> {
        let mut known = HashMap::new();
        let mut unknown: Vec<&str> = Vec::new();
        let now = self.store.now_ms();
        let works = || lanes.iter().flatten().filter_map(|item| item.as_ref().ok());
        for work in works() {
            match self.cache.get(&work.key, now) {
                Some(completed) => {
                    known.insert(work.key.clone(), completed);
                }
                None => unknown.push(&work.key),
            }
        }
        unknown.sort_unstable();
        unknown.dedup();
        let shared = self.cache.shared_get(&unknown).await;
        if !shared.is_empty() {
            // Trusted only for the same payload and before the item's TTL;
            // anything else is read from the durable store.
            for work in works() {
                let Some((completed, expires_at_s)) = shared.get(&work.key) else {
                    continue;
                };
                if completed.payload_hash == work.payload_hash && *expires_at_s >= ms_to_s(now) {
                    self.cache
                        .insert_local(&work.key, completed.clone(), *expires_at_s);
                    known.insert(work.key.clone(), completed.clone());
                }
            }
            unknown.retain(|key| !known.contains_key(*key));
        }
        let (sample, rest) = unknown.split_at(unknown.len().min(SAMPLE_KEYS));
        let replayed = self.read_completed(sample, &mut known).await;
        if replayed && !rest.is_empty() {
            self.read_completed(rest, &mut known).await;
        }
        known
    }

    /// Adds the COMPLETED ones of `keys` to `known` (and to the cache);
    /// whether there was any.
    async fn read_completed(&self, keys: &[&str], known: &mut HashMap<String, Completed>) -> bool {
        if keys.is_empty() {
            return false;
        }
        let items = match self.store.batch_get(keys).await {
            Ok(items) => items,
            Err(err) => {
                // The claims will meet the same trouble and decide.
                tracing::warn!(error = %err, "batch pre-check failed; claiming every record");
                return false;
            }
        };
        let mut any = false;
        let config = self.store.config();
        for (key, item) in items {
            if item.proves_completed(config) {
                let completed = Completed::new(&item.payload_hash, item.result.as_deref());
                self.cache
                    .insert(&key, completed.clone(), item.expires_at_s);
                known.insert(key, completed);
                any = true;
            }
        }
        any
    }
}
