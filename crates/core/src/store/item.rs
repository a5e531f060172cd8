//! The idempotency item: one per key, the same in every backend. Its
//! attribute names are a public contract that operators query and
//! `template.yaml` (and each backend's schema) declares.

use crate::config::StoreConfig;

/// Attribute names of the idempotency item.
pub mod attr {
    /// Partition key: key prefix + idempotency key.
    pub const PK: &str = "pk";
    /// `STARTED`, `COMPLETED` or `FAILED`.
    pub const STATUS: &str = "status";
    /// Fencing number: 1 on claim, +1 on every takeover.
    pub const VERSION: &str = "version";
    /// Token unique to each claim; every later write is conditioned on it.
    pub const OWNER: &str = "owner";
    /// Hex SHA-256 of the payload that claimed the key.
    pub const PAYLOAD_HASH: &str = "payload_hash";
    /// Lease end, epoch milliseconds; meaningful while STARTED.
    pub const LOCK_EXPIRES_AT: &str = "lock_expires_at";
    /// The table's TTL attribute, epoch seconds. Written on every item.
    pub const EXPIRES_AT: &str = "expires_at";
    /// Epoch milliseconds of the first claim.
    pub const CREATED_AT: &str = "created_at";
    /// Epoch milliseconds of the last write.
    pub const UPDATED_AT: &str = "updated_at";
    /// Number of claims and takeovers so far.
    pub const ATTEMPTS: &str = "attempts";
    /// Where the first claimer's message came from (e.g. `payments-0@15`).
    pub const ORIGIN: &str = "origin";
    /// Bounded result text of a COMPLETED item.
    pub const RESULT: &str = "result";
    /// The messages a COMPLETED item's record emitted and that are not yet
    /// known sent (JSON, [`crate::outbox`]); removed once they were.
    pub const OUTBOX: &str = "outbox";
    /// Bounded error text of a FAILED item.
    pub const ERROR: &str = "error";
    /// The error of a FAILED item an operator let run again.
    pub const LAST_ERROR: &str = "last_error";
    /// Whose item it is ([`crate::config::StoreConfig::scope`]: on Lambda
    /// the function's name); absent on items written before scopes.
    pub const SCOPE: &str = "scope";
    /// DynamoDB only: the shard (0-15) of a STARTED item in the sparse index
    /// `started`; set by the claim and the take-over, removed by completion
    /// and failure, so the index holds STARTED items only.
    pub const STARTED_SHARD: &str = "started_shard";
}

/// The lifecycle state of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Claimed: the work may be running under a lease.
    Started,
    /// Done: redeliveries are duplicates.
    Completed,
    /// Failed for good: redeliveries are refused.
    Failed,
}

impl Status {
    /// The stored text (`STARTED`, `COMPLETED`, `FAILED`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Started => "STARTED",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
        }
    }

    /// The status a stored text names.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "STARTED" => Some(Self::Started),
            "COMPLETED" => Some(Self::Completed),
            "FAILED" => Some(Self::Failed),
            _ => None,
        }
    }
}

/// What a found item means for a new message of the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Past its TTL: counts as absent (stores delete lazily).
    Expired,
    /// Written under the very owner token of the message's attempt: its own
    /// write, sent again after the first was made (the answer lost or
    /// late), never another worker's.
    Ours,
    /// Another scope's (another function's) live item: never this
    /// function's duplicate, lock or failure; the work does not run here.
    OtherScope,
    /// The key was used with another payload: the work never runs.
    OtherPayload,
    /// Done for this payload: a duplicate.
    Completed,
    /// Failed permanently for this payload: refused again.
    Failed,
    /// STARTED under a live lease: in progress elsewhere.
    Locked,
    /// STARTED with its lease ended: may be taken over.
    Abandoned,
}

