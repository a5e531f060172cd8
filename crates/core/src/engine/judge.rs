//! What the store answered about a message's key, judged once for both
//! paths: a lease to do the work, the outcome that makes it unnecessary or
//! impossible now, or a wait for another worker's live lease
//! (`waiting.rs`, under this one).
//!
//! The locking path asks with a claim: the store judges the item it finds
//! itself ([`StoredItem::standing`]), takes a free, expired or abandoned key
//! and recognises its own claim sent again, and answers a lease or what
//! stood in the way ([`Found::of_claim`]). The lock-free path writes a new
//! key's item and, refused, is handed the item in its way, judged here
//! ([`Found::of_item`]): that item may have expired, may be its own write
//! sent again, or an abandoned lock of the locking path, which the locking
//! path takes over.

use std::sync::Arc;
use std::time::Duration;

use crate::store::outbox::Pending;
use crate::store::{ClaimOutcome, Lease, Standing, Status, Store, StoreError, StoredItem};

use super::cache::Completed;
use super::deadline::Deadline;
use super::handler::RecordHandler;
use super::outcome::store_failure;
use super::{Engine, Outcome};

mod waiting;

pub(super) use waiting::LeaseWait;

/// What the store answered about a message's key, on either path.
pub(super) enum Found {
    /// A claim holds the key under this lease (acquired or taken over).
    Leased(Lease),
    /// No item, or one past its TTL: it counts as absent.
    Absent,
    /// The attempt's own write, made by a send whose answer was lost or
    /// late.
    Own(StoredItem),
    /// Another scope's (another function's) item.
    OtherScope(StoredItem),
    /// The key was used with another payload.
    OtherPayload,
    /// COMPLETED for this payload.
    Completed(StoredItem),
    /// FAILED for this payload.
    Failed(StoredItem),
    /// STARTED under another worker's live lease.
    Locked(StoredItem),
    /// STARTED under a lease that ended.
    Abandoned,
    /// The store did not answer.
    Unanswered(StoreError),
}

impl Found {
    /// A claim's answer (the locking path): the store judged the item
    /// itself.
    pub(super) fn of_claim(claim: Result<ClaimOutcome, StoreError>) -> Self {
        match claim {
            Ok(ClaimOutcome::Acquired(lease) | ClaimOutcome::TakenOver(lease)) => {
                Self::Leased(lease)
            }
            Ok(ClaimOutcome::Duplicate(item)) => Self::Completed(item),
            Ok(ClaimOutcome::InProgress(item)) => Self::Locked(item),
            Ok(ClaimOutcome::PayloadMismatch(_)) => Self::OtherPayload,
            Ok(ClaimOutcome::OtherScope(item)) => Self::OtherScope(item),
            Ok(ClaimOutcome::PreviouslyFailed(item)) => Self::Failed(item),
            Err(err) => Self::Unanswered(err),
        }
    }

    /// The item a lock-free write of a message with `payload_hash` found in
    /// its way (written or not by this very attempt, under `owner`), judged
    /// at `store`'s clock.
    pub(super) fn of_item<S: Store>(
        item: Option<Box<StoredItem>>,
        store: &S,
        payload_hash: &str,
        owner: &str,
    ) -> Self {
        let Some(item) = item else {
            return Self::Absent;
        };
        let item = *item;
        let now = store.now_ms();
        match item.standing(store.config(), payload_hash, owner, now) {
            Standing::Expired => Self::Absent,
            Standing::Ours => Self::Own(item),
            Standing::OtherScope => Self::OtherScope(item),
            Standing::OtherPayload => Self::OtherPayload,
            Standing::Completed => Self::Completed(item),
            Standing::Failed => Self::Failed(item),
            Standing::Locked => Self::Locked(item),
            Standing::Abandoned => Self::Abandoned,
        }
    }
}

/// Why a claim's answer is never judged [`Judged::Absent`] nor
/// [`Judged::TakeOver`]: [`Found::of_claim`] makes neither.
pub(super) const NOT_FROM_A_CLAIM: &str =
    "a claim's store takes an expired or abandoned key itself";

