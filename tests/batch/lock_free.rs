//! The lock-free path: a record's effect and its COMPLETED item in ONE
//! transaction, consecutive records together; how it meets items of the
//! locking path, refusals inside a shared transaction, and races with
//! workers of both paths.

use crate::support;

use exactly_once::store::Store;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};
use base64::Engine as _;
use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::CountRequests as _;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::{
    CommitPath, Completion, Deadline, Engine, EngineConfig, FencingToken, HandlerError,
    RecordHandler, Work,
};
use exactly_once::lambda::KafkaRecord;
use exactly_once::lambda::{BatchFunction, FunctionSettings, OrderingMode};
use exactly_once::store::ClaimOutcome;
use exactly_once::store::ClaimRequest;
use exactly_once::store::Status;
use exactly_once::store::payload_hash;
use exactly_once::store::requests::RequestCounter;
use ledger::{LedgerHandler, LedgerMode, Payment};
use serde_json::json;
use support::faults::{Fault, FaultPlan, Faults};
use support::msk::{
    account, balance, event, event_of, header_keys, invoke, invoke_until_done, ledger_entry,
    payment, payment_json, record_json, reported,
};

/// A function on `config`'s keys running `handler`, counting its requests.
async fn function<H: RecordHandler<TransactWriteItem, Record: exactly_once::lambda::FromRecord>>(
    config: &StoreConfig,
    counter: &RequestCounter,
    handler: impl FnOnce(aws_sdk_dynamodb::Client) -> H,
) -> BatchFunction<H, DynamoDbStore> {
    function_in(OrderingMode::Partition, config, counter, handler).await
}

async fn function_in<
    H: RecordHandler<TransactWriteItem, Record: exactly_once::lambda::FromRecord>,
>(
    ordering: OrderingMode,
    config: &StoreConfig,
    counter: &RequestCounter,
    handler: impl FnOnce(aws_sdk_dynamodb::Client) -> H,
) -> BatchFunction<H, DynamoDbStore> {
    let client = counter.attach(&support::client().await);
    let store = DynamoDbStore::new(client.clone(), config.clone());
    let settings = FunctionSettings {
        ordering,
        ..FunctionSettings::new(header_keys())
    };
    BatchFunction::new(
        Engine::new(store, handler(client), EngineConfig::default()),
        settings,
    )
    .without_metrics()
}

/// The ledger on the lock-free path in `key` ordering.
async fn lock_free_by_key(
    config: &StoreConfig,
    counter: &RequestCounter,
) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    function_in(
        OrderingMode::Key,
        config,
        counter,
        ledger(LedgerMode::LockFree),
    )
    .await
}

/// One partition of `n` payments, each with its own Kafka key, idempotency
/// key and account: in `key` ordering, `n` lanes of one record.
fn one_record_per_key(n: usize, accounts: &[String]) -> serde_json::Value {
    let records = (0..n)
        .map(|i| {
            let mut json = record_json(
                "payments-0",
                &payment(i as i64, &format!("k-{i}"), &accounts[i], 1),
            );
            json["key"] = json!(base64::engine::general_purpose::STANDARD.encode(format!("K{i}")));
            json
        })
        .collect();
    event_of(vec![("payments-0", records)])
}

#[tokio::test]
async fn in_key_mode_the_records_of_different_keys_share_transactions() {
    let config = support::store_config(Duration::from_secs(30));
    let accounts: Vec<String> = (0..60).map(|_| account()).collect();
    let counter = RequestCounter::default();
    let function = lock_free_by_key(&config, &counter).await;

    let response = invoke(&function, &one_record_per_key(60, &accounts)).await;

    assert_eq!(reported(&response), Vec::<String>::new());
    for account in &accounts {
        assert_eq!(ledger_entry(account).await, (1, 1));
    }
    // 60 lanes of one record, all ready at once (this runtime has one
    // thread: every lane submits before the combiner runs): 25 a
    // transaction, where a new container's groups start (GROUP_START).
    let counts = counter.counts();
    assert_eq!(counts.get("TransactWriteItems"), Some(&3), "{counts:?}");
}

