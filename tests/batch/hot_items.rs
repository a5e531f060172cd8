//! Hot items: many records on ONE account (a merchant's). Their balance
//! updates are increments, merged into shared transactions; a merged update
//! that overdraws splits so that each record gets the outcome it would have
//! had alone; and two commits touching one item are never in flight at the
//! same time, so the function never conflicts with itself (DynamoDB in AWS
//! cancels concurrent transactions on one item with `TransactionConflict`).

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::CountRequests as _;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::{CommitPath, Engine, EngineConfig, GROUP_START, WINDOW_GROUPS};
use exactly_once::lambda::{BatchFunction, FunctionSettings, OrderingMode};
use exactly_once::store::Status;
use exactly_once::store::Store;
use exactly_once::store::requests::RequestCounter;
use ledger::{LedgerHandler, LedgerMode};
use serde_json::{Value, json};
use support::faults::{Fault, FaultPlan, Faults};
use support::msk::{
    account, event_of, header_keys, invoke, invoke_until_done, ledger_entry, payment, record_json,
    reported,
};

/// `amounts.len()` payments to `account`, round robin over `partitions`
/// partitions, each from its own customer (its Kafka key): `pay-<i>`.
fn payments_to(account: &str, amounts: &[i64], partitions: usize) -> Value {
    let to: Vec<(&str, i64)> = amounts.iter().map(|&amount| (account, amount)).collect();
    payments(&to, partitions)
}

/// A payment of each `(account, amount)`, round robin over `partitions`
/// partitions, each from its own customer (its Kafka key): `pay-<i>`.
fn payments(to: &[(&str, i64)], partitions: usize) -> Value {
    let mut lists: Vec<(String, Vec<Value>)> = (0..partitions)
        .map(|p| (format!("payments-{p}"), Vec::new()))
        .collect();
    for (i, (account, amount)) in to.iter().enumerate() {
        let (name, records) = &mut lists[i % partitions];
        let offset = records.len() as i64;
        let mut record = record_json(
            name,
            &payment(offset, &format!("pay-{i}"), account, *amount),
        );
        let customer = format!("customer-{i}");
        record["key"] = json!(base64::engine::general_purpose::STANDARD.encode(customer));
        records.push(record);
    }
    event_of(lists.iter().map(|(n, r)| (n.as_str(), r.clone())).collect())
}

/// The demo ledger in `mode` and `ordering`, on `client`, with `engine`.
fn ledger_function(
    client: aws_sdk_dynamodb::Client,
    config: &StoreConfig,
    mode: LedgerMode,
    ordering: OrderingMode,
    engine: EngineConfig,
    floor: Option<i64>,
) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let store = DynamoDbStore::new(client.clone(), config.clone());
    let ledger = LedgerHandler::new(client, support::env("LEDGER_TABLE"), mode).with_floor(floor);
    let settings = FunctionSettings {
        ordering,
        ..FunctionSettings::new(header_keys())
    };
    BatchFunction::new(Engine::new(store, ledger, engine), settings).without_metrics()
}

/// The demo ledger on the lock-free path in `ordering`, default sizing, its
/// requests through `faults`, under a fresh key prefix.
async fn lock_free_through(
    faults: &Arc<Faults>,
    ordering: OrderingMode,
) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let client = faults.attach(&support::client().await);
    let config = support::store_config(Duration::from_secs(30));
    ledger_function(
        client,
        &config,
        LedgerMode::LockFree,
        ordering,
        EngineConfig::default(),
        None,
    )
}

/// Every request waits 0 to 20 ms on the way out, so that commits overlap
/// where they can.
fn overlapping() -> FaultPlan {
    FaultPlan {
        latency: 1.0,
        latency_ms: (0, 20),
        ..FaultPlan::default()
    }
}

const ORDERINGS: [OrderingMode; 3] = [
    OrderingMode::Partition,
    OrderingMode::Key,
    OrderingMode::Unordered,
];

