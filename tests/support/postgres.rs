//! The PostgreSQL that `infra/test.sh` starts (`DATABASE_URL`): a pool per
//! test (its connections live on the test's runtime), the tables migrated
//! under the same names as the DynamoDB tables, and readers of the ledger.

use std::time::Duration;

use deadpool_postgres::Pool;
use exactly_once::postgres::schema;
use exactly_once::postgres::{DatabaseSettings, PostgresStore};

/// How long a test store waits for PostgreSQL per call.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The settings of the test server, `DATABASE_URL` as exported.
pub fn settings() -> DatabaseSettings {
    let url = super::env("DATABASE_URL");
    DatabaseSettings::from_lookup(|name| (name == "DATABASE_URL").then(|| url.clone()))
        .expect("DATABASE_URL as infra/postgres-local.sh exports it")
}

/// A pool of the test server, its tables migrated (idempotent).
pub async fn pool() -> Pool {
    let pool = settings().pool(None).await.expect("a pool");
    migrate(&pool).await;
    pool
}

pub async fn migrate(pool: &Pool) {
    let (idempotency, ledger) = (super::env("IDEMPOTENCY_TABLE"), super::env("LEDGER_TABLE"));
    schema::migrate(
        pool,
        &[
            (schema::IDEMPOTENCY, &idempotency),
            (ledger::LEDGER_SCHEMA, &ledger),
        ],
    )
    .await
    .expect("migrate the test tables");
}

/// A store on the test table under a fresh key prefix.
pub async fn store(lock_timeout: Duration) -> PostgresStore {
    PostgresStore::new(pool().await, super::store_config(lock_timeout), TIMEOUT)
        .expect("a valid table name")
}

/// `(balance_cents, payment_count)` of `account` (zeros if it has none).
pub async fn ledger_entry(pool: &Pool, account: &str) -> (i64, i64) {
    let client = pool.get().await.expect("a connection");
    let sql = format!(
        "SELECT balance_cents, payment_count FROM \"{}\" WHERE account_id = $1",
        super::env("LEDGER_TABLE")
    );
    client
        .query_opt(&sql, &[&account])
        .await
        .expect("read the ledger")
        .map_or((0, 0), |row| (row.get(0), row.get(1)))
}