/// Why an item found is never judged [`Judged::Lease`]: [`Found::of_item`]
/// makes no [`Found::Leased`].
pub(super) const NOT_FROM_AN_ITEM: &str = "an item found is never a lease";

/// What a message does next, from what the store answered about its key.
pub(super) enum Judged {
    /// Its work, under this lease.
    Lease(Lease),
    /// Nothing: this outcome makes the work unnecessary or impossible now.
    Settled(Outcome),
    /// Another worker's lease ends while records may still start: ask
    /// again after this long.
    WaitAndRetry(Duration),
    /// Write again: the key has no live item (a claim takes such a key
    /// itself).
    Absent,
    /// Claim the key: its lock was abandoned (a claim takes it over
    /// itself).
    TakeOver,
}

impl<H, S> Engine<H, S>
where
    S: Store,
    H: RecordHandler<S::Effect>,
{
    /// What `found` under `key` means for its message; a live lease
    /// elsewhere is waited for as `waiting` allows. A COMPLETED item with
    /// nothing left to send is remembered in the cache.
    pub(super) fn judge(
        &self,
        key: &str,
        found: Found,
        deadline: Deadline,
        waiting: &mut LeaseWait,
    ) -> Judged {
        let outcome = match found {
            Found::Leased(lease) => return Judged::Lease(lease),
            Found::Absent => return Judged::Absent,
            Found::Abandoned => return Judged::TakeOver,
            Found::Own(item) => match item.status {
                Status::Completed => {
                    let (result, unsent) = self.found_completed(key, &item);
                    Outcome::Processed {
                        version: item.version,
                        result,
                        unsent,
                    }
                }
                Status::Failed => Outcome::Failed {
                    error: item.error.unwrap_or_default(),
                },
                // A lock-free attempt writes no STARTED item.
                Status::Started => Outcome::InProgress,
            },
            Found::OtherScope(item) => self.other_scope(item),
            Found::OtherPayload => Outcome::PayloadMismatch,
            Found::Completed(item) => {
                let (result, unsent) = self.found_completed(key, &item);
                Outcome::Duplicate { result, unsent }
            }
            Found::Failed(item) => Outcome::PreviouslyFailed { error: item.error },
            Found::Locked(item) => match self.lease_wait(&item, deadline, waiting) {
                Some(wait) => return Judged::WaitAndRetry(wait),
                None => Outcome::InProgress,
            },
            Found::Unanswered(err) => store_failure(err),
        };
        Judged::Settled(outcome)
    }

    /// A key another scope holds: refused, naming both scopes.
    fn other_scope(&self, item: StoredItem) -> Outcome {
        Outcome::OtherScope {
            theirs: item.scope.unwrap_or_default(),
            ours: self.store.config().scope.clone(),
        }
    }

    /// How long to wait before looking again at a key another worker holds
    /// under a live lease (`item`), as `waiting` allows (see `waiting.rs`):
    /// a crashed container's key is then taken over here, a finished one is
    /// a duplicate, instead of the record being reported (and redelivered
    /// at once, again and again, until the event source mapping's retries
    /// run out and it lands in the on-failure destination although nothing
    /// is wrong with it). `None`: report it in progress.
    fn lease_wait(
        &self,
        item: &StoredItem,
        deadline: Deadline,
        waiting: &mut LeaseWait,
    ) -> Option<Duration> {
        let lock_timeout = self.store.config().lock_timeout;
        waiting.next(item, self.store.now_ms(), lock_timeout, deadline)
    }

    /// A COMPLETED `item` found for `key`: its result, and the messages
    /// still in its outbox; remembered in the cache when there are none.
    fn found_completed(
        &self,
        key: &str,
        item: &StoredItem,
    ) -> (Option<Arc<str>>, Option<Box<Pending>>) {
        let completed = Completed::new(&item.payload_hash, item.result.as_deref());
        let result = completed.result.clone();
        if item.outbox.is_none() {
            self.cache.insert(key, completed, item.expires_at_s);
        }
        (result, Pending::of_item(item).map(Box::new))
    }
}
