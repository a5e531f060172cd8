//! The conformance suite of the key state machine (feature `conformance`):
//! written once against the [`Store`] trait, instantiated per backend with
//! [`conformance_suite!`](crate::conformance_suite) (and
//! [`operator_conformance_suite!`](crate::operator_conformance_suite) for
//! a store that implements [`Operator`]). This repository runs it on
//! DynamoDB Local, PostgreSQL, Redis, a Redis Cluster and the in-memory
//! store; a store written elsewhere runs the same tests. Every behaviour
//! the engine relies on is here, with real concurrent callers where the
//! issue is a race. The generated tests are `#[tokio::test]`s: the crate
//! running them needs `tokio` (features `macros`, `rt-multi-thread`).
//!
//! A backend provides a [`Backend`]: stores on fresh key spaces, a view of
//! the same items under another configuration (clock skew, to see items
//! expire), and effects on counters (a ledger's balances).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::now_ms;
use crate::config::StoreConfig;
use crate::store::{
    Claim, ClaimOutcome, ClaimRequest, Commit, CommitOutcome, Conditional, Effects, FencedWrite,
    Increment, Lease, Listing, Operator, Status, Store, StoreError,
};
use tokio::sync::Barrier;

/// A lock that outlives every test.
pub const LONG_LOCK: Duration = Duration::from_secs(30);
/// A lock that ends while a test waits.
pub const SHORT_LOCK: Duration = Duration::from_millis(300);

/// What the suite needs of a backend.
pub trait Backend: Send + Sync + 'static {
    /// The backend's store.
    type S: Store;

    /// A store on a key space no other test uses, with lock timeout `lock`.
    fn store(&self, lock: Duration) -> impl Future<Output = Self::S> + Send;

    /// The same items as `store`, seen under `config`.
    fn with_config(&self, store: &Self::S, config: StoreConfig) -> Self::S;

    /// An effect adding `add` to `counter`, refused if the counter would
    /// fall below `floor`.
    fn effect(
        &self,
        store: &Self::S,
        counter: &str,
        add: i64,
        floor: Option<i64>,
    ) -> <Self::S as Store>::Effect;

    /// The value of `counter` (0 if never written).
    fn counter(&self, store: &Self::S, counter: &str) -> impl Future<Output = i64> + Send;

    /// The table increments of the suite go to (its items keyed by a
    /// string `account_id`).
    fn ledger_table(&self) -> String;

    /// The number `attribute` of the item `increment` touches (0 if none).
    fn number(
        &self,
        store: &Self::S,
        increment: &Increment,
        attribute: &str,
    ) -> impl Future<Output = i128> + Send;
}

/// Instantiates every test of the suite for `$backend` (an expression of a
/// type implementing [`Backend`]).
#[macro_export]
macro_rules! conformance_suite {
    ($backend:expr) => {
        $crate::conformance_suite!(@each $backend;
            first_claim_creates_a_started_item_at_version_1,
            complete_marks_the_key_completed_and_a_redelivery_is_a_duplicate,
            a_key_reused_with_another_payload_is_rejected_in_every_state,
            a_live_lock_is_reported_in_progress,
            an_expired_lock_is_taken_over_at_version_2,
            of_16_concurrent_claimers_of_a_fresh_key_exactly_one_wins,
            of_16_concurrent_takers_of_a_stale_lock_exactly_one_wins,
            takeovers_of_a_lock_that_keeps_expiring_never_share_a_version,
            a_takeover_from_a_stale_observation_is_refused,
            a_worker_taken_over_can_neither_complete_fail_release_nor_extend,
            an_expired_item_counts_as_absent_and_is_claimable_again,
            a_released_key_is_claimable_at_once_as_the_next_version,
            a_failed_key_stays_failed,
            a_lease_is_extended_by_its_owner,
            keys_beyond_the_store_limit_are_rejected_before_any_write,
            a_late_completion_and_concurrent_takers_never_both_win,
            a_completion_and_its_effect_happen_together_or_not_at_all,
            a_lock_free_commit_writes_every_message_and_effect_or_nothing,
            increments_of_one_item_merge_and_keep_every_floor,
            a_refused_increment_refuses_the_completion,
            lock_free_commits_and_claims_racing_on_one_key_have_one_winner,
            a_lock_free_failure_is_written_only_for_a_new_key,
            batch_reads_return_live_items_by_key,
            a_key_another_scope_holds_is_never_its_duplicate_lock_or_failure,
            an_abandoned_lock_of_another_scope_is_never_taken_over,
            items_written_before_scopes_belong_to_whoever_finds_them,
            claimers_of_two_scopes_racing_on_a_fresh_key_have_one_winner,
            claims_made_together_each_answer_as_alone,
            batched_and_single_claimers_of_one_key_have_one_winner,
            fenced_writes_made_together_each_keep_their_fence,
            a_commit_completes_held_keys_under_their_fence_with_their_effects,
            a_claim_sent_again_recognises_its_own_item,
            a_fenced_write_sent_again_recognises_its_own_write,
            a_commit_sent_again_finds_its_own_items,
            emitted_messages_live_on_the_completed_item_on_every_path,
            an_outbox_is_cleared_only_under_the_owner_that_completed_it,
            a_refused_effect_keeps_no_messages,
            a_new_item_over_an_expired_one_keeps_none_of_its_messages
        );
    };
    (@each $backend:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                $crate::store::conformance::$name(&$backend).await
            }
        )*
    };
}

/// Instantiates the operator's tests of the suite (listings, operator
/// release and retry) for `$backend`, whose store implements
/// [`Operator`](crate::store::Operator) beside [`Store`].
#[macro_export]
macro_rules! operator_conformance_suite {
    ($backend:expr) => {
        $crate::conformance_suite!(@each $backend;
            operator_release_and_retry_act_only_at_the_observed_version,
            listings_find_stuck_and_failed_keys_under_the_prefix,
            the_started_listing_follows_every_transition,
            the_unsent_listing_finds_completions_with_messages_left
        );
    };
}

/// A claim of `key` for a payload fingerprinted `hash`, from `payments-0@15`.
pub fn request<'a>(key: &'a str, hash: &'a str) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        payload_hash: hash,
        origin: Some("payments-0@15"),
        lease_cap_ms: None,
        owner: None,
    }
}

/// Claims `key` and returns its lease; panics if the store does not grant it.
pub async fn acquire<S: Store>(store: &S, key: &str, hash: &str) -> Lease {
    match store.claim(request(key, hash)).await.expect("claim") {
        ClaimOutcome::Acquired(lease) | ClaimOutcome::TakenOver(lease) => lease,
        other => panic!("expected to hold {key}, got {other:?}"),
    }
}

async fn wait_for_lock_expiry() {
    tokio::time::sleep(SHORT_LOCK + Duration::from_millis(150)).await;
}

fn lost<T: std::fmt::Debug>(result: Result<T, StoreError>, version: u64) {
    match result {
        Err(StoreError::LockLost { version: v, .. }) if v == version => {}
        other => panic!("expected lock lost for version {version}, got {other:?}"),
    }
}

/// First claim creates a started item at version 1.
pub async fn first_claim_creates_a_started_item_at_version_1<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let before = store.now_ms();
    let lease = acquire(&store, "p-1", "h1").await;
    assert_eq!(lease.version, 1);
    assert_eq!(lease.pk, format!("{}p-1", store.config().key_prefix));

    let item = store
        .get("p-1")
        .await
        .expect("get")
        .expect("the claim wrote an item");
    assert_eq!((item.status, item.version), (Status::Started, 1));
    assert_eq!(item.pk, lease.pk);
    assert_eq!(item.owner, lease.owner);
    assert_eq!(item.payload_hash, "h1");
    assert_eq!(item.origin.as_deref(), Some("payments-0@15"));
    assert_eq!(item.attempts, Some(1));
    let lock = item.lock_expires_at_ms.expect("a lease");
    assert_eq!(lock, lease.lock_expires_at_ms);
    assert!(
        lock >= before + 30_000 && lock <= store.now_ms() + 30_000,
        "lease of 30 s: {lock}"
    );
    let eight_days = 8 * 24 * 3600;
    assert!(
        item.expires_at_s >= before / 1000 + eight_days
            && item.expires_at_s <= store.now_ms() / 1000 + eight_days
    );
}

/// Complete marks the key completed and a redelivery is a duplicate.
pub async fn complete_marks_the_key_completed_and_a_redelivery_is_a_duplicate<B: Backend>(
    backend: &B,
) {
    let store = backend.store(LONG_LOCK).await;
    let lease = acquire(&store, "p-1", "h1").await;
    store
        .complete(&lease, Some("balance 1250"), vec![].into())
        .await
        .expect("complete");

    let item = store.get("p-1").await.expect("get").expect("item");
    assert_eq!(item.status, Status::Completed);
    assert_eq!(item.result.as_deref(), Some("balance 1250"));
    assert_eq!(item.lock_expires_at_ms, None);

    match store.claim(request("p-1", "h1")).await.expect("claim") {
        ClaimOutcome::Duplicate(stored) => assert_eq!(stored, item),
        other => panic!("expected a duplicate, got {other:?}"),
    }
    // The duplicate check wrote nothing: the item is as the completion left it.
    assert_eq!(store.get("p-1").await.expect("get"), Some(item));
}

/// A key reused with another payload is rejected in every state.
pub async fn a_key_reused_with_another_payload_is_rejected_in_every_state<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let started = acquire(&store, "started", "h1").await;
    let completed = acquire(&store, "completed", "h1").await;
    store
        .complete(&completed, None, vec![].into())
        .await
        .expect("complete");
    let failed = acquire(&store, "failed", "h1").await;
    store.fail(&failed, "bad amount").await.expect("fail");

    for key in ["started", "completed", "failed"] {
        match store.claim(request(key, "h2")).await.expect("claim") {
            ClaimOutcome::PayloadMismatch(stored) => assert_eq!(stored.payload_hash, "h1"),
            other => panic!("{key}: expected a payload mismatch, got {other:?}"),
        }
    }
    let item = store.get("started").await.expect("get").expect("item");
    assert_eq!((item.owner, item.version), (started.owner, 1));
}

