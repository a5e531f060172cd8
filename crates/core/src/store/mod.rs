//! The idempotency store: the key state machine every backend implements.
//!
//! [`Store`] is the narrow interface the engine and the operator CLI use:
//! each transition is ONE conditional write in the backend, fenced as the
//! diagram says. A backend is a module of its own (`dynamodb/`, `postgres/`,
//! `memory.rs`), its state machine read top to bottom in one file per path;
//! what a found item means is judged in one place for all of them
//! ([`StoredItem::standing`]). The conformance suite (`tests/conformance/`)
//! holds every backend to the same semantics.
//!
//! ```text
//! absent | expired ──claim──▶ STARTED v1
//! STARTED, lock expired ──take over──▶ STARTED v+1 (new owner)
//! STARTED ──complete──▶ COMPLETED          ┐ (optionally in one transaction
//!                                          │  with the work's own effects)
//! STARTED ──fail──▶ FAILED                 │ fenced: status STARTED
//! STARTED ──release──▶ STARTED, lock ended │ AND version AND owner
//! STARTED ──extend──▶ STARTED, lock later  ┘
//! absent | expired ──commit new──▶ COMPLETED v1, with the effects (lock-free)
//! absent | expired ──fail new──▶ FAILED v1 (lock-free)
//! STARTED v ──operator release──▶ STARTED v, lock ended  ┐ fenced: status
//! FAILED v ──operator retry──▶ STARTED v, lock ended     ┘ AND version
//! ```

#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
pub mod increment;
mod item;
pub mod memory;
pub(crate) mod outbox;
pub mod requests;
pub mod transition;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

pub use error::StoreError;
pub use increment::{Add, Increment};
pub use item::NewItem;
pub use item::{Standing, Status, StoredItem, attr};

use sha2::{Digest, Sha256};

use crate::clock::duration_ms;
use crate::config::{LongKeyPolicy, StoreConfig};

/// Hex SHA-256 of some bytes: the form of an item's `payload_hash` (the
/// payload's fingerprint), and of a long key under [`LongKeyPolicy::Hash`].
pub fn payload_hash(payload: &[u8]) -> String {
    hex::encode(Sha256::digest(payload))
}

/// Error texts (and origins) are cut to this many bytes before they are
/// stored.
pub const MAX_TEXT_BYTES: usize = 1024;
/// The largest result a COMPLETED item keeps (64 KiB, well within
/// DynamoDB's 400 KB item). Results are stored whole, never cut: the engine
/// fails a message whose result is larger.
pub const MAX_RESULT_BYTES: usize = 64 * 1024;

/// A claim that keeps racing (item expiring, takeovers by others) gives up
/// after this many looks at the stored item and reports contention.
const MAX_CLAIM_ROUNDS: usize = 4;

/// What a claimer knows about the message whose key it claims.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRequest<'a> {
    /// The idempotency key, without the table's key prefix.
    pub key: &'a str,
    /// The payload's fingerprint.
    pub payload_hash: &'a str,
    /// Where the message came from, kept on the item for operators.
    pub origin: Option<&'a str>,
    /// The latest the lease may end (epoch ms), e.g. just after the
    /// invocation's deadline; `None`: a full lock timeout.
    pub lease_cap_ms: Option<u64>,
    /// The owner token the claim writes, chosen once by the claimer
    /// ([`new_owner`]: on Lambda it starts with the invocation, so that a
    /// STARTED item leads to its logs). A claim sent again (its first
    /// answer lost or late, the write perhaps made) carries the same owner
    /// and recognises its own item ([`Standing::Ours`]). `None`: the store
    /// makes a fresh one per write, and such a claim sent again finds its
    /// own item in progress.
    pub owner: Option<&'a str>,
}

/// The right to do a key's work, held until completion, failure or release.
/// Every write made with it is fenced on `version` + `owner`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The item's partition key (prefix + idempotency key).
    pub pk: String,
    /// Fencing number: grows with every takeover.
    pub version: u64,
    /// This claim's unique token.
    pub owner: String,
    /// Lease end, epoch milliseconds.
    pub lock_expires_at_ms: u64,
}

impl Lease {
    /// A claim's lease on `pk` at `version`: the request's owner (or a new
    /// one), for one lock timeout from `now_ms` (not past the request's
    /// cap).
    pub fn claimed(
        pk: String,
        version: u64,
        config: &StoreConfig,
        now_ms: u64,
        request: &ClaimRequest<'_>,
    ) -> Self {
        Self {
            pk,
            version,
            owner: request.owner.map_or_else(|| new_owner(None), str::to_owned),
            lock_expires_at_ms: config.lease_end(now_ms, request.lease_cap_ms),
        }
    }

