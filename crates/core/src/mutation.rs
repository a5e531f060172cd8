//! Mutations of the protocol's guards, for the model checker's tests only
//! (feature `mutations`, never in a shipped build): each weakens one guard
//! the way a plausible bug would, so that a test can show the checker
//! finding the counterexample (`crates/model`, docs/guarantees.md). Without
//! the feature every guard reads `mutated!(…)` as `false`.

use std::cell::Cell;

/// One guard weakened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// A take-over ignores the version it observed (two takers both win).
    TakeOverIgnoresVersion,
    /// A take-over ignores whether the lease ran out (a live lock taken).
    TakeOverIgnoresLease,
    /// A take-over ignores the item's scope (another function's key taken).
    TakeOverIgnoresScope,
    /// A fenced write (completion, failure, extension) ignores the owner.
    FenceIgnoresOwner,
    /// The judge ignores the item's scope (another function's key judged
    /// as this one's duplicate, lock or failure).
    JudgeIgnoresScope,
    /// An item counts as expired when its lease ran out, not its TTL.
    ExpiryReadsLease,
    /// A claim sent again takes an item of its payload for its own write.
    ResendOwnsByPayload,
    /// The pre-check and caches trust an item of any status as completed.
    CacheTrustsAnyStatus,
    /// A lane keeps its claims made ahead while it waits on a foreign lease.
    ClaimsKeptWhileWaiting,
    /// The key handed downstream is the attempt's (its owner token), not
    /// the item's.
    DownstreamKeyPerAttempt,
    /// A record's messages are sent as its handler returns, before the
    /// write that completes its key (which may then be refused).
    SendBeforeCommit,
    /// The pre-check trusts a COMPLETED item whose messages are still in
    /// its outbox (a duplicate skipped without sending what was left).
    CacheTrustsUnsent,
}

impl Mutation {
    /// Every mutation.
    pub const ALL: &[Self] = &[
        Self::TakeOverIgnoresVersion,
        Self::TakeOverIgnoresLease,
        Self::TakeOverIgnoresScope,
        Self::FenceIgnoresOwner,
        Self::JudgeIgnoresScope,
        Self::ExpiryReadsLease,
        Self::ResendOwnsByPayload,
        Self::CacheTrustsAnyStatus,
        Self::ClaimsKeptWhileWaiting,
        Self::DownstreamKeyPerAttempt,
        Self::SendBeforeCommit,
        Self::CacheTrustsUnsent,
    ];
}

thread_local! {
    static ACTIVE: Cell<Option<Mutation>> = const { Cell::new(None) };
}

/// Whether `mutation` is active on this thread.
pub fn active(mutation: Mutation) -> bool {
    ACTIVE.with(|active| active.get() == Some(mutation))
}

/// Runs `f` with `mutation` active on this thread (and none after).
pub fn with<T>(mutation: Mutation, f: impl FnOnce() -> T) -> T {
    ACTIVE.with(|active| active.set(Some(mutation)));
    let result = f();
    ACTIVE.with(|active| active.set(None));
    result
}