/// A live lock is reported in progress.
pub async fn a_live_lock_is_reported_in_progress<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let lease = acquire(&store, "p-1", "h1").await;
    match store.claim(request("p-1", "h1")).await.expect("claim") {
        ClaimOutcome::InProgress(stored) => {
            assert_eq!(stored.owner, lease.owner);
            assert_eq!(stored.lock_expires_at_ms, Some(lease.lock_expires_at_ms));
        }
        other => panic!("expected in progress, got {other:?}"),
    }
}

/// An expired lock is taken over at version 2.
pub async fn an_expired_lock_is_taken_over_at_version_2<B: Backend>(backend: &B) {
    let store = backend.store(SHORT_LOCK).await;
    let first = acquire(&store, "p-1", "h1").await;
    wait_for_lock_expiry().await;

    let second = match store.claim(request("p-1", "h1")).await.expect("claim") {
        ClaimOutcome::TakenOver(lease) => lease,
        other => panic!("expected a takeover, got {other:?}"),
    };
    assert_eq!(second.version, 2);
    assert_ne!(second.owner, first.owner);
    let item = store.get("p-1").await.expect("get").expect("item");
    assert_eq!(item.status, Status::Started);
    assert_eq!(
        (item.version, item.owner.as_str()),
        (2, second.owner.as_str())
    );
    assert_eq!(item.attempts, Some(2));
}

/// Of 16 concurrent claimers of a fresh key exactly one wins.
pub async fn of_16_concurrent_claimers_of_a_fresh_key_exactly_one_wins<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let outcomes = race(&store, "fresh", 16).await;
    let winners = outcomes
        .iter()
        .filter(|o| matches!(o, ClaimOutcome::Acquired(_)))
        .count();
    let in_progress = outcomes
        .iter()
        .filter(|o| matches!(o, ClaimOutcome::InProgress(_)))
        .count();
    assert_eq!((winners, in_progress), (1, 15), "{outcomes:?}");
}

/// Of 16 concurrent takers of a stale lock exactly one wins.
pub async fn of_16_concurrent_takers_of_a_stale_lock_exactly_one_wins<B: Backend>(backend: &B) {
    let store = backend.store(SHORT_LOCK).await;
    acquire(&store, "stale", "h1").await;
    wait_for_lock_expiry().await;

    let outcomes = race(&store, "stale", 16).await;
    let winners: Vec<&Lease> = outcomes
        .iter()
        .filter_map(|o| match o {
            ClaimOutcome::TakenOver(lease) => Some(lease),
            _ => None,
        })
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    assert_eq!(winners[0].version, 2);
    let losers_in_progress = outcomes
        .iter()
        .filter(|o| matches!(o, ClaimOutcome::InProgress(_)))
        .count();
    assert_eq!(losers_in_progress, 15, "{outcomes:?}");
    let item = store.get("stale").await.expect("get").expect("item");
    assert_eq!((item.version, &item.owner), (2, &winners[0].owner));
}

/// Takers whose own leases expire at once keep taking the key from each
/// other: the version guard must give every takeover its own version (without
/// it, two takers that observed the same version would both "win" it).
pub async fn takeovers_of_a_lock_that_keeps_expiring_never_share_a_version<B: Backend>(
    backend: &B,
) {
    let store = backend.store(Duration::from_millis(1)).await;
    acquire(&store, "churn", "h1").await;
    tokio::time::sleep(Duration::from_millis(5)).await;

    // Claimers that keep losing the race give up with a retryable contention.
    let outcomes = race_results(&store, "churn", 16).await;
    let mut versions: Vec<u64> = outcomes
        .iter()
        .filter_map(|o| match o {
            Ok(ClaimOutcome::TakenOver(lease)) => Some(lease.version),
            Ok(ClaimOutcome::InProgress(_)) | Err(StoreError::Contention { .. }) => None,
            other => panic!("unexpected outcome {other:?}"),
        })
        .collect();
    versions.sort_unstable();
    let distinct = versions.len();
    versions.dedup();
    assert_eq!(
        versions.len(),
        distinct,
        "two takers won one version: {outcomes:?}"
    );
    assert!(!versions.is_empty());
    let item = store.get("churn").await.expect("get").expect("item");
    assert_eq!(Some(&item.version), versions.last());
}

/// The version guard, deterministically: a taker that observed version 1
/// acts after another taker won version 2 and released it (so the item is
/// again STARTED with its lock ended): its takeover must be refused, or two
/// workers would both hold version 2.
pub async fn a_takeover_from_a_stale_observation_is_refused<B: Backend>(backend: &B) {
    let store = backend.store(SHORT_LOCK).await;
    acquire(&store, "stale", "h1").await;
    wait_for_lock_expiry().await;
    let observed = store.get("stale").await.expect("get").expect("item");
    let winner = acquire(&store, "stale", "h1").await;
    assert_eq!(winner.version, 2);
    store.release(&winner).await.expect("release");

    match store
        .take_over(&observed, request("stale", "h1"))
        .await
        .expect("take over")
    {
        Conditional::Conflict(Some(item)) => {
            assert_eq!((item.version, &item.owner), (2, &winner.owner));
        }
        other => panic!("a takeover from version 1 must be refused at version 2, got {other:?}"),
    }
    let item = store.get("stale").await.expect("get").expect("item");
    assert_eq!((item.version, &item.owner), (2, &winner.owner));
}

/// `n` tasks claim `key` at the same moment.
async fn race<S: Store>(store: &S, key: &str, n: usize) -> Vec<ClaimOutcome> {
    race_results(store, key, n)
        .await
        .into_iter()
        .map(|result| result.expect("claim"))
        .collect()
}

async fn race_results<S: Store>(
    store: &S,
    key: &str,
    n: usize,
) -> Vec<Result<ClaimOutcome, StoreError>> {
    let barrier = Arc::new(Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let (store, barrier, key) = (store.clone(), barrier.clone(), key.to_owned());
            tokio::spawn(async move {
                barrier.wait().await;
                store.claim(request(&key, "h1")).await
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.expect("claimer task"));
    }
    outcomes
}

/// A worker taken over can neither complete fail release nor extend.
pub async fn a_worker_taken_over_can_neither_complete_fail_release_nor_extend<B: Backend>(
    backend: &B,
) {
    let store = backend.store(SHORT_LOCK).await;
    let counter = format!("c-{}", uuid::Uuid::new_v4());
    let old = acquire(&store, "p-1", "h1").await;
    wait_for_lock_expiry().await;
    let new = acquire(&store, "p-1", "h1").await;
    assert_eq!(new.version, 2);

    let effect = backend.effect(&store, &counter, 5, None);
    lost(store.complete(&old, Some("late"), vec![].into()).await, 1);
    lost(
        store
            .complete(&old, Some("late"), vec![effect].into())
            .await,
        1,
    );
    lost(store.fail(&old, "late").await, 1);
    lost(store.release(&old).await, 1);
    lost(store.extend(&old, now_ms() + 60_000).await, 1);

    let item = store.get("p-1").await.expect("get").expect("item");
    assert_eq!(item.status, Status::Started);
    assert_eq!((item.version, &item.owner), (2, &new.owner));
    assert_eq!(item.lock_expires_at_ms, Some(new.lock_expires_at_ms));
    // The fenced-out completion's effect did not happen either.
    assert_eq!(backend.counter(&store, &counter).await, 0);
    // The new owner's writes still go through.
    store
        .complete(&new, None, vec![].into())
        .await
        .expect("the new owner completes");
}

/// An item past its TTL that the store has not deleted yet counts as absent:
/// seen through a clock just past the retention.
pub async fn an_expired_item_counts_as_absent_and_is_claimable_again<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let lease = acquire(&store, "old", "h1").await;
    store
        .complete(&lease, None, vec![].into())
        .await
        .expect("complete");
    let config = store.config().clone();
    let later = backend.with_config(
        &store,
        StoreConfig {
            clock_offset_ms: (config.retention.as_millis() as i64) + 10_000,
            ..config
        },
    );

    assert_eq!(later.get("old").await.expect("get"), None);
    assert!(later.batch_get(&["old"]).await.expect("batch").is_empty());
    let again = match later.claim(request("old", "h2")).await.expect("claim") {
        ClaimOutcome::Acquired(lease) => lease,
        other => panic!("expected a fresh claim, got {other:?}"),
    };
    assert_ne!(again.owner, lease.owner);
    let item = later.get("old").await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Started, 1));
    assert_eq!(item.payload_hash, "h2");
}

/// A released key is claimable at once as the next version.
pub async fn a_released_key_is_claimable_at_once_as_the_next_version<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let first = acquire(&store, "p-1", "h1").await;
    store.release(&first).await.expect("release");

    match store.claim(request("p-1", "h1")).await.expect("claim") {
        ClaimOutcome::TakenOver(lease) => assert_eq!(lease.version, 2),
        other => panic!("expected the released key to be taken over, got {other:?}"),
    }
}

/// A failed key stays failed.
pub async fn a_failed_key_stays_failed<B: Backend>(backend: &B) {
    let store = backend.store(SHORT_LOCK).await;
    let lease = acquire(&store, "poison", "h1").await;
    store
        .fail(&lease, "amount_cents is not an integer")
        .await
        .expect("fail");
    wait_for_lock_expiry().await;

    for _ in 0..2 {
        match store.claim(request("poison", "h1")).await.expect("claim") {
            ClaimOutcome::PreviouslyFailed(item) => {
                assert_eq!(
                    item.error.as_deref(),
                    Some("amount_cents is not an integer")
                );
            }
            other => panic!("expected the failure again, got {other:?}"),
        }
    }
    let item = store.get("poison").await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Failed, 1));
}

