//! What a batch costs in DynamoDB requests (counted by an SDK interceptor)
//! and capacity units (by another, `support::capacity`), and the batch rules
//! in every ordering mode.

use crate::support;

use exactly_once::store::Store;
use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::CountRequests as _;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::{Engine, EngineConfig, PoisonPolicy};
use exactly_once::lambda::{BatchFunction, FunctionSettings, OrderingMode};
use exactly_once::store::requests::RequestCounter;
use ledger::{LedgerHandler, LedgerMode};
use serde_json::Value;
use support::capacity::{CapacityCounter, CapacityUnits};
use support::figures::figure;
use support::msk::{
    Rec, account, balance, event, header_keys, invoke, invoke_until_done, ledger_entry, payment,
    reported,
};

/// The ledger function (in the mode `TEST_LEDGER_MODE` names) on `config`'s
/// keys, counting requests.
async fn counted(
    config: &StoreConfig,
    ordering: OrderingMode,
    counter: &RequestCounter,
) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let mode = support::msk::ledger_mode();
    counted_with(mode, EngineConfig::default(), config, ordering, counter).await
}

/// The ledger function with `POISON_POLICY=report`: a FAILED record stops
/// its lane.
async fn reporting(
    config: &StoreConfig,
    ordering: OrderingMode,
) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let engine = EngineConfig {
        poison: PoisonPolicy::Report,
        ..EngineConfig::default()
    };
    let (mode, counter) = (support::msk::ledger_mode(), RequestCounter::default());
    counted_with(mode, engine, config, ordering, &counter).await
}

/// The ledger function in `mode` with `engine`'s settings, counting requests.
async fn counted_with(
    mode: LedgerMode,
    engine: EngineConfig,
    config: &StoreConfig,
    ordering: OrderingMode,
    counter: &RequestCounter,
) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let client = counter.attach(&support::client().await);
    function_on(client, mode, engine, config, ordering)
}

/// The ledger function in `mode` with `engine`'s settings, on `client`.
fn function_on(
    client: Client,
    mode: LedgerMode,
    engine: EngineConfig,
    config: &StoreConfig,
    ordering: OrderingMode,
) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let store = DynamoDbStore::new(client.clone(), config.clone());
    let ledger = LedgerHandler::new(client, support::env("LEDGER_TABLE"), mode);
    let settings = FunctionSettings {
        ordering,
        ..FunctionSettings::new(header_keys())
    };
    BatchFunction::new(Engine::new(store, ledger, engine), settings)
}

/// `n` payments over 4 partitions into `accounts`, each with its own key.
fn payments(n: usize, accounts: &[String]) -> Value {
    let partitions = ["payments-0", "payments-1", "payments-2", "payments-3"];
    event(
        partitions
            .iter()
            .enumerate()
            .map(|(p, name)| {
                let records = (0..n / 4)
                    .map(|i| {
                        let n = i * 4 + p;
                        payment(
                            i as i64,
                            &format!("pay-{n}"),
                            &accounts[n % accounts.len()],
                            1,
                        )
                    })
                    .collect();
                (*name, records)
            })
            .collect(),
    )
}

fn per_record(counter: &RequestCounter, records: usize) -> f64 {
    counter.total() as f64 / records as f64
}

