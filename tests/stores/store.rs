//! The key state machine on DynamoDB Local: the conformance suite
//! (`exactly_once::store::conformance`), and what only DynamoDB has (its attribute names,
//! its errors).

use crate::support;
use exactly_once::store::conformance;
use exactly_once::store::{conformance_suite, operator_conformance_suite};

use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use conformance::{Backend, LONG_LOCK, acquire, request};
use exactly_once::clock::now_ms;
use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::store::ClaimOutcome;
use exactly_once::store::Increment;
use exactly_once::store::Store;
use exactly_once::store::StoreError;
use support::{number, raw_item, string};

/// DynamoDB Local, the test table; counters are accounts of the ledger table.
struct DynamoDb;

impl Backend for DynamoDb {
    type S = DynamoDbStore;

    async fn store(&self, lock: Duration) -> DynamoDbStore {
        support::store(lock).await
    }

    fn with_config(&self, store: &DynamoDbStore, config: StoreConfig) -> DynamoDbStore {
        DynamoDbStore::new(store.client().clone(), config)
    }

    fn effect(
        &self,
        _: &DynamoDbStore,
        counter: &str,
        add: i64,
        floor: Option<i64>,
    ) -> TransactWriteItem {
        let mut update = Update::builder()
            .table_name(support::env("LEDGER_TABLE"))
            .key("account_id", AttributeValue::S(counter.to_owned()))
            .update_expression("ADD balance_cents :add")
            .expression_attribute_values(":add", AttributeValue::N(add.to_string()));
        if let Some(floor) = floor {
            // The balance before the write must be at least floor - add (an
            // absent balance is 0).
            let need = floor - add;
            let condition = match need <= 0 {
                true => "attribute_not_exists(balance_cents) OR balance_cents >= :need",
                false => "balance_cents >= :need",
            };
            update = update
                .condition_expression(condition)
                .expression_attribute_values(":need", AttributeValue::N(need.to_string()));
        }
        let update = update.build().expect("an update");
        TransactWriteItem::builder().update(update).build()
    }

    async fn counter(&self, _: &DynamoDbStore, counter: &str) -> i64 {
        support::msk::balance(counter).await
    }

    fn ledger_table(&self) -> String {
        support::env("LEDGER_TABLE")
    }

    async fn number(&self, store: &DynamoDbStore, increment: &Increment, attribute: &str) -> i128 {
        let item = store
            .client()
            .get_item()
            .table_name(&increment.table)
            .key(
                &increment.key_name,
                AttributeValue::S(increment.key.clone()),
            )
            .consistent_read(true)
            .send()
            .await
            .expect("GetItem");
        match item.item().and_then(|item| item.get(attribute)) {
            Some(AttributeValue::N(number)) => number.parse().expect("a number"),
            _ => 0,
        }
    }
}

conformance_suite!(DynamoDb);

operator_conformance_suite!(DynamoDb);

#[tokio::test]
async fn a_claim_writes_the_documented_attributes() {
    let store = support::store(LONG_LOCK).await;
    let before = now_ms();
    let lease = acquire(&store, "p-1", "h1").await;
    let item = raw_item(store.client(), &store.config().table_name, &lease.pk)
        .await
        .expect("the claim wrote an item");
    assert_eq!(string(&item, "pk"), lease.pk);
    assert_eq!(string(&item, "status"), "STARTED");
    assert_eq!(number(&item, "version"), 1);
    assert_eq!(string(&item, "owner"), lease.owner);
    assert_eq!(string(&item, "payload_hash"), "h1");
    assert_eq!(string(&item, "origin"), "payments-0@15");
    assert_eq!(number(&item, "attempts"), 1);
    assert_eq!(number(&item, "lock_expires_at"), lease.lock_expires_at_ms);
    let created = number(&item, "created_at");
    assert!(created >= before && created <= now_ms());
    assert_eq!(number(&item, "updated_at"), created);
    assert_eq!(
        number(&item, "expires_at"),
        created / 1000 + 8 * 24 * 3600,
        "the table's TTL attribute, epoch seconds"
    );
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
        other => panic!("expected the store unavailable, got {other:?}"),
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

#[tokio::test]
async fn a_claim_that_is_not_new_reads_the_item_it_lost_to() {
    let store = support::store(LONG_LOCK).await;
    let first = acquire(&store, "p-1", "h1").await;
    match store.claim(request("p-1", "h1")).await.expect("claim") {
        // ReturnValuesOnConditionCheckFailure: the item, in the same request.
        ClaimOutcome::InProgress(item) => assert_eq!(item.owner, first.owner),
        other => panic!("expected in progress, got {other:?}"),
    }
}