/// A lease is extended by its owner.
pub async fn a_lease_is_extended_by_its_owner<B: Backend>(backend: &B) {
    let store = backend.store(SHORT_LOCK).await;
    let lease = acquire(&store, "slow", "h1").await;
    let extended = store
        .extend(&lease, now_ms() + 30_000)
        .await
        .expect("extend");
    wait_for_lock_expiry().await;
    match store.claim(request("slow", "h1")).await.expect("claim") {
        ClaimOutcome::InProgress(item) => {
            assert_eq!(item.lock_expires_at_ms, Some(extended.lock_expires_at_ms));
        }
        other => panic!("an extended lease must still hold, got {other:?}"),
    }
    store
        .complete(&extended, None, vec![].into())
        .await
        .expect("complete");
}

/// Keys beyond the store limit are rejected before any write.
pub async fn keys_beyond_the_store_limit_are_rejected_before_any_write<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let long = "k".repeat(<B::S as Store>::MAX_KEY_BYTES);
    for key in ["", long.as_str()] {
        match store.claim(request(key, "h1")).await {
            Err(err @ StoreError::InvalidKey(_)) => assert!(!err.is_retryable()),
            other => panic!("expected an invalid key error, got {other:?}"),
        }
    }
}

/// The old owner completes just as 8 workers try to take its expired lock
/// over: either the completion wins (every taker then sees a duplicate) or
/// one taker wins (the completion is refused as lock lost), never both.
pub async fn a_late_completion_and_concurrent_takers_never_both_win<B: Backend>(backend: &B) {
    for round in 0..5 {
        let store = backend.store(SHORT_LOCK).await;
        let key = format!("late-{round}");
        let old = acquire(&store, &key, "h1").await;
        wait_for_lock_expiry().await;

        let barrier = Arc::new(Barrier::new(9));
        let completion = {
            let (store, barrier, old) = (store.clone(), barrier.clone(), old.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.complete(&old, None, vec![].into()).await
            })
        };
        let takers: Vec<_> = (0..8)
            .map(|_| {
                let (store, barrier, key) = (store.clone(), barrier.clone(), key.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.claim(request(&key, "h1")).await
                })
            })
            .collect();
        let completed = completion.await.expect("completion task");
        let mut taken = 0;
        for taker in takers {
            match taker.await.expect("taker task").expect("claim") {
                ClaimOutcome::TakenOver(_) => taken += 1,
                ClaimOutcome::Duplicate(_) | ClaimOutcome::InProgress(_) => {}
                other => panic!("unexpected claim outcome {other:?}"),
            }
        }
        let item = store.get(&key).await.expect("get").expect("item");
        match completed {
            Ok(_) => {
                assert_eq!(taken, 0, "a COMPLETED key was taken over");
                assert_eq!((item.status, item.version), (Status::Completed, 1));
            }
            Err(StoreError::LockLost { .. }) => {
                assert_eq!(taken, 1, "exactly one taker wins");
                assert_eq!((item.status, item.version), (Status::Started, 2));
            }
            Err(other) => panic!("unexpected completion error {other}"),
        }
    }
}

/// The locking path's transactional completion: a refused effect leaves the
/// key STARTED and no effect at all; an accepted one commits with COMPLETED.
pub async fn a_completion_and_its_effect_happen_together_or_not_at_all<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let (a, b) = (
        format!("a-{}", uuid::Uuid::new_v4()),
        format!("b-{}", uuid::Uuid::new_v4()),
    );
    let lease = acquire(&store, "pay", "h1").await;
    // b would go below 0: nothing happens, a's credit neither.
    let refused = store
        .complete(
            &lease,
            Some("r"),
            vec![
                backend.effect(&store, &a, 100, None),
                backend.effect(&store, &b, -5, Some(0)),
            ]
            .into(),
        )
        .await;
    match refused {
        Err(StoreError::EffectConditionFailed { effect: 1, .. }) => {}
        other => panic!("expected effect 1 refused, got {other:?}"),
    }
    assert_eq!(
        (
            backend.counter(&store, &a).await,
            backend.counter(&store, &b).await
        ),
        (0, 0)
    );
    let item = store.get("pay").await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Started, 1));

    // Too many effects for one transaction: refused before any write.
    let many = (0..=<B::S as Store>::MAX_EFFECTS)
        .map(|i| backend.effect(&store, &format!("{a}-{i}"), 1, None))
        .collect::<Vec<_>>();
    match store.complete(&lease, None, many.into()).await {
        Err(err @ StoreError::TooManyWrites { .. }) => assert!(!err.is_retryable()),
        other => panic!("expected too many writes, got {other:?}"),
    }

    store
        .complete(
            &lease,
            Some("r"),
            vec![
                backend.effect(&store, &a, 100, None),
                backend.effect(&store, &b, 5, Some(0)),
            ]
            .into(),
        )
        .await
        .expect("complete with the effect");
    assert_eq!(
        (
            backend.counter(&store, &a).await,
            backend.counter(&store, &b).await
        ),
        (100, 5)
    );
    let item = store.get("pay").await.expect("get").expect("item");
    assert_eq!(
        (item.status, item.result.as_deref()),
        (Status::Completed, Some("r"))
    );
}

fn new_commit<E>(key: &str, hash: &str, effects: Vec<E>) -> Commit<E> {
    Commit {
        key: key.to_owned(),
        payload_hash: hash.to_owned(),
        origin: Some(format!("payments-0@{key}")),
        owner: uuid::Uuid::new_v4().to_string(),
        result: Some(format!("applied {key}")),
        effects: effects.into(),
        held: None,
    }
}

/// A message adding `by` to the balance of `account` (floor 0) and 1 to
/// its payment count, as the demo ledger does.
fn payment<B: Backend>(backend: &B, account: &str, by: i64) -> Increment {
    Increment::new(backend.ledger_table(), "account_id", account)
        .add_at_least("balance_cents", by, 0)
        .add("payment_count", 1)
}

fn incrementing<E>(key: &str, increment: Increment) -> Commit<E> {
    Commit {
        effects: Effects {
            increments: vec![increment],
            ..Effects::default()
        },
        ..new_commit(key, "h1", Vec::new())
    }
}

/// Lock-free: the increments of one item from several messages commit as
/// ONE merged update, accepted exactly when the messages, one after
/// another, would all be; a refusal writes nothing and tells the numbers
/// it found (from which the engine finds the message that overdraws).
pub async fn increments_of_one_item_merge_and_keep_every_floor<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let account = format!("hot-{}", uuid::Uuid::new_v4());
    let pay = |by| payment(backend, &account, by);
    let committed = |outcome: CommitOutcome| {
        assert!(
            matches!(outcome, CommitOutcome::Committed { .. }),
            "{outcome:?}"
        );
    };
    committed(
        store
            .commit(vec![incrementing("i-0", pay(5))])
            .await
            .expect("commit"),
    );
    // 5 +10 -20 +100: the sum (95) is fine, but the second step (-5) is
    // not. Nothing is written.
    let outcome = store
        .commit(vec![
            incrementing("i-1", pay(10)),
            incrementing("i-2", pay(-20)),
            incrementing("i-3", pay(100)),
        ])
        .await
        .expect("commit");
    let found = HashMap::from([
        ("balance_cents".to_owned(), 5),
        ("payment_count".to_owned(), 1),
    ]);
    match outcome {
        CommitOutcome::IncrementRefused { item, current } => {
            assert_eq!(item, pay(0).item());
            assert_eq!(current, Some(found));
        }
        other => panic!("expected the merged increment refused, got {other:?}"),
    }
    assert_eq!(store.get("i-1").await.expect("get"), None);
    assert_eq!(backend.number(&store, &pay(0), "balance_cents").await, 5);
    // 5 +10 -15 +100: every step stays at 0 or above: one update.
    committed(
        store
            .commit(vec![
                incrementing("i-1", pay(10)),
                incrementing("i-2", pay(-15)),
                incrementing("i-3", pay(100)),
            ])
            .await
            .expect("commit"),
    );
    assert_eq!(backend.number(&store, &pay(0), "balance_cents").await, 100);
    assert_eq!(backend.number(&store, &pay(0), "payment_count").await, 4);
    for key in ["i-1", "i-2", "i-3"] {
        let item = store.get(key).await.expect("get").expect("item");
        assert_eq!(item.status, Status::Completed);
    }
}

/// Locking path: a completion whose increment a floor refuses writes
/// nothing and names the increment (after the writes).
pub async fn a_refused_increment_refuses_the_completion<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let (account, counter) = (
        format!("acc-{}", uuid::Uuid::new_v4()),
        format!("c-{}", uuid::Uuid::new_v4()),
    );
    let lease = acquire(&store, "pay", "h1").await;
    let effects = |by| Effects {
        writes: vec![backend.effect(&store, &counter, 1, None)],
        increments: vec![payment(backend, &account, by)],
        outbox: None,
    };
    match store.complete(&lease, None, effects(-1)).await {
        Err(StoreError::EffectConditionFailed { effect: 1, .. }) => {}
        other => panic!("expected the increment refused, got {other:?}"),
    }
    assert_eq!(backend.counter(&store, &counter).await, 0);
    store
        .complete(&lease, Some("ok"), effects(7))
        .await
        .expect("complete");
    let item = payment(backend, &account, 0);
    assert_eq!(backend.number(&store, &item, "balance_cents").await, 7);
    assert_eq!(backend.counter(&store, &counter).await, 1);
}

