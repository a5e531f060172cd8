//! Redis failing under the function, on servers of the tests' own
//! (`infra/redis-local.sh`): what a restart loses without persistence and
//! keeps with AOF (`appendfsync always`), exactly as the README's
//! durability section says; a restart mid-batch and a slow script failing
//! closed; `REDIS_WAIT_REPLICAS` with a real replica and without one; and a
//! storm of those faults (connection resets, slow scripts, a restart) under
//! three containers delivering one stream (Kafka events, and RabbitMQ
//! events, whose batches are retried whole).
//! (Connection resets mid-batch: `tests/stores/ledger_stores.rs`.)

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use exactly_once::engine::{
    CommitPath, Completion, Engine, EngineConfig, FencingToken, HandlerError, RecordHandler,
};
use exactly_once::lambda::{BatchFunction, KafkaRecord};
use exactly_once::redis::RedisStore;
use exactly_once::store::Status;
use exactly_once::store::Store;
use exactly_once::store::StoreError;
use ledger::{LedgerHandler, LedgerMode};
use serde_json::Value;
use support::msk::{account, event, header_keys, invoke_until_done, payment, reported};
use support::redis::LocalRedis;
use support::sources::Encoding;

/// Work whose effect is outside Redis (a notification sent), on the
/// locking path: Redis holds only its keys.
#[derive(Clone, Default)]
struct Notifier {
    sent: Arc<AtomicUsize>,
    /// Run this once the n-th notification is sent (1-based).
    on_call: Option<(usize, Arc<dyn Fn() + Send + Sync>)>,
}

impl<E: Clone + Send + Sync + 'static> RecordHandler<E> for Notifier {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        CommitPath::Locking
    }

    async fn handle(
        &self,
        _: &FencingToken,
        _: &KafkaRecord,
    ) -> Result<Completion<E>, HandlerError> {
        let sent = self.sent.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some((n, hook)) = &self.on_call
            && *n == sent
        {
            hook();
        }
        Ok(Completion::done("sent"))
    }
}

fn function<
    H: RecordHandler<exactly_once::redis::RedisEffect, Record: exactly_once::lambda::FromRecord>,
>(
    store: &RedisStore,
    handler: H,
) -> BatchFunction<H, RedisStore> {
    BatchFunction::new(
        Engine::new(store.clone(), handler, EngineConfig::default()),
        support::msk::settings(header_keys()),
    )
    .without_metrics()
}

/// Ten payments of 1..=10 cents to `account` on one partition.
fn payments(prefix: &str, account: &str) -> Value {
    let records = (0..10)
        .map(|i| payment(i, &format!("{prefix}-{i}"), account, i + 1))
        .collect();
    event(vec![("payments-0", records)])
}

/// What one server went through: a lock-free ledger batch and a locking
/// notifier batch, a crash, then both batches replayed.
#[derive(Debug, PartialEq, Eq)]
struct Crash {
    /// COMPLETED keys found right after the restart (of 20).
    keys_after_restart: usize,
    /// The ledger's balance right after the restart (55 before it).
    balance_after_restart: i64,
    /// After the replay.
    balance_after_replay: i64,
    /// Notifications sent in all (10 by the first delivery).
    notifications: usize,
}

