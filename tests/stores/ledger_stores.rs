//! The demo function on PostgreSQL and on Redis, end to end: MSK events
//! in, balances in the store's own ledger (a SQL table, Redis hashes), the
//! exact response out, in all three ledger modes; the path each mode takes,
//! asserted from inside the work; poison records failing alone; concurrent
//! deliveries of one batch; a hot account's merged payments with a floor;
//! the store cut off mid-batch and before it. Written once against
//! [`LedgerStore`], instantiated per store (`postgres::`, `redis::`).

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use exactly_once::config::StoreConfig;
use exactly_once::engine::{
    CommitPath, Completion, Engine, EngineConfig, FencingToken, HandlerError, RecordHandler,
    Resized,
};
use exactly_once::lambda::{BatchFunction, Record};
use exactly_once::postgres::DatabaseSettings;
use exactly_once::postgres::PostgresStore;
use exactly_once::redis::RedisStore;
use exactly_once::store::Status;
use exactly_once::store::requests::RequestCounter;
use exactly_once::store::{Operator, Store};
use ledger::{LedgerHandler, LedgerMode};
use serde_json::{Value, json};
use support::msk::{account, event, header_keys, invoke, invoke_until_done, payment, reported};
use support::proxy::Proxy;

/// What the suite needs of a store holding both the keys and the ledger.
trait LedgerStore: Operator + Sized {
    /// A store under a fresh key prefix, with lock timeout `lock`.
    async fn fresh(lock: Duration) -> Self;
    /// Another container's store (its own connections) on `config`'s keys.
    async fn container(config: StoreConfig) -> Self;
    /// A store on `config`'s keys whose connections go through `proxy`.
    async fn through(proxy: &Proxy, config: StoreConfig) -> Self;
    /// `host:port` of the test server.
    fn address() -> String;
    /// The demo ledger on this store.
    fn ledger(&self, mode: LedgerMode) -> LedgerHandler;
    /// `(balance_cents, payment_count)` of `account`.
    async fn entry(&self, account: &str) -> (i64, i64);
    /// The same store, its requests counted by `counter`.
    fn counted(self, counter: &RequestCounter) -> Self;
}

impl LedgerStore for PostgresStore {
    async fn fresh(lock: Duration) -> Self {
        support::postgres::store(lock).await
    }

    async fn container(config: StoreConfig) -> Self {
        Self::fresh(config.lock_timeout).await.with_config(config)
    }

    async fn through(proxy: &Proxy, config: StoreConfig) -> Self {
        let url = support::env("DATABASE_URL");
        let proxied = url.replacen(&Self::address(), &format!("127.0.0.1:{}", proxy.port), 1);
        let settings =
            DatabaseSettings::from_lookup(|name| (name == "DATABASE_URL").then(|| proxied.clone()))
                .expect("settings");
        let pool = settings.pool(None).await.expect("a pool");
        PostgresStore::new(pool, config, settings.call_timeout()).expect("store")
    }

    fn address() -> String {
        let url = support::env("DATABASE_URL");
        let after = url.split_once("127.0.0.1:").expect("a loopback URL").1;
        format!(
            "127.0.0.1:{}",
            after.split(['/', '?']).next().expect("a port")
        )
    }

    fn ledger(&self, mode: LedgerMode) -> LedgerHandler {
        LedgerHandler::on_postgres(self.clone(), support::env("LEDGER_TABLE"), mode)
    }

    async fn entry(&self, account: &str) -> (i64, i64) {
        support::postgres::ledger_entry(self.pool(), account).await
    }

    fn counted(self, counter: &RequestCounter) -> Self {
        self.with_request_counter(counter.clone())
    }
}

impl LedgerStore for RedisStore {
    async fn fresh(lock: Duration) -> Self {
        support::redis::store(lock)
    }

    async fn container(config: StoreConfig) -> Self {
        support::redis::store_with(&support::env("REDIS_URL"), config)
    }

    async fn through(proxy: &Proxy, config: StoreConfig) -> Self {
        support::redis::store_with(&format!("redis://127.0.0.1:{}", proxy.port), config)
    }