/// Lock-free: several messages and their effects in one commit, or nothing,
/// and the commit says which message stopped it.
pub async fn a_lock_free_commit_writes_every_message_and_effect_or_nothing<B: Backend>(
    backend: &B,
) {
    let store = backend.store(LONG_LOCK).await;
    let (a, b) = (
        format!("a-{}", uuid::Uuid::new_v4()),
        format!("b-{}", uuid::Uuid::new_v4()),
    );
    acquire(&store, "taken", "h1").await;

    // The second message's key is not new: nothing of the commit happens.
    let outcome = store
        .commit(vec![
            new_commit("m-1", "h1", vec![backend.effect(&store, &a, 10, None)]),
            new_commit("taken", "h1", vec![backend.effect(&store, &b, 10, None)]),
        ])
        .await
        .expect("commit");
    match outcome {
        CommitOutcome::KeyTaken { index: 1, item } => {
            let item = item.expect("the item found");
            assert_eq!((item.status, item.version), (Status::Started, 1));
        }
        other => panic!("expected the second key taken, got {other:?}"),
    }
    // The second message's effect is refused: nothing happens either.
    let outcome = store
        .commit(vec![
            new_commit("m-1", "h1", vec![backend.effect(&store, &a, 10, None)]),
            new_commit("m-2", "h1", vec![backend.effect(&store, &b, -1, Some(0))]),
        ])
        .await
        .expect("commit");
    match outcome {
        CommitOutcome::EffectRefused {
            index: 1,
            effect: 0,
            ..
        } => {}
        other => panic!("expected the second effect refused, got {other:?}"),
    }
    assert_eq!(store.get("m-1").await.expect("get"), None);
    assert_eq!(store.get("m-2").await.expect("get"), None);
    assert_eq!(backend.counter(&store, &a).await, 0);

    let outcome = store
        .commit(vec![
            new_commit("m-1", "h1", vec![backend.effect(&store, &a, 10, None)]),
            new_commit("m-2", "h2", vec![backend.effect(&store, &b, 3, Some(0))]),
        ])
        .await
        .expect("commit");
    let CommitOutcome::Committed { expires_at_s, .. } = outcome else {
        panic!("expected a commit, got {outcome:?}");
    };
    for (key, hash) in [("m-1", "h1"), ("m-2", "h2")] {
        let item = store.get(key).await.expect("get").expect("item");
        assert_eq!(
            (item.status, item.version, item.payload_hash.as_str()),
            (Status::Completed, 1, hash)
        );
        assert_eq!(item.expires_at_s, expires_at_s);
        assert_eq!(item.result, Some(format!("applied {key}")));
    }
    assert_eq!(
        (
            backend.counter(&store, &a).await,
            backend.counter(&store, &b).await
        ),
        (10, 3)
    );
    // Committed once: the same message again is refused with the item.
    let again = store
        .commit(vec![new_commit(
            "m-1",
            "h1",
            vec![backend.effect(&store, &a, 10, None)],
        )])
        .await
        .expect("commit");
    assert!(
        matches!(again, CommitOutcome::KeyTaken { index: 0, item: Some(ref item) } if item.status == Status::Completed),
        "{again:?}"
    );
    assert_eq!(backend.counter(&store, &a).await, 10);
}

/// 4 lock-free committers and 4 claimers of one new key at the same moment:
/// exactly one of the 8 wins; the effect happened iff a commit won.
pub async fn lock_free_commits_and_claims_racing_on_one_key_have_one_winner<B: Backend>(
    backend: &B,
) {
    for round in 0..5 {
        let store = backend.store(LONG_LOCK).await;
        let counter = format!("c-{}", uuid::Uuid::new_v4());
        let key = format!("race-{round}");
        let barrier = Arc::new(Barrier::new(8));
        let mut commits = Vec::new();
        let mut claims = Vec::new();
        for _ in 0..4 {
            let effect = backend.effect(&store, &counter, 7, None);
            let (committer, barrier_c, key_c) = (store.clone(), barrier.clone(), key.clone());
            commits.push(tokio::spawn(async move {
                barrier_c.wait().await;
                let commit = new_commit(&key_c, "h1", vec![effect]);
                committer.commit(vec![commit]).await
            }));
            let (claimer, barrier_c, key_c) = (store.clone(), barrier.clone(), key.clone());
            claims.push(tokio::spawn(async move {
                barrier_c.wait().await;
                claimer.claim(request(&key_c, "h1")).await
            }));
        }
        let mut committed = 0;
        for commit in commits {
            match commit.await.expect("task").expect("commit") {
                CommitOutcome::Committed { .. } => committed += 1,
                CommitOutcome::KeyTaken { index: 0, .. } => {}
                other => panic!("unexpected commit outcome {other:?}"),
            }
        }
        let mut acquired = 0;
        for claim in claims {
            match claim.await.expect("task").expect("claim") {
                ClaimOutcome::Acquired(_) => acquired += 1,
                ClaimOutcome::Duplicate(_) | ClaimOutcome::InProgress(_) => {}
                other => panic!("unexpected claim outcome {other:?}"),
            }
        }
        assert_eq!(committed + acquired, 1, "one winner of 8");
        let item = store.get(&key).await.expect("get").expect("item");
        let expected = match committed {
            1 => (Status::Completed, 7),
            _ => (Status::Started, 0),
        };
        assert_eq!(
            (item.status, backend.counter(&store, &counter).await),
            expected
        );
    }
}

/// A lock free failure is written only for a new key.
pub async fn a_lock_free_failure_is_written_only_for_a_new_key<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let written = store
        .fail_new(request("poison", "h1"), "o-1", "not a payment")
        .await
        .expect("fail new");
    assert_eq!(written, Conditional::Written(()));
    let item = store.get("poison").await.expect("get").expect("item");
    assert_eq!(
        (item.status, item.version, item.owner.as_str()),
        (Status::Failed, 1, "o-1")
    );
    assert_eq!(item.error.as_deref(), Some("not a payment"));

    match store
        .fail_new(request("poison", "h1"), "o-2", "again")
        .await
        .expect("fail new")
    {
        Conditional::Conflict(Some(found)) => assert_eq!(*found, item),
        other => panic!("expected the item found, got {other:?}"),
    }
    match store.claim(request("poison", "h1")).await.expect("claim") {
        ClaimOutcome::PreviouslyFailed(found) => assert_eq!(found, item),
        other => panic!("expected previously failed, got {other:?}"),
    }
}

/// The same items as `store`, seen by the function whose scope is `scope`
/// (`None`: a caller that writes no scope, as before scopes existed).
pub fn in_scope<B: Backend>(backend: &B, store: &B::S, scope: Option<&str>) -> B::S {
    let config = StoreConfig {
        scope: scope.map(str::to_owned),
        ..store.config().clone()
    };
    backend.with_config(store, config)
}

/// Two functions on one table and one key prefix: a key that function A
/// completed, failed or holds is, for function B, neither a duplicate, nor
/// its failure, nor its lock to wait for: B is refused on every path (claim,
/// lock-free commit, lock-free failure) and A's items stay as they were.
/// A third function that shares A's scope on purpose sees A's items as its
/// own.
pub async fn a_key_another_scope_holds_is_never_its_duplicate_lock_or_failure<B: Backend>(
    backend: &B,
) {
    let store = backend.store(LONG_LOCK).await;
    let a = in_scope(backend, &store, Some("payments-a"));
    let b = in_scope(backend, &store, Some("payments-b"));
    let completed = acquire(&a, "completed", "h1").await;
    a.complete(&completed, Some("paid"), vec![].into())
        .await
        .expect("complete");
    acquire(&a, "started", "h1").await;
    let failed = acquire(&a, "failed", "h1").await;
    a.fail(&failed, "bad amount").await.expect("fail");
    let keys = ["completed", "started", "failed"];
    let mut items = HashMap::new();
    for key in keys {
        let item = a.get(key).await.expect("get").expect("item");
        assert_eq!(item.scope.as_deref(), Some("payments-a"), "{key}");
        items.insert(key, item);
    }

    for key in keys {
        match b.claim(request(key, "h1")).await.expect("claim") {
            ClaimOutcome::OtherScope(found) => assert_eq!(found, items[key]),
            other => panic!("{key}: B must be refused, got {other:?}"),
        }
        let counter = format!("c-{}", uuid::Uuid::new_v4());
        let commit = Commit {
            key: key.to_owned(),
            payload_hash: "h1".into(),
            origin: None,
            owner: "b-owner".into(),
            result: Some("paid by b".into()),
            effects: vec![backend.effect(&b, &counter, 5, None)].into(),
            held: None,
        };
        match b.commit(vec![commit]).await.expect("commit") {
            CommitOutcome::KeyTaken {
                index: 0,
                item: Some(found),
            } => {
                let standing = found.standing(b.config(), "h1", "", b.now_ms());
                assert_eq!(standing, crate::store::Standing::OtherScope, "{key}");
            }
            other => panic!("{key}: B's lock-free commit must find A's item, got {other:?}"),
        }
        assert_eq!(backend.counter(&b, &counter).await, 0, "{key}: no effect");
        match b.fail_new(request(key, "h1"), "b-owner", "x").await {
            Ok(Conditional::Conflict(Some(found))) => assert_eq!(*found, items[key]),
            other => panic!("{key}: B's lock-free failure must find A's item, got {other:?}"),
        }
        assert_eq!(a.get(key).await.expect("get").as_ref(), Some(&items[key]));
    }
    // A hint only: B's batch read shows A's items with their scope.
    let found = b.batch_get(&["completed"]).await.expect("batch get");
    assert_eq!(found["completed"].scope.as_deref(), Some("payments-a"));

    // A itself, and a function sharing A's scope on purpose, see its items.
    let shared = in_scope(backend, &store, Some("payments-a"));
    for who in [&a, &shared] {
        match who.claim(request("completed", "h1")).await.expect("claim") {
            ClaimOutcome::Duplicate(found) => assert_eq!(found.result.as_deref(), Some("paid")),
            other => panic!("expected a duplicate, got {other:?}"),
        }
        assert!(matches!(
            who.claim(request("started", "h1")).await.expect("claim"),
            ClaimOutcome::InProgress(_)
        ));
        assert!(matches!(
            who.claim(request("failed", "h1")).await.expect("claim"),
            ClaimOutcome::PreviouslyFailed(_)
        ));
    }
}

