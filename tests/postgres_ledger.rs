//! The demo function on PostgreSQL, end to end: MSK events in, balances in
//! a SQL ledger, the exact response out, in all three ledger modes; the
//! path each mode takes, asserted from inside the work; poison records
//! failing alone; concurrent deliveries of one batch; a hot account's
//! merged payments with a floor.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use exactly_once::engine::{
    CommitPath, Completion, Engine, EngineConfig, FencingToken, HandlerError, RecordHandler,
};
use exactly_once::lambda::{KafkaRecord, MskFunction};
use exactly_once::ledger::{LedgerHandler, LedgerMode};
use exactly_once::store::postgres::SqlEffect;
use exactly_once::{PostgresStore, Status, Store};
use serde_json::{Value, json};
use support::msk::{account, event, header_keys, invoke, invoke_until_done, payment, reported};
use support::postgres;

/// The ledger, noting what the store held for each key while its work ran
/// (read directly, not through any proxy): `None` on the lock-free path
/// (nothing is written before the commit), STARTED on the locking path (the
/// claim came first); and, with `cut`, cutting the database off (the proxy)
/// at its n-th call.
struct Watching {
    ledger: LedgerHandler,
    store: PostgresStore,
    seen: Seen,
    cut: Option<(usize, Arc<support::proxy::Proxy>)>,
}

impl RecordHandler<SqlEffect> for Watching {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        self.ledger.commit_path()
    }

    async fn handle(
        &self,
        token: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<SqlEffect>, HandlerError> {
        let key = token
            .key
            .strip_prefix(&self.store.config().key_prefix)
            .expect("under the prefix");
        let held = self.store.get(key).await.expect("get");
        let call = {
            let mut seen = self.seen.lock().expect("seen");
            seen.push(held.map(|item| item.status));
            seen.len()
        };
        if let Some((n, proxy)) = &self.cut
            && *n == call
        {
            proxy.cut();
        }
        self.ledger.handle(token, record).await
    }
}

type Seen = Arc<Mutex<Vec<Option<Status>>>>;

/// The demo function in `mode` on a fresh key prefix, and what its work saw.
async fn function(
    mode: LedgerMode,
    floor: Option<i64>,
) -> (MskFunction<Watching, PostgresStore>, Seen) {
    let store = postgres::store(Duration::from_secs(30)).await;
    let ledger = LedgerHandler::on_postgres(store.clone(), support::env("LEDGER_TABLE"), mode)
        .with_floor(floor);
    let seen = Seen::default();
    let handler = Watching {
        ledger,
        store: store.clone(),
        seen: seen.clone(),
        cut: None,
    };
    let function = MskFunction::new(
        Engine::new(store, handler, EngineConfig::default()),
        support::msk::settings(header_keys()),
    )
    .without_metrics();
    (function, seen)
}

fn store_of(function: &MskFunction<Watching, PostgresStore>) -> &PostgresStore {
    function.engine().store()
}