    fn address() -> String {
        support::env("REDIS_URL")
            .trim_start_matches("redis://")
            .to_owned()
    }

    fn ledger(&self, mode: LedgerMode) -> LedgerHandler {
        LedgerHandler::on_redis(self.clone(), support::env("LEDGER_TABLE"), mode)
    }

    async fn entry(&self, account: &str) -> (i64, i64) {
        support::redis::ledger_entry(self, &support::env("LEDGER_TABLE"), account).await
    }

    fn counted(self, counter: &RequestCounter) -> Self {
        self.with_request_counter(counter.clone())
    }
}

/// The ledger, noting what the store held for each key while its work ran
/// (read directly, not through any proxy): `None` on the lock-free path
/// (nothing is written before the commit), STARTED on the locking path (the
/// claim came first); and, with `cut`, cutting the store off (the proxy)
/// at its n-th call.
struct Watching<S> {
    ledger: LedgerHandler,
    store: S,
    seen: Seen,
    cut: Option<(usize, Arc<Proxy>)>,
}

impl<S: Store> RecordHandler<S::Effect> for Watching<S> {
    type Record = Record;

    fn commit_path(&self) -> CommitPath {
        self.ledger.commit_path()
    }

    async fn handle(
        &self,
        token: &FencingToken,
        record: &Record,
    ) -> Result<Completion<S::Effect>, HandlerError> {
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
        RecordHandler::<S::Effect>::handle(&self.ledger, token, record).await
    }
}

type Seen = Arc<Mutex<Vec<Option<Status>>>>;

/// The demo function in `mode` on a fresh key prefix, and what its work saw.
async fn function<S: LedgerStore>(
    mode: LedgerMode,
    floor: Option<i64>,
) -> (BatchFunction<Watching<S>, S>, Seen) {
    let store = S::fresh(Duration::from_secs(30)).await;
    let ledger = store.ledger(mode).with_floor(floor);
    let seen = Seen::default();
    let handler = Watching {
        ledger,
        store: store.clone(),
        seen: seen.clone(),
        cut: None,
    };
    let function = BatchFunction::new(
        Engine::new(store, handler, EngineConfig::default()),
        support::msk::settings(header_keys()),
    )
    .without_metrics();
    (function, seen)
}

fn store_of<S: LedgerStore>(function: &BatchFunction<Watching<S>, S>) -> &S {
    function.engine().store()
}

const MODES: [LedgerMode; 3] = [
    LedgerMode::LockFree,
    LedgerMode::Transactional,
    LedgerMode::Direct,
];

async fn every_mode_applies_each_payment_once_and_a_replay_changes_nothing<S: LedgerStore>() {
    for mode in MODES {
        let (function, seen) = function::<S>(mode, None).await;
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
        let store = store_of(&function);
        assert_eq!(store.entry(&a).await, (510, 5), "{mode:?}");
        assert_eq!(store.entry(&b).await, (150, 5), "{mode:?}");
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
        assert_eq!(store.entry(&a).await, (510, 5), "{mode:?}");
        assert_eq!(store.entry(&b).await, (150, 5), "{mode:?}");
    }
}

