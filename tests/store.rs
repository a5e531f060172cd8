//! The key state machine against DynamoDB Local.

mod support;

use exactly_once::Store;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use exactly_once::clock::now_ms;
use exactly_once::{ClaimOutcome, ClaimRequest, DynamoDbStore, Lease, Status, StoreError};
use support::{number, raw_item, store, string};
use tokio::sync::Barrier;

const LONG_LOCK: Duration = Duration::from_secs(30);
const SHORT_LOCK: Duration = Duration::from_millis(300);

fn request<'a>(key: &'a str, hash: &'a str) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        payload_hash: hash,
        origin: Some("payments-0@15"),
        lease_cap_ms: None,
    }
}

async fn acquire(store: &DynamoDbStore, key: &str, hash: &str) -> Lease {
    match store.claim(request(key, hash)).await.expect("claim") {
        ClaimOutcome::Acquired(lease) | ClaimOutcome::TakenOver(lease) => lease,
        other => panic!("expected to hold {key}, got {other:?}"),
    }
}

async fn wait_for_lock_expiry() {
    tokio::time::sleep(SHORT_LOCK + Duration::from_millis(150)).await;
}

#[tokio::test]
async fn first_claim_creates_a_started_item_at_version_1() {
    let store = store(LONG_LOCK).await;
    let before = now_ms();
    let lease = acquire(&store, "p-1", "h1").await;
    assert_eq!(lease.version, 1);

    let pk = format!("{}p-1", store.config().key_prefix);
    let item = raw_item(&support::client().await, &store.config().table_name, &pk)
        .await
        .expect("the claim wrote an item");
    assert_eq!(string(&item, "status"), "STARTED");
    assert_eq!(number(&item, "version"), 1);
    assert_eq!(string(&item, "owner"), lease.owner);
    assert_eq!(string(&item, "payload_hash"), "h1");
    assert_eq!(string(&item, "origin"), "payments-0@15");
    assert_eq!(number(&item, "attempts"), 1);
    let lock = number(&item, "lock_expires_at");
    assert!(
        lock >= before + 30_000 && lock <= now_ms() + 30_000,
        "lease of 30 s: {lock}"
    );
    let eight_days = 8 * 24 * 3600;
    let expires = number(&item, "expires_at");
    assert!(expires >= before / 1000 + eight_days && expires <= now_ms() / 1000 + eight_days);
}