/// A group commit the store applied but whose every SDK attempt failed (as
/// a queue past the attempt timeout leaves it) is sent again in halves, not
/// failed closed: the halves find their keys COMPLETED, duplicates of what
/// the lost commit did. Each payment applied once, nothing reported, and
/// the invocation succeeds.
#[tokio::test]
async fn a_group_commit_the_sdk_gave_up_on_is_sent_again_in_halves_and_applies_once() {
    let config = support::store_config(Duration::from_secs(30));
    // The group's three attempts (the SDK's most) lose their answers; the
    // first was applied, the other two refused (its keys taken).
    let plan = FaultPlan {
        first_transactions: Some((Fault::ResponseLost, 3)),
        ..FaultPlan::default()
    };
    let faults = Faults::new(plan, 3, None);
    let counter = RequestCounter::default();
    let client = counter.attach(&faults.attach(&support::client().await));
    let function = BatchFunction::new(
        Engine::new(
            DynamoDbStore::new(client.clone(), config.clone()),
            ledger(LedgerMode::LockFree)(client),
            EngineConfig::default(),
        ),
        FunctionSettings::new(header_keys()),
    )
    .without_metrics();
    let accounts: Vec<String> = (0..6).map(|_| account()).collect();
    let records = (0..6)
        .map(|i| payment(i, &format!("h-{i}"), &accounts[i as usize], 1))
        .collect();

    let response = invoke(&function, &event(vec![("payments-0", records)])).await;

    assert_eq!(reported(&response), Vec::<String>::new());
    for account in &accounts {
        assert_eq!(ledger_entry(account).await, (1, 1), "applied once");
    }
    // The group's three attempts; its first half, refused (its keys
    // taken); the first alone, a duplicate; then the others together,
    // refused, and the first of them alone, until one is left: 3 + 1 + 1 +
    // 4 x 2 + 1.
    assert_eq!(faults.counts.get(Fault::ResponseLost), 3);
    let counts = counter.counts();
    assert_eq!(counts.get("TransactWriteItems"), Some(&14), "{counts:?}");
}

#[tokio::test]
async fn a_refused_shared_transaction_lets_each_lane_commit_alone() {
    let config = support::store_config(Duration::from_secs(30));
    let store = DynamoDbStore::new(support::client().await, config.clone());
    let accounts: Vec<String> = (0..10).map(|_| account()).collect();
    assert!(matches!(
        claim(&store, "k-3", &accounts[3], 1).await,
        ClaimOutcome::Acquired(_)
    ));
    let counter = RequestCounter::default();
    let function = lock_free_by_key(&config, &counter).await;

    let response = invoke(&function, &one_record_per_key(10, &accounts)).await;

    assert_eq!(reported(&response), ["payments-0@3"]);
    let mut balances = Vec::new();
    for account in &accounts {
        balances.push(balance(account).await);
    }
    assert_eq!(balances, [1, 1, 1, 0, 1, 1, 1, 1, 1, 1]);
    // The shared transaction of all ten, refused; then each lane alone.
    let counts = counter.counts();
    assert_eq!(counts.get("TransactWriteItems"), Some(&11), "{counts:?}");
}

fn ledger(mode: LedgerMode) -> impl FnOnce(aws_sdk_dynamodb::Client) -> LedgerHandler {
    move |client| LedgerHandler::new(client, support::env("LEDGER_TABLE"), mode)
}

/// Claims `key` on the locking path, as a worker of it would.
async fn claim(store: &DynamoDbStore, key: &str, account: &str, amount: i64) -> ClaimOutcome {
    let payload_hash = support::sha256_hex(payment_json(key, account, amount).as_bytes());
    store
        .claim(ClaimRequest {
            key,
            payload_hash: &payload_hash,
            origin: None,
            lease_cap_ms: None,
            owner: None,
        })
        .await
        .expect("claim")
}

