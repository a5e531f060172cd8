//! Throughput of the real MSK function on PostgreSQL, on Redis, and on
//! PostgreSQL with Redis as the shared duplicate cache in front of it
//! (`DUPLICATE_CACHE=redis`), beside the DynamoDB benchmark
//! (`benches/throughput/`), with the same generated batches.
//!
//!     infra/bench.sh     # runs both; this one needs DATABASE_URL and REDIS_URL
//!
//! Drives `BatchFunction::handle` over 1,000 new records on 4 partitions
//! (200 accounts), the same batch replayed to a cold container, and 1,000
//! records on ONE account (a hot merchant), each on the lock-free and the
//! locking (transactional) path, at 0 and 5 ms of simulated round trip
//! (`delay.rs`: every byte waits half the round trip each way, so a
//! pipeline costs one; with the cache, both servers are behind one). Prints
//! records per second (batch p50 of the repetitions), round trips per
//! record (counted at the proxies) and writes per record (PostgreSQL: the
//! server's transaction ids consumed; Redis: scripts run), and writes
//! `bench/stores.csv`. BENCH_REPS multiplies the repetitions (default 3
//! each). First, the default sizing on a warm container of each store
//! (`sizing.rs`, `bench/sizing-stores.csv`); BENCH_ONLY=sizing runs that
//! alone.

#[allow(dead_code)]
#[path = "../throughput/batches.rs"]
mod batches;
mod delay;
mod sizing;

use std::time::{Duration, Instant};

use std::sync::Arc;

use batches::Batch;
use deadpool_postgres::Pool;
use exactly_once::config::StoreConfig;
use exactly_once::engine::{Engine, EngineConfig, SharedCache};
use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy};
use exactly_once::lambda::{BatchFunction, FunctionSettings, OrderingMode};
use exactly_once::postgres::DatabaseSettings;
use exactly_once::postgres::PostgresStore;
use exactly_once::postgres::schema;
use exactly_once::redis::RedisConnection;
use exactly_once::redis::RedisStore;
use exactly_once::redis::{RedisDuplicateCache, RedisSettings};
use exactly_once::store::Operator;
use lambda_runtime::{Context, LambdaEvent};
use ledger::{LedgerHandler, LedgerMode};

use delay::DelayProxy;

/// What is measured of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    /// 1,000 new payments, 4 partitions, 200 accounts.
    New,
    /// The same batch again, to a new (cold) container: all duplicates.
    Replay,
    /// 1,000 new payments to ONE account.
    Hot,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Self::New => "new-1000x4p",
            Self::Replay => "1000x4p-replay",
            Self::Hot => "hot-1000x4p",
        }
    }

    fn batch(self, tag: &str) -> Batch {
        match self {
            Self::New | Self::Replay => Batch::new_payments(tag, 1000, 4),
            Self::Hot => Batch::hot_payments(tag, 1000, 4, None),
        }
    }
}

/// Where the keys and the ledger live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Postgres,
    Redis,
    /// PostgreSQL, with Redis as the shared duplicate cache in front.
    PostgresCached,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Redis => "redis",
            Self::PostgresCached => "postgres+redis-cache",
        }
    }
}

/// The servers, reached through delaying proxies, and directly (to count).
struct Servers {
    pool: Pool,
    redis: RedisConnection,
    redis_settings: RedisSettings,
    direct_pool: Pool,
    direct_redis: RedisConnection,
    table: String,
    ledger: String,
}

impl Servers {
    /// Writes so far: PostgreSQL's transaction ids (the read consumes one)
    /// plus Redis's scripts run.
    async fn writes(&self) -> u64 {
        current_xid(&self.direct_pool).await + scripts_run(&self.direct_redis).await
    }

    fn config(&self, prefix: &str) -> StoreConfig {
        StoreConfig {
            key_prefix: prefix.to_owned(),
            ..StoreConfig::new(&self.table)
        }
    }