/// 100 payments to one account over 4 partitions share transactions as 100
/// payments to 100 accounts would, each with ONE merged update of the
/// account, in every ordering mode (in `key` and `none`, across lanes,
/// through the combiner): groups sized from 10 up (one more per full
/// transaction, at most `MAX_RECORDS_PER_TRANSACTION=50`), so each lane's
/// 25 payments take at most 3 transactions of its own, at most 12 in all,
/// where a transaction per payment would be 100.
#[tokio::test]
async fn a_hot_accounts_payments_share_transactions_in_every_ordering_mode() {
    for ordering in ORDERINGS {
        let config = support::store_config(Duration::from_secs(30));
        let merchant = account();
        let counter = RequestCounter::default();
        let client = counter.attach(&support::client().await);
        let function = ledger_function(
            client,
            &config,
            LedgerMode::LockFree,
            ordering,
            EngineConfig {
                max_records_per_transaction: 50,
                ..EngineConfig::default()
            },
            Some(0),
        );
        assert_eq!(
            function.engine().handler().commit_path(),
            CommitPath::LockFree
        );
        let amounts: Vec<i64> = (1..=100).collect();

        let response = invoke(&function, &payments_to(&merchant, &amounts, 4)).await;

        assert_eq!(reported(&response), Vec::<String>::new(), "{ordering:?}");
        assert_eq!(ledger_entry(&merchant).await, (5050, 100), "{ordering:?}");
        let counts = counter.counts();
        let transactions = counts.get("TransactWriteItems").copied().unwrap_or(0);
        assert!((1..=12).contains(&transactions), "{ordering:?}: {counts:?}");
    }
}

/// Payments of 10, -20, -5, -6 and 1 cents to a fresh account that may not
/// go below 0, in one partition. Alone, one after another, the second and
/// the fourth overdraw and fail; the others apply (balance 6, 3 payments).
/// Merged into one group, the engine reaches exactly that: on the lock-free
/// path by splitting the refused merged update, on the locking path record
/// by record. The FAILED items say why; the lane goes on (park).
#[tokio::test]
async fn an_overdraft_fails_alone_and_the_payments_around_it_apply() {
    for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
        let config = support::store_config(Duration::from_secs(30));
        let counter = RequestCounter::default();
        let client = counter.attach(&support::client().await);
        let store = DynamoDbStore::new(client.clone(), config.clone());
        let function = ledger_function(
            client,
            &config,
            mode,
            OrderingMode::Partition,
            EngineConfig::default(),
            Some(0),
        );
        let merchant = account();

        let response = invoke(&function, &payments_to(&merchant, &[10, -20, -5, -6, 1], 1)).await;

        assert_eq!(reported(&response), Vec::<String>::new(), "{mode:?}");
        assert_eq!(ledger_entry(&merchant).await, (6, 3), "{mode:?}");
        for (i, expected) in [
            Status::Completed,
            Status::Failed,
            Status::Completed,
            Status::Failed,
            Status::Completed,
        ]
        .into_iter()
        .enumerate()
        {
            let item = store
                .get(&format!("pay-{i}"))
                .await
                .expect("get")
                .expect("an item");
            assert_eq!(item.status, expected, "{mode:?}: pay-{i}");
            if expected == Status::Failed {
                let error = item.error.unwrap_or_default();
                assert!(error.contains("below its floor"), "{mode:?}: {error}");
            }
        }
        if mode == LedgerMode::LockFree {
            // The path: all five merged (refused: from 0, the second
            // overdraws), the first alone, the second alone (refused: FAILED),
            // the last three merged (refused: from 10, the second of them
            // overdraws), then one by one.
            let counts = counter.counts();
            assert_eq!(counts.get("TransactWriteItems"), Some(&7), "{counts:?}");
            assert_eq!(counts.get("PutItem"), Some(&2), "{counts:?}");
        }
    }
}

/// Without merging (one record a transaction), 40 lanes of one record each
/// (`none` ordering) commit to one account, and on the locking path 40
/// lanes complete to it; every request waits 0 to 20 ms on the way out, so
/// that commits would overlap if they could. No two transactions touching
/// the account are ever in flight together (counted at the HTTP layer), and
/// every payment applies once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn commits_touching_one_item_are_never_in_flight_together() {
    for (mode, ordering) in [
        (LedgerMode::LockFree, OrderingMode::Unordered),
        (LedgerMode::Transactional, OrderingMode::Key),
    ] {
        let faults = Faults::new(overlapping(), 17, None);
        let client = faults.attach(&support::client().await);
        let config = support::store_config(Duration::from_secs(30));
        let engine = EngineConfig {
            max_records_per_transaction: 1,
            ..EngineConfig::default()
        };
        let function = ledger_function(client, &config, mode, ordering, engine, None);
        let merchant = account();
        let amounts = vec![1; 40];

        let response = invoke(&function, &payments_to(&merchant, &amounts, 4)).await;

        assert_eq!(reported(&response), Vec::<String>::new(), "{mode:?}");
        assert_eq!(ledger_entry(&merchant).await, (40, 40), "{mode:?}");
        assert_eq!(
            faults.counts.get(Fault::TransactionConflict),
            0,
            "{mode:?}: transactions on the account were in flight together"
        );
    }
}

