//! Batch behaviour of the engine and the Lambda edge on the in-memory
//! backend, which passes the same conformance suite as DynamoDB
//! (`tests/stores/store_memory.rs`): lanes, claims made ahead, copies of a key in
//! one batch, the lock-free grouping and its fallback, leases waited out and
//! kept by heartbeat. No network; time is tokio's, paused where a test waits
//! out a lease, so 30-second locks cost nothing.

use crate::support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exactly_once::clock::now_ms;
use exactly_once::config::StoreConfig;
use exactly_once::engine::{
    CommitPath, Completion, Engine, EngineConfig, FencingToken, HandlerError, RecordHandler,
};
use exactly_once::lambda::{BatchFunction, KafkaRecord};
use exactly_once::store::ClaimOutcome;
use exactly_once::store::ClaimRequest;
use exactly_once::store::Status;
use exactly_once::store::Store;
use exactly_once::store::memory::{CounterEffect, MemoryStore};
use lambda_runtime::{Context, LambdaEvent};
use ledger::Payment;
use serde_json::Value;
use support::msk::{event, header_keys, payment, reported, settings};

/// The demo ledger on counters: a payment adds its amount to its account; a
/// debit may not take the account below 0. Counts its runs per payment.
struct Counters {
    path: CommitPath,
    /// Virtual time each run takes.
    pause: Duration,
    runs: Mutex<HashMap<String, usize>>,
}

impl Counters {
    fn new(path: CommitPath) -> Self {
        Self {
            path,
            pause: Duration::ZERO,
            runs: Mutex::default(),
        }
    }

    fn runs(&self) -> HashMap<String, usize> {
        self.runs.lock().unwrap().clone()
    }
}

impl RecordHandler<CounterEffect> for Counters {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        self.path
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<CounterEffect>, HandlerError> {
        let payment = Payment::parse(&record.value)?;
        *self
            .runs
            .lock()
            .unwrap()
            .entry(payment.payment_id.clone())
            .or_default() += 1;
        tokio::time::sleep(self.pause).await;
        let effect = CounterEffect {
            counter: payment.account_id,
            add: payment.amount_cents,
            floor: (payment.amount_cents < 0).then_some(0),
        };
        Ok(Completion::transactional(payment.payment_id, vec![effect]))
    }
}

/// The window of records in flight starts at four full groups, and never
/// holds fewer than `MAX_IN_FLIGHT` records (64): with groups of one record
/// (`MAX_RECORDS_PER_TRANSACTION=1`), 64 commits still go at once, as
/// before there was a window.
#[test]
fn the_window_of_records_in_flight_starts_at_four_groups_and_holds_max_in_flight() {
    let window = |cap: usize| {
        let config = EngineConfig {
            max_records_per_transaction: cap,
            ..EngineConfig::default()
        };
        let store = store(Duration::from_secs(30));
        let engine = Engine::new(store, Counters::new(CommitPath::LockFree), config);
        engine.records_in_flight_limit()
    };
    assert_eq!(window(99), 396);
    assert_eq!(window(20), 80);
    assert_eq!(window(10), 64);
    assert_eq!(window(1), 64);
}

fn store(lock: Duration) -> MemoryStore {
    MemoryStore::new(StoreConfig {
        lock_timeout: lock,
        ..StoreConfig::new("memory")
    })
}

fn function(store: &MemoryStore, handler: Counters) -> BatchFunction<Counters, MemoryStore> {
    BatchFunction::new(
        Engine::new(store.clone(), handler, EngineConfig::default()),
        settings(header_keys()),
    )
    .without_metrics()
}

/// One invocation with ten minutes to go.
async fn invoke(function: &BatchFunction<Counters, MemoryStore>, batch: &Value) -> Vec<String> {
    invoke_within(function, batch, Duration::from_secs(600)).await
}

/// One invocation with `time` to go.
async fn invoke_within(
    function: &BatchFunction<Counters, MemoryStore>,
    batch: &Value,
    time: Duration,
) -> Vec<String> {
    let mut context = Context::default();
    context.deadline = now_ms() + time.as_millis() as u64;
    let response = function
        .handle(LambdaEvent::new(batch.clone(), context))
        .await
        .expect("a Kafka event is never an invocation error");
    reported(&response)
}