    /// The lease a take-over of `observed` writes: the next version, the
    /// request's owner (or a new one), for one lock timeout from `now_ms`
    /// (not past the request's cap).
    pub fn taking_over(
        observed: &StoredItem,
        config: &StoreConfig,
        now_ms: u64,
        request: &ClaimRequest<'_>,
    ) -> Self {
        let next = observed.version + 1;
        Self::claimed(observed.pk.clone(), next, config, now_ms, request)
    }

    /// This lease, ending at `until_ms` instead (what an extension
    /// answers).
    pub fn until(&self, until_ms: u64) -> Self {
        Self {
            lock_expires_at_ms: until_ms,
            ..self.clone()
        }
    }

    /// The lease an item of this holder's shows: `item` STARTED under its
    /// owner (what a claim sent again finds when its first write was made).
    pub fn of_item(item: &StoredItem) -> Self {
        Self {
            pk: item.pk.clone(),
            version: item.version,
            owner: item.owner.clone(),
            lock_expires_at_ms: item.lock_expires_at_ms.unwrap_or(0),
        }
    }

    /// Whether `found` shows this lease's own last write made: `found` is
    /// `status` at this lease's version and owner. Only the lease's holder
    /// can have moved it there (every such write is fenced on both), so a
    /// fenced write sent again after its first attempt was applied (the
    /// answer lost or late) recognises its own write instead of taking it
    /// for a lost lock.
    pub fn finished_as(&self, found: &StoredItem, status: Status) -> bool {
        found.status == status && found.version == self.version && found.owner == self.owner
    }

    /// What a fenced write of this lease that finishes its key as
    /// `finishing` (a completion, a failure; `None` for a release or an
    /// extension) answers when the store refused its fence, judged from the
    /// item the store found there (`None`: absent or not returned): already
    /// made by this very lease ([`Self::finished_as`]: the write sent again
    /// after its first attempt was applied) it is made, and answers the
    /// item's `expires_at` (a failure answers 0); anything else is the lock
    /// lost. (A release or an extension sent again passes its fence again.)
    pub fn refused(
        &self,
        finishing: Option<Status>,
        found: Option<&StoredItem>,
    ) -> Result<u64, StoreError> {
        let made = finishing
            .zip(found)
            .filter(|(status, item)| self.finished_as(item, *status))
            .map(|(status, item)| match status {
                Status::Completed => item.expires_at_s,
                _ => 0,
            });
        made.ok_or_else(|| StoreError::LockLost {
            key: self.pk.clone(),
            version: self.version,
        })
    }
}

/// What a claim found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// The key was free (absent, expired): this worker holds it at version 1.
    Acquired(Lease),
    /// The key's previous owner abandoned it (lease ran out or released):
    /// this worker holds it at the next version; the old owner is fenced out.
    TakenOver(Lease),
    /// The key was already completed for this same payload: skip the work.
    Duplicate(StoredItem),
    /// The key was used before with another payload: never run the work.
    PayloadMismatch(StoredItem),
    /// The key failed permanently before: never run the work again.
    PreviouslyFailed(StoredItem),
    /// Another worker holds a live lease on the key: try again later.
    InProgress(StoredItem),
    /// Another scope (another function sharing the table and the key
    /// prefix) holds the key: never this function's duplicate; the work
    /// does not run until the functions' keys are told apart
    /// (`IDEMPOTENCY_KEY_PREFIX`), or shared (`IDEMPOTENCY_SCOPE`).
    OtherScope(StoredItem),
}

/// A conditional write that creates or takes an item: written, or the
/// item that made its condition fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conditional<T> {
    /// The condition held; the write happened.
    Written(T),
    /// The condition failed; the item as it was (`None` if there was none).
    Conflict(Option<Box<StoredItem>>),
}

/// One message for [`Store::commit`]: a new key's COMPLETED item (the
/// lock-free path), or the completion of a key this worker holds (the
/// locking path, [`Self::held`]), with its effect.
#[derive(Debug, Clone)]
pub struct Commit<E> {
    /// The idempotency key, without the table's key prefix.
    pub key: String,
    /// The payload's fingerprint.
    pub payload_hash: String,
    /// Where the message came from.
    pub origin: Option<String>,
    /// Unique to this attempt (the handler's fencing token).
    pub owner: String,
    /// Kept whole on the COMPLETED item (within [`MAX_RESULT_BYTES`]).
    pub result: Option<String>,
    /// The work's effect.
    pub effects: Effects<E>,
    /// The lease the key is held by (the locking path): its item is
    /// completed under the fence (STARTED, this version and owner) instead
    /// of created; a fence that fails is [`CommitOutcome::KeyTaken`] for
    /// it. `None`: a new key (the lock-free path).
    pub held: Option<Lease>,
}