#[tokio::test]
async fn a_live_lock_of_the_locking_path_stops_the_shared_transaction_there() {
    let config = support::store_config(Duration::from_secs(30));
    let store = DynamoDbStore::new(support::client().await, config.clone());
    let accounts: Vec<String> = (0..5).map(|_| account()).collect();
    assert!(matches!(
        claim(&store, "k-2", &accounts[2], 1).await,
        ClaimOutcome::Acquired(_)
    ));
    let counter = RequestCounter::default();
    let function = function(&config, &counter, ledger(LedgerMode::LockFree)).await;
    let records = (0..5)
        .map(|i| payment(i as i64, &format!("k-{i}"), &accounts[i], 1))
        .collect();

    let response = invoke(&function, &event(vec![("payments-0", records)])).await;

    assert_eq!(
        reported(&response),
        ["payments-0@2", "payments-0@3", "payments-0@4"]
    );
    let mut balances = Vec::new();
    for account in &accounts {
        balances.push(balance(account).await);
    }
    assert_eq!(balances, [1, 1, 0, 0, 0]);
    let held = store.get("k-2").await.expect("get").expect("item");
    assert_eq!((held.status, held.version), (Status::Started, 1));
    for key in ["k-3", "k-4"] {
        assert_eq!(store.get(key).await.expect("get"), None);
    }
    // The shared transaction of all five was refused at k-2; k-0 and k-1
    // committed together; k-2 alone says "in progress".
    let counts = counter.counts();
    assert_eq!(counts.get("TransactWriteItems"), Some(&3), "{counts:?}");
    assert_eq!(counter.total(), 4, "and the pre-check: {counts:?}");
}

#[tokio::test]
async fn an_abandoned_lock_of_the_locking_path_is_taken_over_and_applied_once() {
    let config = support::store_config(Duration::from_millis(200));
    let store = DynamoDbStore::new(support::client().await, config.clone());
    let a = account();
    assert!(matches!(
        claim(&store, "k-1", &a, 70).await,
        ClaimOutcome::Acquired(_)
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counter = RequestCounter::default();
    let function = function(&config, &counter, ledger(LedgerMode::LockFree)).await;
    let batch = event(vec![("payments-0", vec![payment(0, "k-1", &a, 70)])]);

    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );

    assert_eq!(ledger_entry(&a).await, (70, 1));
    let item = store.get("k-1").await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Completed, 2));
}

/// Pays into `account_id`, or, for a negative amount, debits it only if
/// the balance covers it (the effect's own condition).
struct Guarded {
    table: String,
}

impl RecordHandler<TransactWriteItem> for Guarded {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        CommitPath::LockFree
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<TransactWriteItem>, HandlerError> {
        let payment = Payment::parse(&record.value)?;
        let condition = (payment.amount_cents < 0).then(|| "balance_cents >= :needed".to_owned());
        let mut values = HashMap::from([(
            ":amount".to_owned(),
            AttributeValue::N(payment.amount_cents.to_string()),
        )]);
        if condition.is_some() {
            values.insert(
                ":needed".into(),
                AttributeValue::N((-payment.amount_cents).to_string()),
            );
        }
        let update = Update::builder()
            .table_name(&self.table)
            .key("account_id", AttributeValue::S(payment.account_id))
            .update_expression("ADD balance_cents :amount")
            .set_condition_expression(condition)
            .set_expression_attribute_values(Some(values))
            .build()
            .map_err(|err| HandlerError::Permanent(err.to_string()))?;
        Ok(Completion::transactional(
            payment.payment_id,
            vec![TransactWriteItem::builder().update(update).build()],
        ))
    }
}