/// An abandoned lock of function A is not function B's to take over: B's
/// claim is refused, a takeover B attempts from what it read is refused by
/// the store's own condition, and A then takes it over as version 2.
pub async fn an_abandoned_lock_of_another_scope_is_never_taken_over<B: Backend>(backend: &B) {
    let store = backend.store(SHORT_LOCK).await;
    let a = in_scope(backend, &store, Some("payments-a"));
    let b = in_scope(backend, &store, Some("payments-b"));
    acquire(&a, "stale", "h1").await;
    wait_for_lock_expiry().await;
    let observed = b.get("stale").await.expect("get").expect("item");

    assert!(matches!(
        b.claim(request("stale", "h1")).await.expect("claim"),
        ClaimOutcome::OtherScope(_)
    ));
    match b
        .take_over(&observed, request("stale", "h1"))
        .await
        .expect("take over")
    {
        Conditional::Conflict(Some(found)) => assert_eq!(*found, observed),
        other => panic!("B's takeover of A's lock must be refused, got {other:?}"),
    }
    let taken = match a.claim(request("stale", "h1")).await.expect("claim") {
        ClaimOutcome::TakenOver(lease) => lease,
        other => panic!("A takes its own lock over, got {other:?}"),
    };
    assert_eq!(taken.version, 2);
    let item = a.get("stale").await.expect("get").expect("item");
    assert_eq!(
        (item.version, item.scope.as_deref()),
        (2, Some("payments-a"))
    );
}

/// Items written before scopes (none on the item) stay usable after an
/// upgrade: a completed one is the finding function's duplicate (nothing
/// runs again), and an abandoned lock is taken over and then carries the
/// taker's scope, so another function is refused from then on.
pub async fn items_written_before_scopes_belong_to_whoever_finds_them<B: Backend>(backend: &B) {
    let store = backend.store(SHORT_LOCK).await;
    let old = in_scope(backend, &store, None);
    let a = in_scope(backend, &store, Some("payments-a"));
    let b = in_scope(backend, &store, Some("payments-b"));
    let done = acquire(&old, "done", "h1").await;
    old.complete(&done, Some("paid"), vec![].into())
        .await
        .expect("complete");
    assert_eq!(
        old.get("done").await.expect("get").expect("item").scope,
        None
    );
    match a.claim(request("done", "h1")).await.expect("claim") {
        ClaimOutcome::Duplicate(found) => assert_eq!(found.result.as_deref(), Some("paid")),
        other => panic!("an item from before scopes is a duplicate, got {other:?}"),
    }

    acquire(&old, "abandoned", "h1").await;
    wait_for_lock_expiry().await;
    let taken = acquire(&a, "abandoned", "h1").await;
    assert_eq!(taken.version, 2);
    let item = a.get("abandoned").await.expect("get").expect("item");
    assert_eq!(item.scope.as_deref(), Some("payments-a"));
    assert!(matches!(
        b.claim(request("abandoned", "h1")).await.expect("claim"),
        ClaimOutcome::OtherScope(_)
    ));
    // An unscoped caller meets a scoped item as another scope's.
    assert!(matches!(
        old.claim(request("abandoned", "h1")).await.expect("claim"),
        ClaimOutcome::OtherScope(_)
    ));
}

/// 8 claimers of function A and 8 of function B claim one fresh key at the
/// same moment: exactly one wins; the others of its scope find it in
/// progress, every one of the other scope is refused.
pub async fn claimers_of_two_scopes_racing_on_a_fresh_key_have_one_winner<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let scopes = ["payments-a", "payments-b"];
    let barrier = Arc::new(Barrier::new(16));
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let scope = scopes[i % 2];
            let claimer = in_scope(backend, &store, Some(scope));
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                (scope, claimer.claim(request("fresh", "h1")).await)
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        let (scope, outcome) = task.await.expect("claimer task");
        outcomes.push((scope, outcome.expect("claim")));
    }
    let winners: Vec<&str> = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, ClaimOutcome::Acquired(_)))
        .map(|(scope, _)| *scope)
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    for (scope, outcome) in &outcomes {
        match outcome {
            ClaimOutcome::Acquired(_) => {}
            ClaimOutcome::InProgress(_) if *scope == winners[0] => {}
            ClaimOutcome::OtherScope(item) if *scope != winners[0] => {
                assert_eq!(item.scope.as_deref(), Some(winners[0]));
            }
            other => panic!("{scope}: {other:?} (winner {})", winners[0]),
        }
    }
}

/// An owned claim of `key` for a payload fingerprinted `hash`.
pub fn claim_of(key: &str, hash: &str) -> Claim {
    Claim {
        key: key.to_owned(),
        payload_hash: hash.to_owned(),
        origin: Some("payments-0@15".into()),
        lease_cap_ms: None,
        owner: crate::store::new_owner(None),
    }
}

/// Claims made together in one batched request: each answers what it would
/// have answered alone (new keys acquired, a duplicate, a live lock, a
/// failure, a key reused, an abandoned lock taken over, an item past its
/// TTL claimed again, a key too long refused), and none depends on another.
pub async fn claims_made_together_each_answer_as_alone<B: Backend>(backend: &B) {
    let store = backend.store(SHORT_LOCK).await;
    let done = acquire(&store, "done", "h1").await;
    store
        .complete(&done, Some("paid"), vec![].into())
        .await
        .expect("complete");
    let failed = acquire(&store, "failed", "h1").await;
    store.fail(&failed, "bad").await.expect("fail");
    acquire(&store, "stale", "h1").await;
    wait_for_lock_expiry().await;
    let live = in_scope(backend, &store, store.config().scope.as_deref());
    let live = backend.with_config(
        &live,
        StoreConfig {
            lock_timeout: LONG_LOCK,
            ..live.config().clone()
        },
    );
    acquire(&live, "live", "h1").await;
    acquire(&live, "reused", "h1").await;
    let too_long = "k".repeat(<B::S as Store>::MAX_KEY_BYTES + 1);
    let claims: Vec<Claim> = [
        "new-1", "done", "live", "failed", "stale", "reused", "new-2", &too_long,
    ]
    .iter()
    .map(|key| claim_of(key, if *key == "reused" { "h2" } else { "h1" }))
    .collect();
    let outcomes = claim_many(&store, &claims).await;
    let names: Vec<String> = outcomes
        .iter()
        .map(|outcome| match outcome {
            Ok(ClaimOutcome::Acquired(lease)) => format!("acquired v{}", lease.version),
            Ok(ClaimOutcome::TakenOver(lease)) => format!("taken over v{}", lease.version),
            Ok(ClaimOutcome::Duplicate(item)) => format!("duplicate {:?}", item.result),
            Ok(ClaimOutcome::InProgress(_)) => "in progress".into(),
            Ok(ClaimOutcome::PreviouslyFailed(_)) => "failed".into(),
            Ok(ClaimOutcome::PayloadMismatch(_)) => "mismatch".into(),
            Ok(ClaimOutcome::OtherScope(_)) => "other scope".into(),
            Err(StoreError::InvalidKey(_)) => "invalid key".into(),
            Err(err) => format!("error {err}"),
        })
        .collect();
    assert_eq!(
        names,
        [
            "acquired v1",
            "duplicate Some(\"paid\")",
            "in progress",
            "failed",
            "taken over v2",
            "mismatch",
            "acquired v1",
            "invalid key"
        ]
    );
    for key in ["new-1", "new-2"] {
        let item = store.get(key).await.expect("get").expect("item");
        assert_eq!((item.status, item.version), (Status::Started, 1), "{key}");
    }
    // An item past its TTL is claimed again in a batch, as alone.
    let config = store.config().clone();
    let later = backend.with_config(
        &store,
        StoreConfig {
            clock_offset_ms: (config.retention.as_millis() as i64) + 10_000,
            ..config
        },
    );
    let again = claim_many(&later, &[claim_of("done", "h2"), claim_of("new-3", "h1")]).await;
    assert!(
        matches!(
            again[..],
            [Ok(ClaimOutcome::Acquired(_)), Ok(ClaimOutcome::Acquired(_))]
        ),
        "{again:?}"
    );
    assert!(claim_many(&store, &[]).await.is_empty());
}

/// [`Store::claim_many`]'s answers, in the claims' order.
async fn claim_many<S: Store>(
    store: &S,
    claims: &[Claim],
) -> Vec<Result<ClaimOutcome, StoreError>> {
    let answers = std::sync::Mutex::new(claims.iter().map(|_| None).collect::<Vec<_>>());
    store
        .claim_many(claims, |i, outcome| {
            answers.lock().expect("answers")[i] = Some(outcome);
        })
        .await;
    answers
        .into_inner()
        .expect("answers")
        .into_iter()
        .map(|answer| answer.expect("every claim answered"))
        .collect()
}

/// 8 batched claimers (each with a key of its own beside) and 8 single
/// claimers claim one fresh key at the same moment: exactly one wins it,
/// every other is told it is in progress, every own key is acquired.
pub async fn batched_and_single_claimers_of_one_key_have_one_winner<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let barrier = Arc::new(Barrier::new(16));
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (store, barrier) = (store.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                match i % 2 {
                    0 => {
                        let claims = [
                            claim_of("shared", "h1"),
                            claim_of(&format!("own-{i}"), "h1"),
                        ];
                        claim_many(&store, &claims).await
                    }
                    _ => vec![store.claim(request("shared", "h1")).await],
                }
            })
        })
        .collect();
    let mut shared = Vec::new();
    for task in tasks {
        let mut outcomes = task.await.expect("claimer").into_iter();
        shared.push(outcomes.next().expect("the shared key's").expect("claim"));
        for own in outcomes {
            assert!(matches!(own, Ok(ClaimOutcome::Acquired(_))), "{own:?}");
        }
    }
    let winners = shared
        .iter()
        .filter(|o| matches!(o, ClaimOutcome::Acquired(_)))
        .count();
    let in_progress = shared
        .iter()
        .filter(|o| matches!(o, ClaimOutcome::InProgress(_)))
        .count();
    assert_eq!((winners, in_progress), (1, 15), "{shared:?}");
}