/// A claim to make, owned (what [`ClaimRequest`] borrows): for claims
/// gathered from several lanes into one request ([`Store::claim_many`]).
#[derive(Debug, Clone)]
pub struct Claim {
    /// The idempotency key, without the table's key prefix.
    pub key: String,
    /// The payload's fingerprint.
    pub payload_hash: String,
    /// Where the message came from.
    pub origin: Option<String>,
    /// The latest the lease may end (epoch ms).
    pub lease_cap_ms: Option<u64>,
    /// The claim's owner token, the same on every send of it (see
    /// [`ClaimRequest::owner`]).
    pub owner: String,
}

impl Claim {
    /// The claim as [`Store::claim`] takes it.
    pub fn request(&self) -> ClaimRequest<'_> {
        ClaimRequest {
            key: &self.key,
            payload_hash: &self.payload_hash,
            origin: self.origin.as_deref(),
            lease_cap_ms: self.lease_cap_ms,
            owner: Some(&self.owner),
        }
    }
}

/// A write of a lease's holder, fenced on its version and owner, that
/// needs no transaction (no effect beside it): what a batch of them
/// ([`Store::write_fenced`]) holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencedWrite {
    /// COMPLETED, with the result (the work's effect happened outside the
    /// store: "direct mode").
    Complete {
        /// Kept whole on the item.
        result: Option<String>,
    },
    /// FAILED for good, with the error.
    Fail {
        /// The error (cut to [`MAX_TEXT_BYTES`]).
        error: String,
    },
    /// The lock ends now (claimable at once as the next version).
    Release,
    /// The lease ends at `until_ms` (a heartbeat).
    Extend {
        /// The new end, epoch ms.
        until_ms: u64,
    },
}

impl FencedWrite {
    /// The status this write finishes its key in, if it does (a
    /// completion, a failure).
    pub fn finishes(&self) -> Option<Status> {
        match self {
            Self::Complete { .. } => Some(Status::Completed),
            Self::Fail { .. } => Some(Status::Failed),
            Self::Release | Self::Extend { .. } => None,
        }
    }

    /// What this write answers once made ([`Store::write_fenced`]): a
    /// completion its item's new `expires_at_s`, an extension the lease's
    /// new end, a failure or a release 0.
    pub fn answer(&self, expires_at_s: u64) -> u64 {
        match self {
            Self::Complete { .. } => expires_at_s,
            Self::Extend { until_ms } => *until_ms,
            Self::Fail { .. } | Self::Release => 0,
        }
    }

    /// What this write, under `lease`, answers when the store refused its
    /// fence and found `found` (see [`Lease::refused`]).
    pub fn refused(&self, lease: &Lease, found: Option<&StoredItem>) -> Result<u64, StoreError> {
        lease.refused(self.finishes(), found)
    }
}

/// A work's effect, committed in ONE transaction with its completion:
/// opaque writes, increments (which the store merges per item across the
/// messages of a transaction, see [`increment`]), and the messages it
/// emits (kept on the COMPLETED item itself, [`crate::outbox`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Effects<E> {
    /// Writes in the store's own terms (DynamoDB: `TransactWriteItem`).
    pub writes: Vec<E>,
    /// Commutative increments.
    pub increments: Vec<Increment>,
    /// The emitted messages ([`outbox::encode`]), written on the
    /// COMPLETED item as its `outbox`.
    pub outbox: Option<String>,
}

impl<E> Default for Effects<E> {
    fn default() -> Self {
        Self {
            writes: Vec::new(),
            increments: Vec::new(),
            outbox: None,
        }
    }
}

/// Writes only.
impl<E> From<Vec<E>> for Effects<E> {
    fn from(writes: Vec<E>) -> Self {
        Self {
            writes,
            ..Self::default()
        }
    }
}

impl<E> Effects<E> {
    /// Nothing to write beside the completion.
    pub fn is_empty(&self) -> bool {
        !self.touches_items() && self.outbox.is_none()
    }

    /// Whether items other than the key's are written (writes or
    /// increments): a completion that must commit in one transaction with
    /// them. Messages alone ride on the key's own write.
    pub fn touches_items(&self) -> bool {
        !self.writes.is_empty() || !self.increments.is_empty()
    }
}

