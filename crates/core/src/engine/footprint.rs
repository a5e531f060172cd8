//! What a commit touches, and which commits may share a transaction or be
//! in flight at the same time.
//!
//! - Sharing: an item written by an opaque write is touched by nothing else
//!   in the transaction (DynamoDB refuses two actions on one item, and
//!   their order would matter); an item only incremented may be
//!   incremented by many messages, merged into one update
//!   ([`Increment::then`]).
//! - In flight ([`ItemLocks`]): two commits touching a common item are never
//!   sent at the same time, so the function never conflicts with itself
//!   (DynamoDB cancels concurrent transactions on one item with
//!   `TransactionConflict`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::store::{Increment, Store};

use super::{Completion, Work};

/// What one transaction may hold: records, actions (each record's item,
/// each written item, each incremented item), and bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Limits {
    pub records: usize,
    pub actions: usize,
    pub bytes: usize,
}

impl Limits {
    /// At most `records` records, and what store `S` allows.
    pub fn of<S: Store>(records: usize) -> Self {
        Self {
            records: records.max(1),
            actions: S::MAX_EFFECTS + 1,
            bytes: S::MAX_TRANSACTION_BYTES,
        }
    }
}

/// What a record's COMPLETED item and effects weigh in a transaction,
/// estimated: its result, outbox (the messages it emits), key and origin,
/// and a share for the item's other attributes and for each opaque write
/// (an increment's update is small).
pub(super) fn estimated_bytes(
    key: &str,
    origin: &str,
    texts: [Option<&str>; 2],
    writes: usize,
) -> usize {
    const ITEM: usize = 512;
    const WRITE: usize = 1024;
    let texts: usize = texts.iter().flatten().map(|text| text.len()).sum();
    key.len() + origin.len() + texts + ITEM + WRITE * writes
}

/// The items of one or more messages' effects.
#[derive(Debug, Default, Clone)]
pub(super) struct Footprint {
    records: usize,
    /// Estimated bytes ([`estimated_bytes`]).
    bytes: usize,
    /// Items written by opaque writes.
    written: HashSet<String>,
    /// Items only incremented, with their increments merged so far.
    incremented: HashMap<String, Increment>,
    /// A write whose item the store cannot name: it commits alone, and
    /// nothing else is in flight meanwhile.
    unknown: bool,
}

impl Footprint {
    /// The footprint of one message: the items its writes touch (`None`:
    /// unknown) and its increments.
    pub fn of(writes: impl IntoIterator<Item = Option<String>>, increments: &[Increment]) -> Self {
        let mut footprint = Self {
            records: 1,
            ..Self::default()
        };
        for item in writes {
            match item {
                Some(item) => {
                    footprint.written.insert(item);
                }
                None => footprint.unknown = true,
            }
        }
        for increment in increments {
            // Beyond i64 even alone: the store refuses it, alone.
            if !merge_into(&mut footprint.incremented, increment) {
                footprint.unknown = true;
            }
        }
        footprint
    }

    /// The footprint of `work`'s `completion` in a group transaction: the
    /// items its writes and increments touch, weighing its COMPLETED item
    /// and writes ([`estimated_bytes`]).
    pub fn of_completion<S: Store, R>(work: &Work<R>, completion: &Completion<S::Effect>) -> Self {
        Self::of(
            completion.writes.iter().map(S::touched),
            &completion.increments,
        )
        .weighing(estimated_bytes(
            &work.key,
            &work.origin,
            [
                completion.result.as_deref(),
                crate::store::outbox::encode(&completion.messages).as_deref(),
            ],
            completion.writes.len(),
        ))
    }

    /// The same, weighing `bytes` ([`estimated_bytes`]).
    pub fn weighing(self, bytes: usize) -> Self {
        Self { bytes, ..self }
    }

    /// Transaction actions: one item per message, one per written item,
    /// one per incremented item.
    pub fn actions(&self) -> usize {
        self.records + self.written.len() + self.incremented.len()
    }

