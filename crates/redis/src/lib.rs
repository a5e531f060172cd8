//! The Redis (and Valkey) backend: one hash per key at
//! `<IDEMPOTENCY_TABLE>:<pk>` with the DynamoDB item's fields, each
//! transition ONE Lua script whose first lines are its condition (Redis
//! runs a script atomically); the work's own writes and increments run in
//! the script of its completion. The scripts are loaded once and called by
//! SHA (`EVALSHA`, loaded again after a server restart). One file per path,
//! each read top to bottom with its scripts beside their transitions, each
//! transition a function named as the [`Store`] method it is:
//! `locking.rs`, `lock_free.rs`, `operator.rs`; the Lua they share in
//! `lua.rs`; `RedisEffect` and the effects' script input in `effect.rs`;
//! the hash codec in `codec.rs`; the settings in `connect.rs` and the
//! connection (one server, or a cluster) in `connection.rs`; the shared
//! duplicate cache in `cache.rs`.
//!
//! Redis deletes an item itself (`PEXPIREAT` just after `expires_at`), and
//! every read also judges one past its TTL absent. In cluster mode a
//! function's keys share one hash slot (a `{tag}` in its names), since a
//! lock-free commit's script touches several keys. Durability is Redis's:
//! an acknowledged write survives a primary's failure only with AOF
//! `appendfsync always`, MemoryDB's log, or (`REDIS_WAIT_REPLICAS`) once
//! replicas hold it; see docs/stores.md.

#![deny(missing_docs)]

pub mod cache;
mod codec;
pub mod connect;
mod connection;
mod effect;
mod lock_free;
mod locking;
mod lua;
mod operator;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::{RetryMethod, Script, ScriptInvocation, Value};

pub use cache::RedisDuplicateCache;
pub use connect::RedisSettings;
pub use connection::RedisConnection;
pub use effect::{RedisEffect, increment_key};
/// The Redis client this crate is built with.
pub use redis;

use exactly_once_core::clock::{self, ClockReading, ClockWatch};
use exactly_once_core::config::StoreConfig;
use exactly_once_core::outbox::Pending;
use exactly_once_core::store::requests::RequestCounter;
use exactly_once_core::store::{
    ClaimRequest, Commit, CommitOutcome, Conditional, Effects, FencedWrite, Increment, Lease,
    Listed, Listing, NewItem, Operator, Store, StoreError, StoredItem,
};

/// At most this many effects (writes and merged increments) share a
/// script with one completion: Redis has no limit of its own; the engine
/// sizes groups with it, as with the other stores.
pub const MAX_EFFECTS: usize = 99;
/// The longest `pk`, in bytes: as on DynamoDB, so that a key is hashed
/// (`LONG_KEY_POLICY=hash`) the same way on every store.
pub const MAX_KEY_BYTES: usize = 2048;

/// The transitions' scripts, each hashed once per store.
struct Scripts {
    create: Script,
    create_many: Script,
    take_over: Script,
    fenced: Script,
    fenced_many: Script,
    clear_outbox: Script,
    commit: Script,
    operator: Script,
    prune: Script,
    prune_unsent: Script,
}

/// The idempotency items in Redis, seen through the transitions of their
/// keys.
#[derive(Clone)]
pub struct RedisStore {
    connection: RedisConnection,
    config: StoreConfig,
    scripts: Arc<Scripts>,
    timeout: Duration,
    wait_replicas: u32,
    requests: RequestCounter,
    clock: Arc<ClockWatch>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("config", &self.config)
            .field("timeout", &self.timeout)
            .field("wait_replicas", &self.wait_replicas)
            .finish_non_exhaustive()
    }
}

/// What a transition's script answered: done, or refused and why (a tag
/// and what goes with it, e.g. `found` and the item's fields).
enum Answer {
    Written,
    Refused(String, Vec<Value>),
}

