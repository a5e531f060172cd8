//! The store's transitions as pure functions of the item found: each guard
//! is the condition every backend writes beside its transition (a DynamoDB
//! condition expression, a SQL `WHERE`, a Lua check), next to the change it
//! allows. The in-memory store applies them under its mutex; the model
//! checker (`crates/model`) explores every interleaving of them; the
//! conformance suite holds the other backends to the memory store's answers.

use super::{Lease, Status, StoredItem, bounded};
use crate::config::StoreConfig;

/// Whether a claim, a lock-free commit or a lock-free failure may create
/// the key's item over `found` at `now_ms` (the writer's clock).
pub fn may_create(found: Option<&StoredItem>, now_ms: u64) -> bool {
    // Invariant: one live item per key; a create never replaces an item
    // that has not passed its TTL.
    found.is_none_or(|item| item.is_expired(now_ms))
}

/// Whether a take-over of the item its taker saw at `observed_version` may
/// be written over `found` at `now_ms` (the taker's clock), by a store
/// configured as `config`.
pub fn may_take_over(
    found: &StoredItem,
    observed_version: u64,
    config: &StoreConfig,
    now_ms: u64,
) -> bool {
    // Invariant: of all takers that saw this version, exactly one wins, only
    // while the lock is still abandoned (not renewed, not finished), and
    // only of its own scope's item (or one without any).
    (found.version == observed_version || mutated!(TakeOverIgnoresVersion))
        && found.status == Status::Started
        && (found.lock_expired(now_ms) || mutated!(TakeOverIgnoresLease))
        && (config.owns(found.scope.as_deref()) || mutated!(TakeOverIgnoresScope))
}

/// Whether a write of `lease`'s holder (complete, fail, release, extend)
/// may change `found`.
pub fn fence_holds(found: Option<&StoredItem>, lease: &Lease) -> bool {
    // Invariant: only the current owner of a STARTED item writes to it; a
    // worker taken over (new version, new owner) is fenced out.
    found.is_some_and(|item| {
        item.status == Status::Started
            && item.version == lease.version
            && (item.owner == lease.owner || mutated!(FenceIgnoresOwner))
    })
}

/// Whether an operator's write that expects `expected` at `version` may
/// change `found`.
pub fn operator_may(found: &StoredItem, expected: Status, version: u64) -> bool {
    // Invariant: only the item in the status and at the version the
    // operator saw changes; one taken over or finished since does not.
    found.status == expected && found.version == version
}

/// `item` taken over by `lease` (the next version) at `now_ms`: its new
/// owner, lease and TTL, one more attempt, and this store's scope if it had
/// none.
pub fn take_over(item: &mut StoredItem, lease: &Lease, config: &StoreConfig, now_ms: u64) {
    item.owner.clone_from(&lease.owner);
    item.version = lease.version;
    item.lock_expires_at_ms = Some(lease.lock_expires_at_ms);
    item.expires_at_s = config.expires_at_s(now_ms);
    item.updated_at_ms = Some(now_ms);
    item.attempts = Some(item.attempts.unwrap_or(0) + 1);
    if item.scope.is_none() {
        item.scope.clone_from(&config.scope);
    }
}

/// `item` COMPLETED with `result` and the messages of `outbox` at `now_ms`;
/// its new TTL.
pub fn complete(
    item: &mut StoredItem,
    result: Option<String>,
    outbox: Option<String>,
    config: &StoreConfig,
    now_ms: u64,
) -> u64 {
    item.status = Status::Completed;
    item.result = result;
    item.outbox = outbox;
    item.expires_at_s = config.expires_at_s(now_ms);
    item.lock_expires_at_ms = None;
    item.updated_at_ms = Some(now_ms);
    item.expires_at_s
}

/// `item` FAILED for good with `error` at `now_ms`.
pub fn fail(item: &mut StoredItem, error: &str, config: &StoreConfig, now_ms: u64) {
    item.status = Status::Failed;
    item.error = Some(bounded(error).to_owned());
    item.expires_at_s = config.expires_at_s(now_ms);
    item.lock_expires_at_ms = None;
    item.updated_at_ms = Some(now_ms);
}

/// Whether a clearing of the outbox of the item completed under `owner`
/// may change `found`.
pub fn may_clear_outbox(found: Option<&StoredItem>, owner: &str) -> bool {
    // Invariant: only the messages of the completion that was sent are
    // cleared; a later item of the key (past its TTL, claimed again) keeps
    // its own.
    found.is_some_and(|item| item.status == Status::Completed && item.owner == owner)
}

/// `item`'s lease moved to end at `until_ms` (a release: now or 0; an
/// extension: later), at `now_ms`.
pub fn extend(item: &mut StoredItem, until_ms: u64, now_ms: u64) {
    item.lock_expires_at_ms = Some(until_ms);
    item.updated_at_ms = Some(now_ms);
}