async fn crash_and_replay(aof: bool) -> Crash {
    let server = LocalRedis::start(if aof { &["--aof"] } else { &[] });
    let store =
        support::redis::store_with(&server.url, support::store_config(Duration::from_secs(30)));
    let a = account();
    let ledger = LedgerHandler::on_redis(
        store.clone(),
        support::env("LEDGER_TABLE"),
        LedgerMode::LockFree,
    );
    let (ledger, notifier) = (function(&store, ledger), Notifier::default());
    let sent = notifier.sent.clone();
    let notifier = function(&store, notifier);
    let (payments, notices) = (payments("pay", &a), payments("note", &account()));
    invoke_until_done(&ledger, &payments).await;
    invoke_until_done(&notifier, &notices).await;
    assert_eq!(
        support::redis::ledger_entry(&store, &support::env("LEDGER_TABLE"), &a).await,
        (55, 10)
    );

    server.restart();
    let keys = ["pay", "note"]
        .iter()
        .flat_map(|p| (0..10).map(move |i| format!("{p}-{i}")));
    let mut keys_after_restart = 0;
    for key in keys {
        // The first call after the restart may meet the dropped connection.
        let item = loop {
            match store.get(&key).await {
                Err(StoreError::Unavailable { .. }) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => break other.expect("get"),
            }
        };
        keys_after_restart +=
            usize::from(item.is_some_and(|item| item.status == Status::Completed));
    }
    let balance_after_restart =
        support::redis::ledger_entry(&store, &support::env("LEDGER_TABLE"), &a)
            .await
            .0;
    // Redelivered to a new container (a warm one remembers what it
    // completed, and would skip the batches from memory).
    let store = support::redis::store_with(&server.url, store.config().clone());
    let ledger = LedgerHandler::on_redis(
        store.clone(),
        support::env("LEDGER_TABLE"),
        LedgerMode::LockFree,
    );
    let notifier = Notifier {
        sent: sent.clone(),
        on_call: None,
    };
    invoke_until_done(&function(&store, ledger), &payments).await;
    invoke_until_done(&function(&store, notifier), &notices).await;
    Crash {
        keys_after_restart,
        balance_after_restart,
        balance_after_replay: support::redis::ledger_entry(
            &store,
            &support::env("LEDGER_TABLE"),
            &a,
        )
        .await
        .0,
        notifications: sent.load(Ordering::SeqCst),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_persistence_a_restart_loses_every_key_and_effect_so_outside_effects_repeat() {
    // Everything acknowledged is gone: the keys and the Redis-held balance
    // together (the replay applies each payment once, to the emptied
    // ledger), but the notifications, held elsewhere, are sent again.
    assert_eq!(
        crash_and_replay(false).await,
        Crash {
            keys_after_restart: 0,
            balance_after_restart: 0,
            balance_after_replay: 55,
            notifications: 20,
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_aof_fsync_always_a_restart_loses_nothing_acknowledged() {
    assert_eq!(
        crash_and_replay(true).await,
        Crash {
            keys_after_restart: 20,
            balance_after_restart: 55,
            balance_after_replay: 55,
            notifications: 10,
        }
    );
}

/// How long Redis stays down after the crash of
/// `a_restart_mid_batch_...`: longer than the engine's re-sends of a
/// request it did not answer (pauses of 0.1, 0.4 and 1.6 s, `RESENDS`), so
/// the batch fails closed instead of riding it out.
const DOWN: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_batch_fails_closed_and_the_replay_sends_each_notification_once() {
    let server = Arc::new(LocalRedis::start(&["--aof"]));
    let store = support::redis::store_with(
        &server.url,
        support::store_config(Duration::from_millis(500)),
    );
    // A crash with the 4th record's work (which goes on for half a second
    // after it: the completions waiting before it meet the crash); Redis
    // back (AOF: nothing lost) after `DOWN`.
    let restarting = server.clone();
    let notifier = Notifier {
        on_call: Some((
            4,
            Arc::new(move || {
                restarting.stop();
                let restarting = restarting.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(DOWN);
                    restarting.restart();
                });
                std::thread::sleep(Duration::from_millis(500));
            }),
        )),
        ..Notifier::default()
    };
    let sent = notifier.sent.clone();
    let function = function(&store, notifier);
    let batch = payments("r", &account());
    let response = function
        .handle(lambda_runtime::LambdaEvent::new(
            batch.clone(),
            lambda_runtime::Context::default(),
        ))
        .await;
    // The ten keys were claimed together; the crash came with the 4th
    // record's work, and no record ran after it (a lane starts no work
    // while the store does not answer its requests). Of the four that
    // ran, the completions that waited to share a request were lost with
    // the connection, sent again while Redis was down, then given up: the
    // first record the store failed and everything after it are reported
    // (if nothing could be written, the invocation fails: all ten).
    let first = match &response {
        Ok(response) => {
            let reported = reported(response);
            let first = reported.first().map_or(10, |at| {
                at["payments-0@".len()..].parse().expect("an offset")
            });
            let expected: Vec<String> = (first..10).map(|i| format!("payments-0@{i}")).collect();
            assert_eq!(reported, expected);
            first
        }
        Err(_) => 0,
    };
    assert!(first <= 4, "offset {first} was reported first");
    assert_eq!(sent.load(Ordering::SeqCst), 4, "no work after the failure");
    // Redis back, the claims' leases ended: the replay.
    tokio::time::sleep(DOWN).await;
    invoke_until_done(&function, &batch).await;
    // Every record ran once, but those among the first four whose
    // completion was lost with the connection: the locking path's
    // documented at-least-once window for effects outside the store.
    assert_eq!(sent.load(Ordering::SeqCst), 10 + (4 - first));
    for i in 0..10 {
        let item = store
            .get(&format!("r-{i}"))
            .await
            .expect("get")
            .expect("item");
        assert_eq!(item.status, Status::Completed, "r-{i}");
    }
}

/// Another client's script keeps the server busy for `busy` (from when
/// the returned future resolves); the future of its end.
async fn block_redis(url: &str, busy: Duration) -> impl std::future::Future<Output = ()> {
    let url = url.to_owned();
    let started = tokio::time::Instant::now();
    let script = tokio::spawn(async move {
        let mut blocker = redis::Client::open(url.as_str())
            .expect("client")
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let script = format!(
            "local t = redis.call('TIME'); local until_us = t[1] * 1000000 + t[2] + {} \
             repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= until_us return 1",
            busy.as_micros()
        );
        // Its own client may give up waiting for it; Redis runs it to its
        // end.
        let _ = redis::cmd("EVAL")
            .arg(script)
            .arg(0)
            .query_async::<i64>(&mut blocker)
            .await;
    });
    // Running (its connection made, the script sent).
    tokio::time::sleep(Duration::from_millis(200)).await;
    async move {
        let _ = script.await;
        tokio::time::sleep_until(started + busy + Duration::from_millis(500)).await;
    }
}

/// A script blocking Redis for 1.5 s (five of the store's 300 ms call
/// timeouts) is ridden out: the requests it held up are sent again until
/// it answers, and each payment applies once, nothing reported. One that
/// blocks it for 6 s (longer than the re-sends) fails the batch closed,
/// nothing applied; its replay applies each payment once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_script_blocking_redis_is_ridden_out_or_fails_closed_and_loses_nothing() {
    let server = LocalRedis::start(&[]);
    let config = support::store_config(Duration::from_secs(30));
    let store = support::redis::store_tuned(&server.url, config, Duration::from_millis(300), 0);
    let table = support::env("LEDGER_TABLE");
    let ledger = LedgerHandler::on_redis(store.clone(), table.clone(), LedgerMode::Transactional);
    let function = function(&store, ledger);

    let a = account();
    let busy = block_redis(&server.url, Duration::from_millis(1_500)).await;
    let response = function
        .handle(lambda_runtime::LambdaEvent::new(
            payments("slow", &a),
            lambda_runtime::Context::default(),
        ))
        .await
        .expect("answered");
    assert_eq!(reported(&response), Vec::<String>::new());
    let () = busy.await;
    assert_eq!(
        support::redis::ledger_entry(&store, &table, &a).await,
        (55, 10)
    );

    let b = account();
    let batch = payments("blocked", &b);
    let busy = block_redis(&server.url, Duration::from_secs(6)).await;
    let result = function
        .handle(lambda_runtime::LambdaEvent::new(
            batch.clone(),
            lambda_runtime::Context::default(),
        ))
        .await;
    assert!(
        matches!(
            result,
            Err(exactly_once::lambda::InvocationError::StoreUnavailable { reported: 10 })
        ),
        "{result:?}"
    );
    busy.await;
    let entry = support::redis::ledger_entry(&store, &table, &b).await;
    assert_eq!(entry, (0, 0), "nothing applied while Redis was busy");
    invoke_until_done(&function, &batch).await;
    assert_eq!(
        support::redis::ledger_entry(&store, &table, &b).await,
        (55, 10)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_replicas_acknowledges_a_write_only_once_a_replica_holds_it() {
    let primary = LocalRedis::start(&[]);
    let replica = LocalRedis::start(&[]);
    let mut to_primary = redis::Client::open(primary.url.as_str())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    // No 5 s pause before the replica's first (diskless) sync.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("repl-diskless-sync-delay")
        .arg("0")
        .query_async(&mut to_primary)
        .await
        .expect("CONFIG SET");
    let mut connection = redis::Client::open(replica.url.as_str())
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let (host, port) = primary
        .address()
        .split_once(':')
        .map(|(h, p)| (h.to_owned(), p.to_owned()))
        .expect("host:port");
    let _: () = redis::cmd("REPLICAOF")
        .arg(host)
        .arg(port)
        .query_async(&mut connection)
        .await
        .expect("REPLICAOF");
    let config = support::store_config(Duration::from_secs(30));
    let store = support::redis::store_tuned(&primary.url, config, Duration::from_secs(2), 1);
    // The replica's first sync, before the test writes.
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut connection)
            .await
            .expect("INFO");
        if info.contains("master_link_status:up") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let claimed = store.claim(support_request("w-1")).await.expect("claim");
    assert!(
        matches!(claimed, exactly_once::store::ClaimOutcome::Acquired(_)),
        "{claimed:?}"
    );
    let replica_store = support::redis::store_with(&replica.url, store.config().clone());
    assert!(
        replica_store.get("w-1").await.expect("get").is_some(),
        "the replica holds the claim"
    );

    drop(replica);
    match store.claim(support_request("w-2")).await {
        Err(err @ StoreError::Unavailable { .. }) => assert!(
            err.to_string()
                .contains("0 of 1 replicas acknowledged it in time"),
            "{err}"
        ),
        other => panic!("expected the write reported, got {other:?}"),
    }
}

fn support_request(key: &str) -> exactly_once::store::ClaimRequest<'_> {
    exactly_once::store::ClaimRequest {
        key,
        payload_hash: "h",
        origin: None,
        lease_cap_ms: None,
        owner: None,
    }
}

/// What the faults of a storm did, and what the ledger shows after them.
#[derive(Debug, Default)]
struct Storm {
    cuts: u64,
    slow_scripts: u64,
    restarts: u64,
    /// Deliveries that reported records (the faults made them fail closed).
    reported_deliveries: u64,
    double_applications: i64,
    lost: i64,
    not_completed: usize,
}

/// Batches of 10 payments in a storm's stream.
const BATCHES: i64 = 30;

/// Three containers deliver one stream of 30 batches (events of
/// `encoding`'s source) at once through a proxy, while the proxy resets every connection, another client's script
/// blocks Redis past the calls' timeout, and the server (AOF, `appendfsync
/// always`) is killed and restarted, at random (`seed`).
async fn storm(mode: LedgerMode, seed: u64, encoding: Encoding) -> Storm {
    let mut rng = fastrand::Rng::with_seed(seed);
    let server = LocalRedis::start(&["--aof"]);
    let proxy = support::proxy::Proxy::start(server.address()).await;
    let config = support::store_config(Duration::from_millis(300));
    let accounts: Vec<String> = (0..4).map(|_| account()).collect();
    let stream = format!("f-{}", uuid::Uuid::new_v4());
    let batches = support::sources::payment_stream(encoding, &stream, &accounts, BATCHES);
    let reported = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..3 {
        let url = format!("redis://127.0.0.1:{}", proxy.port);
        let store =
            support::redis::store_tuned(&url, config.clone(), Duration::from_millis(150), 0);
        let ledger = LedgerHandler::on_redis(store.clone(), support::env("LEDGER_TABLE"), mode);
        let function = function(&store, ledger);
        let (batches, reported) = (batches.clone(), reported.clone());
        workers.push(tokio::spawn(async move {
            for batch in &batches {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
                // Like Lambda: the batch comes again until nothing is reported.
                while !function
                    .handle(lambda_runtime::LambdaEvent::new(
                        batch.clone(),
                        lambda_runtime::Context::default(),
                    ))
                    .await
                    .is_ok_and(|response| response.batch_item_failures.is_empty())
                {
                    reported.fetch_add(1, Ordering::Relaxed);
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "a batch never finished"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }));
    }
    let mut storm = Storm::default();
    let blocker = redis::Client::open(server.url.as_str()).expect("client");
    // Each fault once in the first three rounds (in a random order), then
    // resets and slow scripts at random until every container is done.
    let mut first = vec![0_u8, 1, 2];
    rng.shuffle(&mut first);
    let mut round = 0;
    while workers.iter().any(|w| !w.is_finished()) {
        round += 1;
        let fault = first
            .get(round - 1)
            .copied()
            .unwrap_or_else(|| rng.u8(0..2));
        match fault {
            0 => {
                proxy.cut();
                tokio::time::sleep(Duration::from_millis(rng.u64(0..50))).await;
                proxy.restore();
                storm.cuts += 1;
            }
            1 => {
                let script = format!(
                    "local t = redis.call('TIME'); local until_us = t[1] * 1000000 + t[2] + {} \
                     repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= until_us return 1",
                    rng.u64(200_000..400_000)
                );
                // A connection of its own: a restart may have cut the last.
                let mut connection = blocker
                    .get_multiplexed_async_connection()
                    .await
                    .expect("a connection to the server");
                let ran = redis::cmd("EVAL")
                    .arg(script)
                    .arg(0)
                    .query_async::<i64>(&mut connection)
                    .await;
                assert_eq!(ran.ok(), Some(1), "the slow script ran");
                storm.slow_scripts += 1;
            }
            _ => {
                server.restart();
                storm.restarts += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(10..60))).await;
    }
    for worker in workers {
        worker.await.expect("a container finished every batch");
    }
    storm.reported_deliveries = reported.load(Ordering::Relaxed) as u64;

    let check = support::redis::store_with(&server.url, config);
    let ledger = support::env("LEDGER_TABLE");
    let mut counted = 0;
    for (account, expected) in accounts
        .iter()
        .zip(support::msk::stream_balances(&accounts, 12))
    {
        let (balance, payments) = support::redis::ledger_entry(&check, &ledger, account).await;
        counted += payments;
        storm.lost += i64::from(balance < expected);
    }
    let payments = BATCHES * 10;
    storm.double_applications = counted - payments;
    for n in 0..payments {
        let item = check.get(&format!("{stream}-{n}")).await.expect("get");
        storm.not_completed += usize::from(item.map(|i| i.status) != Some(Status::Completed));
    }
    storm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resets_slow_scripts_and_a_restart_apply_every_payment_once() {
    let seed = std::env::var("FAULT_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    // Kafka's partial batch responses, and RabbitMQ's batches retried whole.
    for (mode, encoding) in [
        (LedgerMode::LockFree, Encoding::Kafka),
        (LedgerMode::Transactional, Encoding::Kafka),
        (LedgerMode::LockFree, Encoding::RabbitMq),
    ] {
        let storm = storm(mode, seed, encoding).await;
        println!(
            "{mode:?} fault storm on Redis, {encoding:?} events (FAULT_TEST_SEED={seed}): {storm:?}"
        );
        assert_eq!(
            (storm.double_applications, storm.lost, storm.not_completed),
            (0, 0, 0),
            "seed {seed}: {storm:?}"
        );
        assert_eq!(storm.restarts, 1, "{storm:?}");
        assert!(storm.cuts > 0 && storm.slow_scripts > 0, "{storm:?}");
        assert!(
            storm.reported_deliveries > 0,
            "the faults were felt: {storm:?}"
        );
    }
}
