//! Lock lifecycle and failure semantics: heartbeats, stolen locks, DynamoDB
//! outages, deadlines.

use crate::support;

use aws_sdk_dynamodb::types::TransactWriteItem;
use exactly_once::store::Store;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use exactly_once::clock::now_ms;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::{
    CommitPath, Completion, Engine, EngineConfig, FencingToken, HandlerError, RecordHandler,
};
use exactly_once::lambda::Record;
use exactly_once::lambda::{BatchFunction, BatchResponse, FunctionSettings, InvocationError};
use exactly_once::store::Status;
use lambda_runtime::{Context, LambdaEvent};
use ledger::{LedgerHandler, LedgerMode};
use support::msk::{account, balance, event, header_keys, invoke, payment, reported};
use support::proxy::Proxy;

/// The ledger (transactional), after a pause; counts its calls, may cut
/// DynamoDB on the n-th call.
struct Paced {
    ledger: LedgerHandler,
    pause: Duration,
    calls: AtomicUsize,
    finished: AtomicBool,
    cut_on_call: Option<(usize, Arc<Proxy>)>,
}

impl Paced {
    /// The ledger in the mode `TEST_LEDGER_MODE` names.
    fn new(client: aws_sdk_dynamodb::Client, pause: Duration) -> Self {
        Self::in_mode(client, pause, support::msk::ledger_mode())
    }

    /// The ledger on the locking path (leases, heartbeats).
    fn locking(client: aws_sdk_dynamodb::Client, pause: Duration) -> Self {
        Self::in_mode(client, pause, LedgerMode::Transactional)
    }

    fn in_mode(client: aws_sdk_dynamodb::Client, pause: Duration, mode: LedgerMode) -> Self {
        Self {
            ledger: LedgerHandler::new(client, support::env("LEDGER_TABLE"), mode),
            pause,
            calls: AtomicUsize::new(0),
            finished: AtomicBool::new(false),
            cut_on_call: None,
        }
    }
}

impl RecordHandler<TransactWriteItem> for Paced {
    type Record = Record;

    fn commit_path(&self) -> CommitPath {
        self.ledger.commit_path()
    }
    async fn handle(
        &self,
        token: &FencingToken,
        record: &Record,
    ) -> Result<Completion<TransactWriteItem>, HandlerError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(self.pause).await;
        if let Some((n, proxy)) = &self.cut_on_call
            && *n == call
        {
            proxy.cut();
        }
        let completion = self.ledger.handle(token, record).await;
        self.finished.store(true, Ordering::SeqCst);
        completion
    }
}

fn function(
    store: DynamoDbStore,
    handler: Paced,
    margin: Duration,
) -> BatchFunction<Paced, DynamoDbStore> {
    let settings = FunctionSettings {
        safety_margin: margin,
        ..support::msk::settings(header_keys())
    };
    BatchFunction::new(
        Engine::new(store, handler, EngineConfig::default()),
        settings,
    )
}