/// Fenced writes made together: each keeps its own fence (a worker taken
/// over is refused, alone), and each does what it would alone.
pub async fn fenced_writes_made_together_each_keep_their_fence<B: Backend>(backend: &B) {
    let store = backend.store(SHORT_LOCK).await;
    let stale = acquire(&store, "stale", "h1").await;
    wait_for_lock_expiry().await;
    let taker = acquire(&store, "stale", "h1").await;
    let done = acquire(&store, "done", "h1").await;
    let failed = acquire(&store, "failed", "h1").await;
    let released = acquire(&store, "released", "h1").await;
    let extended = acquire(&store, "extended", "h1").await;
    let until = store.now_ms() + 60_000;
    let writes = [
        (
            done.clone(),
            FencedWrite::Complete {
                result: Some("paid".into()),
            },
        ),
        (
            stale.clone(),
            FencedWrite::Complete {
                result: Some("late".into()),
            },
        ),
        (
            failed.clone(),
            FencedWrite::Fail {
                error: "bad amount".into(),
            },
        ),
        (released.clone(), FencedWrite::Release),
        (extended.clone(), FencedWrite::Extend { until_ms: until }),
    ];
    let answers = store.write_fenced(&writes).await;
    assert_eq!(answers.len(), 5);
    assert!(
        answers[0].as_ref().is_ok_and(|expires| *expires > 0),
        "{:?}",
        answers[0]
    );
    lost(answers[1].clone(), 1);
    assert!(answers[2].is_ok() && answers[3].is_ok(), "{answers:?}");
    assert_eq!(answers[4].as_ref().ok(), Some(&until));
    let item = |key: &'static str| {
        let store = store.clone();
        async move { store.get(key).await.expect("get").expect("item") }
    };
    let done_item = item("done").await;
    assert_eq!(
        (done_item.status, done_item.result.as_deref()),
        (Status::Completed, Some("paid"))
    );
    assert_eq!(
        done_item.expires_at_s,
        *answers[0].as_ref().expect("expires")
    );
    let stale_item = item("stale").await;
    assert_eq!(
        (stale_item.status, &stale_item.owner),
        (Status::Started, &taker.owner)
    );
    let failed_item = item("failed").await;
    assert_eq!(
        (failed_item.status, failed_item.error.as_deref()),
        (Status::Failed, Some("bad amount"))
    );
    assert_eq!(item("released").await.lock_expires_at_ms, Some(0));
    assert_eq!(item("extended").await.lock_expires_at_ms, Some(until));
    assert!(store.write_fenced(&[]).await.is_empty());
}

/// The locking path's commit: held keys completed under their fences with
/// their effects, beside a new key, in one transaction; a held key taken
/// over meanwhile refuses the whole transaction (nothing written) and is
/// named.
pub async fn a_commit_completes_held_keys_under_their_fence_with_their_effects<B: Backend>(
    backend: &B,
) {
    let store = backend.store(SHORT_LOCK).await;
    // A counter per message: a transaction writes an item once.
    let counter = |key: &str| format!("c-{key}-{}", store.config().key_prefix);
    let held = |lease: &Lease, key: &str, by: i64| Commit {
        owner: lease.owner.clone(),
        held: Some(lease.clone()),
        ..new_commit(
            key,
            "h1",
            vec![backend.effect(&store, &counter(key), by, None)],
        )
    };
    let total = async |keys: &[&str]| {
        let mut total = 0;
        for key in keys {
            total += backend.counter(&store, &counter(key)).await;
        }
        total
    };
    let first = acquire(&store, "held-1", "h1").await;
    let second = acquire(&store, "held-2", "h1").await;
    let outcome = store
        .commit(vec![
            held(&first, "held-1", 5),
            new_commit(
                "new",
                "h1",
                vec![backend.effect(&store, &counter("new"), 1, None)],
            ),
            held(&second, "held-2", 7),
        ])
        .await
        .expect("commit");
    assert!(
        matches!(outcome, CommitOutcome::Committed { .. }),
        "{outcome:?}"
    );
    assert_eq!(total(&["held-1", "new", "held-2"]).await, 13);
    for (key, version) in [("held-1", 1), ("held-2", 1), ("new", 1)] {
        let item = store.get(key).await.expect("get").expect("item");
        assert_eq!(
            (item.status, item.version),
            (Status::Completed, version),
            "{key}"
        );
        assert_eq!(
            item.result.as_deref(),
            Some(format!("applied {key}").as_str())
        );
        assert_eq!(item.lock_expires_at_ms, None, "{key}");
    }

    // A held key taken over meanwhile: nothing of the transaction happens.
    let kept = acquire(&store, "held-3", "h1").await;
    let stale = acquire(&store, "held-4", "h1").await;
    wait_for_lock_expiry().await;
    let kept = store
        .extend(&kept, store.now_ms() + 60_000)
        .await
        .expect("extend");
    acquire(&store, "held-4", "h1").await;
    let outcome = store
        .commit(vec![
            held(&kept, "held-3", 100),
            held(&stale, "held-4", 100),
        ])
        .await
        .expect("commit");
    assert!(
        matches!(outcome, CommitOutcome::KeyTaken { index: 1, .. }),
        "{outcome:?}"
    );
    assert_eq!(total(&["held-3", "held-4"]).await, 0);
    let item = store.get("held-3").await.expect("get").expect("item");
    assert_eq!(item.status, Status::Started);
}

/// A claim sent again (its first answer lost or late, the write made)
/// carries the same owner and finds its own item: the lease it holds, at
/// the version it wrote, never "in progress" under itself; alone, batched,
/// and as a take-over. A claim under another owner still finds it in
/// progress.
pub async fn a_claim_sent_again_recognises_its_own_item<B: Backend>(backend: &B) {
    let store = backend.store(SHORT_LOCK).await;
    let owner = crate::store::new_owner(Some("invocation"));
    let mine = ClaimRequest {
        owner: Some(&owner),
        ..request("p-1", "h1")
    };
    let first = match store.claim(mine).await.expect("claim") {
        ClaimOutcome::Acquired(lease) => lease,
        other => panic!("expected to acquire, got {other:?}"),
    };
    assert_eq!(first.owner, owner);
    match store.claim(mine).await.expect("claim sent again") {
        ClaimOutcome::Acquired(lease) => assert_eq!(lease, first),
        other => panic!("expected its own lease again, got {other:?}"),
    }
    let answers = std::sync::Mutex::new(Vec::new());
    let claim = Claim {
        owner: owner.clone(),
        ..claim_of("p-1", "h1")
    };
    store
        .claim_many(std::slice::from_ref(&claim), |_, outcome| {
            answers.lock().expect("answers").push(outcome);
        })
        .await;
    match answers.into_inner().expect("answers").as_slice() {
        [Ok(ClaimOutcome::Acquired(lease))] => assert_eq!(lease, &first),
        other => panic!("expected its own lease again in a batch, got {other:?}"),
    }
    match store.claim(request("p-1", "h1")).await.expect("claim") {
        ClaimOutcome::InProgress(item) => assert_eq!(item.owner, owner),
        other => panic!("another owner: expected in progress, got {other:?}"),
    }

    // A take-over sent again: its own lease at version 2.
    wait_for_lock_expiry().await;
    let taker = crate::store::new_owner(None);
    let taking = ClaimRequest {
        owner: Some(&taker),
        ..request("p-1", "h1")
    };
    let taken = match store.claim(taking).await.expect("take over") {
        ClaimOutcome::TakenOver(lease) => lease,
        other => panic!("expected a take-over, got {other:?}"),
    };
    assert_eq!((taken.version, taken.owner.as_str()), (2, taker.as_str()));
    match store.claim(taking).await.expect("take-over sent again") {
        ClaimOutcome::TakenOver(lease) => assert_eq!(lease, taken),
        other => panic!("expected its own lease at version 2, got {other:?}"),
    }
    let item = store.get("p-1").await.expect("get").expect("item");
    assert_eq!((item.version, item.attempts), (2, Some(2)));
}

/// A fenced write sent again after its first attempt was applied finds
/// the version and owner it wrote: a completion answers as it did (its
/// effect applied once), a failure too, alone and batched; the same write
/// by a worker taken over is still refused (the lock lost).
pub async fn a_fenced_write_sent_again_recognises_its_own_write<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let counter = format!("c-{}", uuid::Uuid::new_v4());
    let lease = acquire(&store, "paid", "h1").await;
    let effect = || Effects::from(vec![backend.effect(&store, &counter, 5, None)]);
    let expires = store
        .complete(&lease, Some("paid"), effect())
        .await
        .expect("complete");
    let again = store.complete(&lease, Some("paid"), effect()).await;
    assert_eq!(again.expect("sent again: made"), expires);
    assert_eq!(backend.counter(&store, &counter).await, 5, "applied once");
    let alone = acquire(&store, "alone", "h1").await;
    let expires = store
        .complete(&alone, None, Effects::default())
        .await
        .expect("complete");
    let again = store.complete(&alone, None, Effects::default()).await;
    assert_eq!(again.expect("sent again: made"), expires);

    let failed = acquire(&store, "failed", "h1").await;
    store.fail(&failed, "bad amount").await.expect("fail");
    store
        .fail(&failed, "bad amount")
        .await
        .expect("sent again: made");
    // A completion of a key this lease failed is not made: refused.
    lost(store.complete(&failed, None, Effects::default()).await, 1);

    let done = acquire(&store, "done", "h1").await;
    let failing = acquire(&store, "failing", "h1").await;
    let writes = [
        (
            done.clone(),
            FencedWrite::Complete {
                result: Some("paid".into()),
            },
        ),
        (
            failing.clone(),
            FencedWrite::Fail {
                error: "bad".into(),
            },
        ),
    ];
    let first = store.write_fenced(&writes).await;
    let again = store.write_fenced(&writes).await;
    assert!(first.iter().all(Result::is_ok), "{first:?}");
    assert_eq!(
        again.iter().map(|a| a.as_ref().ok()).collect::<Vec<_>>(),
        first.iter().map(|a| a.as_ref().ok()).collect::<Vec<_>>(),
        "sent again: made, answering as the first"
    );
    let item = store.get("done").await.expect("get").expect("item");
    assert_eq!(
        (item.status, item.result.as_deref()),
        (Status::Completed, Some("paid"))
    );
}

