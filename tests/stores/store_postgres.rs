//! The key state machine on a real PostgreSQL (`infra/postgres-local.sh`):
//! the conformance suite (`exactly_once::store::conformance`), and what only PostgreSQL
//! has (its columns, its schema, expired rows, its errors).

use crate::support;
use exactly_once::store::conformance;
use exactly_once::store::{conformance_suite, operator_conformance_suite};

use std::time::Duration;

use conformance::{Backend, LONG_LOCK, acquire, request};
use deadpool_postgres::Pool;
use exactly_once::clock::now_ms;
use exactly_once::config::StoreConfig;
use exactly_once::postgres::schema::{self, SchemaError};
use exactly_once::postgres::{PostgresStore, SqlEffect};
use exactly_once::store::ClaimOutcome;
use exactly_once::store::Increment;
use exactly_once::store::Store;
use exactly_once::store::StoreError;
use exactly_once::store::{FencedWrite, Lease};
use support::postgres;

/// The test server; counters are accounts of the ledger table.
struct Postgres;

impl Backend for Postgres {
    type S = PostgresStore;

    async fn store(&self, lock: Duration) -> PostgresStore {
        postgres::store(lock).await
    }

    fn with_config(&self, store: &PostgresStore, config: StoreConfig) -> PostgresStore {
        store.with_config(config)
    }

    fn effect(&self, _: &PostgresStore, counter: &str, add: i64, floor: Option<i64>) -> SqlEffect {
        let ledger = format!("\"{}\"", support::env("LEDGER_TABLE"));
        // The balance after the write must be at least floor (an absent
        // balance is 0): the update or the insert, whichever applies, or no
        // row at all (refused).
        let sql = format!(
            "WITH updated AS (UPDATE {ledger} SET balance_cents = balance_cents + $2 \
             WHERE account_id = $1 AND balance_cents + $2 >= $3 RETURNING 1), \
             inserted AS (INSERT INTO {ledger} (account_id, balance_cents) SELECT $1, $2 \
             WHERE $2 >= $3 AND NOT EXISTS (SELECT 1 FROM {ledger} WHERE account_id = $1) \
             RETURNING 1) \
             SELECT 1 FROM updated UNION ALL SELECT 1 FROM inserted"
        );
        SqlEffect::new(sql)
            .bind(counter)
            .bind(add)
            .bind(floor.unwrap_or(i64::MIN))
            .on_row(&ledger, "account_id", counter)
    }

    async fn counter(&self, store: &PostgresStore, counter: &str) -> i64 {
        postgres::ledger_entry(store.pool(), counter).await.0
    }

    fn ledger_table(&self) -> String {
        support::env("LEDGER_TABLE")
    }

    async fn number(&self, store: &PostgresStore, increment: &Increment, attribute: &str) -> i128 {
        let client = store.pool().get().await.expect("a connection");
        let sql = format!(
            "SELECT \"{attribute}\" FROM \"{}\" WHERE \"{}\" = $1",
            increment.table, increment.key_name
        );
        client
            .query_opt(&sql, &[&increment.key])
            .await
            .expect("read the number")
            .map_or(0, |row| row.get::<_, i64>(0).into())
    }
}

conformance_suite!(Postgres);

operator_conformance_suite!(Postgres);

/// The function's start-up check of an idempotency table, as it runs it.
async fn check_idempotency(pool: &Pool, table: &str) -> Result<(), SchemaError> {
    schema::check(pool, schema::IDEMPOTENCY, table, support::postgres::TIMEOUT).await
}