async fn invoke_until(
    function: &BatchFunction<Paced, DynamoDbStore>,
    batch: &serde_json::Value,
    deadline_ms: u64,
) -> Result<BatchResponse, InvocationError> {
    let mut context = Context::default();
    context.deadline = deadline_ms;
    function
        .handle(LambdaEvent::new(batch.clone(), context))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_slower_than_its_lock_keeps_it_by_heartbeat() {
    let store = support::store(Duration::from_millis(600)).await;
    let slow = Paced::locking(support::client().await, Duration::from_millis(1800));
    let function = Arc::new(function(store.clone(), slow, Duration::from_secs(5)));
    let a = account();
    let batch = Arc::new(event(vec![(
        "payments-0",
        vec![payment(0, "slow-1", &a, 40)],
    )]));

    let first = {
        let (function, batch) = (function.clone(), batch.clone());
        tokio::spawn(async move { invoke(&function, &batch).await })
    };
    // Well past the 600 ms lock: only the heartbeat keeps it from another
    // container. (Another invocation of the same container waits for it.)
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let fast = Paced::locking(support::client().await, Duration::ZERO);
    let other = self::function(store.clone(), fast, Duration::from_secs(5));
    assert_eq!(reported(&invoke(&other, &batch).await), ["payments-0@0"]);

    assert_eq!(
        reported(&first.await.expect("first invocation")),
        Vec::<String>::new()
    );
    let item = store.get("slow-1").await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Completed, 1));
    assert_eq!(balance(&a).await, 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_whose_lock_is_stolen_is_stopped_and_records_nothing() {
    let store = support::store(Duration::from_millis(300)).await;
    let slow = Paced::locking(support::client().await, Duration::from_millis(1500));
    let function = Arc::new(function(store.clone(), slow, Duration::from_secs(5)));
    let a = account();
    let batch = Arc::new(event(vec![(
        "payments-0",
        vec![payment(0, "stolen", &a, 40)],
    )]));
    let run = {
        let (function, batch) = (function.clone(), batch.clone());
        tokio::spawn(async move { invoke(&function, &batch).await })
    };
    // Once the key is claimed (the handler then runs for 1.5 s), another
    // worker takes it over (as after a long GC pause here).
    for _ in 0..250 {
        if store.get("stolen").await.expect("get").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pk = format!("{}stolen", store.config().key_prefix);
    support::client()
        .await
        .update_item()
        .table_name(&store.config().table_name)
        .key("pk", AttributeValue::S(pk))
        .update_expression("SET version = version + :one, #o = :thief")
        .expression_attribute_names("#o", "owner")
        .expression_attribute_values(":one", AttributeValue::N("1".into()))
        .expression_attribute_values(":thief", AttributeValue::S("thief".into()))
        .send()
        .await
        .expect("steal the lock");

    assert_eq!(reported(&run.await.expect("invocation")), ["payments-0@0"]);
    assert!(
        !function.engine().handler().finished.load(Ordering::SeqCst),
        "the work must be stopped when the lock is lost"
    );
    let item = store.get("stolen").await.expect("get").expect("item");
    assert_eq!(
        (item.status, item.version, item.owner.as_str()),
        (Status::Started, 2, "thief")
    );
    assert_eq!(balance(&a).await, 0);
}

async fn proxied(lock: Duration) -> (Arc<Proxy>, DynamoDbStore, aws_sdk_dynamodb::Client) {
    let proxy = Arc::new(Proxy::start(support::dynamodb_address()).await);
    let client = support::client_at(&proxy.endpoint()).await;
    let store = DynamoDbStore::new(client.clone(), support::store_config(lock));
    (proxy, store, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_gone_mid_batch_fails_closed_and_the_replay_applies_everything_once() {
    let (proxy, store, client) = proxied(Duration::from_millis(500)).await;
    let mut handler = Paced::new(client, Duration::ZERO);
    handler.cut_on_call = Some((3, proxy.clone()));
    let function = function(store.clone(), handler, Duration::from_secs(5));
    let a = account();
    let records = (0..6)
        .map(|i| payment(i, &format!("o-{i}"), &a, 10_i64.pow(i as u32)))
        .collect();
    let batch = event(vec![("payments-0", records)]);

    let result = function
        .handle(LambdaEvent::new(batch.clone(), Context::default()))
        .await;
    let calls = function.engine().handler().calls.load(Ordering::SeqCst);
    let lock_free = support::msk::commit_path() == CommitPath::LockFree;
    // On both paths the six payments (increments of one account, their
    // effects in the store) were computed into one group (locking: under
    // the claims made for all six together, ahead of their turn), whose
    // commit met the cut: nothing finished, so the invocation fails and the
    // whole batch comes again.
    assert!(
        matches!(
            result,
            Err(InvocationError::StoreUnavailable { reported: 6 })
        ),
        "lock-free {lock_free}: {result:?}"
    );
    // Each record's effect was computed once, none applied.
    assert_eq!(calls, 6);
    assert_eq!(balance(&a).await, 0);

    proxy.restore();
    tokio::time::sleep(Duration::from_millis(600)).await; // offset 2's lock expires
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    assert_eq!(balance(&a).await, 111_111);
    // Locking: the claims made before the cut are taken over. Lock-free: nothing was
    // written; the redelivery commits afresh.
    let (key, version) = if lock_free { ("o-2", 1) } else { ("o-2", 2) };
    let item = store.get(key).await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Completed, version));
}

#[tokio::test]
async fn dynamodb_gone_before_the_batch_is_an_invocation_error_and_nothing_runs() {
    let (proxy, store, client) = proxied(Duration::from_secs(30)).await;
    let function = function(
        store,
        Paced::new(client, Duration::ZERO),
        Duration::from_secs(5),
    );
    let a = account();
    let batch = event(vec![
        (
            "payments-0",
            vec![payment(0, "x-1", &a, 1), payment(1, "x-2", &a, 2)],
        ),
        ("payments-1", vec![payment(0, "x-3", &a, 4)]),
    ]);
    proxy.cut();
    let err = function
        .handle(LambdaEvent::new(batch.clone(), Context::default()))
        .await
        .expect_err("nothing could be done");
    assert!(
        matches!(err, InvocationError::StoreUnavailable { reported: 3 }),
        "{err:?}"
    );
    // Locking: no business logic runs without a claim. Lock-free: the
    // handler only computed effects (no side effect); none was committed.
    if support::msk::commit_path() == CommitPath::Locking {
        assert_eq!(function.engine().handler().calls.load(Ordering::SeqCst), 0);
    }
    assert_eq!(balance(&a).await, 0);

    proxy.restore();
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    assert_eq!(balance(&a).await, 7);
}

#[tokio::test]
async fn near_the_deadline_no_record_starts_and_none_is_left_half_done() {
    let store = support::store(Duration::from_secs(30)).await;
    let paced = Paced::new(support::client().await, Duration::from_millis(150));
    let function = function(store.clone(), paced, Duration::from_millis(600));
    let a = account();
    let records = (0..10)
        .map(|i| payment(i, &format!("d-{i}"), &a, 1 << i))
        .collect();
    let batch = event(vec![("payments-0", records)]);

    let response = invoke_until(&function, &batch, now_ms() + 1000)
        .await
        .expect("response");
    let reported = reported(&response);
    let first_reported: usize = reported
        .first()
        .and_then(|r| r.strip_prefix("payments-0@"))
        .and_then(|o| o.parse().ok())
        .expect("records near the deadline are reported");
    assert!(
        first_reported >= 1,
        "a record had time to run: {reported:?}"
    );
    let expected: Vec<String> = (first_reported..10)
        .map(|i| format!("payments-0@{i}"))
        .collect();
    assert_eq!(reported, expected);
    // Finished records are applied; the others never ran: unclaimed, or
    // claimed ahead and released (claimable at once by the redelivery).
    assert_eq!(balance(&a).await, (1 << first_reported) - 1);
    for i in first_reported..10 {
        let item = store.get(&format!("d-{i}")).await.expect("get");
        assert!(
            item.as_ref()
                .is_none_or(|i| (i.status, i.lock_expires_at_ms) == (Status::Started, Some(0))),
            "d-{i}: {item:?}"
        );
    }
}

#[tokio::test]
async fn work_still_running_at_the_deadline_is_cut_and_its_key_released() {
    let store = support::store(Duration::from_secs(30)).await;
    let stuck = Paced::new(support::client().await, Duration::from_secs(5));
    let function = function(store.clone(), stuck, Duration::from_millis(600));
    let a = account();
    let batch = event(vec![(
        "payments-0",
        vec![payment(0, "cut-1", &a, 5), payment(1, "cut-2", &a, 6)],
    )]);

    let response = invoke_until(&function, &batch, now_ms() + 1000)
        .await
        .expect("response");
    assert_eq!(reported(&response), ["payments-0@0", "payments-0@1"]);
    let item = store.get("cut-1").await.expect("get");
    match support::msk::commit_path() {
        // Its effect was never computed: nothing written.
        CommitPath::LockFree => assert_eq!(item, None),
        CommitPath::Locking => {
            let released = item.expect("claimed");
            assert_eq!(
                (released.status, released.lock_expires_at_ms),
                (Status::Started, Some(0))
            );
        }
    }
    assert_eq!(balance(&a).await, 0);
}

#[tokio::test]
async fn records_claimed_ahead_keep_their_claims_while_earlier_work_runs_long() {
    // Each record's work takes 2/3 of the lock: the last ones were claimed
    // ahead long before their turn, and are renewed when it comes.
    let store = support::store(Duration::from_millis(600)).await;
    let slow = Paced::locking(support::client().await, Duration::from_millis(400));
    let function = function(store.clone(), slow, Duration::from_secs(5));
    let a = account();
    let records = (0..4)
        .map(|i| payment(i, &format!("ahead-{i}"), &a, 1))
        .collect();
    let batch = event(vec![("payments-0", records)]);

    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    for i in 0..4 {
        let item = store
            .get(&format!("ahead-{i}"))
            .await
            .expect("get")
            .expect("item");
        assert_eq!(
            (item.status, item.version),
            (Status::Completed, 1),
            "ahead-{i}"
        );
    }
    assert_eq!(balance(&a).await, 4);
}

/// Tells when DynamoDB has answered the batch's first read (`BatchGetItem`).
struct FirstRead(tokio::sync::watch::Sender<bool>);

impl support::faults::Observer for FirstRead {
    fn exchanged(&self, exchange: support::faults::Exchange) {
        if exchange.operation == "BatchGetItem" {
            self.0.send_replace(true);
        }
    }
}

/// An invocation dropped midway (a crash; Lambda freezing the container)
/// leaves nothing behind that writes later: not the claims made ahead
/// (locking path), not a shared transaction (lock-free path). Every request
/// waits 600 ms before it leaves; the invocation is dropped while its first
/// writes wait, and none of them may ever reach DynamoDB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invocation_dropped_midway_writes_nothing_afterwards() {
    for mode in [LedgerMode::Transactional, LedgerMode::LockFree] {
        let (read, mut answered) = tokio::sync::watch::channel(false);
        let plan = support::faults::FaultPlan {
            latency: 1.0,
            latency_ms: (600, 600),
            ..Default::default()
        };
        let faults = support::faults::Faults::new(plan, 7, Some(Arc::new(FirstRead(read))));
        let client = faults.attach(&support::client().await);
        let config = support::store_config(Duration::from_secs(30));
        let store = DynamoDbStore::new(client.clone(), config.clone());
        let ledger = LedgerHandler::new(client, support::env("LEDGER_TABLE"), mode);
        assert_eq!(
            ledger.commit_path(),
            match mode {
                LedgerMode::LockFree => CommitPath::LockFree,
                _ => CommitPath::Locking,
            }
        );
        let function = BatchFunction::new(
            Engine::new(store, ledger, EngineConfig::default()),
            support::msk::settings(header_keys()),
        )
        .without_metrics();
        // An account per partition: their transactions may be shared.
        let accounts: Vec<String> = (0..3).map(|_| account()).collect();
        let keys: Vec<String> = (0..6)
            .map(|i| format!("dropped-{}-{i}", accounts[0]))
            .collect();
        let batch = event(
            (0..3)
                .map(|p| {
                    let name = ["payments-0", "payments-1", "payments-2"][p];
                    let recs = (0..2)
                        .map(|i| payment(i as i64, &keys[p * 2 + i], &accounts[p], 5))
                        .collect();
                    (name, recs)
                })
                .collect(),
        );
        let function = Arc::new(function);
        let invocation = tokio::spawn({
            let function = Arc::clone(&function);
            async move {
                function
                    .handle(LambdaEvent::new(batch, Context::default()))
                    .await
            }
        });
        answered
            .wait_for(|read| *read)
            .await
            .expect("the batch read");
        // The claims (or the shared transaction) have started and wait.
        tokio::time::sleep(Duration::from_millis(200)).await;
        invocation.abort();
        assert!(invocation.await.is_err_and(|err| err.is_cancelled()));
        tokio::time::sleep(Duration::from_millis(1000)).await;
        faults.settle().await;

        let checker = DynamoDbStore::new(support::client().await, config);
        for key in &keys {
            let item = checker.get(key).await.expect("get");
            assert_eq!(
                item, None,
                "{mode:?}: {key} was written after its invocation ended"
            );
        }
        for a in &accounts {
            assert_eq!(balance(a).await, 0, "{mode:?}");
        }
    }
}
