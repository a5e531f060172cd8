//! Transactional completion: the work's DynamoDB writes commit in one
//! transaction with the fenced transition to COMPLETED (locking path) or
//! with the new COMPLETED item (lock-free path, `TEST_LEDGER_MODE`).

use crate::support;

use exactly_once::store::Store;
use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use exactly_once::engine::{
    CommitPath, Completion, ConditionFailure, FencingToken, HandlerError, RecordHandler,
};
use exactly_once::lambda::KafkaRecord;
use exactly_once::store::ClaimOutcome;
use exactly_once::store::ClaimRequest;
use exactly_once::store::Status;
use exactly_once::store::StoreError;
use support::msk::{account, balance, event, header_keys, invoke, payment, reported};

/// An `ADD balance_cents` on `account`, optionally only if `condition` holds.
fn add(account: &str, amount: i64, condition: Option<&str>) -> TransactWriteItem {
    let update = Update::builder()
        .table_name(support::env("LEDGER_TABLE"))
        .set_key(Some(HashMap::from([(
            "account_id".to_owned(),
            AttributeValue::S(account.to_owned()),
        )])))
        .update_expression("ADD balance_cents :amount")
        .set_condition_expression(condition.map(str::to_owned))
        .set_expression_attribute_values(Some(HashMap::from([(
            ":amount".to_owned(),
            AttributeValue::N(amount.to_string()),
        )])))
        .build()
        .expect("a valid update");
    TransactWriteItem::builder().update(update).build()
}

#[tokio::test]
async fn a_worker_taken_over_commits_neither_its_effect_nor_its_completion() {
    let store = support::store(Duration::from_millis(200)).await;
    let a = account();
    let request = ClaimRequest {
        key: "p-1",
        payload_hash: "h",
        origin: None,
        lease_cap_ms: None,
        owner: None,
    };
    let ClaimOutcome::Acquired(old) = store.claim(request).await.expect("claim") else {
        panic!("fresh key");
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ClaimOutcome::TakenOver(new) = store.claim(request).await.expect("claim") else {
        panic!("stale lock");
    };

    let late = store
        .complete(&old, None, vec![add(&a, 100, None)].into())
        .await;
    assert!(
        matches!(late, Err(StoreError::LockLost { version: 1, .. })),
        "{late:?}"
    );
    assert_eq!(balance(&a).await, 0);

    store
        .complete(&new, Some("done"), vec![add(&a, 100, None)].into())
        .await
        .expect("the owner commits");
    assert_eq!(balance(&a).await, 100);
    let item = store.get("p-1").await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Completed, 2));
}

/// Debits an account only if it holds enough: the effect's own condition.
struct Debit {
    account: String,
    on_condition_failure: ConditionFailure,
    writes: usize,
}

impl RecordHandler<TransactWriteItem> for Debit {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        support::msk::commit_path()
    }

    async fn handle(
        &self,
        _: &FencingToken,
        _: &KafkaRecord,
    ) -> Result<Completion<TransactWriteItem>, HandlerError> {
        let guarded = add(&self.account, -500, Some("balance_cents >= :amount"));
        let mut writes = vec![guarded];
        writes.extend((1..self.writes).map(|i| add(&format!("{}-{i}", self.account), 1, None)));
        Ok(Completion {
            result: None,
            writes,
            on_condition_failure: self.on_condition_failure,
            ..Completion::default()
        })
    }
}

async fn debit(
    on_condition_failure: ConditionFailure,
    writes: usize,
) -> (exactly_once::dynamodb::DynamoDbStore, Vec<String>, String) {
    let store = support::store(Duration::from_secs(30)).await;
    let a = account();
    let handler = Debit {
        account: a.clone(),
        on_condition_failure,
        writes,
    };
    let function = support::msk::function_with(store.clone(), handler, header_keys());
    let batch = event(vec![("payments-0", vec![payment(0, "d-1", &a, 0)])]);
    let response = invoke(&function, &batch).await;
    (store, reported(&response), a)
}

#[tokio::test]
async fn a_failed_business_condition_declared_permanent_fails_the_key_and_writes_nothing() {
    let (store, reported, a) = debit(ConditionFailure::Permanent, 1).await;
    // FAILED, and parked (the default poison policy): not reported.
    assert_eq!(reported, Vec::<String>::new());
    let item = store.get("d-1").await.expect("get").expect("item");
    assert_eq!(item.status, Status::Failed);
    assert!(
        item.error
            .as_deref()
            .unwrap_or_default()
            .starts_with("a condition of effect write 0 failed"),
        "{item:?}"
    );
    assert_eq!(balance(&a).await, 0);
}

#[tokio::test]
async fn a_failed_business_condition_declared_retryable_leaves_the_key_free() {
    let (store, reported, a) = debit(ConditionFailure::Retryable, 1).await;
    assert_eq!(reported, ["payments-0@0"]);
    let item = store.get("d-1").await.expect("get");
    match support::msk::commit_path() {
        // Nothing was written: the redelivery starts afresh.
        CommitPath::LockFree => assert_eq!(item, None),
        CommitPath::Locking => {
            let item = item.expect("item");
            assert_eq!(
                (item.status, item.lock_expires_at_ms),
                (Status::Started, Some(0))
            );
        }
    }
    assert_eq!(balance(&a).await, 0);
}

#[tokio::test]
async fn an_effect_larger_than_one_transaction_fails_with_a_clear_error() {
    let (store, reported, _) = debit(ConditionFailure::Permanent, 100).await;
    assert_eq!(reported, Vec::<String>::new(), "FAILED and parked");
    let item = store.get("d-1").await.expect("get").expect("item");
    assert_eq!(
        item.error.as_deref(),
        Some("the effect has 100 writes; one transaction holds at most 99 beside the completion")
    );
}