#[tokio::test]
async fn a_claim_writes_the_documented_columns() {
    let store = postgres::store(LONG_LOCK).await;
    let before = now_ms();
    let lease = acquire(&store, "p-1", "h1").await;
    let client = store.pool().get().await.expect("a connection");
    let sql = format!(
        "SELECT status, version, owner, payload_hash, lock_expires_at, expires_at, created_at, \
         updated_at, attempts, origin, result, error, last_error FROM \"{}\" WHERE pk = $1",
        store.config().table_name
    );
    let row = client.query_one(&sql, &[&lease.pk]).await.expect("the row");
    assert_eq!(row.get::<_, String>("status"), "STARTED");
    assert_eq!(row.get::<_, i64>("version"), 1);
    assert_eq!(row.get::<_, String>("owner"), lease.owner);
    assert_eq!(row.get::<_, String>("payload_hash"), "h1");
    assert_eq!(row.get::<_, String>("origin"), "payments-0@15");
    assert_eq!(row.get::<_, i64>("attempts"), 1);
    assert_eq!(
        row.get::<_, i64>("lock_expires_at"),
        lease.lock_expires_at_ms as i64
    );
    let created = row.get::<_, i64>("created_at");
    assert!(created >= before as i64 && created <= now_ms() as i64);
    assert_eq!(row.get::<_, i64>("updated_at"), created);
    assert_eq!(
        row.get::<_, i64>("expires_at"),
        created / 1000 + 8 * 24 * 3600,
        "epoch seconds, as DynamoDB's TTL attribute"
    );
    for empty in ["result", "error", "last_error"] {
        assert_eq!(row.get::<_, Option<String>>(empty), None, "{empty}");
    }
}