/// Two containers (two engines) on the same hot account at the same time,
/// with transactions cancelled on conflict as DynamoDB in AWS does: the
/// conflicts between them are retried (or their records reported and
/// redelivered), and every payment applies exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conflicts_between_containers_are_retried_and_apply_each_payment_once() {
    let plan = FaultPlan {
        latency: 1.0,
        latency_ms: (0, 10),
        transaction_conflicts: true,
        ..FaultPlan::default()
    };
    let faults = Faults::new(plan, 23, None);
    let config = support::store_config(Duration::from_secs(30));
    let merchant = account();
    let mut containers = Vec::new();
    for half in 0..2 {
        let client = faults.attach(&support::client().await);
        let engine = EngineConfig {
            max_records_per_transaction: 1 + half * 4,
            ..EngineConfig::default()
        };
        let function = ledger_function(
            client,
            &config,
            LedgerMode::LockFree,
            OrderingMode::Unordered,
            engine,
            None,
        );
        // Each container its own 30 payments (ids pay-<half>-<i>).
        let amounts = vec![1; 30];
        let mut event = payments_to(&merchant, &amounts, 3);
        for records in event["records"]
            .as_object_mut()
            .expect("records")
            .values_mut()
        {
            for record in records.as_array_mut().expect("a list") {
                rename(record, half);
            }
        }
        containers.push(tokio::spawn(async move {
            invoke_until_done(&function, &event).await;
        }));
    }
    for container in containers {
        container.await.expect("the container's task");
    }
    assert_eq!(ledger_entry(&merchant).await, (60, 60));
    assert!(
        faults.counts.get(Fault::TransactionConflict) > 0,
        "no conflict happened: the test shows nothing"
    );
}

/// Gives a record of `payments_to` the idempotency key and payment id
/// `pay-<half>-<i>`.
fn rename(record: &mut Value, half: usize) {
    let decode = |v: &Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().expect("base64"))
            .expect("base64")
    };
    let value: Value = serde_json::from_slice(&decode(&record["value"])).expect("json");
    let id = format!("{}-{half}", value["payment_id"].as_str().expect("an id"));
    let mut value = value;
    value["payment_id"] = json!(id);
    record["value"] = json!(base64::engine::general_purpose::STANDARD.encode(value.to_string()));
    record["headers"] = json!([support::msk::header("idempotency-key", id.as_bytes())]);
}

/// The sizes a container's lock-free transactions took, in order, after the
/// start ([`GROUP_START`]).
fn sizes(function: &BatchFunction<LedgerHandler, DynamoDbStore>) -> Vec<usize> {
    let history = function.engine().group_sizes();
    assert_eq!(
        history.first().map(|r| r.size),
        Some(GROUP_START),
        "the start"
    );
    history.iter().skip(1).map(|r| r.size).collect()
}

/// One hot account's payments through a store that answers `plan`'s way:
/// delivered until nothing is reported, each applied once; the sizes the
/// container's transactions took.
async fn hot_account_through(plan: FaultPlan, payments: usize) -> Vec<usize> {
    let faults = Faults::new(plan, 29, None);
    let function = lock_free_through(&faults, OrderingMode::Partition).await;
    let merchant = account();
    let amounts = vec![1; payments];
    support::msk::invoke_until_done(&function, &payments_to(&merchant, &amounts, 1)).await;
    assert_eq!(
        ledger_entry(&merchant).await,
        (payments as i64, payments as i64),
        "each payment applied once"
    );
    sizes(&function)
}

