//! The PostgreSQL backend: one row per key in the idempotency table, each
//! transition ONE SQL statement whose `WHERE` is its condition; the work's
//! own SQL commits in the same transaction as its completion. One file per
//! path, each read top to bottom with its statements as constants beside
//! their transitions, each transition a function named as the [`Store`]
//! method it is: `locking.rs`, `batched.rs`, `lock_free.rs`, `operator.rs`;
//! the statements of a table (rendered once per store) in `statements.rs`;
//! the row codec in `rows.rs`; the pipelined transaction in
//! `transaction.rs`; `SqlEffect` in `effect.rs`; increments in
//! `increment.rs`; the schema and its migrations in `schema.rs`; the
//! connection (settings, pool, TLS, secret, IAM token) in `connect/`.
//!
//! An expired row counts as absent on every read and is replaced by the
//! next claim: PostgreSQL has no TTL, `exactly-once-ops purge-expired`
//! deletes expired rows.

#![deny(missing_docs)]

mod batched;
pub mod connect;
mod effect;
mod increment;
mod lock_free;
mod locking;
mod operator;
mod rows;
pub mod schema;
mod statements;
mod transaction;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Object, PoolError};
use tokio_postgres::error::SqlState;

pub use connect::{DatabaseSettings, SslMode};
/// The connection pool a store runs on (`deadpool-postgres`).
#[doc(no_inline)]
pub use deadpool_postgres::Pool;
pub use effect::{SqlEffect, SqlValue};
/// The PostgreSQL client this crate is built with.
pub use tokio_postgres;

use exactly_once_core::clock::{self, ClockReading, ClockWatch};
use exactly_once_core::config::StoreConfig;
use exactly_once_core::outbox::Pending;
use exactly_once_core::store::requests::RequestCounter;
use exactly_once_core::store::{
    ClaimRequest, Commit, CommitOutcome, Conditional, Effects, FencedWrite, Increment, Lease,
    Listed, Listing, NewItem, Operator, Store, StoreError, StoredItem,
};
use rows::new_row;
use statements::Statements;
use transaction::{Answer, Statement};

/// At most this many effects (statements and merged increments) share a
/// transaction with one completion: PostgreSQL has no limit of its own; the
/// engine sizes groups with it, as with DynamoDB.
pub const MAX_EFFECTS: usize = 99;
/// The longest `pk`, in bytes: as on DynamoDB, and well within a B-tree
/// index entry (2704 bytes).
pub const MAX_KEY_BYTES: usize = 2048;

/// The idempotency table in PostgreSQL, seen through the transitions of its
/// keys.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    config: StoreConfig,
    sql: Arc<Statements>,
    timeout: Duration,
    requests: RequestCounter,
    clock: Arc<ClockWatch>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("config", &self.config)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// The store on `pool` as `config` says; every call gives up (and
    /// reports the record) after `timeout`. The table name must be a SQL
    /// identifier (`name` or `schema.name`).
    pub fn new(pool: Pool, config: StoreConfig, timeout: Duration) -> Result<Self, StoreError> {
        let sql = Statements::for_table(&config.table_name)?;
        Ok(Self {
            pool,
            config,
            sql: Arc::new(sql),
            timeout,
            requests: RequestCounter::default(),
            clock: Arc::default(),
        })
    }

    /// Counts and times every call (one per transition or read) in
    /// `counter`, for the invocation's metrics.
    pub fn with_request_counter(mut self, counter: RequestCounter) -> Self {
        self.requests = counter;
        self
    }

    /// Its connection pool.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The same store under another configuration (same pool and table).
    pub fn with_config(&self, config: StoreConfig) -> Self {
        Self {
            config,
            ..self.clone()
        }
    }

    /// Runs `work` on a pooled connection within the store's timeout. A
    /// connection whose call failed retryably or ran out of time is closed,
    /// never pooled again: it may hold an unfinished transaction or request.
    async fn with_client<T>(
        &self,
        operation: &'static str,
        work: impl AsyncFnOnce(&Object) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let _timed = self.requests.timer(operation);
        let deadline = tokio::time::Instant::now() + self.timeout;
        let client = tokio::time::timeout_at(deadline, self.pool.get())
            .await
            .map_err(|_| self.timed_out(operation))?
            .map_err(|err| pool_error(operation, err))?;
        // Once a minute, the server's clock read in the same round trip
        // (tokio-postgres pipelines the two; the look is sent first).
        let look = self.clock.look_due(clock::now_ms());
        let work = async {
            if !look {
                return work(&client).await;
            }
            let (reading, result) = tokio::join!(read_clock(&client), work(&client));
            if let Some(reading) = reading {
                self.clock.observe(reading);
            }
            result
        };
        match tokio::time::timeout_at(deadline, work).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                if err.is_retryable() {
                    drop(Object::take(client));
                }
                Err(err)
            }
            Err(_) => {
                drop(Object::take(client));
                Err(self.timed_out(operation))
            }
        }
    }

    /// `statement` on its own (autocommit), within the store's timeout.
    async fn run(
        &self,
        operation: &'static str,
        statement: &Statement<'_>,
    ) -> Result<Answer, StoreError> {
        self.with_client(operation, async |client| {
            statement
                .query(client)
                .await
                .map_err(|err| pg_error(operation, err))
        })
        .await
    }

    fn timed_out(&self, operation: &'static str) -> StoreError {
        StoreError::Unavailable {
            operation,
            message: format!("no answer within {} ms", self.timeout.as_millis()),
        }
    }
}