/// The increments of `commits`, merged per item in message order, and the
/// number of effect actions of the whole transaction (writes + merged
/// increments); [`StoreError::TooManyWrites`] beyond `limit`, and
/// [`StoreError::Rejected`] if a merged sum leaves `i64`.
pub fn transaction_effects<'a, E: 'a>(
    effects: impl IntoIterator<Item = &'a Effects<E>> + Clone,
    limit: usize,
) -> Result<Vec<Increment>, StoreError> {
    let increments = increment::merged(effects.clone().into_iter().flat_map(|e| &e.increments))
        .ok_or(StoreError::Rejected {
            operation: "commit",
            message: "a merged increment leaves the range of a 64-bit integer".into(),
        })?;
    let writes: usize = effects.into_iter().map(|e| e.writes.len()).sum();
    let count = writes + increments.len();
    if count > limit {
        return Err(StoreError::TooManyWrites { count, limit });
    }
    Ok(increments)
}

impl<E> Commit<E> {
    /// What its new item is written with (no lease: it is created
    /// finished; a held key's item exists already).
    pub fn request(&self) -> ClaimRequest<'_> {
        ClaimRequest {
            key: &self.key,
            payload_hash: &self.payload_hash,
            origin: self.origin.as_deref(),
            lease_cap_ms: None,
            owner: Some(&self.owner),
        }
    }
}

/// What a lock-free commit did: everything written, or nothing and why.
#[derive(Debug)]
pub enum CommitOutcome {
    /// Every message's COMPLETED item and effects are written.
    Committed {
        /// The items' `expires_at` (epoch seconds).
        expires_at_s: u64,
        /// How often the store sent it again, cancelled by a conflict with
        /// another transaction or by throttling, before it committed (0: at
        /// once): a sign of contention the engine sizes its groups by.
        contended: u32,
    },
    /// The key of message `index` is not new; the item found (None if the
    /// store returned none).
    KeyTaken {
        /// Which message (0-based).
        index: usize,
        /// The item found.
        item: Option<Box<StoredItem>>,
    },
    /// The merged increment of `item` would take a number below its floor
    /// (nothing was written). `current`: the item's numbers as the store
    /// found them (missing: 0), when it tells, so that the caller can see
    /// which message, applied alone after the ones before it, is refused.
    IncrementRefused {
        /// The item ([`Increment::item`]).
        item: String,
        /// Its numbers at the refusal, by attribute.
        current: Option<HashMap<String, i128>>,
    },
    /// A condition of write `effect` of message `index` failed.
    EffectRefused {
        /// Which message (0-based).
        index: usize,
        /// Which of its effects (0-based).
        effect: usize,
        /// The store's reason.
        message: String,
    },
}

/// Which keys an operator lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// STARTED keys whose lock ended, or created before `now - older_than`.
    Stuck {
        /// STARTED keys created longer ago are listed too.
        older_than: Duration,
    },
    /// FAILED keys: the durable record of every poison record.
    Failed,
    /// COMPLETED keys whose messages are not known sent, completed before
    /// `now - older_than` (younger ones are still being sent by their
    /// invocation): what the sweeper sends.
    Unsent {
        /// Completed longer ago.
        older_than: Duration,
    },
}

impl Listing {
    /// Whether `item` (not past its TTL) belongs to this listing at `now_ms`.
    pub fn matches(&self, item: &StoredItem, now_ms: u64) -> bool {
        match (self, item.status) {
            (Listing::Stuck { older_than }, Status::Started) => {
                item.lock_expired(now_ms)
                    || item
                        .created_at_ms
                        .is_some_and(|at| at < now_ms.saturating_sub(duration_ms(*older_than)))
            }
            (Listing::Failed, Status::Failed) => true,
            (Listing::Unsent { older_than }, Status::Completed) => {
                item.outbox.is_some()
                    && item
                        .updated_at_ms
                        .is_none_or(|at| at < now_ms.saturating_sub(duration_ms(*older_than)))
            }
            _ => false,
        }
    }
}

/// What a listing cost the store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListingCost {
    /// Requests (pages) sent.
    pub requests: u64,
    /// Items the store read to answer (before any filter): what is billed.
    pub read: u64,
    /// Read capacity units consumed, where the store counts them.
    pub capacity_units: f64,
}

/// The keys of a listing and what it cost.
#[derive(Debug, Clone, Default)]
pub struct Listed {
    /// The items listed (under the store's key prefix).
    pub items: Vec<StoredItem>,
    /// What it cost.
    pub cost: ListingCost,
}