impl RedisStore {
    /// The store on `connection` as `config` says; every call gives up (and
    /// reports the record) after `settings.timeout`.
    pub fn new(connection: RedisConnection, config: StoreConfig, settings: &RedisSettings) -> Self {
        Self {
            connection,
            config,
            scripts: Arc::new(Scripts {
                create: Script::new(locking::CREATE),
                create_many: Script::new(locking::CREATE_MANY),
                take_over: Script::new(locking::TAKE_OVER),
                fenced: Script::new(locking::FENCED),
                fenced_many: Script::new(locking::FENCED_MANY),
                clear_outbox: Script::new(locking::CLEAR_OUTBOX),
                commit: Script::new(lock_free::COMMIT),
                operator: Script::new(operator::OPERATOR),
                prune: Script::new(operator::PRUNE),
                prune_unsent: Script::new(operator::PRUNE_UNSENT),
            }),
            timeout: settings.timeout,
            wait_replicas: settings.wait_replicas,
            requests: RequestCounter::default(),
            clock: Arc::default(),
        }
    }

    /// Counts and times every call (a transition's script with its `WAIT`,
    /// or a read) in `counter`, for the invocation's metrics.
    pub fn with_request_counter(mut self, counter: RequestCounter) -> Self {
        self.requests = counter;
        self
    }

    /// The same store under another configuration (same connection).
    pub fn with_config(&self, config: StoreConfig) -> Self {
        Self {
            config,
            ..self.clone()
        }
    }

    /// Checks that `names` (tables whose hashes a handler's effects write)
    /// can share a script with this store's items: in cluster mode they
    /// must share the idempotency table's hash tag (e.g.
    /// `{payments}idempotency` and `{payments}ledger`); standalone, any
    /// names.
    pub fn check_names(&self, names: &[&str]) -> Result<(), String> {
        match &self.connection {
            RedisConnection::Cluster { .. } => {
                let mut all = vec![self.config.table_name.as_str()];
                all.extend_from_slice(names);
                connect::one_slot(&all)
            }
            RedisConnection::Single(_) => Ok(()),
        }
    }

    /// Its connection (for tests and tools reading the effects).
    pub fn connection(&self) -> RedisConnection {
        self.connection.clone()
    }

    /// The Redis key of `pk`'s item.
    fn item_key(&self, pk: &str) -> String {
        format!("{}:{pk}", self.config.table_name)
    }

    /// The sorted set of the table's STARTED items (members: their Redis
    /// keys; scores: their `created_at`): the table's own name, which no
    /// item's key (`NAME:pk`) can be, in the same cluster slot as they.
    fn started_set(&self) -> String {
        self.config.table_name.clone()
    }

    /// The sorted set of the table's items with messages left to send
    /// (members: their Redis keys; scores: their `updated_at`), which the
    /// sweeper lists: `NAME;unsent`, which no item's key (`NAME:pk`) can
    /// be, in the same cluster slot as they.
    fn unsent_set(&self) -> String {
        format!("{};unsent", self.config.table_name)
    }

    /// Runs a transition's script within the store's timeout; a write
    /// waits for `REDIS_WAIT_REPLICAS` replicas when asked to.
    async fn run(
        &self,
        operation: &'static str,
        invocation: &ScriptInvocation<'_>,
    ) -> Result<Answer, StoreError> {
        let mut answers = self
            .run_many(operation, invocation, |value| vec![value])
            .await?;
        answers.pop().ok_or_else(|| StoreError::Rejected {
            operation,
            message: "the script answered nothing".into(),
        })
    }