/// A commit sent again after the first was applied: a held key's item
/// shows its own completion (the version and owner of its lease), a new
/// key's its own owner; the effects applied once.
pub async fn a_commit_sent_again_finds_its_own_items<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let counter = |key: &str| format!("c-{key}-{}", store.config().key_prefix);
    let lease = acquire(&store, "held", "h1").await;
    let commits = || {
        vec![
            Commit {
                owner: lease.owner.clone(),
                held: Some(lease.clone()),
                ..new_commit(
                    "held",
                    "h1",
                    vec![backend.effect(&store, &counter("held"), 3, None)],
                )
            },
            new_commit(
                "new",
                "h1",
                vec![backend.effect(&store, &counter("new"), 4, None)],
            ),
        ]
    };
    let first = commits();
    let new_owner = first[1].owner.clone();
    let outcome = store.commit(first).await.expect("commit");
    assert!(
        matches!(outcome, CommitOutcome::Committed { .. }),
        "{outcome:?}"
    );
    // The second send carries the same owners.
    let again: Vec<_> = commits()
        .into_iter()
        .map(|commit| match commit.held {
            Some(_) => commit,
            None => Commit {
                owner: new_owner.clone(),
                ..commit
            },
        })
        .collect();
    match store
        .commit(again.clone())
        .await
        .expect("commit sent again")
    {
        CommitOutcome::KeyTaken {
            index: 0,
            item: Some(item),
        } => assert!(lease.finished_as(&item, Status::Completed), "{item:?}"),
        other => panic!("expected the held key taken, with its item, got {other:?}"),
    }
    match store
        .commit(again[1..].to_vec())
        .await
        .expect("commit sent again")
    {
        CommitOutcome::KeyTaken {
            index: 0,
            item: Some(item),
        } => {
            let standing = item.standing(store.config(), "h1", &new_owner, store.now_ms());
            assert_eq!(standing, crate::store::Standing::Ours);
        }
        other => panic!("expected the new key taken, with its item, got {other:?}"),
    }
    assert_eq!(
        (
            backend.counter(&store, &counter("held")).await,
            backend.counter(&store, &counter("new")).await
        ),
        (3, 4),
        "applied once"
    );
}

/// Operator release and retry act only at the observed version.
pub async fn operator_release_and_retry_act_only_at_the_observed_version<B: Backend>(backend: &B)
where
    B::S: Operator,
{
    let store = backend.store(LONG_LOCK).await;
    // Release: only the STARTED item at the version seen.
    let lease = acquire(&store, "stuck", "h1").await;
    match store.release_version("stuck", 2).await {
        Err(StoreError::NotInState {
            version: 2, found, ..
        }) => {
            assert_eq!(found, "STARTED at version 1");
        }
        other => panic!("expected not in state, got {other:?}"),
    }
    store.release_version("stuck", 1).await.expect("release");
    let item = store.get("stuck").await.expect("get").expect("item");
    assert_eq!(
        (item.owner.as_str(), item.lock_expires_at_ms),
        (lease.owner.as_str(), Some(0))
    );
    match store.claim(request("stuck", "h1")).await.expect("claim") {
        ClaimOutcome::TakenOver(next) => assert_eq!(next.version, 2),
        other => panic!("expected a takeover at version 2, got {other:?}"),
    }
    match store.release_version("absent", 1).await {
        Err(StoreError::NotInState { found, .. }) => assert_eq!(found, "absent"),
        other => panic!("expected not in state, got {other:?}"),
    }

    // Retry: only the FAILED item at the version seen; its error is kept.
    let poison = acquire(&store, "poison", "h1").await;
    store.fail(&poison, "bad amount").await.expect("fail");
    assert!(matches!(
        store.retry_failed("poison", 2).await,
        Err(StoreError::NotInState { .. })
    ));
    assert!(matches!(
        store.retry_failed("stuck", 2).await,
        Err(StoreError::NotInState { .. })
    ));
    store.retry_failed("poison", 1).await.expect("retry");
    let item = store.get("poison").await.expect("get").expect("item");
    assert_eq!(
        (item.status, item.version, item.error.as_deref()),
        (Status::Started, 1, None)
    );
    assert_eq!(item.last_error.as_deref(), Some("bad amount"));
    match store.claim(request("poison", "h1")).await.expect("claim") {
        ClaimOutcome::TakenOver(next) => assert_eq!(next.version, 2),
        other => panic!("expected a takeover at version 2, got {other:?}"),
    }
}

/// Batch reads return live items by key.
pub async fn batch_reads_return_live_items_by_key<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let done = acquire(&store, "done", "h1").await;
    store
        .complete(&done, Some("ok"), vec![].into())
        .await
        .expect("complete");
    acquire(&store, "running", "h2").await;
    let too_long = "k".repeat(<B::S as Store>::MAX_KEY_BYTES);
    let found = store
        .batch_get(&["done", "running", "absent", "", &too_long])
        .await
        .expect("batch get");
    let mut keys: Vec<&str> = found.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["done", "running"]);
    assert_eq!(found["done"].result.as_deref(), Some("ok"));
    assert_eq!(found["running"].status, Status::Started);
}

/// Listings find stuck and failed keys under the prefix.
pub async fn listings_find_stuck_and_failed_keys_under_the_prefix<B: Backend>(backend: &B)
where
    B::S: Operator,
{
    let store = backend.store(LONG_LOCK).await;
    let _live = acquire(&store, "live", "h1").await;
    let released = acquire(&store, "released", "h1").await;
    store.release(&released).await.expect("release");
    let failed = acquire(&store, "failed", "h1").await;
    store.fail(&failed, "bad").await.expect("fail");
    let done = acquire(&store, "done", "h1").await;
    store
        .complete(&done, None, vec![].into())
        .await
        .expect("complete");
    // Another function's keys (another prefix) are never listed.
    let other = backend.store(LONG_LOCK).await;
    let theirs = acquire(&other, "released", "h1").await;
    other.release(&theirs).await.expect("release");

    let names = |listed: crate::store::Listed| {
        let mut keys: Vec<String> = listed
            .items
            .iter()
            .map(|item| {
                item.pk
                    .trim_start_matches(&store.config().key_prefix)
                    .to_owned()
            })
            .collect();
        keys.sort();
        keys
    };
    let stuck = store
        .list(Listing::Stuck {
            older_than: Duration::from_secs(3600),
        })
        .await
        .expect("list");
    assert_eq!(names(stuck), ["released"]);
    // Old enough: a live lock is listed too.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let old = store
        .list(Listing::Stuck {
            older_than: Duration::from_millis(10),
        })
        .await
        .expect("list");
    assert_eq!(names(old), ["live", "released"]);
    let failed = store.list(Listing::Failed).await.expect("list");
    assert_eq!(names(failed), ["failed"]);
}

/// Every STARTED key under the store's prefix (`older_than` zero: all of
/// them), as the scheduled stuck-key check lists them: through each
/// backend's index of STARTED items (a sparse GSI, a partial index, a
/// sorted set), which every transition must keep exact.
async fn all_started<S: Operator>(store: &S) -> Vec<String> {
    // Created strictly before the listing's now.
    tokio::time::sleep(Duration::from_millis(2)).await;
    let listed = store
        .list(Listing::Stuck {
            older_than: Duration::ZERO,
        })
        .await
        .expect("list");
    let prefix = &store.config().key_prefix;
    let mut keys: Vec<String> = listed
        .items
        .iter()
        .map(|item| item.pk.trim_start_matches(prefix.as_str()).to_owned())
        .collect();
    keys.sort();
    keys
}

/// The started listing follows every transition.
pub async fn the_started_listing_follows_every_transition<B: Backend>(backend: &B)
where
    B::S: Operator,
{
    let store = backend.store(LONG_LOCK).await;
    let completed = acquire(&store, "completed", "h1").await;
    let failed = acquire(&store, "failed", "h1").await;
    let released = acquire(&store, "released", "h1").await;
    let extended = acquire(&store, "extended", "h1").await;
    assert_eq!(
        all_started(&store).await,
        ["completed", "extended", "failed", "released"],
        "claims are listed"
    );
    let done = store.complete(&completed, None, vec![].into());
    done.await.expect("complete");
    store.fail(&failed, "bad").await.expect("fail");
    store.release(&released).await.expect("release");
    let until = now_ms() + 60_000;
    store.extend(&extended, until).await.expect("extend");
    assert_eq!(
        all_started(&store).await,
        ["extended", "released"],
        "completed and failed keys leave; released and extended ones stay"
    );
    let taken = match store.claim(request("released", "h1")).await.expect("claim") {
        ClaimOutcome::TakenOver(lease) => lease,
        other => panic!("expected a takeover, got {other:?}"),
    };
    assert_eq!(all_started(&store).await, ["extended", "released"]);
    let done = store.complete(&taken, Some("ok"), vec![].into());
    done.await.expect("complete");
    assert_eq!(
        all_started(&store).await,
        ["extended"],
        "taken over, then done"
    );
    store.retry_failed("failed", 1).await.expect("retry");
    assert_eq!(
        all_started(&store).await,
        ["extended", "failed"],
        "an operator's retry makes a FAILED key STARTED again"
    );
    // The lock-free path writes COMPLETED and FAILED items directly.
    let committed = store
        .commit(vec![new_commit::<<B::S as Store>::Effect>(
            "direct",
            "h1",
            vec![],
        )])
        .await
        .expect("commit");
    assert!(
        matches!(committed, CommitOutcome::Committed { .. }),
        "{committed:?}"
    );
    let poison = store.fail_new(request("poison", "h1"), "o-1", "not a payment");
    assert_eq!(poison.await.expect("fail new"), Conditional::Written(()));
    assert_eq!(all_started(&store).await, ["extended", "failed"]);
}