#[tokio::test]
async fn complete_marks_the_key_completed_and_a_redelivery_is_a_duplicate() {
    let store = store(LONG_LOCK).await;
    let lease = acquire(&store, "p-1", "h1").await;
    store
        .complete(&lease, Some("balance 1250"), vec![])
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

#[tokio::test]
async fn a_key_reused_with_another_payload_is_rejected_in_every_state() {
    let store = store(LONG_LOCK).await;
    let started = acquire(&store, "started", "h1").await;
    let completed = acquire(&store, "completed", "h1").await;
    store
        .complete(&completed, None, vec![])
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

#[tokio::test]
async fn a_live_lock_is_reported_in_progress() {
    let store = store(LONG_LOCK).await;
    let lease = acquire(&store, "p-1", "h1").await;
    match store.claim(request("p-1", "h1")).await.expect("claim") {
        ClaimOutcome::InProgress(stored) => {
            assert_eq!(stored.owner, lease.owner);
            assert_eq!(stored.lock_expires_at_ms, Some(lease.lock_expires_at_ms));
        }
        other => panic!("expected in progress, got {other:?}"),
    }
}

#[tokio::test]
async fn an_expired_lock_is_taken_over_at_version_2() {
    let store = store(SHORT_LOCK).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_16_concurrent_claimers_of_a_fresh_key_exactly_one_wins() {
    let store = store(LONG_LOCK).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_16_concurrent_takers_of_a_stale_lock_exactly_one_wins() {
    let store = store(SHORT_LOCK).await;
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
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn takeovers_of_a_lock_that_keeps_expiring_never_share_a_version() {
    let store = store(Duration::from_millis(1)).await;
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
    versions.sort();
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

/// `n` tasks claim `key` at the same moment.
async fn race(store: &DynamoDbStore, key: &str, n: usize) -> Vec<ClaimOutcome> {
    race_results(store, key, n)
        .await
        .into_iter()
        .map(|result| result.expect("claim"))
        .collect()
}

async fn race_results(
    store: &DynamoDbStore,
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

#[tokio::test]
async fn a_worker_taken_over_can_neither_complete_fail_release_nor_extend() {
    let store = store(SHORT_LOCK).await;
    let old = acquire(&store, "p-1", "h1").await;
    wait_for_lock_expiry().await;
    let new = acquire(&store, "p-1", "h1").await;
    assert_eq!(new.version, 2);

    let lost = |result: Result<(), StoreError>| match result {
        Err(StoreError::LockLost { version: 1, .. }) => {}
        other => panic!("expected lock lost for version 1, got {other:?}"),
    };
    lost(store.complete(&old, Some("late"), vec![]).await.map(|_| ()));
    lost(store.fail(&old, "late").await);
    lost(store.release(&old).await);
    lost(store.extend(&old, now_ms() + 60_000).await.map(|_| ()));

    let item = store.get("p-1").await.expect("get").expect("item");
    assert_eq!(item.status, Status::Started);
    assert_eq!((item.version, &item.owner), (2, &new.owner));
    assert_eq!(item.lock_expires_at_ms, Some(new.lock_expires_at_ms));
    // The new owner's writes still go through.
    store
        .complete(&new, None, vec![])
        .await
        .expect("the new owner completes");
}

#[tokio::test]
async fn an_expired_completed_item_counts_as_absent_and_is_claimable_again() {
    let store = store(LONG_LOCK).await;
    let client = support::client().await;
    let lease = acquire(&store, "old", "h1").await;
    store
        .complete(&lease, None, vec![])
        .await
        .expect("complete");
    // Age the item past its TTL, as if DynamoDB had not deleted it yet.
    client
        .update_item()
        .table_name(&store.config().table_name)
        .key("pk", AttributeValue::S(lease.pk.clone()))
        .update_expression("SET expires_at = :past")
        .expression_attribute_values(
            ":past",
            AttributeValue::N((now_ms() / 1000 - 10).to_string()),
        )
        .send()
        .await
        .expect("age the item");

    assert_eq!(store.get("old").await.expect("get"), None);
    let again = match store.claim(request("old", "h1")).await.expect("claim") {
        ClaimOutcome::Acquired(lease) => lease,
        other => panic!("expected a fresh claim, got {other:?}"),
    };
    assert_ne!(again.owner, lease.owner);
    let item = store.get("old").await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Started, 1));
}

#[tokio::test]
async fn a_released_key_is_claimable_at_once_as_the_next_version() {
    let store = store(LONG_LOCK).await;
    let first = acquire(&store, "p-1", "h1").await;
    store.release(&first).await.expect("release");

    match store.claim(request("p-1", "h1")).await.expect("claim") {
        ClaimOutcome::TakenOver(lease) => assert_eq!(lease.version, 2),
        other => panic!("expected the released key to be taken over, got {other:?}"),
    }
}

#[tokio::test]
async fn a_failed_key_stays_failed() {
    let store = store(SHORT_LOCK).await;
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

#[tokio::test]
async fn a_lease_is_extended_by_its_owner() {
    let store = store(SHORT_LOCK).await;
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
        .complete(&extended, None, vec![])
        .await
        .expect("complete");
}

#[tokio::test]
async fn keys_beyond_dynamodb_limits_are_rejected_before_any_write() {
    let store = store(LONG_LOCK).await;
    let long = "k".repeat(2048);
    for key in ["", long.as_str()] {
        match store.claim(request(key, "h1")).await {
            Err(err @ StoreError::InvalidKey(_)) => assert!(!err.is_retryable()),
            other => panic!("expected an invalid key error, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn an_unreachable_dynamodb_is_a_retryable_error_and_never_a_claim() {
    let store = DynamoDbStore::new(
        support::unreachable_client().await,
        support::store_config(LONG_LOCK),
    );
    match store.claim(request("p-1", "h1")).await {
        Err(err @ StoreError::Unavailable { .. }) => {
            assert!(err.is_retryable());
            assert!(err.to_string().contains("claim (PutItem)"), "{err}");
        }
        other => panic!("expected DynamoDB unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_table_is_a_permanent_rejection() {
    let mut config = support::store_config(LONG_LOCK);
    config.table_name = "no-such-table".into();
    let store = DynamoDbStore::new(support::client().await, config);
    match store.claim(request("p-1", "h1")).await {
        Err(err @ StoreError::Rejected { .. }) => assert!(!err.is_retryable()),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// The old owner completes just as 8 workers try to take its expired lock
/// over: either the completion wins (every taker then sees a duplicate) or
/// one taker wins (the completion is refused as lock lost), never both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_completion_and_concurrent_takers_never_both_win() {
    for round in 0..5 {
        let store = store(SHORT_LOCK).await;
        let key = format!("late-{round}");
        let old = acquire(&store, &key, "h1").await;
        wait_for_lock_expiry().await;

        let barrier = Arc::new(Barrier::new(9));
        let completion = {
            let (store, barrier, old) = (store.clone(), barrier.clone(), old.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                store.complete(&old, None, vec![]).await
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