/// 1,000 new payments over 4 partitions on the locking path in `mode`, with
/// the default configuration: the requests they cost, by operation.
async fn locking_path_requests(mode: LedgerMode) -> BTreeMap<String, u64> {
    let config = support::store_config(Duration::from_secs(30));
    let counter = RequestCounter::default();
    // What is counted is the requests' shape, not riding out a starved
    // store: an attempt abandoned at the default 3 s (seen beside a CPU hog)
    // is sent again, finds its own claims and claims them alone.
    let patient = exactly_once::dynamodb::DynamoDbSettings {
        attempt_timeout: Duration::from_secs(30),
        operation_timeout: Duration::from_secs(60),
    };
    let client = counter.attach(&exactly_once::aws::dynamodb_client_with(&patient).await);
    let function = function_on(
        client,
        mode,
        EngineConfig::default(),
        &config,
        OrderingMode::Partition,
    );
    let accounts: Vec<String> = (0..5).map(|_| account()).collect();
    let batch = payments(1000, &accounts);

    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    for account in &accounts {
        assert_eq!(balance(account).await, 200);
    }
    let item = function
        .engine()
        .store()
        .get("pay-517")
        .await
        .expect("get")
        .expect("item");
    assert_eq!(
        (item.status, item.version),
        (exactly_once::store::Status::Completed, 1)
    );
    counter.counts()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_locking_path_claims_in_batches_and_completes_in_group_transactions() {
    let counts = locking_path_requests(LedgerMode::Transactional).await;
    // The claims: PartiQL INSERTs, up to 25 a request; never a claim alone.
    assert!(!counts.contains_key("PutItem"), "{counts:?}");
    let claims = counts["BatchExecuteStatement"];
    assert!((40..=60).contains(&claims), "{counts:?}");
    // The completions with their balance updates: group transactions.
    let groups = counts["TransactWriteItems"];
    assert!(groups <= 60, "{counts:?}");
    // One sampling read: it found nothing COMPLETED, so no more were made.
    assert_eq!(counts.get("BatchGetItem"), Some(&1), "{counts:?}");
    let total: u64 = counts.values().sum();
    assert!(total as f64 / 1000.0 <= 0.15, "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_direct_mode_the_library_adds_claims_and_completions_in_batches() {
    let counts = locking_path_requests(LedgerMode::Direct).await;
    // The handler's own balance update, one per record.
    assert_eq!(counts.get("UpdateItem"), Some(&1000), "{counts:?}");
    // Claims and completions: PartiQL, up to 25 statements a request.
    assert!(!counts.contains_key("PutItem"), "{counts:?}");
    assert!(!counts.contains_key("TransactWriteItems"), "{counts:?}");
    let batched = counts["BatchExecuteStatement"];
    assert!((80..=140).contains(&batched), "{counts:?}");
    let library: u64 = counts.values().sum::<u64>() - 1000;
    assert!(library as f64 / 1000.0 <= 0.15, "{counts:?}");
}

/// 1,000 new payments on the lock-free path with at most `per_transaction`
/// records a transaction: the TransactWriteItems calls they cost.
async fn lock_free_transactions(per_transaction: usize, accounts: usize) -> u64 {
    let config = support::store_config(Duration::from_secs(30));
    let counter = RequestCounter::default();
    let engine = EngineConfig {
        max_records_per_transaction: per_transaction,
        ..EngineConfig::default()
    };
    let mode = LedgerMode::LockFree;
    let function = counted_with(mode, engine, &config, OrderingMode::Partition, &counter).await;
    let accounts: Vec<String> = (0..accounts).map(|_| account()).collect();
    let batch = payments(1000, &accounts);
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    let counts = counter.counts();
    assert_eq!(counts.get("BatchGetItem"), Some(&1), "{counts:?}");
    assert_eq!(counts.len(), 2, "no claim, no update: {counts:?}");
    assert_eq!(total_balance(&accounts).await, 1000);
    for account in &accounts {
        assert_eq!(ledger_entry(account).await.1, 1000 / accounts.len() as i64);
    }
    counts["TransactWriteItems"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_record_costs_one_transaction_on_the_lock_free_path() {
    assert_eq!(lock_free_transactions(1, 200).await, 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consecutive_records_on_distinct_accounts_share_a_transaction() {
    // 250 records a partition, 10 a transaction.
    assert_eq!(lock_free_transactions(10, 200).await, 100);
    // With 5 accounts, the records of a run touch each account twice: their
    // increments merge into one update per account, and 10 records still
    // share a transaction.
    assert_eq!(lock_free_transactions(10, 5).await, 100);
}

/// What a batch cost, by operation: requests, and capacity units as DynamoDB
/// Local reports them.
struct Cost {
    requests: BTreeMap<String, u64>,
    units: BTreeMap<String, CapacityUnits>,
}

/// What 100 new payments over 4 partitions into 2 accounts cost in `mode`.
async fn cost_of_100(mode: LedgerMode, engine: EngineConfig) -> Cost {
    let config = support::store_config(Duration::from_secs(30));
    let (counter, capacity) = (RequestCounter::default(), CapacityCounter::default());
    let client = capacity.attach(&counter.attach(&support::client().await));
    let function = function_on(client, mode, engine, &config, OrderingMode::Partition);
    let accounts: Vec<String> = (0..2).map(|_| account()).collect();
    assert_eq!(
        reported(&invoke(&function, &payments(100, &accounts)).await),
        Vec::<String>::new()
    );
    Cost {
        requests: counter.counts(),
        units: capacity.units(),
    }
}

#[tokio::test]
async fn a_new_records_completion_costs_six_write_units_on_the_locking_path_as_dynamodb_local_reports_them()
 {
    // Each record's completion alone: DynamoDB Local reports a
    // transaction's units per table, not per item, so a group would be
    // under-counted.
    let engine = EngineConfig {
        max_records_per_transaction: 1,
        ..EngineConfig::default()
    };
    let cost = cost_of_100(LedgerMode::Transactional, engine).await;
    let stats = &cost.units;
    let units = |operation: &str| {
        let consumed = stats.get(operation).copied().unwrap_or_default();
        (consumed.read, consumed.write)
    };
    // The claim: a PartiQL INSERT of an item under 1 KB (in a batch of up
    // to 25), billed as the PutItem it replaces (1 WCU, and 1 for its entry
    // in the index of STARTED items, `started`). DynamoDB Local reports no
    // capacity for BatchExecuteStatement, so it is not counted here.
    assert!(!stats.contains_key("PutItem"), "{stats:?}");
    // The transaction: the completion (idempotency table) and the balance
    // update (ledger table), each an item under 1 KB at twice the cost of a
    // plain write: 2 + 2 WCU. (DynamoDB Local reports 2 units per table
    // whatever the number of items of that table in the transaction, so
    // this count holds only because the two items are in two tables.)
    // The completion also deletes the item's entry in the index of STARTED
    // items: DynamoDB Local reports 2 more.
    assert_eq!(units("TransactWriteItems"), (0.0, 600.0), "{stats:?}");
    // The pre-check's one sampling read finds none of its keys: DynamoDB
    // Local reports 0 RCU for it (a GetItem of an absent key: 0.5).
    assert_eq!(units("BatchGetItem"), (0.0, 0.0), "{stats:?}");
}

#[tokio::test]
async fn a_new_record_costs_four_write_units_on_the_lock_free_path_as_dynamodb_local_reports_them()
{
    // Each record alone: DynamoDB Local reports a transaction's units per
    // table, not per item, so a shared transaction would be under-counted.
    let engine = EngineConfig {
        max_records_per_transaction: 1,
        ..EngineConfig::default()
    };
    let cost = cost_of_100(LedgerMode::LockFree, engine).await;
    let stats = &cost.units;
    // The COMPLETED item (idempotency table) and the balance update (ledger
    // table) in one transaction: 2 + 2 WCU; no claim.
    let consumed = stats["TransactWriteItems"];
    assert_eq!((consumed.read, consumed.write), (0.0, 400.0), "{stats:?}");
    assert!(
        !cost.requests.contains_key("PutItem"),
        "{:?}",
        cost.requests
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_batch_costs_one_read_per_100_records_and_nothing_when_warm() {
    let config = support::store_config(Duration::from_secs(30));
    let accounts: Vec<String> = (0..5).map(|_| account()).collect();
    let batch = payments(1000, &accounts);
    let first = RequestCounter::default();
    let warm = counted(&config, OrderingMode::Partition, &first).await;
    assert_eq!(reported(&invoke(&warm, &batch).await), Vec::<String>::new());

    // Another container (cold cache): one BatchGetItem per 100 keys.
    let cold_counter = RequestCounter::default();
    let cold = counted(&config, OrderingMode::Partition, &cold_counter).await;
    assert_eq!(reported(&invoke(&cold, &batch).await), Vec::<String>::new());
    let counts = cold_counter.counts();
    assert_eq!(counts.get("BatchGetItem"), Some(&10), "{counts:?}");
    assert_eq!(cold_counter.total(), 10, "no conditional write: {counts:?}");
    // The figure docs/benchmarks.md states.
    assert_eq!(
        format!("{:.3}", per_record(&cold_counter, 1000)),
        figure("replay_cold_requests")
    );

    // The container that processed it: its cache answers, no request at all.
    first.reset();
    assert_eq!(reported(&invoke(&warm, &batch).await), Vec::<String>::new());
    assert_eq!(
        first.total().to_string(),
        figure("replay_warm_requests"),
        "{:?}",
        first.counts()
    );
    for account in &accounts {
        assert_eq!(balance(account).await, 200);
    }
}

/// One partition: key A's second record is poison, key B's are fine.
fn keyed_partition(a: &str, b: &str) -> Value {
    let with_key = |rec: Rec, kafka_key: &str| {
        let mut json = support::msk::record_json("payments-0", &rec);
        json["key"] = Value::String(base64_of(kafka_key));
        json
    };
    let poison = Rec {
        offset: 1,
        key: Some("a-2".into()),
        value: b"{not json".to_vec(),
    };
    support::msk::event_of(vec![(
        "payments-0",
        vec![
            with_key(payment(0, "a-1", a, 1), "A"),
            with_key(poison, "A"),
            with_key(payment(2, "b-1", b, 10), "B"),
            with_key(payment(3, "a-3", a, 100), "A"),
            with_key(payment(4, "b-2", b, 1000), "B"),
        ],
    )])
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

#[tokio::test]
async fn in_key_mode_a_failure_stops_only_its_own_key() {
    let config = support::store_config(Duration::from_secs(30));
    let function = reporting(&config, OrderingMode::Key).await;
    let (a, b) = (account(), account());
    let response = invoke(&function, &keyed_partition(&a, &b)).await;
    // Key A stops at its poison record; key B finishes past it.
    assert_eq!(reported(&response), ["payments-0@1", "payments-0@3"]);
    assert_eq!((balance(&a).await, balance(&b).await), (1, 1010));
}

#[tokio::test]
async fn with_the_default_poison_policy_park_the_partition_goes_on_past_a_failed_record() {
    let config = support::store_config(Duration::from_secs(30));
    let function = counted(&config, OrderingMode::Partition, &RequestCounter::default()).await;
    let (a, b) = (account(), account());
    let response = invoke(&function, &keyed_partition(&a, &b)).await;
    // The poison record is FAILED in the table (the durable record of it),
    // not reported: nothing of the partition goes back to Lambda.
    assert_eq!(reported(&response), Vec::<String>::new());
    assert_eq!((balance(&a).await, balance(&b).await), (101, 1010));
    let store = DynamoDbStore::new(support::client().await, config);
    let parked = store
        .get("a-2")
        .await
        .expect("get")
        .expect("the FAILED item");
    assert_eq!(parked.status, exactly_once::store::Status::Failed);
}

#[tokio::test]
async fn in_partition_mode_a_failure_stops_the_whole_partition() {
    let config = support::store_config(Duration::from_secs(30));
    let function = reporting(&config, OrderingMode::Partition).await;
    let (a, b) = (account(), account());
    let response = invoke(&function, &keyed_partition(&a, &b)).await;
    assert_eq!(
        reported(&response),
        [
            "payments-0@1",
            "payments-0@2",
            "payments-0@3",
            "payments-0@4"
        ]
    );
    assert_eq!((balance(&a).await, balance(&b).await), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_ordering_mode_applies_each_payment_once_under_concurrent_replays() {
    for ordering in [
        OrderingMode::Partition,
        OrderingMode::Key,
        OrderingMode::Unordered,
    ] {
        let config = support::store_config(Duration::from_secs(30));
        let accounts: Vec<String> = (0..3).map(|_| account()).collect();
        let mut batch = payments(200, &accounts);
        // In-batch duplicates across partitions, too.
        let mut copy = batch["records"]["payments-0"][0].clone();
        copy["offset"] = Value::from(10_000);
        batch["records"]["payments-3"]
            .as_array_mut()
            .expect("list")
            .push(copy);
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (config, batch) = (config.clone(), batch.clone());
                tokio::spawn(async move {
                    let function = counted(&config, ordering, &RequestCounter::default()).await;
                    invoke_until_done(&function, &batch).await;
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("invocation task");
        }
        let total: i64 = total_balance(&accounts).await;
        assert_eq!(total, 200, "{ordering:?}");
    }
}

async fn total_balance(accounts: &[String]) -> i64 {
    let mut total = 0;
    for account in accounts {
        total += balance(account).await;
    }
    total
}

/// The parser of `support::capacity` (the one test binary that uses it runs
/// its tests).
mod capacity_parser {
    use super::support::capacity::{ACCEPTING, CapacityUnits, ask_for_total, consumed};
    use serde_json::{Value, json};

    fn asked(operation: &str, body: Value) -> Option<Value> {
        let bytes = serde_json::to_vec(&body).expect("json");
        ask_for_total(operation, &bytes).map(|b| serde_json::from_slice(&b).expect("json"))
    }

    #[test]
    fn total_is_asked_for_by_every_operation_that_accepts_it() {
        for operation in ACCEPTING {
            let body = asked(
                operation,
                json!({"TableName": "t", "Key": {"pk": {"S": "a"}}}),
            );
            assert_eq!(
                body,
                Some(
                    json!({"TableName": "t", "Key": {"pk": {"S": "a"}}, "ReturnConsumedCapacity": "TOTAL"})
                ),
                "{operation}"
            );
        }
    }

    #[test]
    fn other_operations_a_caller_s_choice_and_bodies_that_are_not_objects_stay_as_they_are() {
        assert_eq!(asked("DescribeTable", json!({"TableName": "t"})), None);
        assert_eq!(asked("CreateTable", json!({"TableName": "t"})), None);
        assert_eq!(
            asked("PutItem", json!({"ReturnConsumedCapacity": "INDEXES"})),
            None
        );
        assert_eq!(asked("PutItem", json!([1, 2])), None);
        assert_eq!(ask_for_total("PutItem", b""), None);
        assert_eq!(ask_for_total("PutItem", b"{not json"), None);
    }

    fn read(operation: &str, body: Value) -> Option<CapacityUnits> {
        consumed(operation, &serde_json::to_vec(&body).expect("json"))
    }

    #[test]
    fn capacity_units_of_one_table_count_as_reads_or_writes_by_operation() {
        // DynamoDB Local's answers.
        let one = json!({"ConsumedCapacity": {"TableName": "t", "CapacityUnits": 1.0}});
        assert_eq!(
            read("PutItem", one.clone()),
            Some(CapacityUnits {
                read: 0.0,
                write: 1.0
            })
        );
        let half =
            json!({"Item": {}, "ConsumedCapacity": {"TableName": "t", "CapacityUnits": 0.5}});
        assert_eq!(
            read("GetItem", half),
            Some(CapacityUnits {
                read: 0.5,
                write: 0.0
            })
        );
        assert_eq!(read("Query", one).map(|u| u.read), Some(1.0));
    }

    #[test]
    fn a_list_of_tables_is_summed() {
        let body = json!({"ConsumedCapacity": [
            {"TableName": "idempotency", "CapacityUnits": 2.0},
            {"TableName": "ledger", "CapacityUnits": 2.0},
        ]});
        assert_eq!(
            read("TransactWriteItems", body),
            Some(CapacityUnits {
                read: 0.0,
                write: 4.0
            })
        );
        let body = json!({"Responses": {}, "ConsumedCapacity": [
            {"TableName": "a", "CapacityUnits": 0.5},
            {"TableName": "b", "CapacityUnits": 0.0},
        ]});
        assert_eq!(read("BatchGetItem", body).map(|u| u.read), Some(0.5));
    }

    #[test]
    fn read_and_write_units_named_by_dynamodb_are_taken_as_they_are() {
        let body = json!({"ConsumedCapacity": {
            "TableName": "t", "CapacityUnits": 3.0, "ReadCapacityUnits": 1.0, "WriteCapacityUnits": 2.0,
            "Table": {"CapacityUnits": 3.0},
        }});
        assert_eq!(
            read("UpdateItem", body),
            Some(CapacityUnits {
                read: 1.0,
                write: 2.0
            })
        );
        let body = json!({"ConsumedCapacity": {"WriteCapacityUnits": 2.0}});
        assert_eq!(
            read("GetItem", body),
            Some(CapacityUnits {
                read: 0.0,
                write: 2.0
            })
        );
    }

    #[test]
    fn an_error_body_reports_capacity_if_it_has_some() {
        let failed = json!({
            "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
            "Message": "The conditional request failed",
        });
        assert_eq!(read("PutItem", failed.clone()), None);
        let mut with_capacity = failed;
        with_capacity["ConsumedCapacity"] = json!({"TableName": "t", "CapacityUnits": 1.0});
        assert_eq!(read("PutItem", with_capacity).map(|u| u.write), Some(1.0));
        assert_eq!(consumed("PutItem", b""), None);
        assert_eq!(consumed("PutItem", b"<html>"), None);
    }
}