/// An outbox text as the engine writes it (`crate::store::outbox::encode`).
fn outbox_of(key: &str) -> String {
    let message =
        crate::store::outbox::Message::new("https://sqs/1/payments", format!("applied {key}"));
    crate::store::outbox::encode(&[message]).expect("one message")
}

/// The messages a record emits live on its COMPLETED item, written by the
/// completion itself on every path (a lock-free commit, a held key's group
/// commit, a completion alone and one with effects), and come back with
/// the item to a duplicate's claim.
pub async fn emitted_messages_live_on_the_completed_item_on_every_path<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let emitting = |key: &str, effects: Vec<<B::S as Store>::Effect>| {
        let mut commit = new_commit(key, "h1", effects);
        commit.effects.outbox = Some(outbox_of(key));
        commit
    };
    // Lock-free, and a held key's completion in the same group.
    let held = acquire(&store, "held", "h1").await;
    let mut held_commit = emitting("held", Vec::new());
    held_commit.held = Some(held);
    let counter = format!("c-{}", uuid::Uuid::new_v4());
    let commits = vec![
        emitting("new", vec![backend.effect(&store, &counter, 1, None)]),
        held_commit,
    ];
    match store.commit(commits).await.expect("commit") {
        CommitOutcome::Committed { .. } => {}
        other => panic!("expected committed, got {other:?}"),
    }
    // The locking path: alone, and with an effect in its transaction.
    for (key, effects) in [
        ("alone", Vec::new()),
        (
            "with-effect",
            vec![backend.effect(&store, &counter, 1, None)],
        ),
    ] {
        let lease = acquire(&store, key, "h1").await;
        let effects = Effects {
            outbox: Some(outbox_of(key)),
            ..Effects::from(effects)
        };
        store
            .complete(&lease, Some("r"), effects)
            .await
            .expect("complete");
    }
    assert_eq!(backend.counter(&store, &counter).await, 2);
    for key in ["new", "held", "alone", "with-effect"] {
        let item = store.get(key).await.expect("get").expect("item");
        assert_eq!(
            (item.status, item.outbox),
            (Status::Completed, Some(outbox_of(key))),
            "{key}"
        );
        match store.claim(request(key, "h1")).await.expect("claim") {
            ClaimOutcome::Duplicate(item) => assert_eq!(item.outbox, Some(outbox_of(key))),
            other => panic!("expected a duplicate of {key}, got {other:?}"),
        }
    }
}

/// Clearing an outbox once its messages were sent is fenced on the owner
/// that completed the item: under another owner nothing changes.
pub async fn an_outbox_is_cleared_only_under_the_owner_that_completed_it<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let mut commit = new_commit("p-1", "h1", Vec::new());
    commit.effects.outbox = Some(outbox_of("p-1"));
    let owner = commit.owner.clone();
    store.commit(vec![commit]).await.expect("commit");
    let pk = store.pk("p-1").expect("pk");
    let sent = |owner: &str| crate::store::outbox::Pending {
        pk: pk.clone(),
        owner: owner.to_owned(),
        messages: Vec::new(),
    };
    store
        .outbox_sent(&[sent("someone-else")])
        .await
        .expect("clear under another owner");
    let item = store.get("p-1").await.expect("get").expect("item");
    assert_eq!(item.outbox, Some(outbox_of("p-1")), "another owner's clear");
    store
        .outbox_sent(&[sent(&owner), sent(&owner)])
        .await
        .expect("clear");
    let item = store.get("p-1").await.expect("get").expect("item");
    assert_eq!((item.status, item.outbox), (Status::Completed, None));
    assert_eq!(
        item.result.as_deref(),
        Some("applied p-1"),
        "the rest stays"
    );
}

/// A commit whose effect is refused writes nothing, its messages
/// included: a refused payment is never announced.
pub async fn a_refused_effect_keeps_no_messages<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let account = format!("acc-{}", uuid::Uuid::new_v4());
    let mut commit = incrementing("overdraw", payment(backend, &account, -5));
    commit.effects.outbox = Some(outbox_of("overdraw"));
    match store.commit(vec![commit]).await.expect("commit") {
        CommitOutcome::IncrementRefused { .. } => {}
        other => panic!("expected the increment refused, got {other:?}"),
    }
    assert_eq!(store.get("overdraw").await.expect("get"), None);
    let lease = acquire(&store, "overdraw-held", "h1").await;
    let effects = Effects {
        increments: vec![payment(backend, &account, -5)],
        outbox: Some(outbox_of("overdraw-held")),
        ..Effects::default()
    };
    match store.complete(&lease, None, effects).await {
        Err(StoreError::EffectConditionFailed { .. }) => {}
        other => panic!("expected the increment refused, got {other:?}"),
    }
    let item = store
        .get("overdraw-held")
        .await
        .expect("get")
        .expect("item");
    assert_eq!((item.status, item.outbox), (Status::Started, None));
}

/// A key claimed again past its TTL starts a new item: the expired one's
/// messages are not its own.
pub async fn a_new_item_over_an_expired_one_keeps_none_of_its_messages<B: Backend>(backend: &B) {
    let store = backend.store(LONG_LOCK).await;
    let mut commit = new_commit("old", "h1", Vec::new());
    commit.effects.outbox = Some(outbox_of("old"));
    store.commit(vec![commit]).await.expect("commit");
    let config = store.config().clone();
    let later = backend.with_config(
        &store,
        StoreConfig {
            clock_offset_ms: (config.retention.as_millis() as i64) + 10_000,
            ..config
        },
    );
    let claimed = [
        later.claim(request("old", "h2")).await.expect("claim"),
        // The same through a batched claim.
        {
            let mut commit = new_commit("old-2", "h1", Vec::new());
            commit.effects.outbox = Some(outbox_of("old-2"));
            store.commit(vec![commit]).await.expect("commit");
            let claims = vec![Claim {
                key: "old-2".into(),
                payload_hash: "h2".into(),
                origin: None,
                lease_cap_ms: None,
                owner: "again".into(),
            }];
            claim_many(&later, &claims).await.remove(0).expect("claim")
        },
    ];
    for (key, claimed) in ["old", "old-2"].into_iter().zip(claimed) {
        assert!(
            matches!(claimed, ClaimOutcome::Acquired(_)),
            "{key}: {claimed:?}"
        );
        let item = later.get(key).await.expect("get").expect("item");
        assert_eq!((item.status, item.outbox), (Status::Started, None), "{key}");
    }
}

/// The sweeper's listing: COMPLETED keys whose messages are not known
/// sent, completed before the cutoff, under the prefix; none once cleared.
pub async fn the_unsent_listing_finds_completions_with_messages_left<B: Backend>(backend: &B)
where
    B::S: Operator,
{
    let store = backend.store(LONG_LOCK).await;
    // Every write that keeps messages: a new key's commit, a held key's in
    // a group, a held key's completion alone.
    let mut emitting = new_commit("emitting", "h1", Vec::new());
    emitting.effects.outbox = Some(outbox_of("emitting"));
    let mut held = new_commit("held", "h1", Vec::new());
    held.effects.outbox = Some(outbox_of("held"));
    let lease = acquire(&store, "held", "h1").await;
    held.owner = lease.owner.clone();
    held.held = Some(lease);
    let silent = new_commit("silent", "h1", Vec::new());
    let owners = [emitting.owner.clone(), held.owner.clone()];
    store
        .commit(vec![emitting, held, silent])
        .await
        .expect("commit");
    let alone = acquire(&store, "alone", "h1").await;
    let effects = Effects {
        outbox: Some(outbox_of("alone")),
        ..Effects::default()
    };
    store
        .complete(&alone, Some("r"), effects)
        .await
        .expect("complete");
    let unsent = |older_than| {
        let store = store.clone();
        async move {
            let listed = store
                .list(Listing::Unsent { older_than })
                .await
                .expect("list");
            let mut keys: Vec<(String, Option<String>)> = listed
                .items
                .into_iter()
                .map(|item| (item.pk, item.outbox))
                .collect();
            keys.sort();
            keys
        }
    };
    let pk = |key: &str| store.pk(key).expect("pk");
    // Completed strictly before the cutoff.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut expected: Vec<(String, Option<String>)> = ["emitting", "held", "alone"]
        .into_iter()
        .map(|key| (pk(key), Some(outbox_of(key))))
        .collect();
    expected.sort();
    assert_eq!(unsent(Duration::ZERO).await, expected);
    assert_eq!(unsent(Duration::from_secs(3600)).await, vec![], "too young");
    let [emitting_owner, held_owner] = owners;
    let sent: Vec<crate::store::outbox::Pending> = [
        ("emitting", emitting_owner),
        ("held", held_owner),
        ("alone", alone.owner.clone()),
    ]
    .into_iter()
    .map(|(key, owner)| crate::store::outbox::Pending {
        pk: pk(key),
        owner,
        messages: Vec::new(),
    })
    .collect();
    store.outbox_sent(&sent[..2]).await.expect("clear");
    assert_eq!(
        unsent(Duration::ZERO).await,
        vec![(pk("alone"), Some(outbox_of("alone")))]
    );
    store.outbox_sent(&sent[2..]).await.expect("clear");
    assert_eq!(unsent(Duration::ZERO).await, vec![]);
}