impl Store for PostgresStore {
    type Effect = SqlEffect;
    const NAME: &'static str = "PostgreSQL";
    const MAX_EFFECTS: usize = MAX_EFFECTS;
    const MAX_KEY_BYTES: usize = MAX_KEY_BYTES;
    /// One statement of up to 100 rows.
    const MAX_BATCH: usize = batched::MAX_ROWS;
    /// The whole statement from the start: one of 100 rows costs the
    /// server little more than one of 25, and a new container's first
    /// batch is then as quick as a warm one's (docs/benchmarks.md).
    const START_SIZE: usize = Self::MAX_BATCH;

    fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// How far its clock is known to be off the server's, from
    /// `clock_timestamp()` read once a minute (milliseconds, within the
    /// round trip).
    fn clock_skew_ms(&self) -> Option<i64> {
        self.clock.skew_ms(self.config.clock_offset_ms)
    }

    /// The call timeout (the statement timeout and the client's grace).
    fn request_timeout(&self) -> Duration {
        self.timeout
    }

    fn touched(effect: &SqlEffect) -> Option<String> {
        effect.item().map(str::to_owned)
    }

    async fn create_started(
        &self,
        pk: &str,
        request: ClaimRequest<'_>,
    ) -> Result<Conditional<Lease>, StoreError> {
        locking::create_started(self, pk, request).await
    }