const MODES: [LedgerMode; 3] = [
    LedgerMode::LockFree,
    LedgerMode::Transactional,
    LedgerMode::Direct,
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_mode_applies_each_payment_once_and_a_replay_changes_nothing() {
    for mode in MODES {
        let (function, seen) = function(mode, None).await;
        let (a, b) = (account(), account());
        let batch = event(vec![
            (
                "payments-0",
                (0..5)
                    .map(|i| payment(i, &format!("p0-{i}"), &a, 100 + i))
                    .collect(),
            ),
            (
                "payments-1",
                (0..5)
                    .map(|i| payment(i, &format!("p1-{i}"), &b, 10 * (i + 1)))
                    .collect(),
            ),
        ]);
        let response = invoke(&function, &batch).await;
        assert_eq!(
            serde_json::to_value(&response).expect("json"),
            json!({"batchItemFailures": []}),
            "{mode:?}"
        );
        let pool = store_of(&function).pool();
        assert_eq!(postgres::ledger_entry(pool, &a).await, (510, 5), "{mode:?}");
        assert_eq!(postgres::ledger_entry(pool, &b).await, (150, 5), "{mode:?}");
        // The path: nothing stored during the lock-free work; a STARTED
        // claim during the locking path's.
        let expected = match mode {
            LedgerMode::LockFree => None,
            _ => Some(Status::Started),
        };
        assert_eq!(*seen.lock().expect("seen"), vec![expected; 10], "{mode:?}");
        let item = store_of(&function)
            .get("p0-3")
            .await
            .expect("get")
            .expect("row");
        assert_eq!(
            (item.status, item.version),
            (Status::Completed, 1),
            "{mode:?}"
        );
        assert_eq!(
            item.result.as_deref(),
            Some(&*format!("p0-3 103 EUR to {a}"))
        );

        // Redelivered whole: every record a duplicate, no work, no change.
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        assert_eq!(
            seen.lock().expect("seen").len(),
            10,
            "{mode:?}: no work ran again"
        );
        assert_eq!(postgres::ledger_entry(pool, &a).await, (510, 5), "{mode:?}");
        assert_eq!(postgres::ledger_entry(pool, &b).await, (150, 5), "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_record_fails_alone_and_is_stored_failed() {
    for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
        let (function, _) = function(mode, None).await;
        let a = account();
        let mut records = vec![payment(0, "ok-0", &a, 5)];
        records.push(support::msk::Rec {
            offset: 1,
            key: Some("bad-1".into()),
            value: br#"{"payment_id":"bad-1","amount_cents":"lots"}"#.to_vec(),
        });
        records.push(payment(2, "ok-2", &a, 7));
        let batch = event(vec![("payments-0", records)]);
        // Parked (the default POISON_POLICY): its FAILED row is its record.
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        let pool = store_of(&function).pool();
        assert_eq!(postgres::ledger_entry(pool, &a).await, (12, 2), "{mode:?}");
        let failed = store_of(&function)
            .get("bad-1")
            .await
            .expect("get")
            .expect("row");
        assert_eq!(failed.status, Status::Failed, "{mode:?}");
        let error = failed.error.expect("an error");
        assert!(error.starts_with("not a payment: "), "{error}");
        assert!(
            !error.contains("lots"),
            "no payload in a stored error: {error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_containers_delivered_one_batch_at_once_apply_each_payment_once() {
    for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
        let accounts: Vec<String> = (0..3).map(|_| account()).collect();
        let batch = event(vec![
            (
                "payments-0",
                (0..10)
                    .map(|i| payment(i, &format!("c0-{i}"), &accounts[i as usize % 3], 1))
                    .collect(),
            ),
            (
                "payments-1",
                (0..10)
                    .map(|i| payment(i, &format!("c1-{i}"), &accounts[i as usize % 3], 1))
                    .collect(),
            ),
        ]);
        let (first, _) = function(mode, None).await;
        let config = store_of(&first).config().clone();
        let mut containers = Vec::new();
        for _ in 0..4 {
            // Each container: its own pool, the same table and key prefix.
            let store = postgres::store(Duration::from_secs(30))
                .await
                .with_config(config.clone());
            let ledger =
                LedgerHandler::on_postgres(store.clone(), support::env("LEDGER_TABLE"), mode);
            let function = MskFunction::new(
                Engine::new(store, ledger, EngineConfig::default()),
                support::msk::settings(header_keys()),
            )
            .without_metrics();
            let batch: Value = batch.clone();
            containers.push(tokio::spawn(async move {
                invoke_until_done(&function, &batch).await;
            }));
        }
        for container in containers {
            container.await.expect("a container finished");
        }
        let pool = store_of(&first).pool();
        let mut payments = 0;
        for account in &accounts {
            let (balance, count) = postgres::ledger_entry(pool, account).await;
            assert_eq!(balance, count, "{mode:?}: one cent per payment");
            payments += count;
        }
        assert_eq!(payments, 20, "{mode:?}: every payment once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_accounts_payments_merge_and_the_floor_refuses_only_the_overdraft() {
    for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
        let (function, _) = function(mode, Some(0)).await;
        let merchant = account();
        let amounts = [100, -30, -80, 20, -50, 5];
        let records = amounts
            .iter()
            .enumerate()
            .map(|(i, amount)| payment(i as i64, &format!("h-{i}"), &merchant, *amount))
            .collect();
        let batch = event(vec![("payments-0", records)]);
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        // 100 - 30 = 70; -80 would overdraw (refused); + 20 - 50 + 5 = 45.
        let pool = store_of(&function).pool();
        assert_eq!(
            postgres::ledger_entry(pool, &merchant).await,
            (45, 5),
            "{mode:?}"
        );
        let refused = store_of(&function)
            .get("h-2")
            .await
            .expect("get")
            .expect("row");
        assert_eq!(refused.status, Status::Failed, "{mode:?}");
        let error = refused.error.expect("an error");
        assert!(
            error.ends_with("a number would fall below its floor"),
            "{mode:?}: {error}"
        );
    }
}

/// The demo function in `mode` on a pool through a proxy that can cut
/// PostgreSQL off, the handler cutting it at call `cut_on` (0: never); and
/// a store on the same key space that reaches PostgreSQL directly.
async fn cuttable(
    mode: LedgerMode,
    lock: Duration,
    cut_on: usize,
) -> (
    MskFunction<Watching, PostgresStore>,
    PostgresStore,
    Arc<support::proxy::Proxy>,
) {
    let direct = postgres::store(lock).await;
    let url = support::env("DATABASE_URL");
    let (before, after) = url.split_once("127.0.0.1:").expect("a loopback URL");
    let port = after.split(['/', '?']).next().expect("a port");
    let proxy = Arc::new(support::proxy::Proxy::start(format!("127.0.0.1:{port}")).await);
    let proxied_url = format!("{before}127.0.0.1:{}{}", proxy.port, &after[port.len()..]);
    let settings = exactly_once::store::postgres::DatabaseSettings::from_lookup(|name| {
        (name == "DATABASE_URL").then(|| proxied_url.clone())
    })
    .expect("settings");
    let store = PostgresStore::new(
        settings.pool(None).await.expect("a pool"),
        direct.config().clone(),
        settings.call_timeout(),
    )
    .expect("store");
    let handler = Watching {
        ledger: LedgerHandler::on_postgres(store.clone(), support::env("LEDGER_TABLE"), mode),
        store: direct.clone(),
        seen: Seen::default(),
        cut: (cut_on > 0).then(|| (cut_on, proxy.clone())),
    };
    let function = MskFunction::new(
        Engine::new(store, handler, EngineConfig::default()),
        support::msk::settings(header_keys()),
    )
    .without_metrics();
    (function, direct, proxy)
}

/// How many times the work ran.
fn calls(function: &MskFunction<Watching, PostgresStore>) -> usize {
    function.engine().handler().seen.lock().expect("seen").len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_gone_mid_batch_fails_closed_and_the_replay_applies_everything_once() {
    for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
        let (function, direct, proxy) = cuttable(mode, Duration::from_millis(500), 3).await;
        let a = account();
        let records = (0..6)
            .map(|i| payment(i, &format!("o-{i}"), &a, 10_i64.pow(i as u32)))
            .collect();
        let batch = event(vec![("payments-0", records)]);
        let result = function
            .handle(lambda_runtime::LambdaEvent::new(
                batch.clone(),
                lambda_runtime::Context::default(),
            ))
            .await;
        let pool = direct.pool();
        // As on DynamoDB (tests/lifecycle.rs). Locking: offsets 0 and 1
        // finished, offset 2 was claimed and its work cut PostgreSQL off.
        // Lock-free: the six increments of one account were one group,
        // whose commit met the cut: nothing finished, the invocation fails.
        match (mode, result) {
            (LedgerMode::LockFree, Err(err)) => assert!(
                matches!(
                    err,
                    exactly_once::lambda::InvocationError::StoreUnavailable { reported: 6 }
                ),
                "{err:?}"
            ),
            (LedgerMode::Transactional, Ok(response)) => {
                let expected: Vec<String> = (2..6).map(|i| format!("payments-0@{i}")).collect();
                assert_eq!(reported(&response), expected);
            }
            (_, other) => panic!("{mode:?}: {other:?}"),
        }
        // No business logic for a record that was not claimed (locking).
        let (ran, applied) = match mode {
            LedgerMode::LockFree => (6, 0),
            _ => (3, 1 + 10),
        };
        assert_eq!(calls(&function), ran, "{mode:?}");
        assert_eq!(
            postgres::ledger_entry(pool, &a).await.0,
            applied,
            "{mode:?}"
        );

        proxy.restore();
        tokio::time::sleep(Duration::from_millis(600)).await; // offset 2's lock ends
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        assert_eq!(
            postgres::ledger_entry(pool, &a).await,
            (111_111, 6),
            "{mode:?}"
        );
        let version = if mode == LedgerMode::LockFree { 1 } else { 2 };
        let item = direct.get("o-2").await.expect("get").expect("row");
        assert_eq!(
            (item.status, item.version),
            (Status::Completed, version),
            "{mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_gone_before_the_batch_is_an_invocation_error_and_nothing_runs() {
    for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
        let (function, direct, proxy) = cuttable(mode, Duration::from_secs(30), 0).await;
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
            .handle(lambda_runtime::LambdaEvent::new(
                batch.clone(),
                lambda_runtime::Context::default(),
            ))
            .await
            .expect_err("nothing could be done");
        assert!(
            matches!(
                err,
                exactly_once::lambda::InvocationError::StoreUnavailable { reported: 3 }
            ),
            "{mode:?}: {err:?}"
        );
        if mode == LedgerMode::Transactional {
            assert_eq!(calls(&function), 0, "no business logic without a claim");
        }
        assert_eq!(postgres::ledger_entry(direct.pool(), &a).await, (0, 0));
        proxy.restore();
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        assert_eq!(
            postgres::ledger_entry(direct.pool(), &a).await,
            (7, 3),
            "{mode:?}"
        );
    }
}