/// 3 partitions of 20 payments; every payment appears twice (in another
/// partition, or twice in its own): each runs once, each applies once.
async fn each_payment_applies_once(path: CommitPath) {
    let store = store(Duration::from_secs(30));
    let function = function(&store, Counters::new(path));
    let partitions: Vec<(&str, Vec<_>)> = ["payments-0", "payments-1", "payments-2"]
        .into_iter()
        .enumerate()
        .map(|(p, name)| {
            let records = (0..20)
                .map(|i| {
                    // Payment n of partition p: p-n, and also the one of the next partition.
                    let n = if i % 2 == 0 { i / 2 } else { i / 2 + 100 };
                    let owner = if n >= 100 { (p + 1) % 3 } else { p };
                    let key = format!("pay-{owner}-{}", n % 100);
                    payment(i64::from(i), &key, &format!("acc-{owner}"), 10)
                })
                .collect();
            (name, records)
        })
        .collect();
    let batch = event(partitions);

    assert_eq!(invoke(&function, &batch).await, Vec::<String>::new());
    let runs = function.engine().handler().runs();
    assert_eq!(runs.len(), 30, "{runs:?}");
    assert!(runs.values().all(|&n| n == 1), "{runs:?}");
    for account in ["acc-0", "acc-1", "acc-2"] {
        assert_eq!(store.counter(account), 100, "{account}");
    }
    // Delivered again: all duplicates, nothing runs or applies again.
    assert_eq!(invoke(&function, &batch).await, Vec::<String>::new());
    assert_eq!(function.engine().handler().runs(), runs);
    assert_eq!(store.counter("acc-0"), 100);
    let item = store.get("pay-0-3").await.expect("get").expect("item");
    assert_eq!(
        (item.status, item.version, item.result.as_deref()),
        (Status::Completed, 1, Some("pay-0-3"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locking_each_payment_of_a_batch_with_copies_runs_and_applies_once() {
    each_payment_applies_once(CommitPath::Locking).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_free_each_payment_of_a_batch_with_copies_runs_and_applies_once() {
    each_payment_applies_once(CommitPath::LockFree).await;
}

/// Two invocations of one container (Lambda Managed Instances) handed the
/// same records at once, as a rebalance hands a partition to two pollers:
/// each key's work runs once, in one of them; the other waits for it and
/// gets a duplicate, so neither reports a record (the container never
/// races itself for a key), and each payment applies once. A third
/// invocation afterwards is all duplicates from the warm cache.
async fn overlapping_invocations_run_each_key_once(path: CommitPath) {
    let store = store(Duration::from_secs(30));
    let handler = Counters {
        // Long enough that the two invocations overlap.
        pause: Duration::from_millis(20),
        ..Counters::new(path)
    };
    let function = function(&store, handler);
    let partitions: Vec<(&str, Vec<_>)> = ["payments-0", "payments-1"]
        .into_iter()
        .enumerate()
        .map(|(p, name)| {
            let records = (0..10)
                .map(|i| payment(i, &format!("pay-{p}-{i}"), &format!("acc-{p}"), 10))
                .collect();
            (name, records)
        })
        .collect();
    let batch = event(partitions);
    // Less time than the 30 s lock: a key locked by the other invocation
    // would be reported in progress, not waited out.
    let within = Duration::from_secs(10);
    let (first, second) = tokio::join!(
        invoke_within(&function, &batch, within),
        invoke_within(&function, &batch, within)
    );
    assert_eq!(
        (first, second),
        (Vec::new(), Vec::new()),
        "nothing reported"
    );
    let runs = function.engine().handler().runs();
    assert_eq!(runs.len(), 20, "{runs:?}");
    assert!(runs.values().all(|&n| n == 1), "{runs:?}");
    assert_eq!((store.counter("acc-0"), store.counter("acc-1")), (100, 100));
    assert_eq!(invoke(&function, &batch).await, Vec::<String>::new());
    assert_eq!(function.engine().handler().runs(), runs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn locking_overlapping_invocations_of_one_container_run_each_key_once() {
    overlapping_invocations_run_each_key_once(CommitPath::Locking).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lock_free_overlapping_invocations_of_one_container_run_each_key_once() {
    overlapping_invocations_run_each_key_once(CommitPath::LockFree).await;
}

/// Lock-free: a debit the account cannot cover in the middle of a lane's
/// shared transaction fails alone (stored FAILED, parked); the payments
/// around it apply.
#[tokio::test]
async fn a_refused_effect_inside_a_shared_transaction_fails_that_payment_alone() {
    let store = store(Duration::from_secs(30));
    let function = function(&store, Counters::new(CommitPath::LockFree));
    let batch = event(vec![(
        "payments-0",
        vec![
            payment(0, "g-0", "acc", 100),
            payment(1, "g-1", "acc-poor", -5),
            payment(2, "g-2", "acc-2", 7),
            payment(3, "g-3", "acc-poor", 3),
        ],
    )]);

    assert_eq!(invoke(&function, &batch).await, Vec::<String>::new());
    assert_eq!(
        (
            store.counter("acc"),
            store.counter("acc-poor"),
            store.counter("acc-2")
        ),
        (100, 3, 7)
    );
    let failed = store.get("g-1").await.expect("get").expect("item");
    assert_eq!((failed.status, failed.version), (Status::Failed, 1));
    assert!(
        failed
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("a condition of effect write 0 failed")),
        "{failed:?}"
    );
}

/// A crashed worker holds a 30 s lease on a key: the invocation waits it
/// out (virtual time) and takes the key over, instead of reporting the
/// record.
#[tokio::test(start_paused = true)]
async fn a_crashed_workers_lease_is_waited_out_and_taken_over() {
    let store = store(Duration::from_secs(30));
    let crashed = store
        .claim(ClaimRequest {
            key: "p-1",
            payload_hash: &exactly_once::store::payload_hash(
                support::msk::payment_json("p-1", "acc", 40).as_bytes(),
            ),
            origin: Some("payments-0@0"),
            lease_cap_ms: None,
            owner: None,
        })
        .await
        .expect("claim");
    assert!(matches!(crashed, ClaimOutcome::Acquired(_)));
    let function = function(&store, Counters::new(CommitPath::Locking));
    let batch = event(vec![("payments-0", vec![payment(0, "p-1", "acc", 40)])]);

    let started = tokio::time::Instant::now();
    assert_eq!(invoke(&function, &batch).await, Vec::<String>::new());
    assert!(started.elapsed() >= Duration::from_secs(30));
    let item = store.get("p-1").await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Completed, 2));
    assert_eq!(store.counter("acc"), 40);
}

/// Work that runs 100 s under a 30 s lock keeps it by heartbeat: a second
/// container delivered the same record meanwhile finds it in progress and
/// runs nothing; the first completes at version 1.
#[tokio::test(start_paused = true)]
async fn a_handler_slower_than_its_lock_keeps_it_by_heartbeat() {
    let store = store(Duration::from_secs(30));
    let slow = Counters {
        pause: Duration::from_secs(100),
        ..Counters::new(CommitPath::Locking)
    };
    let first = Arc::new(function(&store, slow));
    let second = function(&store, Counters::new(CommitPath::Locking));
    let batch = event(vec![("payments-0", vec![payment(0, "slow-1", "acc", 5)])]);

    let running = tokio::spawn({
        let (first, batch) = (Arc::clone(&first), batch.clone());
        async move { invoke(&first, &batch).await }
    });
    tokio::time::sleep(Duration::from_secs(50)).await;
    // Its own deadline is near enough that the live lease is not waited out.
    let mut context = Context::default();
    context.deadline = now_ms() + 20_000;
    let response = second
        .handle(LambdaEvent::new(batch.clone(), context))
        .await
        .expect("response");
    assert_eq!(reported(&response), ["payments-0@0"]);
    assert!(second.engine().handler().runs().is_empty());

    assert_eq!(running.await.expect("task"), Vec::<String>::new());
    let item = store.get("slow-1").await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Completed, 1));
    assert_eq!(store.counter("acc"), 5);
}

/// Counters whose run of `held` waits at a gate: says it started, then
/// waits to be let through.
struct Gated {
    counters: Counters,
    held: &'static str,
    started: Arc<tokio::sync::Notify>,
    open: Arc<tokio::sync::Notify>,
}

impl RecordHandler<CounterEffect> for Gated {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        self.counters.path
    }

    async fn handle(
        &self,
        token: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<CounterEffect>, HandlerError> {
        if Payment::parse(&record.value)?.payment_id == self.held {
            self.started.notify_one();
            self.open.notified().await;
        }
        self.counters.handle(token, record).await
    }
}

/// A lane's keys claimed together ahead of their turn, two of them taken
/// over by another worker meanwhile (an operator released them, a new
/// delivery took them over as version 2): the lane's group transaction is
/// refused for their fences, the records before the first commit, the
/// first taken over is lock lost alone, the rest are not started and
/// released (but the other one taken over, whose release is fenced out
/// too). The other worker's items stay as it left them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_made_together_and_taken_over_are_fenced_record_by_record() {
    let store = store(Duration::from_secs(30));
    let (started, open) = (Arc::default(), Arc::default());
    let gated = Gated {
        counters: Counters::new(CommitPath::Locking),
        held: "p-0",
        started: Arc::clone(&started),
        open: Arc::clone(&open),
    };
    let function = Arc::new(BatchFunction::new(
        Engine::new(store.clone(), gated, EngineConfig::default()),
        settings(header_keys()),
    ));
    let payments = (0..10)
        .map(|i| payment(i, &format!("p-{i}"), "acc", 1))
        .collect();
    let batch = event(vec![("payments-0", payments)]);
    let running = tokio::spawn({
        let (function, batch) = (Arc::clone(&function), batch.clone());
        async move {
            let mut context = Context::default();
            context.deadline = now_ms() + 600_000;
            let response = function.handle(LambdaEvent::new(batch, context)).await;
            reported(&response.expect("response"))
        }
    });
    started.notified().await;
    // Every key of the lane was claimed in one batch before p-0 ran.
    for i in 0..10 {
        let item = store
            .get(&format!("p-{i}"))
            .await
            .expect("get")
            .expect("claimed");
        assert_eq!((item.status, item.version), (Status::Started, 1), "p-{i}");
    }
    let mut taken = Vec::new();
    for key in ["p-3", "p-7"] {
        exactly_once::store::Operator::release_version(&store, key, 1)
            .await
            .expect("release");
        let hash =
            exactly_once::store::payload_hash(support::msk::payment_json(key, "acc", 1).as_bytes());
        let outcome = store
            .claim(ClaimRequest {
                key,
                payload_hash: &hash,
                origin: Some("elsewhere"),
                lease_cap_ms: None,
                owner: None,
            })
            .await
            .expect("claim");
        let ClaimOutcome::TakenOver(lease) = outcome else {
            panic!("{key}: {outcome:?}");
        };
        taken.push(lease);
    }
    open.notify_one();

    let reported = running.await.expect("task");
    let expected: Vec<String> = (3..10).map(|i| format!("payments-0@{i}")).collect();
    assert_eq!(reported, expected);
    assert_eq!(store.counter("acc"), 3, "p-0, p-1, p-2 only");
    for i in 0..3 {
        let item = store
            .get(&format!("p-{i}"))
            .await
            .expect("get")
            .expect("item");
        assert_eq!((item.status, item.version), (Status::Completed, 1));
    }
    for lease in &taken {
        let item = store.get(&lease.pk).await.expect("get").expect("item");
        assert_eq!(
            (item.status, item.version, item.owner.as_str()),
            (Status::Started, 2, lease.owner.as_str()),
            "the other worker's item is untouched"
        );
    }
    // Not started: released at once, for the redelivery to take over.
    for key in ["p-4", "p-5", "p-6", "p-8", "p-9"] {
        let item = store.get(key).await.expect("get").expect("item");
        assert_eq!((item.status, item.version), (Status::Started, 1), "{key}");
        assert!(
            item.lock_expires_at_ms.unwrap_or(0) <= store.now_ms(),
            "{key}"
        );
    }
}
