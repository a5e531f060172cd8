//! Database faults under load, on the real PostgreSQL: three containers
//! deliver the same stream of batches at once while connections are cut
//! mid-transaction (a proxy drops every open connection), statements time
//! out (another session holds the ledger's rows longer than
//! `statement_timeout`), and the server crashes and restarts
//! (`infra/postgres-local.sh restart`: an immediate stop). Every payment
//! must be applied exactly once, and every key end COMPLETED.
//!
//! One test in a module run alone (`infra/test-area.sh` runs the modules of
//! an area one after another): the restart would disturb any other test.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use exactly_once::config::StoreConfig;
use exactly_once::engine::{Engine, EngineConfig};
use exactly_once::lambda::BatchFunction;
use exactly_once::postgres::PostgresStore;
use exactly_once::store::Status;
use exactly_once::store::Store;
use lambda_runtime::{Context, LambdaEvent};
use ledger::{LedgerHandler, LedgerMode};
use support::msk::{account, header_keys, payment_stream, stream_balances};
use support::postgres;
use support::proxy::Proxy;

/// What the faults did, and what the ledger shows after them.
#[derive(Debug, Default)]
struct Storm {
    cuts: u64,
    lock_holds: u64,
    restarts: u64,
    /// Deliveries that reported records (the faults made them fail closed).
    reported_deliveries: u64,
    payments: i64,
    double_applications: i64,
    lost: i64,
    not_completed: usize,
}

/// The test server's port, from `DATABASE_URL`.
fn server_port() -> u16 {
    let url = support::env("DATABASE_URL");
    let after_host = url.split_once("@127.0.0.1:").expect("a loopback URL").1;
    after_host
        .split(['/', '?'])
        .next()
        .and_then(|port| port.parse().ok())
        .expect("a port")
}

/// A container: its own pool, through `proxy`, with short timeouts.
async fn container(
    proxy: &Proxy,
    config: &StoreConfig,
    mode: LedgerMode,
) -> BatchFunction<LedgerHandler, PostgresStore> {
    let url = format!(
        "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
        proxy.port
    );
    let mut settings = exactly_once::postgres::DatabaseSettings::from_lookup(|name| {
        (name == "DATABASE_URL").then(|| url.clone())
    })
    .expect("settings");
    settings.statement_timeout = Duration::from_millis(200);
    settings.connect_timeout = Duration::from_millis(1000);
    let pool = settings.pool(None).await.expect("a pool");
    let store = PostgresStore::new(pool, config.clone(), settings.call_timeout()).expect("store");
    let ledger = LedgerHandler::on_postgres(store.clone(), support::env("LEDGER_TABLE"), mode);
    BatchFunction::new(
        Engine::new(store, ledger, EngineConfig::default()),
        support::msk::settings(header_keys()),
    )
    .without_metrics()
}

/// Batches of 10 payments a storm's stream holds: enough for the storm to
/// outlast its restart and a few faults of each kind.
const BATCHES: i64 = 36;

async fn storm(mode: LedgerMode, seed: u64) -> Storm {
    let mut rng = fastrand::Rng::with_seed(seed);
    let proxy = Arc::new(Proxy::start(format!("127.0.0.1:{}", server_port())).await);
    let config = support::store_config(Duration::from_millis(300));
    let accounts: Vec<String> = (0..4).map(|_| account()).collect();
    let stream = format!("f-{}", uuid::Uuid::new_v4());
    let batches = payment_stream(&stream, &accounts, BATCHES);
    let reported = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..3 {
        let function = container(&proxy, &config, mode).await;
        let (batches, reported) = (batches.clone(), reported.clone());
        workers.push(tokio::spawn(async move {
            for batch in &batches {
                // Like Lambda: the batch comes again until nothing is reported.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
                // An invocation error (the store unavailable for every
                // record) brings the whole batch again, as Lambda does.
                while !function
                    .handle(LambdaEvent::new(batch.clone(), Context::default()))
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
    // Another session holds a ledger row past the statement timeout.
    let holder = postgres::pool().await;
    let ledger = format!("\"{}\"", support::env("LEDGER_TABLE"));
    let restart_at = rng.u64(2..5);
    let mut round = 0;
    while workers.iter().any(|w| !w.is_finished()) {
        round += 1;
        // The crash comes once, at its round (not left to the draw below,
        // which could miss it before the stream ends).
        if round >= restart_at && storm.restarts == 0 {
            restart_server().await;
            storm.restarts += 1;
            continue;
        }
        match rng.u8(0..2) {
            0 => {
                proxy.cut();
                tokio::time::sleep(Duration::from_millis(rng.u64(0..50))).await;
                proxy.restore();
                storm.cuts += 1;
            }
            _ => {
                let mut client = holder.get().await.expect("a connection");
                let transaction = client.transaction().await.expect("begin");
                let sql = format!("SELECT 1 FROM {ledger} WHERE account_id = $1 FOR UPDATE");
                let held = &accounts[rng.usize(0..4)];
                if transaction.query(&sql, &[held]).await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(rng.u64(250..400))).await;
                    storm.lock_holds += 1;
                }
                let _ = transaction.rollback().await;
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.u64(20..150))).await;
    }
    for worker in workers {
        worker.await.expect("a container finished every batch");
    }
    storm.reported_deliveries = reported.load(Ordering::Relaxed);

    let check = postgres::store(Duration::from_secs(30))
        .await
        .with_config(config);
    let pool = check.pool();
    let mut counted = 0;
    for (account, expected) in accounts
        .iter()
        .zip(stream_balances(&accounts, BATCHES as usize))
    {
        let (balance, payments) = postgres::ledger_entry(pool, account).await;
        counted += payments;
        storm.lost += i64::from(balance < expected);
    }
    let payments = BATCHES * 10;
    storm.payments = payments;
    storm.double_applications = counted - payments;
    for n in 0..payments {
        let item = check.get(&format!("{stream}-{n}")).await.expect("get");
        storm.not_completed += usize::from(item.map(|i| i.status) != Some(Status::Completed));
    }
    storm
}

/// An immediate stop (a crash: no checkpoint, clients cut) and a start.
async fn restart_server() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/infra/postgres-local.sh");
    let status = tokio::process::Command::new(script)
        .arg("restart")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await
        .expect("run infra/postgres-local.sh restart");
    assert!(status.success(), "the test server restarted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cut_connections_statement_timeouts_and_a_crash_apply_every_payment_once() {
    let seed = std::env::var("FAULT_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    for mode in [LedgerMode::LockFree, LedgerMode::Transactional] {
        let storm = storm(mode, seed).await;
        println!("{mode:?} fault storm on PostgreSQL (FAULT_TEST_SEED={seed}): {storm:?}");
        assert_eq!(
            (storm.double_applications, storm.lost, storm.not_completed),
            (0, 0, 0),
            "seed {seed}: {storm:?}"
        );
        // The faults came (the requests they met are sent again, so a
        // delivery is reported only when a fault outlasts the re-sends).
        assert_eq!(storm.restarts, 1, "{storm:?}");
        assert!(storm.cuts > 0 && storm.lock_holds > 0, "{storm:?}");
    }
}