/// An idempotency item as stored.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoredItem {
    /// Partition key: prefix + idempotency key.
    pub pk: String,
    /// The key's state.
    pub status: Status,
    /// Fencing number.
    pub version: u64,
    /// The current claim's token.
    pub owner: String,
    /// The fingerprint the key was claimed with.
    pub payload_hash: String,
    /// Lease end, epoch ms, while STARTED.
    pub lock_expires_at_ms: Option<u64>,
    /// TTL, epoch seconds.
    pub expires_at_s: u64,
    /// Epoch ms of the first claim.
    pub created_at_ms: Option<u64>,
    /// Epoch ms of the last write.
    pub updated_at_ms: Option<u64>,
    /// Claims and takeovers so far.
    pub attempts: Option<u64>,
    /// Where the first claimer's message came from.
    pub origin: Option<String>,
    /// The handler's result (COMPLETED).
    pub result: Option<String>,
    /// The messages its record emitted, not yet known sent (COMPLETED;
    /// [`crate::outbox`]).
    pub outbox: Option<String>,
    /// The error (FAILED).
    pub error: Option<String>,
    /// The error of a FAILED item an operator let run again.
    pub last_error: Option<String>,
    /// Whose item it is (on Lambda the function's name); `None` on items
    /// written before scopes, which belong to whoever finds them.
    pub scope: Option<String>,
}

impl StoredItem {
    /// Past its TTL: the store may not have deleted it yet, but it counts
    /// as absent. Mirrors the claim condition `expires_at < :now_s`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        if mutated!(ExpiryReadsLease) {
            return self.lock_expired(now_ms);
        }
        self.expires_at_s < crate::clock::ms_to_s(now_ms)
    }

    /// A STARTED item whose lease ran out. Mirrors the takeover condition
    /// `lock_expires_at < :now_ms`.
    pub fn lock_expired(&self, now_ms: u64) -> bool {
        self.lock_expires_at_ms.unwrap_or(0) < now_ms
    }

    /// What this item means, to the store configured as `config`, for a
    /// message with `payload_hash` whose attempt writes under `owner` (a
    /// claim's or a lock-free commit's token; "" for none), at `now_ms`:
    /// the one place where a found item is judged (claims, lock-free
    /// commits).
    pub fn standing(
        &self,
        config: &StoreConfig,
        payload_hash: &str,
        owner: &str,
        now_ms: u64,
    ) -> Standing {
        if self.is_expired(now_ms) {
            Standing::Expired
        } else if !owner.is_empty()
            && (self.owner == owner
                || (mutated!(ResendOwnsByPayload) && self.payload_hash == payload_hash))
        {
            Standing::Ours
        } else if !config.owns(self.scope.as_deref()) && !mutated!(JudgeIgnoresScope) {
            Standing::OtherScope
        } else if self.payload_hash != payload_hash {
            Standing::OtherPayload
        } else {
            match self.status {
                Status::Completed => Standing::Completed,
                Status::Failed => Standing::Failed,
                Status::Started if self.lock_expired(now_ms) => Standing::Abandoned,
                Status::Started => Standing::Locked,
            }
        }
    }

    /// Whether this item, read before the claims (the pre-check) or kept
    /// in a cache, proves its key done for the store configured as
    /// `config`: COMPLETED, this store's own (another function's
    /// COMPLETED key is never this one's duplicate), with nothing left to
    /// send (messages still in its outbox are sent by the delivery that
    /// finds the item at its claim). Anything else is left to the claim.
    pub fn proves_completed(&self, config: &StoreConfig) -> bool {
        (self.status == Status::Completed || mutated!(CacheTrustsAnyStatus))
            && config.owns(self.scope.as_deref())
            && (self.outbox.is_none() || mutated!(CacheTrustsUnsent))
    }
}