    async fn create_started_many(
        &self,
        claims: &[(String, ClaimRequest<'_>)],
    ) -> Result<Vec<Conditional<Lease>>, StoreError> {
        batched::create_started_many(self, claims).await
    }

    async fn write_fenced(&self, writes: &[(Lease, FencedWrite)]) -> Vec<Result<u64, StoreError>> {
        batched::write_fenced(self, writes).await
    }

    async fn take_over(
        &self,
        observed: &StoredItem,
        request: ClaimRequest<'_>,
    ) -> Result<Conditional<Lease>, StoreError> {
        locking::take_over(self, observed, request).await
    }

    async fn complete(
        &self,
        lease: &Lease,
        result: Option<&str>,
        effects: Effects<SqlEffect>,
    ) -> Result<u64, StoreError> {
        locking::complete(self, lease, result, effects).await
    }

    async fn outbox_sent(&self, sent: &[Pending]) -> Result<(), StoreError> {
        locking::outbox_sent(self, sent).await
    }

    async fn fail(&self, lease: &Lease, error: &str) -> Result<(), StoreError> {
        locking::fail(self, lease, error).await
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        locking::release(self, lease).await
    }

    async fn extend(&self, lease: &Lease, until_ms: u64) -> Result<Lease, StoreError> {
        locking::extend(self, lease, until_ms).await
    }

    async fn commit(&self, commits: Vec<Commit<SqlEffect>>) -> Result<CommitOutcome, StoreError> {
        lock_free::commit(self, commits).await
    }

    async fn fail_new(
        &self,
        request: ClaimRequest<'_>,
        owner: &str,
        error: &str,
    ) -> Result<Conditional<()>, StoreError> {
        // Absent | expired ──fail──▶ FAILED v1, a poison message on the
        // lock-free path: the row-creating statement of a claim (locking.rs).
        let pk = self.pk(request.key)?;
        let now = self.now_ms();
        let row = NewItem::failed(&pk, request, owner, error, &self.config, now);
        // Invariant: one live row per key (see locking.rs, INSERT_NEW).
        let statement = Statement::new(self.sql.insert_new.as_str(), new_row(&row));
        self.conditional_write("fail new", statement, ()).await
    }

    async fn get(&self, key: &str) -> Result<Option<StoredItem>, StoreError> {
        // One past its TTL counts as absent.
        let now = self.now_ms();
        Ok(self.stored(key).await?.filter(|item| !item.is_expired(now)))
    }

    async fn batch_get(&self, keys: &[&str]) -> Result<HashMap<String, StoredItem>, StoreError> {
        operator::batch_get(self, keys).await
    }
}

/// The operator's transitions and listings (`exactly-once-ops`).
impl Operator for PostgresStore {
    async fn release_version(&self, key: &str, version: u64) -> Result<(), StoreError> {
        operator::release_version(self, key, version).await
    }

    async fn retry_failed(&self, key: &str, version: u64) -> Result<(), StoreError> {
        operator::retry_failed(self, key, version).await
    }

    async fn list(&self, listing: Listing) -> Result<Listed, StoreError> {
        operator::list(self, listing).await
    }
}

impl PostgresStore {
    /// Applies `increment` on its own, committed at once (no completion
    /// beside it): what the demo ledger's `direct` mode does on PostgreSQL.
    /// A floor that would be crossed: [`StoreError::EffectConditionFailed`].
    pub async fn apply(&self, increment: &Increment) -> Result<(), StoreError> {
        self.apply_increment(increment).await
    }
}

/// Classifies a PostgreSQL error: what goes away by itself (connection
/// lost, server restarting, statement timeout, serialization failure,
/// deadlock, too many connections) is [`StoreError::Unavailable`];
/// anything else the server refused is [`StoreError::Rejected`]. The text
/// is the server's message without its detail, which may quote values.
pub(crate) fn pg_error(operation: &'static str, err: tokio_postgres::Error) -> StoreError {
    let message = error_text(&err);
    match err.code() {
        Some(code) if !is_transient(code) => StoreError::Rejected { operation, message },
        _ => StoreError::Unavailable { operation, message },
    }
}

/// The server's severity, code and message (never its detail), or the
/// client's own error.
fn error_text(err: &tokio_postgres::Error) -> String {
    match err.as_db_error() {
        Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
        None => err.to_string(),
    }
}

/// SQLSTATEs that go away by themselves.
fn is_transient(code: &SqlState) -> bool {
    let code = code.code();
    // 08: connection exception; 53: insufficient resources; 57: operator
    // intervention (shutdown, statement timeout); 40: rollback (serialization
    // failure, deadlock); 55P03: lock not available.
    ["08", "53", "57", "40"]
        .iter()
        .any(|class| code.starts_with(class))
        || code == "55P03"
}

/// The server's `clock_timestamp()` against this process's clock, in one
/// simple query (one round trip); `None` if it could not be read (the
/// look tells nothing then, and the call it rides with goes on). Whole
/// milliseconds, truncated as this process's are (`floor`: a cast would
/// round up into a millisecond this clock has not reached).
async fn read_clock(client: &Object) -> Option<ClockReading> {
    let sent_ms = clock::now_ms();
    let answer = client
        .simple_query("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint")
        .await
        .ok()?;
    let received_ms = clock::now_ms();
    let server_ms = answer.iter().find_map(|message| match message {
        tokio_postgres::SimpleQueryMessage::Row(row) => row.get(0)?.parse().ok(),
        _ => None,
    })?;
    Some(ClockReading {
        sent_ms,
        received_ms,
        server_ms,
        resolution_ms: 1,
    })
}

/// A pool that could not give a connection in time: unavailable.
fn pool_error(operation: &'static str, err: PoolError) -> StoreError {
    match err {
        PoolError::Backend(err) => pg_error(operation, err),
        other => StoreError::Unavailable {
            operation,
            message: format!("no database connection: {other}"),
        },
    }
}