    /// Adds `other` if the two may share one transaction within `limits`;
    /// false (nothing changed) otherwise.
    pub fn join(&mut self, other: &Footprint, limits: Limits) -> bool {
        if self.records == 0 {
            *self = other.clone();
            return true;
        }
        if self.unknown
            || other.unknown
            || self.records + other.records > limits.records
            || self.bytes.saturating_add(other.bytes) > limits.bytes
        {
            return false;
        }
        let incremented = |f: &Footprint, item: &String| f.incremented.contains_key(item);
        if other
            .written
            .iter()
            .any(|item| self.written.contains(item) || incremented(self, item))
            || self.written.iter().any(|item| incremented(other, item))
        {
            return false;
        }
        let mut joined = Footprint {
            records: self.records + other.records,
            bytes: self.bytes + other.bytes,
            written: self.written.union(&other.written).cloned().collect(),
            incremented: self.incremented.clone(),
            unknown: false,
        };
        if !other
            .incremented
            .values()
            .all(|i| merge_into(&mut joined.incremented, i))
            || joined.actions() > limits.actions
        {
            return false;
        }
        *self = joined;
        true
    }
}

/// Merges `increment` into the increment of its item in `incremented`;
/// false (unchanged) if a sum would leave `i64`.
fn merge_into(incremented: &mut HashMap<String, Increment>, increment: &Increment) -> bool {
    if increment.adds.is_empty() {
        return true;
    }
    let item = increment.item();
    let merged = match incremented.get(&item) {
        Some(first) => first.then(increment),
        None => Some(increment.clone()),
    };
    merged
        .map(|merged| incremented.insert(item, merged))
        .is_some()
}

/// The items of the commits in flight: a commit waits until none of its
/// items is, then holds them until it is answered. Shared by every batch of
/// an engine.
#[derive(Debug, Default)]
pub(super) struct ItemLocks {
    held: Mutex<Held>,
    freed: Notify,
}

#[derive(Debug, Default)]
struct Held {
    items: HashSet<String>,
    /// Commits in flight holding items.
    holders: usize,
    /// A commit with an unknown item is in flight: it holds everything.
    everything: bool,
}

/// Items held by a commit in flight; released when dropped.
#[derive(Debug)]
pub(super) struct Hold {
    locks: Arc<ItemLocks>,
    /// `None`: everything.
    items: Option<Vec<String>>,
}

impl ItemLocks {
    /// Waits until no commit in flight touches an item of `footprints`,
    /// then holds those items (all or nothing, so no two commits wait for
    /// each other) until the returned [`Hold`] drops. Commits without
    /// effects hold nothing.
    pub async fn hold<'a>(
        self: &Arc<Self>,
        footprints: impl IntoIterator<Item = &'a Footprint>,
    ) -> Option<Hold> {
        let mut wanted: Option<HashSet<String>> = Some(HashSet::new());
        for footprint in footprints {
            match (&mut wanted, footprint.unknown) {
                (_, true) => wanted = None,
                (Some(items), false) => {
                    items.extend(footprint.written.iter().cloned());
                    items.extend(footprint.incremented.keys().cloned());
                }
                (None, false) => {}
            }
        }
        if wanted.as_ref().is_some_and(HashSet::is_empty) {
            return None;
        }
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut held = self.lock();
                let free = !held.everything
                    && match &wanted {
                        None => held.holders == 0,
                        Some(items) => items.is_disjoint(&held.items),
                    };
                if free {
                    held.holders += 1;
                    match &wanted {
                        None => held.everything = true,
                        Some(items) => held.items.extend(items.iter().cloned()),
                    }
                    return Some(Hold {
                        locks: Arc::clone(self),
                        items: wanted.map(|items| items.into_iter().collect()),
                    });
                }
            }
            freed.await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        {
            let mut held = self.locks.lock();
            held.holders -= 1;
            match &self.items {
                None => held.everything = false,
                Some(items) => {
                    for item in items {
                        held.items.remove(item);
                    }
                }
            }
        }
        self.locks.freed.notify_waiters();
    }
}