#[tokio::test]
async fn a_business_condition_refused_inside_a_shared_transaction_fails_that_record_alone() {
    let config = support::store_config(Duration::from_secs(30));
    let (a, b, c) = (account(), account(), account());
    let counter = RequestCounter::default();
    let function = function(&config, &counter, |_| Guarded {
        table: support::env("LEDGER_TABLE"),
    })
    .await;
    let batch = event(vec![(
        "payments-0",
        vec![
            payment(0, "g-0", &a, 100),
            payment(1, "g-1", &b, -500),
            payment(2, "g-2", &c, 7),
        ],
    )]);

    let response = invoke(&function, &batch).await;

    // g-1 is stored FAILED and parked (the default poison policy): the lane
    // goes on with g-2.
    assert_eq!(reported(&response), Vec::<String>::new());
    assert_eq!(
        (balance(&a).await, balance(&b).await, balance(&c).await),
        (100, 0, 7)
    );
    let store = DynamoDbStore::new(support::client().await, config);
    let failed = store.get("g-1").await.expect("get").expect("item");
    assert_eq!((failed.status, failed.version), (Status::Failed, 1));
    assert!(
        failed
            .error
            .as_deref()
            .unwrap_or_default()
            .starts_with("a condition of effect write 0 failed"),
        "{failed:?}"
    );
    let g2 = store.get("g-2").await.expect("get").expect("item");
    assert_eq!(g2.status, Status::Completed);
    // All three refused together; g-0 alone; g-1 alone (refused), then its
    // FAILED item; then g-2.
    let counts = counter.counts();
    assert_eq!(counts.get("TransactWriteItems"), Some(&4), "{counts:?}");
    assert_eq!(counts.get("PutItem"), Some(&1), "{counts:?}");

    // The redelivery: every key is settled, nothing runs again.
    let again = invoke(&function, &batch).await;
    assert_eq!(reported(&again), Vec::<String>::new());
    assert_eq!(
        (balance(&a).await, balance(&b).await, balance(&c).await),
        (100, 0, 7)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_of_both_paths_racing_on_one_batch_apply_each_payment_once() {
    let config = support::store_config(Duration::from_secs(30));
    let accounts: Vec<String> = (0..5).map(|_| account()).collect();
    let partitions = ["payments-0", "payments-1"];
    let batch = event(
        partitions
            .iter()
            .enumerate()
            .map(|(p, name)| {
                let records = (0..50)
                    .map(|i| {
                        let n = i * 2 + p;
                        payment(i as i64, &format!("r-{n}"), &accounts[n % 5], 1)
                    })
                    .collect();
                (*name, records)
            })
            .collect(),
    );
    let modes = [LedgerMode::LockFree, LedgerMode::Transactional];
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (config, batch, mode) = (config.clone(), batch.clone(), modes[i % 2]);
            tokio::spawn(async move {
                let counter = RequestCounter::default();
                let function = function(&config, &counter, ledger(mode)).await;
                invoke_until_done(&function, &batch).await;
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("worker task");
    }
    for account in &accounts {
        assert_eq!(ledger_entry(account).await, (20, 20), "{account}");
    }
    let store = DynamoDbStore::new(support::client().await, config);
    for n in 0..100 {
        let item = store
            .get(&format!("r-{n}"))
            .await
            .expect("get")
            .expect("item");
        assert_eq!(item.status, Status::Completed, "r-{n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_8_concurrent_deliveries_of_a_poison_record_one_stores_it_failed() {
    let config = support::store_config(Duration::from_secs(30));
    let client = support::client().await;
    let engine = Arc::new(Engine::new(
        DynamoDbStore::new(client.clone(), config.clone()),
        ledger(LedgerMode::LockFree)(client),
        EngineConfig::default(),
    ));
    let payload = b"{not a payment".to_vec();
    let work = Work {
        key: "poison".into(),
        payload_hash: payload_hash(&payload),
        origin: "payments-0@0".into(),
        record: exactly_once::lambda::Record::Kafka(support::msk::kafka_record(payload)),
        span: tracing::Span::none(),
        holder: None,
    };
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (engine, work, barrier) = (engine.clone(), work.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let batch = engine
                    .run_batch(vec![vec![(0, Ok(work))]], Deadline::NONE)
                    .await;
                batch.outcomes[0].1.outcome.name()
            })
        })
        .collect();
    let mut names = Vec::new();
    for task in tasks {
        names.push(task.await.expect("delivery task"));
    }
    names.sort_unstable();
    // One stores FAILED (its PutItem's condition held); the others find it.
    let mut expected = vec!["previously-failed"; 7];
    expected.insert(0, "failed");
    assert_eq!(names, expected);
    let store = DynamoDbStore::new(support::client().await, config);
    let item = store.get("poison").await.expect("get").expect("item");
    assert_eq!(
        (item.status, item.version, item.attempts),
        (Status::Failed, 1, Some(1))
    );
}