    /// Runs a script of several transitions (one per item, each judged on
    /// its own) within the store's timeout: each item's answer, as `split`
    /// takes them out of the script's; if any wrote, waits for
    /// `REDIS_WAIT_REPLICAS` replicas when asked to.
    async fn run_many(
        &self,
        operation: &'static str,
        invocation: &ScriptInvocation<'_>,
        split: impl FnOnce(Value) -> Vec<Value>,
    ) -> Result<Vec<Answer>, StoreError> {
        let _timed = self.requests.timer(operation);
        let deadline = tokio::time::Instant::now() + self.timeout;
        let mut connection = self.connection.clone();
        let script = tokio::time::timeout_at(deadline, invocation.invoke_async(&mut connection));
        let value: Value = self
            .looking_at_the_clock(script)
            .await
            .map_err(|_| self.timed_out(operation))?
            .map_err(|err| redis_error(operation, err))?;
        let answers = split(value)
            .into_iter()
            .map(|value| match value {
                Value::Int(1) => Ok(Answer::Written),
                Value::Array(mut values) if !values.is_empty() => {
                    let tag = text(&values.remove(0));
                    Ok(Answer::Refused(tag, values))
                }
                other => Err(StoreError::Rejected {
                    operation,
                    message: format!("unexpected answer from the script: {other:?}"),
                }),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if answers
            .iter()
            .any(|answer| matches!(answer, Answer::Written))
        {
            self.replicated(operation, &mut connection, deadline)
                .await?;
        }
        Ok(answers)
    }

    /// `request`, and once a minute the server's `TIME` beside it (on the
    /// same multiplexed connection: no round trip of its own), given up
    /// with the request's own timeout: a server that stops answering holds
    /// the call no longer than without the look.
    async fn looking_at_the_clock<T>(&self, request: impl Future<Output = T>) -> T {
        if !self.clock.look_due(clock::now_ms()) {
            return request.await;
        }
        let look = tokio::time::timeout(self.timeout, self.read_clock());
        let (reading, answer) = tokio::join!(look, request);
        if let Ok(Some(reading)) = reading {
            self.clock.observe(reading);
        }
        answer
    }

    /// The server's `TIME` (seconds and microseconds) against this
    /// process's clock, on the primary of the table's slot; `None` if it
    /// could not be read (the look tells nothing then).
    async fn read_clock(&self) -> Option<ClockReading> {
        let mut connection = self.connection.clone();
        let sent_ms = clock::now_ms();
        let answer = connection
            .on_node_of(&self.item_key(""), &redis::cmd("TIME"))
            .await
            .ok()?;
        let received_ms = clock::now_ms();
        let (seconds, micros): (u64, u64) = redis::from_redis_value(answer).ok()?;
        Some(ClockReading {
            sent_ms,
            received_ms,
            server_ms: seconds * 1000 + micros / 1000,
            resolution_ms: 1,
        })
    }

    /// `WAIT` for `REDIS_WAIT_REPLICAS` replicas to hold this connection's
    /// writes; fewer before `deadline`: unavailable (the write may be lost
    /// with the primary, so the record is reported).
    async fn replicated(
        &self,
        operation: &'static str,
        connection: &mut RedisConnection,
        deadline: tokio::time::Instant,
    ) -> Result<(), StoreError> {
        if self.wait_replicas == 0 {
            return Ok(());
        }
        // The server's own timeout ends first (it checks it about every
        // 100 ms), so that the answer says how many replicas acknowledged.
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let server_wait = left
            .saturating_sub(Duration::from_millis(250))
            .max(Duration::from_millis(10));
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.wait_replicas)
            .arg(server_wait.as_millis() as u64);
        // The primary the write went to: the one of the table's slot.
        let node = self.item_key("");
        let answer = tokio::time::timeout(left, connection.on_node_of(&node, &wait))
            .await
            .map_err(|_| self.timed_out(operation))?
            .map_err(|err| redis_error(operation, err))?;
        let acknowledged: u32 =
            redis::from_redis_value(answer).map_err(|err| redis_error(operation, err.into()))?;
        if acknowledged < self.wait_replicas {
            return Err(StoreError::Unavailable {
                operation,
                message: format!(
                    "written on the primary, but {acknowledged} of {} replicas acknowledged it in time",
                    self.wait_replicas
                ),
            });
        }
        Ok(())
    }

    /// A plain command (a read) within the store's timeout.
    async fn query<T: redis::FromRedisValue>(
        &self,
        operation: &'static str,
        command: &redis::Pipeline,
    ) -> Result<T, StoreError> {
        let _timed = self.requests.timer(operation);
        let mut connection = self.connection.clone();
        let request = tokio::time::timeout(self.timeout, command.query_async(&mut connection));
        self.looking_at_the_clock(request)
            .await
            .map_err(|_| self.timed_out(operation))?
            .map_err(|err| redis_error(operation, err))
    }

    fn timed_out(&self, operation: &'static str) -> StoreError {
        StoreError::Unavailable {
            operation,
            message: format!("no answer within {} ms", self.timeout.as_millis()),
        }
    }
}

impl Store for RedisStore {
    type Effect = RedisEffect;
    const NAME: &'static str = "Redis";
    const MAX_EFFECTS: usize = MAX_EFFECTS;
    const MAX_KEY_BYTES: usize = MAX_KEY_BYTES;
    /// One script; Redis has no limit of its own, and a script blocks the
    /// server while it runs: as PostgreSQL's statements.
    const MAX_BATCH: usize = 100;
    /// The whole script from the start: a script of 100 records holds the
    /// server about as briefly as one of 25, and a new container's first
    /// batch is then as quick as a warm one's (docs/benchmarks.md).
    const START_SIZE: usize = Self::MAX_BATCH;

    fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// From `TIME`, read once a minute beside a script or a read
    /// (milliseconds, within the round trip).
    fn clock_skew_ms(&self) -> Option<i64> {
        self.clock.skew_ms(self.config.clock_offset_ms)
    }

    /// `REDIS_TIMEOUT_MS`.
    fn request_timeout(&self) -> Duration {
        self.timeout
    }

    fn touched(effect: &RedisEffect) -> Option<String> {
        Some(effect.key().to_owned())
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
        locking::create_started_many(self, claims).await
    }

    async fn write_fenced(&self, writes: &[(Lease, FencedWrite)]) -> Vec<Result<u64, StoreError>> {
        locking::write_fenced(self, writes).await
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
        effects: Effects<RedisEffect>,
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

    async fn commit(&self, commits: Vec<Commit<RedisEffect>>) -> Result<CommitOutcome, StoreError> {
        lock_free::commit(self, commits).await
    }

    async fn fail_new(
        &self,
        request: ClaimRequest<'_>,
        owner: &str,
        error: &str,
    ) -> Result<Conditional<()>, StoreError> {
        // Absent | expired ──fail──▶ FAILED v1, a poison message on the
        // lock-free path: the CREATE script of a claim (locking.rs).
        let pk = self.pk(request.key)?;
        let now = self.now_ms();
        let item = NewItem::failed(&pk, request, owner, error, &self.config, now);
        self.create("fail new", item).await
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
impl Operator for RedisStore {
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

impl RedisStore {
    /// Applies `increment` on its own (no completion beside it): what the
    /// demo ledger's `direct` mode does on Redis. A floor that would be
    /// crossed: [`StoreError::EffectConditionFailed`].
    pub async fn apply(&self, increment: &Increment) -> Result<(), StoreError> {
        self.apply_increment(increment).await
    }
}

/// Classifies a Redis error: what goes away by itself (connection lost or
/// refused, timeout, `LOADING`, `BUSY`, `TRYAGAIN`, `MASTERDOWN`, a
/// failover's `READONLY`) is [`StoreError::Unavailable`]; what the server
/// refuses for the request itself (a script error, `WRONGTYPE`, a failed
/// AUTH) is [`StoreError::Rejected`].
pub(crate) fn redis_error(operation: &'static str, err: redis::RedisError) -> StoreError {
    let message = err.to_string();
    let transient = err.is_io_error()
        || err.is_timeout()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || (err.kind() != redis::ErrorKind::AuthenticationFailed
            && !matches!(err.retry_method(), RetryMethod::NoRetry));
    match transient {
        true => StoreError::Unavailable { operation, message },
        false => StoreError::Rejected { operation, message },
    }
}

/// A bulk or simple string's text ("" for anything else).
fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        Value::Int(n) => n.to_string(),
        _ => String::new(),
    }
}

/// A flat `HGETALL` answer as field → value.
fn fields(value: Option<&Value>) -> HashMap<String, String> {
    let Some(Value::Array(values)) = value else {
        return HashMap::new();
    };
    values
        .chunks_exact(2)
        .map(|pair| (text(&pair[0]), text(&pair[1])))
        .collect()
}

/// The item an answer's `found` carries (`None`: there was none).
fn found_item(values: &[Value]) -> Result<Option<Box<StoredItem>>, StoreError> {
    Ok(codec::item_of(fields(values.first()))?.map(Box::new))
}