/// A new item as every backend writes it (version 1, one attempt): what a
/// claim, a lock-free commit and a lock-free failure create.
pub struct NewItem<'a> {
    /// The partition key (prefix + idempotency key).
    pub pk: &'a str,
    /// STARTED (a claim), COMPLETED or FAILED (lock-free).
    pub status: Status,
    /// The owner token of the write.
    pub owner: &'a str,
    /// The payload's fingerprint.
    pub payload_hash: &'a str,
    /// A claim's lease end (epoch ms); `None` for a finished item.
    pub lock_expires_at_ms: Option<u64>,
    /// The TTL (epoch seconds).
    pub expires_at_s: u64,
    /// When it is written (epoch ms): its `created_at` and `updated_at`.
    pub now_ms: u64,
    /// Where the message came from.
    pub origin: Option<&'a str>,
    /// A COMPLETED item's result.
    pub result: Option<&'a str>,
    /// A COMPLETED item's messages ([`outbox::encode`](super::outbox::encode)).
    pub outbox: Option<&'a str>,
    /// A FAILED item's error.
    pub error: Option<&'a str>,
    /// Whose item it is ([`StoreConfig::scope`]).
    pub scope: Option<&'a str>,
}

impl<'a> NewItem<'a> {
    /// The item as stored (version 1, one attempt; its texts bounded).
    pub fn item(&self) -> StoredItem {
        StoredItem {
            pk: self.pk.to_owned(),
            status: self.status,
            version: 1,
            owner: self.owner.to_owned(),
            payload_hash: self.payload_hash.to_owned(),
            lock_expires_at_ms: self.lock_expires_at_ms,
            expires_at_s: self.expires_at_s,
            created_at_ms: Some(self.now_ms),
            updated_at_ms: Some(self.now_ms),
            attempts: Some(1),
            origin: self.origin.map(|origin| super::bounded(origin).to_owned()),
            result: self.result.map(str::to_owned),
            outbox: self.outbox.map(str::to_owned),
            error: self.error.map(|error| super::bounded(error).to_owned()),
            last_error: None,
            scope: self.scope.map(str::to_owned),
        }
    }

    /// A claim's STARTED item, held by `lease` from `now_ms`, in `config`'s
    /// scope and retained as it says.
    pub fn started(
        lease: &'a super::Lease,
        request: super::ClaimRequest<'a>,
        config: &'a StoreConfig,
        now_ms: u64,
    ) -> Self {
        Self {
            pk: &lease.pk,
            status: Status::Started,
            owner: &lease.owner,
            payload_hash: request.payload_hash,
            lock_expires_at_ms: Some(lease.lock_expires_at_ms),
            expires_at_s: config.expires_at_s(now_ms),
            now_ms,
            origin: request.origin,
            result: None,
            outbox: None,
            error: None,
            scope: config.scope.as_deref(),
        }
    }

    /// A lock-free commit's COMPLETED item for `commit`, at `pk`.
    pub fn completed<E>(
        pk: &'a str,
        commit: &'a super::Commit<E>,
        config: &'a StoreConfig,
        now_ms: u64,
    ) -> Self {
        Self {
            pk,
            status: Status::Completed,
            owner: &commit.owner,
            payload_hash: &commit.payload_hash,
            lock_expires_at_ms: None,
            expires_at_s: config.expires_at_s(now_ms),
            now_ms,
            origin: commit.origin.as_deref(),
            result: commit.result.as_deref(),
            outbox: commit.effects.outbox.as_deref(),
            error: None,
            scope: config.scope.as_deref(),
        }
    }

    /// A lock-free failure's FAILED item, at `pk`.
    pub fn failed(
        pk: &'a str,
        request: super::ClaimRequest<'a>,
        owner: &'a str,
        error: &'a str,
        config: &'a StoreConfig,
        now_ms: u64,
    ) -> Self {
        Self {
            pk,
            status: Status::Failed,
            owner,
            payload_hash: request.payload_hash,
            lock_expires_at_ms: None,
            expires_at_s: config.expires_at_s(now_ms),
            now_ms,
            origin: request.origin,
            result: None,
            outbox: None,
            error: Some(error),
            scope: config.scope.as_deref(),
        }
    }
}