    /// The Redis store and the ledger on it, keys under `prefix`.
    fn redis(&self, mode: LedgerMode, prefix: &str) -> (RedisStore, LedgerHandler) {
        let store = RedisStore::new(
            self.redis.clone(),
            self.config(prefix),
            &self.redis_settings,
        );
        let handler = LedgerHandler::on_redis(store.clone(), &self.ledger, mode);
        (store, handler)
    }

    /// The PostgreSQL store and the ledger on it, keys under `prefix`.
    fn postgres(&self, mode: LedgerMode, prefix: &str) -> (PostgresStore, LedgerHandler) {
        let store = PostgresStore::new(
            self.pool.clone(),
            self.config(prefix),
            Duration::from_secs(10),
        )
        .expect("store");
        let handler = LedgerHandler::on_postgres(store.clone(), &self.ledger, mode);
        (store, handler)
    }

    /// One delivery of `batch` on `backend` to a new container (a new
    /// function, cold cache), keys under `prefix`; its time in ms.
    async fn deliver(
        &self,
        backend: Backend,
        mode: LedgerMode,
        ordering: OrderingMode,
        batch: &Batch,
        prefix: &str,
    ) -> f64 {
        match backend {
            Backend::Redis => {
                let (store, handler) = self.redis(mode, prefix);
                deliver_to(&function(store, handler, None, ordering), batch).await
            }
            Backend::Postgres | Backend::PostgresCached => {
                let cache = (backend == Backend::PostgresCached).then(|| {
                    let cache = RedisDuplicateCache::new(
                        self.redis.clone(),
                        &self.config(prefix),
                        Duration::from_millis(200),
                    );
                    Arc::new(cache) as Arc<dyn SharedCache>
                });
                let (store, handler) = self.postgres(mode, prefix);
                deliver_to(&function(store, handler, cache, ordering), batch).await
            }
        }
    }
}

struct Row {
    backend: Backend,
    scenario: Scenario,
    mode: &'static str,
    rtt_ms: u64,
    batch_ms: Vec<f64>,
    round_trips: u64,
    writes: u64,
    records: usize,
}

/// The median of `samples` (nearest rank, the lower of two).
fn p50(samples: &[f64]) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[(sorted.len() - 1) / 2]
}

impl Row {
    fn p50(&self) -> f64 {
        p50(&self.batch_ms)
    }

    fn per_record(&self, n: u64) -> f64 {
        n as f64 / (self.records * self.batch_ms.len()) as f64
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run());
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run infra/bench.sh"))
}