/// The default sizing (no `MAX_RECORDS_PER_TRANSACTION` cap of one's own)
/// follows what the store answers: quick commits grow the group, and so do
/// commits a second late (far, not queueing); slow ones (half-way to the
/// attempt timeout) shrink it, and so do throttling and transactions
/// cancelled in conflict;
/// every payment applies once whatever group it landed in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_group_size_follows_the_stores_answers() {
    // Quick: twice the size per full transaction (a new container's slow
    // start), up to the cap, never less.
    let quick = hot_account_through(FaultPlan::default(), 300).await;
    assert_eq!(quick.first(), Some(&(2 * GROUP_START)), "{quick:?}");
    assert!(quick.windows(2).all(|w| w[0] < w[1]), "{quick:?}");
    assert_eq!(quick.last(), Some(&99), "{quick:?}");

    // A second a request, well within the attempt timeout (3 s): a store
    // far away or under strain, but answering; the group grows as on a
    // quick one (at a quarter of a second a request, the latency rule used
    // to shrink such groups to one record a round trip).
    let far = FaultPlan {
        latency: 1.0,
        latency_ms: (1_000, 1_000),
        ..FaultPlan::default()
    };
    let far = hot_account_through(far, 60).await;
    assert_eq!(far.first(), Some(&(2 * GROUP_START)), "{far:?}");

    // Slow (1.6 s a request: past half the attempt timeout, near giving
    // requests up): a quarter off each, down from the start.
    let slow = FaultPlan {
        latency: 1.0,
        latency_ms: (1_600, 1_600),
        ..FaultPlan::default()
    };
    let slow = hot_account_through(slow, 40).await;
    assert!(slow.windows(2).all(|w| w[0] > w[1]), "{slow:?}");
    assert!(slow.first() < Some(&GROUP_START), "{slow:?}");

    // Throttled: a commit the SDK gave up on (its three attempts
    // throttled) halves it, from the start.
    let throttled = FaultPlan {
        first_transactions: Some((Fault::Throttle, 3)),
        ..FaultPlan::default()
    };
    let throttled = hot_account_through(throttled, 60).await;
    assert_eq!(throttled.first(), Some(&(GROUP_START / 2)), "{throttled:?}");
}

/// A batch of many lanes (1,000 payments in `key` order, each to its own
/// account, so that nothing serialises them) is sent within the window of
/// records in flight: never more records in transactions at once than the
/// window allowed, where 64 transactions (`MAX_IN_FLIGHT`) of a group each
/// would send them all at once. Every payment applies once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_lanes_is_sent_within_the_window_of_records_in_flight() {
    let faults = Faults::new(overlapping(), 41, None);
    let function = lock_free_through(&faults, OrderingMode::Key).await;
    let accounts: Vec<String> = (0..1_000).map(|_| account()).collect();
    let to: Vec<(&str, i64)> = accounts.iter().map(|a| (a.as_str(), 1)).collect();

    let response = invoke(&function, &payments(&to, 4)).await;

    assert_eq!(reported(&response), Vec::<String>::new());
    for account in &accounts {
        assert_eq!(ledger_entry(account).await, (1, 1));
    }
    let window = function.engine().records_in_flight_limits();
    let start = window.first().map(|r| r.size);
    assert_eq!(start, Some(WINDOW_GROUPS * 99), "four full groups");
    let widest = window.iter().map(|r| r.size).max().unwrap_or_default();
    let peak = faults.peak_records_in_flight();
    assert!(
        peak <= widest,
        "{peak} records in flight, the window {window:?}"
    );
}

/// Transactions cancelled in conflict (two containers on one hot account,
/// as DynamoDB in AWS cancels them) shrink the groups of the container that
/// meets them; each payment applies once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conflicts_shrink_the_group() {
    let plan = FaultPlan {
        latency: 1.0,
        latency_ms: (0, 10),
        transaction_conflicts: true,
        ..FaultPlan::default()
    };
    let faults = Faults::new(plan, 31, None);
    let config = support::store_config(Duration::from_secs(30));
    let merchant = account();
    let containers: Vec<_> = futures_util::future::join_all((0..2).map(|_| async {
        let client = faults.attach(&support::client().await);
        ledger_function(
            client,
            &config,
            LedgerMode::LockFree,
            OrderingMode::Partition,
            EngineConfig::default(),
            None,
        )
    }))
    .await;
    // Each container its own 200 payments (ids pay-<half>-<i>) to the one
    // merchant: their transactions meet on its item only.
    let batches: Vec<Value> = (0..2)
        .map(|half| {
            let mut batch = payments_to(&merchant, &vec![1; 200], 2);
            for records in batch["records"]
                .as_object_mut()
                .expect("records")
                .values_mut()
            {
                for record in records.as_array_mut().expect("a list") {
                    rename(record, half);
                }
            }
            batch
        })
        .collect();
    futures_util::future::join_all(
        containers
            .iter()
            .zip(&batches)
            .map(|(function, batch)| support::msk::invoke_until_done(function, batch)),
    )
    .await;
    assert!(
        faults.counts.get(Fault::TransactionConflict) > 0,
        "conflicts met"
    );
    assert_eq!(ledger_entry(&merchant).await, (400, 400));
    // From the start on: a conflict met first halves the start itself.
    let shrunk = containers.iter().any(|function| {
        let history = function.engine().group_sizes();
        history.windows(2).any(|w| w[1].size < w[0].size)
    });
    assert!(
        shrunk,
        "{:?}",
        containers.iter().map(sizes).collect::<Vec<_>>()
    );
}