async fn a_poison_record_fails_alone_and_is_stored_failed<S: LedgerStore>() {
    for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
        let (function, _) = function::<S>(mode, None).await;
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
        assert_eq!(store_of(&function).entry(&a).await, (12, 2), "{mode:?}");
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

async fn four_containers_delivered_one_batch_at_once_apply_each_payment_once<S: LedgerStore>() {
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
        let (first, _) = function::<S>(mode, None).await;
        let config = store_of(&first).config().clone();
        let mut containers = Vec::new();
        for _ in 0..4 {
            // Each container: its own connections, the same key space.
            let store = S::container(config.clone()).await;
            let ledger = store.ledger(mode);
            let function = BatchFunction::new(
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
        let mut payments = 0;
        for account in &accounts {
            let (balance, count) = store_of(&first).entry(account).await;
            assert_eq!(balance, count, "{mode:?}: one cent per payment");
            payments += count;
        }
        assert_eq!(payments, 20, "{mode:?}: every payment once");
    }
}

async fn a_hot_accounts_payments_merge_and_the_floor_refuses_only_the_overdraft<S: LedgerStore>() {
    for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
        let (function, _) = function::<S>(mode, Some(0)).await;
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
        assert_eq!(
            store_of(&function).entry(&merchant).await,
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

/// The demo function in `mode` on connections through a proxy that can
/// cut the store off, the handler cutting it at call `cut_on` (0: never);
/// and a store on the same key space that reaches the server directly.
async fn cuttable<S: LedgerStore>(
    mode: LedgerMode,
    lock: Duration,
    cut_on: usize,
) -> (BatchFunction<Watching<S>, S>, S, Arc<Proxy>) {
    let direct = S::fresh(lock).await;
    let proxy = Arc::new(Proxy::start(S::address()).await);
    let store = S::through(&proxy, direct.config().clone()).await;
    let handler = Watching {
        ledger: store.ledger(mode),
        store: direct.clone(),
        seen: Seen::default(),
        cut: (cut_on > 0).then(|| (cut_on, proxy.clone())),
    };
    let function = BatchFunction::new(
        Engine::new(store, handler, EngineConfig::default()),
        support::msk::settings(header_keys()),
    )
    .without_metrics();
    (function, direct, proxy)
}

/// How many times the work ran.
fn calls<S: LedgerStore>(function: &BatchFunction<Watching<S>, S>) -> usize {
    function.engine().handler().seen.lock().expect("seen").len()
}

async fn the_store_gone_mid_batch_fails_closed_and_the_replay_applies_everything_once<
    S: LedgerStore,
>() {
    for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
        let (function, direct, proxy) = cuttable::<S>(mode, Duration::from_millis(500), 3).await;
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
        // As on DynamoDB (tests/batch/lifecycle.rs). The six increments of one
        // account were one group, whose commit met the cut: nothing
        // finished, the invocation fails. Lock-free: computed without a
        // claim; locking: the six keys were claimed together (before the
        // cut, which came with the third record's work) and every work ran.
        match result {
            Err(err) => assert!(
                matches!(
                    err,
                    exactly_once::lambda::InvocationError::StoreUnavailable { reported: 6 }
                ),
                "{mode:?}: {err:?}"
            ),
            other => panic!("{mode:?}: {other:?}"),
        }
        assert_eq!(calls(&function), 6, "{mode:?}");
        assert_eq!(direct.entry(&a).await.0, 0, "{mode:?}");

        proxy.restore();
        tokio::time::sleep(Duration::from_millis(600)).await; // the claims' locks end
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        assert_eq!(direct.entry(&a).await, (111_111, 6), "{mode:?}");
        let version = if mode == LedgerMode::LockFree { 1 } else { 2 };
        let item = direct.get("o-2").await.expect("get").expect("row");
        assert_eq!(
            (item.status, item.version),
            (Status::Completed, version),
            "{mode:?}"
        );
    }
}

async fn the_store_gone_before_the_batch_is_an_invocation_error_and_nothing_runs<S: LedgerStore>() {
    for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
        let (function, direct, proxy) = cuttable::<S>(mode, Duration::from_secs(30), 0).await;
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
        assert_eq!(direct.entry(&a).await, (0, 0));
        proxy.restore();
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        assert_eq!(direct.entry(&a).await, (7, 3), "{mode:?}");
    }
}

/// The locking path batched: 400 new payments over 4 partitions, in
/// `transactional` and `direct` mode, take their claims in batched
/// requests (one statement or script for many keys, no claim alone) and
/// their completions together (group transactions; batches of fenced
/// writes), at most 0.15 requests per record besides the direct mode's own
/// ledger write; every payment applied once.
async fn the_locking_path_claims_and_completes_in_batches<S: LedgerStore>() {
    for mode in [LedgerMode::Transactional, LedgerMode::Direct] {
        let counter = RequestCounter::default();
        let store = S::fresh(Duration::from_secs(30)).await.counted(&counter);
        let function = BatchFunction::new(
            Engine::new(store.clone(), store.ledger(mode), EngineConfig::default()),
            support::msk::settings(header_keys()),
        )
        .without_metrics();
        // A new container starts at the store's whole statement or script
        // (`Store::START_SIZE`): its first batch is as quick as a warm one's.
        let first = |sizes: Vec<Resized>| sizes.first().map(|resized| resized.size);
        assert_eq!(first(function.engine().group_sizes()), Some(99), "{mode:?}");
        assert_eq!(
            first(function.engine().claim_batch_sizes()),
            Some(100),
            "{mode:?}"
        );
        let accounts: Vec<String> = (0..20).map(|_| account()).collect();
        let batch = event(
            (0..4)
                .map(|p| {
                    let records = (0..100)
                        .map(|i| {
                            payment(i, &format!("p{p}-{i}"), &accounts[(i as usize + p) % 20], 1)
                        })
                        .collect();
                    (
                        ["payments-0", "payments-1", "payments-2", "payments-3"][p],
                        records,
                    )
                })
                .collect(),
        );
        let (before, _) = store.entry(&accounts[0]).await;
        assert_eq!(before, 0);
        counter.reset();
        assert_eq!(
            serde_json::to_value(invoke(&function, &batch).await).expect("json"),
            json!({"batchItemFailures": []}),
            "{mode:?}"
        );
        let counts = counter.counts();
        for account in &accounts {
            assert_eq!(store.entry(account).await, (20, 20), "{mode:?}");
        }
        // The path: claims only in batches, none alone; no completion alone.
        for single in ["claim", "complete", "take over"] {
            assert!(!counts.contains_key(single), "{mode:?}: {counts:?}");
        }
        let claims = counts.get("claim (batch)").copied().unwrap_or_default();
        assert!((1..=24).contains(&claims), "{mode:?}: {counts:?}");
        let effects = match mode {
            // The ledger's own write, one per record.
            LedgerMode::Direct => {
                let writes = counts
                    .get("fenced write (batch)")
                    .copied()
                    .unwrap_or_default();
                assert!((1..=40).contains(&writes), "{mode:?}: {counts:?}");
                400
            }
            _ => 0,
        };
        let library = (counter.total() - effects) as f64 / 400.0;
        assert!(
            library <= 0.15,
            "{mode:?}: {library} requests per record: {counts:?}"
        );
        let item = store.get("p2-50").await.expect("get").expect("item");
        assert_eq!((item.status, item.version), (Status::Completed, 1));
    }
}

/// Every test of the suite, for the store type `$store`.
macro_rules! ledger_suite {
    ($store:ty) => {

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn every_mode_applies_each_payment_once_and_a_replay_changes_nothing() {
            super::every_mode_applies_each_payment_once_and_a_replay_changes_nothing::<$store>()
                .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_locking_path_claims_and_completes_in_batches() {
            super::the_locking_path_claims_and_completes_in_batches::<$store>().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_poison_record_fails_alone_and_is_stored_failed() {
            super::a_poison_record_fails_alone_and_is_stored_failed::<$store>().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn four_containers_delivered_one_batch_at_once_apply_each_payment_once() {
            super::four_containers_delivered_one_batch_at_once_apply_each_payment_once::<$store>()
                .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_hot_accounts_payments_merge_and_the_floor_refuses_only_the_overdraft() {
            super::a_hot_accounts_payments_merge_and_the_floor_refuses_only_the_overdraft::<$store>()
                .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_store_gone_mid_batch_fails_closed_and_the_replay_applies_everything_once() {
            super::the_store_gone_mid_batch_fails_closed_and_the_replay_applies_everything_once::<
                $store,
            >()
            .await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn the_store_gone_before_the_batch_is_an_invocation_error_and_nothing_runs() {
            super::the_store_gone_before_the_batch_is_an_invocation_error_and_nothing_runs::<$store>()
                .await;
        }
    };
}

mod postgres {
    ledger_suite!(exactly_once::postgres::PostgresStore);
}

mod redis {
    ledger_suite!(exactly_once::redis::RedisStore);
}