async fn run() {
    let started = Instant::now();
    let settings =
        DatabaseSettings::from_lookup(|name| std::env::var(name).ok()).expect("DATABASE_URL");
    let direct_pool = settings.pool(None).await.expect("a pool");
    let (table, ledger) = (var("IDEMPOTENCY_TABLE"), var("LEDGER_TABLE"));
    schema::migrate(
        &direct_pool,
        &[
            (schema::IDEMPOTENCY, &table),
            (ledger::LEDGER_SCHEMA, &ledger),
        ],
    )
    .await
    .expect("migrate");
    let url = var("DATABASE_URL");
    let port = settings.config.get_ports().first().copied().unwrap_or(5432);
    let redis_url = var("REDIS_URL");
    let redis_address = redis_url.trim_start_matches("redis://").to_owned();
    let redis_at = |url: &str| {
        RedisSettings::from_lookup(|name| match name {
            "REDIS_URL" => Some(url.to_owned()),
            "REDIS_TIMEOUT_MS" => Some("10000".into()),
            _ => None,
        })
        .expect("REDIS_URL")
    };
    let direct_redis = redis_at(&redis_url).connect().expect("Redis");
    let reps = std::env::var("BENCH_REPS")
        .ok()
        .and_then(|r| r.parse::<f64>().ok())
        .map_or(3, |factor| ((3.0 * factor).round() as usize).max(1));

    // BENCH_ONLY=sizing: the default sizing's rows alone.
    let only_sizing = std::env::var("BENCH_ONLY").is_ok_and(|only| only.contains("sizing"));
    let mut sized = Vec::new();
    let mut sized_batches = 0;
    let mut sized_tag = || {
        sized_batches += 1;
        format!("s{sized_batches}-{}", std::process::id())
    };
    let mut rows = Vec::new();
    let mut sequence = 0;
    for rtt_ms in [0, 5] {
        let rtt = Duration::from_millis(rtt_ms);
        let proxy = DelayProxy::start(format!("127.0.0.1:{port}"), rtt).await;
        let redis_proxy = DelayProxy::start(redis_address.clone(), rtt).await;
        let proxied = url.replacen(&format!(":{port}/"), &format!(":{}/", proxy.port), 1);
        let through =
            DatabaseSettings::from_lookup(|name| (name == "DATABASE_URL").then(|| proxied.clone()))
                .expect("the proxied URL");
        let redis_settings = redis_at(&format!("redis://127.0.0.1:{}", redis_proxy.port));
        let servers = Servers {
            pool: through.pool(None).await.expect("a pool through the proxy"),
            redis: redis_settings.connect().expect("Redis through the proxy"),
            redis_settings,
            direct_pool: direct_pool.clone(),
            direct_redis: direct_redis.clone(),
            table: table.clone(),
            ledger: ledger.clone(),
        };
        let round_trips = || proxy.round_trips() + redis_proxy.round_trips();
        for backend in [Backend::Postgres, Backend::Redis] {
            let warm = sizing::rows(
                &servers,
                backend,
                rtt_ms,
                reps,
                &round_trips,
                &mut sized_tag,
            );
            sized.extend(warm.await);
        }
        if only_sizing {
            continue;
        }
        for backend in [Backend::Postgres, Backend::Redis, Backend::PostgresCached] {
            // Warm-up, not recorded: connections open, the server's caches filled.
            for _ in 0..2 {
                sequence += 1;
                let tag = format!("warm-{sequence}-{}", std::process::id());
                let batch = Scenario::New.batch(&tag);
                let (mode, ordering) = (LedgerMode::LockFree, OrderingMode::Partition);
                servers
                    .deliver(backend, mode, ordering, &batch, &format!("{tag}#"))
                    .await;
            }
            for scenario in [Scenario::New, Scenario::Replay, Scenario::Hot] {
                for (mode, ledger_mode, ordering) in [
                    (
                        "lockfree-partition",
                        LedgerMode::LockFree,
                        OrderingMode::Partition,
                    ),
                    ("lockfree-key", LedgerMode::LockFree, OrderingMode::Key),
                    (
                        "transactional-partition",
                        LedgerMode::Transactional,
                        OrderingMode::Partition,
                    ),
                ] {
                    let mut row = Row {
                        backend,
                        scenario,
                        mode,
                        rtt_ms,
                        batch_ms: Vec::new(),
                        round_trips: 0,
                        writes: 0,
                        records: 1000,
                    };
                    for _ in 0..reps {
                        sequence += 1;
                        let tag = format!("b{sequence}-{}", std::process::id());
                        let prefix = format!("{tag}#");
                        let batch = scenario.batch(&tag);
                        let deliver =
                            || servers.deliver(backend, ledger_mode, ordering, &batch, &prefix);
                        if scenario == Scenario::Replay {
                            deliver().await;
                        }
                        let (trips, writes) = (round_trips(), servers.writes().await);
                        let ms = deliver().await;
                        row.round_trips += round_trips() - trips;
                        // Counting consumes one transaction id.
                        row.writes += servers.writes().await - writes - 1;
                        row.batch_ms.push(ms);
                    }
                    eprintln!(
                        "  {} {} {} {} ms: {:.0} rec/s",
                        backend.name(),
                        scenario.name(),
                        mode,
                        rtt_ms,
                        1000.0 / (row.p50() / 1000.0)
                    );
                    rows.push(row);
                }
            }
        }
    }
    let out =
        std::path::PathBuf::from(std::env::var("BENCH_OUT").unwrap_or_else(|_| "bench".into()));
    std::fs::create_dir_all(&out).expect("output directory");
    sizing::write(&sized, &out);
    if only_sizing {
        return;
    }
    let mut table_text = String::from(
        "store                 scenario         mode                     rtt  batch p50 ms  rec/s   round trips/rec  writes/rec\n",
    );
    let mut csv = String::from(
        "store,scenario,mode,rtt_ms,records,repetitions,batch_ms_p50,records_per_s,round_trips_per_record,writes_per_record\n",
    );
    for row in &rows {
        let rate = row.records as f64 / (row.p50() / 1000.0);
        table_text.push_str(&format!(
            "{:<21} {:<16} {:<24} {:>3}  {:>12.1}  {:>6.0}  {:>15.3}  {:>10.3}\n",
            row.backend.name(),
            row.scenario.name(),
            row.mode,
            row.rtt_ms,
            row.p50(),
            rate,
            row.per_record(row.round_trips),
            row.per_record(row.writes),
        ));
        csv.push_str(&format!(
            "{},{},{},{},{},{},{:.2},{:.1},{:.4},{:.4}\n",
            row.backend.name(),
            row.scenario.name(),
            row.mode,
            row.rtt_ms,
            row.records,
            row.batch_ms.len(),
            row.p50(),
            rate,
            row.per_record(row.round_trips),
            row.per_record(row.writes),
        ));
    }
    println!(
        "\nPostgreSQL, Redis, and PostgreSQL behind the Redis duplicate cache (the same function and batches; round trips counted at the delaying proxies; writes = PostgreSQL transaction ids consumed + Redis scripts run):\n"
    );
    print!("{table_text}");
    std::fs::write(out.join("stores.csv"), csv).expect("write stores.csv");
    println!(
        "wrote {} in {:.0} s",
        out.join("stores.csv").display(),
        started.elapsed().as_secs_f64()
    );
}