/// Where a new container's transaction groups and batches of claims start
/// unless the store says otherwise ([`crate::store::Store::START_SIZE`]): a
/// quarter of DynamoDB's 100 actions, which two quick answers take to its
/// most, and its whole `BatchExecuteStatement`.
pub const GROUP_START: usize = 25;

/// A backend of the key state machine. Each transition is ONE conditional
/// write whose condition keeps the invariant the diagram of this module
/// shows; every write after a claim is fenced on `version` + `owner`.
/// Errors say what happened and whether a later delivery may succeed
/// ([`StoreError::is_retryable`]).
///
/// To add a backend: implement the required methods, each as one atomic
/// conditional write (a conditional `UPDATE ... WHERE`, a Lua script, a
/// conditional request), and instantiate the conformance suite for it
/// (`tests/conformance/`). The claim loop and the judging of found items
/// are shared.
pub trait Store: Clone + Send + Sync + 'static {
    /// A business write committed in the same transaction as a completion
    /// (DynamoDB: a `TransactWriteItem`; a SQL backend: a statement).
    type Effect: Clone + Send + Sync + 'static;

    /// The backend's name in messages (`DynamoDB`).
    const NAME: &'static str;
    /// At most this many effects fit in one transaction beside one item.
    const MAX_EFFECTS: usize;
    /// The longest partition key the store accepts, in bytes.
    const MAX_KEY_BYTES: usize;
    /// The most one transaction may weigh, in bytes (DynamoDB: 4 MB); the
    /// engine keeps its estimate of a lock-free group below it. Default: no
    /// limit of the store's own.
    const MAX_TRANSACTION_BYTES: usize = usize::MAX;
    /// The most claims, or fenced writes, one request carries
    /// ([`Store::create_started_many`], [`Store::write_fenced`]; DynamoDB:
    /// 25, PartiQL's `BatchExecuteStatement`). Default 1: each alone.
    const MAX_BATCH: usize = 1;
    /// How many records a new container's first transaction group and
    /// first batch of claims carry, before the store has answered any
    /// request (the engine doubles them from there while the answers are
    /// quick: `engine::sizing`), within the caps above. Default
    /// [`GROUP_START`] (25): DynamoDB's transactions of 100 actions queue
    /// inside it when a new container sends many at once.
    const START_SIZE: usize = GROUP_START;

    /// Its configuration.
    fn config(&self) -> &StoreConfig;

    /// The longest one request may take before the client gives it up
    /// (DynamoDB's attempt timeout, PostgreSQL's call timeout, Redis's
    /// timeout). An answer that took half of it is slow: the store is
    /// queueing, near giving requests up, and the engine's sizing backs off
    /// (`engine::sizing`); a quicker one, however slow the network, is not.
    /// Default 1 s.
    fn request_timeout(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// The item an effect writes, when the store can tell, named as
    /// [`Increment::item`] names an incremented item (`table/key="value"`):
    /// effects on distinct items may share a transaction, and two commits
    /// touching one item are never in flight together. `None`: the effect
    /// commits alone, with nothing else in flight.
    fn touched(effect: &Self::Effect) -> Option<String>;

    /// Claim: create the STARTED item at version 1 for `pk`, only if the
    /// key is absent or past its TTL; else the item found.
    fn create_started(
        &self,
        pk: &str,
        request: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Conditional<Lease>, StoreError>> + Send;

    /// Claims of several keys (distinct `pk`s, at most [`Self::MAX_BATCH`])
    /// in as few requests as the store allows, each written or not on its
    /// own (not a transaction): for each, what [`Self::create_started`]
    /// would answer for it alone. A conflict may come back without the item
    /// (`Conflict(None)`): the claim then looks again alone. Default: each
    /// alone, at once.
    fn create_started_many(
        &self,
        claims: &[(String, ClaimRequest<'_>)],
    ) -> impl Future<Output = Result<Vec<Conditional<Lease>>, StoreError>> + Send {
        async move {
            let answers = futures_util::future::join_all(
                claims
                    .iter()
                    .map(|(pk, request)| self.create_started(pk, *request)),
            )
            .await;
            answers.into_iter().collect()
        }
    }

    /// Take over: become the owner of `observed` (STARTED, lock ended) at
    /// version + 1 (the lease as `request` asks), only if it is still at
    /// that version, STARTED, abandoned and this store's own (its scope, or
    /// none: the item then takes this store's scope); else the item found.
    fn take_over(
        &self,
        observed: &StoredItem,
        request: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<Conditional<Lease>, StoreError>> + Send;

    /// Complete (fenced): the work is done, together with `effects` in ONE
    /// transaction when there are any (a refused write or increment:
    /// [`StoreError::EffectConditionFailed`], its index counting the writes
    /// first, then the increments merged per item). Returns the item's new
    /// `expires_at` (epoch seconds).
    fn complete(
        &self,
        lease: &Lease,
        result: Option<&str>,
        effects: Effects<Self::Effect>,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Fail permanently (fenced): redeliveries are refused.
    fn fail(
        &self,
        lease: &Lease,
        error: &str,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Release after a retryable error (fenced): the lock ends now, so the
    /// next claim takes the key over at once as version + 1.
    fn release(&self, lease: &Lease) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Extend (fenced heartbeat): the lease ends at `until_ms`.
    fn extend(
        &self,
        lease: &Lease,
        until_ms: u64,
    ) -> impl Future<Output = Result<Lease, StoreError>> + Send;

    /// Fenced writes of several leases (distinct keys, at most
    /// [`Self::MAX_BATCH`]) in as few requests as the store allows, each on
    /// its own (not a transaction; each fenced as its single write is): for
    /// each, what the single write answers, `Ok` with the item's new
    /// `expires_at` for a completion, the lease's new end for an extension,
    /// 0 otherwise; [`StoreError::LockLost`] when its fence failed. An error
    /// of the whole request is every write's. Default: each alone, at once.
    fn write_fenced(
        &self,
        writes: &[(Lease, FencedWrite)],
    ) -> impl Future<Output = Vec<Result<u64, StoreError>>> + Send {
        async move {
            futures_util::future::join_all(writes.iter().map(|(lease, write)| async move {
                match write {
                    FencedWrite::Complete { result } => {
                        self.complete(lease, result.as_deref(), Effects::default())
                            .await
                    }
                    FencedWrite::Fail { error } => self.fail(lease, error).await.map(|()| 0),
                    FencedWrite::Release => self.release(lease).await.map(|()| 0),
                    FencedWrite::Extend { until_ms } => self
                        .extend(lease, *until_ms)
                        .await
                        .map(|lease| lease.lock_expires_at_ms),
                }
            }))
            .await
        }
    }

    /// Commit, in ONE transaction: each message's COMPLETED item and
    /// effects; a new key's item created at version 1 (only if its key is
    /// absent or past its TTL: the lock-free path), a held key's completed
    /// under its fence ([`Commit::held`]: the locking path); the increments
    /// of one item merged into one update ([`Increment::then`]). The caller
    /// makes sure that the writes touch distinct items, and no item that is
    /// incremented.
    fn commit(
        &self,
        commits: Vec<Commit<Self::Effect>>,
    ) -> impl Future<Output = Result<CommitOutcome, StoreError>> + Send;

    /// The messages of these completions were sent: each item's outbox is
    /// removed, only while it is COMPLETED under the owner given
    /// ([`transition::may_clear_outbox`]); an item that changed since keeps
    /// its own. In as few requests as the store allows.
    fn outbox_sent(
        &self,
        sent: &[outbox::Pending],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Lock-free failure: the FAILED item at version 1, only if the key is
    /// absent or past its TTL; else the item found.
    fn fail_new(
        &self,
        request: ClaimRequest<'_>,
        owner: &str,
        error: &str,
    ) -> impl Future<Output = Result<Conditional<()>, StoreError>> + Send;

    /// The item of `key`, read consistently; `None` when absent or past its
    /// TTL.
    fn get(&self, key: &str)
    -> impl Future<Output = Result<Option<StoredItem>, StoreError>> + Send;

    /// The items of `keys` (invalid keys skipped; expired ones absent), by
    /// key. A hint, which may be stale: only a COMPLETED item may be trusted.
    fn batch_get(
        &self,
        keys: &[&str],
    ) -> impl Future<Output = Result<HashMap<String, StoredItem>, StoreError>> + Send;

    /// Epoch milliseconds as this store sees them (the process's clock plus
    /// [`StoreConfig::clock_offset_ms`]).
    fn now_ms(&self) -> u64 {
        crate::clock::now_ms().saturating_add_signed(self.config().clock_offset_ms)
    }

    /// How far [`Self::now_ms`] is known to be off the server's clock, from
    /// the latest look at it on a request sent anyway (positive: ahead; 0
    /// within what the look can tell); `None` for a store that does not
    /// look, or before its first look.
    fn clock_skew_ms(&self) -> Option<i64> {
        None
    }

    /// The partition key for an idempotency key, within the store's limit:
    /// a longer key is refused, or hashed under [`LongKeyPolicy::Hash`].
    fn pk(&self, key: &str) -> Result<String, StoreError> {
        let config = self.config();
        if key.is_empty() {
            return Err(StoreError::InvalidKey("the key is empty".into()));
        }
        let prefix = &config.key_prefix;
        let bytes = prefix.len() + key.len();
        if bytes <= Self::MAX_KEY_BYTES {
            return Ok(format!("{prefix}{key}"));
        }
        match config.long_keys {
            LongKeyPolicy::Hash => Ok(format!("{prefix}sha256:{}", payload_hash(key.as_bytes()))),
            LongKeyPolicy::Reject => Err(StoreError::InvalidKey(format!(
                "the key is {bytes} bytes with its prefix; {} allows at most {} \
                 (LONG_KEY_POLICY=hash stores a SHA-256 of it instead)",
                Self::NAME,
                Self::MAX_KEY_BYTES
            ))),
        }
    }

    /// Claims `request.key`, or says why the work must not run now: ONE
    /// conditional create, and on conflict the found item judged by
    /// [`StoredItem::standing`] (an abandoned one taken over, version-guarded).
    fn claim(
        &self,
        request: ClaimRequest<'_>,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send {
        async move {
            let pk = self.pk(request.key)?;
            let created = self.create_started(&pk, request).await;
            self.settle_claim(&pk, request, created).await
        }
    }

    /// Claims several keys (distinct, at most [`Self::MAX_BATCH`]) with one
    /// batched create ([`Self::create_started_many`]); a claim that
    /// conflicts (a live lock elsewhere, a duplicate, a key reused, an
    /// expired lock to take over) is settled alone, as [`Self::claim`]
    /// would. `answer(i, outcome)` hears each claim's outcome, what `claim`
    /// would answer for it, as soon as it is settled: no claim waits for a
    /// neighbour's settling.
    fn claim_many(
        &self,
        claims: &[Claim],
        answer: impl Fn(usize, Result<ClaimOutcome, StoreError>) + Send + Sync,
    ) -> impl Future<Output = ()> + Send {
        async move {
            let pks: Vec<Result<String, StoreError>> =
                claims.iter().map(|claim| self.pk(&claim.key)).collect();
            let requests: Vec<(String, ClaimRequest<'_>)> = pks
                .iter()
                .zip(claims)
                .filter_map(|(pk, claim)| Some((pk.as_ref().ok()?.clone(), claim.request())))
                .collect();
            let mut created = match self.create_started_many(&requests).await {
                Ok(created) => created.into_iter().map(Ok).collect::<Vec<_>>(),
                Err(err) => requests.iter().map(|_| Err(err.clone())).collect(),
            }
            .into_iter();
            let answer = &answer;
            let settled = pks
                .into_iter()
                .zip(claims)
                .enumerate()
                .map(|(i, (pk, claim))| {
                    let created = match &pk {
                        Ok(_) => created.next().unwrap_or_else(|| {
                            Err(StoreError::Rejected {
                                operation: "claim",
                                message: "the store answered fewer claims than it was sent".into(),
                            })
                        }),
                        Err(_) => Ok(Conditional::Conflict(None)),
                    };
                    async move {
                        let outcome = match pk {
                            Ok(pk) => self.settle_claim(&pk, claim.request(), created).await,
                            Err(err) => Err(err),
                        };
                        answer(i, outcome);
                    }
                });
            futures_util::future::join_all(settled).await;
        }
    }

    /// The rest of a claim of `pk` after its conditional create answered
    /// `created`: the item found judged, an abandoned lock taken over
    /// (version-guarded), a vanished one created again.
    fn settle_claim(
        &self,
        pk: &str,
        request: ClaimRequest<'_>,
        created: Result<Conditional<Lease>, StoreError>,
    ) -> impl Future<Output = Result<ClaimOutcome, StoreError>> + Send {
        async move {
            let mut observed = match created? {
                Conditional::Written(lease) => return Ok(ClaimOutcome::Acquired(lease)),
                Conditional::Conflict(item) => item,
            };
            for _ in 0..MAX_CLAIM_ROUNDS {
                let Some(item) = observed else {
                    observed = match self.create_started(pk, request).await? {
                        Conditional::Written(lease) => return Ok(ClaimOutcome::Acquired(lease)),
                        Conditional::Conflict(item) => item,
                    };
                    continue;
                };
                let item = *item;
                let owner = request.owner.unwrap_or_default();
                match item.standing(self.config(), request.payload_hash, owner, self.now_ms()) {
                    // Past its TTL: absent, even if the store still has it.
                    Standing::Expired => observed = None,
                    // This very claim's write, made before (sent again).
                    Standing::Ours => return Ok(ClaimOutcome::of_own_item(item)),
                    Standing::OtherScope => return Ok(ClaimOutcome::OtherScope(item)),
                    Standing::OtherPayload => return Ok(ClaimOutcome::PayloadMismatch(item)),
                    Standing::Completed => return Ok(ClaimOutcome::Duplicate(item)),
                    Standing::Failed => return Ok(ClaimOutcome::PreviouslyFailed(item)),
                    Standing::Locked => return Ok(ClaimOutcome::InProgress(item)),
                    Standing::Abandoned => {
                        warn_if_skewed(self.clock_skew_ms(), &item);
                        match self.take_over(&item, request).await? {
                            Conditional::Written(lease) => {
                                return Ok(ClaimOutcome::TakenOver(lease));
                            }
                            Conditional::Conflict(item) => observed = item,
                        }
                    }
                }
            }
            Err(StoreError::Contention { key: pk.to_owned() })
        }
    }
}

/// Before a takeover judged by this container's clock: a clock known to be
/// off by more than the guarantees assume says so. Ahead, it may take a
/// live lease (an effect outside the store, the direct path, may then run
/// twice; the fenced paths refuse the old holder's writes).
fn warn_if_skewed(skew_ms: Option<i64>, item: &StoredItem) {
    if let Some(skew_ms) = skew_ms.filter(|skew| skew.abs() > crate::clock::CLOCK_BOUND_MS) {
        tracing::warn!(
            skew_ms,
            bound_ms = crate::clock::CLOCK_BOUND_MS,
            lock_expires_at_ms = ?item.lock_expires_at_ms,
            version = item.version,
            "taking over a lease judged ended by a clock known to be off the store's by more than \
             the guarantees assume (positive: ahead; the lease may still be held, and an effect \
             outside the store may run twice); check the host's time sync"
        );
    }
}

/// What only an operator needs of a store, beside the engine's [`Store`]:
/// the fenced operator transitions and the listings (`exactly-once-ops`,
/// and the function's scheduled stuck-key check). A store that serves the
/// engine alone need not implement it.
pub trait Operator: Store {
    /// Operator release: the STARTED item at `version` becomes claimable at
    /// once; [`StoreError::NotInState`] otherwise.
    fn release_version(
        &self,
        key: &str,
        version: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Operator retry: the FAILED item at `version` becomes STARTED with its
    /// lock ended (`error` moves to `last_error`); [`StoreError::NotInState`]
    /// otherwise.
    fn retry_failed(
        &self,
        key: &str,
        version: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// The live items under the key prefix that `listing` names.
    fn list(&self, listing: Listing) -> impl Future<Output = Result<Listed, StoreError>> + Send;
}

impl ClaimOutcome {
    /// What a claim that found its own item means (its first send was
    /// written, the answer lost or late): the lease it holds, or, were the
    /// item already finished under it, what that means.
    pub fn of_own_item(item: StoredItem) -> Self {
        match item.status {
            Status::Started if item.version == 1 => Self::Acquired(Lease::of_item(&item)),
            Status::Started => Self::TakenOver(Lease::of_item(&item)),
            Status::Completed => Self::Duplicate(item),
            Status::Failed => Self::PreviouslyFailed(item),
        }
    }
}

/// The indexes of `keys` in rounds of distinct keys, in order: a batched
/// request may hold one write of an item (DynamoDB refuses a batch that
/// names an item twice; a SQL statement writes a row once), so a key met
/// again waits for the next round.
pub fn distinct_rounds<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<Vec<usize>> {
    let mut rounds: Vec<(HashSet<&'a str>, Vec<usize>)> = Vec::new();
    for (index, key) in keys.into_iter().enumerate() {
        match rounds.iter_mut().find(|(seen, _)| !seen.contains(key)) {
            Some((seen, round)) => {
                seen.insert(key);
                round.push(index);
            }
            None => rounds.push((HashSet::from([key]), vec![index])),
        }
    }
    rounds.into_iter().map(|(_, round)| round).collect()
}

/// Cuts `text` to at most [`MAX_TEXT_BYTES`], on a character boundary.
pub fn bounded(text: &str) -> &str {
    let mut end = text.len().min(MAX_TEXT_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// A new owner token, unique to each claim or lock-free attempt: a UUID,
/// after its holder when known (`<request id>/<function version>/<log
/// stream>/<uuid>` on Lambda).
pub fn new_owner(holder: Option<&str>) -> String {
    let unique = uuid::Uuid::new_v4();
    match holder {
        Some(holder) => format!("{holder}/{unique}"),
        None => unique.to_string(),
    }
}