#[tokio::test]
async fn a_database_that_is_down_is_a_retryable_error_and_never_a_claim() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=disable");
    let settings = exactly_once::postgres::DatabaseSettings::from_lookup(|name| {
        (name == "DATABASE_URL").then(|| url.clone())
    })
    .expect("settings");
    let pool = settings.pool(None).await.expect("a pool (connects lazily)");
    let store = PostgresStore::new(pool, support::store_config(LONG_LOCK), postgres::TIMEOUT)
        .expect("store");
    match store.claim(request("p-1", "h1")).await {
        Err(err @ StoreError::Unavailable { .. }) => {
            assert!(err.is_retryable());
            assert!(err.to_string().contains("claim"), "{err}");
        }
        other => panic!("expected the store unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_table_is_a_permanent_rejection_and_the_schema_check_names_the_command() {
    let pool = postgres::pool().await;
    let mut config = support::store_config(LONG_LOCK);
    config.table_name = "no_such_table".into();
    let store = PostgresStore::new(pool.clone(), config, postgres::TIMEOUT).expect("store");
    match store.claim(request("p-1", "h1")).await {
        Err(err @ StoreError::Rejected { .. }) => assert!(!err.is_retryable()),
        other => panic!("expected a rejection, got {other:?}"),
    }
    let err = check_idempotency(&pool, "no_such_table")
        .await
        .expect_err("never migrated");
    assert!(
        matches!(err, SchemaError::Behind { found: 0, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "table \"no_such_table\" is at schema version 0, this build needs 3: run \
         `exactly-once-ops migrate` (with DATABASE_URL set) before deploying"
    );
    let table = support::env("IDEMPOTENCY_TABLE");
    check_idempotency(&pool, &table)
        .await
        .expect("the migrated test table passes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_migrations_create_the_schema_once_and_a_rerun_changes_nothing() {
    let pool = postgres::pool().await;
    let table = format!("migrate_{}", uuid::Uuid::new_v4().simple());
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let (pool, table) = (pool.clone(), table.clone());
            tokio::spawn(
                async move { schema::migrate(&pool, &[(schema::IDEMPOTENCY, &table)]).await },
            )
        })
        .collect();
    let mut created = 0;
    for run in runs {
        let migrated = run.await.expect("joined").expect("migrate");
        assert_eq!(migrated[0].to, 3);
        created += usize::from(migrated[0].from == 0);
    }
    assert_eq!(created, 1, "exactly one run created the table");
    check_idempotency(&pool, &table).await.expect("migrated");
    let client = pool.get().await.expect("a connection");
    let indexes: Vec<String> = client
        .query(
            "SELECT indexdef FROM pg_indexes WHERE tablename = $1 ORDER BY indexname",
            &[&table],
        )
        .await
        .expect("indexes")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(
        indexes
            .iter()
            .any(|i| i.contains("(lock_expires_at) WHERE (status = 'STARTED'::text)")),
        "a partial index of STARTED rows: {indexes:?}"
    );
    assert!(
        indexes.iter().any(|i| i.contains("(expires_at)")),
        "{indexes:?}"
    );
    assert!(
        indexes
            .iter()
            .any(|i| i.contains("(updated_at) WHERE (outbox IS NOT NULL)")),
        "a partial index of rows with messages to send: {indexes:?}"
    );
}

/// An upgrade from schema version 1 (before scopes): `migrate` adds the
/// `scope` column in place, the rows written before it stay as they were,
/// and a function with a scope finds them its own: a completed key is a
/// duplicate with its stored result (nothing runs again).
#[tokio::test]
async fn a_version_1_table_upgrades_in_place_and_its_rows_stay_usable() {
    let pool = postgres::pool().await;
    let table = format!("upgrade_{}", uuid::Uuid::new_v4().simple());
    let version_1 = schema::TableSchema {
        migrations: &schema::IDEMPOTENCY.migrations[..1],
        ..schema::IDEMPOTENCY
    };
    schema::migrate(&pool, &[(version_1, &table)])
        .await
        .expect("version 1");
    let client = pool.get().await.expect("a connection");
    let expires_at_s = (now_ms() / 1000 + 3600) as i64;
    client
        .execute(
            &format!(
                "INSERT INTO \"{table}\" (pk, status, version, owner, payload_hash, expires_at, \
                 result) VALUES ('p-1', 'COMPLETED', 1, 'o-1', 'h1', $1, 'paid')"
            ),
            &[&expires_at_s],
        )
        .await
        .expect("a row of version 1");
    let err = check_idempotency(&pool, &table).await.expect_err("behind");
    assert!(
        matches!(
            err,
            SchemaError::Behind {
                found: 1,
                expected: 3,
                ..
            }
        ),
        "{err:?}"
    );

    let migrated = schema::migrate(&pool, &[(schema::IDEMPOTENCY, &table)])
        .await
        .expect("migrate");
    assert_eq!((migrated[0].from, migrated[0].to), (1, 3));
    check_idempotency(&pool, &table)
        .await
        .expect("at version 3");
    let config = StoreConfig {
        scope: Some("payments-a".into()),
        ..StoreConfig::new(table.clone())
    };
    let store = PostgresStore::new(pool.clone(), config, postgres::TIMEOUT).expect("store");
    match store.claim(request("p-1", "h1")).await.expect("claim") {
        ClaimOutcome::Duplicate(item) => {
            assert_eq!((item.result.as_deref(), item.scope), (Some("paid"), None));
        }
        other => panic!("a row from before the upgrade is a duplicate, got {other:?}"),
    }
    let lease = acquire(&store, "p-2", "h1").await;
    assert_eq!(
        store
            .get("p-2")
            .await
            .expect("get")
            .expect("row")
            .scope
            .as_deref(),
        Some("payments-a")
    );
    assert_eq!(lease.version, 1);
}

#[tokio::test]
async fn expired_rows_count_as_absent_until_purged_in_batches() {
    let store = postgres::store(LONG_LOCK).await;
    // Written nine days ago: past the 8-day retention.
    let past = store.with_config(StoreConfig {
        clock_offset_ms: -9 * 24 * 3600 * 1000,
        ..store.config().clone()
    });
    for key in ["old-1", "old-2", "old-3", "old-4", "old-5"] {
        let lease = acquire(&past, key, "h1").await;
        past.complete(&lease, None, vec![].into())
            .await
            .expect("complete");
    }
    let live = acquire(&store, "live", "h1").await;
    assert_eq!(
        store.get("old-1").await.expect("get"),
        None,
        "expired: absent"
    );
    assert!(
        store
            .batch_get(&["old-1", "live"])
            .await
            .expect("batch")
            .len()
            == 1
    );
    // A claim replaces the expired row: version 1, a new owner.
    let again = acquire(&store, "old-1", "h2").await;
    assert_eq!(again.version, 1);

    let deleted = store.purge_expired(2, 100).await.expect("purge");
    assert!(
        deleted >= 4,
        "the four expired rows of this test, at least: {deleted}"
    );
    let client = store.pool().get().await.expect("a connection");
    let sql = format!(
        "SELECT count(*) FROM \"{}\" WHERE starts_with(pk, $1)",
        store.config().table_name
    );
    let left: i64 = client
        .query_one(&sql, &[&store.config().key_prefix])
        .await
        .expect("count")
        .get(0);
    assert_eq!(left, 2, "the live row and the reclaimed one stay");
    assert_eq!(
        store.get("live").await.expect("get").map(|i| i.owner),
        Some(live.owner)
    );
}

#[tokio::test]
async fn a_statement_timeout_writes_nothing_and_is_retryable() {
    let store = postgres::store(LONG_LOCK).await;
    let lease = acquire(&store, "p-1", "h1").await;
    // Another session holds the row: the completion waits on its lock.
    let mut blocker = store.pool().get().await.expect("a connection");
    let transaction = blocker.transaction().await.expect("begin");
    let sql = format!(
        "SELECT 1 FROM \"{}\" WHERE pk = $1 FOR UPDATE",
        store.config().table_name
    );
    transaction.query(&sql, &[&lease.pk]).await.expect("lock");
    let mut settings = postgres::settings();
    settings.statement_timeout = Duration::from_millis(300);
    let short = PostgresStore::new(
        settings.pool(None).await.expect("a pool"),
        store.config().clone(),
        settings.call_timeout(),
    )
    .expect("store");
    match short.complete(&lease, None, vec![].into()).await {
        Err(err @ StoreError::Unavailable { .. }) => assert!(
            err.to_string().contains("statement timeout (57014)"),
            "the server cancelled it: {err}"
        ),
        other => panic!("expected a timeout, got {other:?}"),
    }
    transaction.rollback().await.expect("rollback");
    drop(blocker);
    // Nothing was written once the lock was gone, and the next call works.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let item = store.get("p-1").await.expect("get").expect("row");
    assert_eq!(item.status, exactly_once::store::Status::Started);
    short
        .complete(&lease, None, vec![].into())
        .await
        .expect("complete after the timeout");
}

#[tokio::test]
async fn a_claim_that_is_not_new_reads_the_row_it_lost_to() {
    let store = postgres::store(LONG_LOCK).await;
    let first = acquire(&store, "p-1", "h1").await;
    match store.claim(request("p-1", "h1")).await.expect("claim") {
        // The statement returns the row it did not write: one round trip.
        ClaimOutcome::InProgress(item) => assert_eq!(item.owner, first.owner),
        other => panic!("expected in progress, got {other:?}"),
    }
}

/// Two workers' batches of fenced writes over the same keys, each in its
/// own order (overlapping deliveries), lock the rows in key order: they
/// queue behind each other and never deadlock. A deadlock aborts one of
/// them after `deadlock_timeout` (a second), which a short lease may not
/// survive; with the rows locked in the order each batch lists them, the
/// opposite orders below deadlocked within a few rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fenced_batches_over_the_same_keys_in_opposite_orders_never_deadlock() {
    let store = std::sync::Arc::new(postgres::store(LONG_LOCK).await);
    let run = uuid::Uuid::new_v4().simple().to_string();
    let mut leases = Vec::new();
    for n in 0..40 {
        leases.push(acquire(&*store, &format!("order-{run}-{n}"), "h1").await);
    }
    let extend = |leases: &[Lease]| -> Vec<(Lease, FencedWrite)> {
        let until_ms = now_ms() + 60_000;
        leases
            .iter()
            .map(|lease| (lease.clone(), FencedWrite::Extend { until_ms }))
            .collect()
    };
    let forward = extend(&leases);
    let backward: Vec<_> = extend(&leases).into_iter().rev().collect();
    let workers: Vec<_> = [forward, backward]
        .into_iter()
        .map(|writes| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..30 {
                    for answer in store.write_fenced(&writes).await {
                        answer.expect("extended, never a deadlock's abort");
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("joined");
    }
}