/// A container: the function on `store` with the default configuration
/// (the shared cache, if any), a cold cache.
fn function<S: Operator>(
    store: S,
    handler: LedgerHandler,
    cache: Option<Arc<dyn SharedCache>>,
    ordering: OrderingMode,
) -> BatchFunction<LedgerHandler, S> {
    let keys = KeySpec::parse("header", "idempotency-key".into(), MissingKeyPolicy::Reject)
        .expect("key spec");
    let settings = FunctionSettings {
        ordering,
        ..FunctionSettings::new(keys)
    };
    let engine = Engine::new(store, handler, EngineConfig::default());
    let engine = match cache {
        Some(cache) => engine.with_shared_cache(cache),
        None => engine,
    };
    BatchFunction::new(engine, settings).without_metrics()
}

/// One delivery of `batch` to `function`; its time in ms. Every record
/// must finish.
async fn deliver_to<S: Operator>(function: &BatchFunction<LedgerHandler, S>, batch: &Batch) -> f64 {
    let event = batch.event();
    let started = Instant::now();
    let response = function
        .handle(LambdaEvent::new(event, Context::default()))
        .await
        .expect("no invocation error");
    assert!(
        response.batch_item_failures.is_empty(),
        "every record finished"
    );
    started.elapsed().as_secs_f64() * 1000.0
}

/// Scripts Redis has run so far (`EVALSHA` and `EVAL` calls).
async fn scripts_run(connection: &RedisConnection) -> u64 {
    let mut connection = connection.clone();
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut connection)
        .await
        .expect("INFO commandstats");
    stats
        .lines()
        .filter(|line| line.starts_with("cmdstat_evalsha:") || line.starts_with("cmdstat_eval:"))
        .filter_map(|line| {
            line.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// The server's next transaction id (consumes one).
async fn current_xid(pool: &Pool) -> u64 {
    let client = pool.get().await.expect("a connection");
    let row = client
        .query_one("SELECT pg_current_xact_id()::text", &[])
        .await
        .expect("xid");
    row.get::<_, String>(0).parse().expect("a number")
}
