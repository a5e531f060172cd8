//! The redis-server that `infra/test.sh` starts (`REDIS_URL`): stores on
//! the test key space (`IDEMPOTENCY_TABLE:` + a fresh key prefix per test),
//! and readers of the ledger's hashes.

use std::time::Duration;

use ::redis::AsyncCommands;
use exactly_once::config::StoreConfig;
use exactly_once::redis::{RedisSettings, RedisStore, increment_key};
use exactly_once::store::Increment;

/// How long a test store waits for Redis per call.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// The settings of the server at `url`.
pub fn settings_at(url: &str) -> RedisSettings {
    RedisSettings::from_lookup(|name| match name {
        "REDIS_URL" => Some(url.to_owned()),
        "REDIS_TIMEOUT_MS" => Some(TIMEOUT.as_millis().to_string()),
        _ => None,
    })
    .expect("REDIS_URL as infra/redis-local.sh exports it")
}

/// A store on the test cluster (`REDIS_CLUSTER_URL`, `REDIS_CLUSTER=true`)
/// under a fresh key prefix, its table tagged `{test}` (one hash slot).
pub fn cluster_store(lock_timeout: Duration) -> RedisStore {
    cluster_store_with(super::store_config(lock_timeout))
}

/// A store on the test cluster as `config` says, its table tagged.
pub fn cluster_store_with(mut config: StoreConfig) -> RedisStore {
    config.table_name = tagged(&config.table_name);
    let url = super::env("REDIS_CLUSTER_URL");
    let settings = RedisSettings::from_lookup(|name| match name {
        "REDIS_URL" => Some(url.clone()),
        "REDIS_TIMEOUT_MS" => Some(TIMEOUT.as_millis().to_string()),
        "REDIS_CLUSTER" => Some("true".into()),
        _ => None,
    })
    .expect("the cluster's settings");
    settings
        .check_names(&[&config.table_name, &tagged(&super::env("LEDGER_TABLE"))])
        .expect("one hash slot");
    RedisStore::new(settings.connect().expect("a connection"), config, &settings)
}

/// `name` in the test cluster's hash slot.
pub fn tagged(name: &str) -> String {
    format!("{{test}}{name}")
}

/// A store on the server at `url` as `config` says, every call given up
/// after `timeout`, every write waiting for `wait_replicas` replicas.
pub fn store_tuned(
    url: &str,
    config: StoreConfig,
    timeout: Duration,
    wait_replicas: u32,
) -> RedisStore {
    let mut settings = settings_at(url);
    settings.timeout = timeout;
    settings.wait_replicas = wait_replicas;
    RedisStore::new(settings.connect().expect("a connection"), config, &settings)
}

/// A store on the test server under a fresh key prefix.
pub fn store(lock_timeout: Duration) -> RedisStore {
    store_with(&super::env("REDIS_URL"), super::store_config(lock_timeout))
}

/// A store on the server at `url` as `config` says.
pub fn store_with(url: &str, config: StoreConfig) -> RedisStore {
    let settings = settings_at(url);
    let connection = settings.connect().expect("a connection");
    RedisStore::new(connection, config, &settings)
}

/// The number `attribute` of the hash `increment` touches (0 if none).
pub async fn number(store: &RedisStore, increment: &Increment, attribute: &str) -> i64 {
    let mut connection = store.connection();
    let value: Option<i64> = connection
        .hget(increment_key(increment), attribute)
        .await
        .expect("read the number");
    value.unwrap_or(0)
}

/// `(balance_cents, payment_count)` of `account` in the ledger `table`.
pub async fn ledger_entry(store: &RedisStore, table: &str, account: &str) -> (i64, i64) {
    let account = Increment::new(table, "account_id", account);
    (
        number(store, &account, "balance_cents").await,
        number(store, &account, "payment_count").await,
    )
}

/// A redis-server of the test's own (`infra/redis-local.sh`), stopped when
/// dropped: for the tests that restart, slow or replicate a server.
pub struct LocalRedis {
    pub url: String,
    /// With `--tls`: the CA that signed the server's certificate.
    pub ca: Option<String>,
    dir: String,
}

impl LocalRedis {
    /// A new server with `options`: `--aof` (every write fsynced before it
    /// is acknowledged, `appendfsync always`; else nothing is kept on
    /// disk), `--tls` (TLS only, and a password).
    pub fn start(options: &[&str]) -> Self {
        let output = Self::script()
            .arg("start")
            .args(options)
            .output()
            .expect("infra/redis-local.sh start");
        assert!(output.status.success(), "redis-local.sh start failed");
        let exports = String::from_utf8_lossy(&output.stdout);
        let export = |name: &str| {
            exports
                .lines()
                .find_map(|line| line.strip_prefix(&format!("export {name}=")))
                .map(str::to_owned)
        };
        Self {
            url: export("REDIS_URL").expect("REDIS_URL"),
            ca: export("REDIS_LOCAL_CA"),
            dir: export("REDIS_LOCAL_DIR").expect("REDIS_LOCAL_DIR"),
        }
    }

    /// A crash: SIGKILL, then a start on the same port and files.
    pub fn restart(&self) {
        self.run("restart");
    }

    /// Stops it (SIGTERM) for good; its files stay until it is dropped.
    pub fn stop(&self) {
        if let Ok(pid) = std::fs::read_to_string(format!("{}/redis.pid", self.dir)) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", pid.trim()])
                .status();
        }
    }

    /// Its `host:port`.
    pub fn address(&self) -> String {
        let after_scheme = self.url.split_once("://").map_or("", |(_, rest)| rest);
        let host = after_scheme
            .rsplit_once('@')
            .map_or(after_scheme, |(_, host)| host);
        host.to_owned()
    }

    fn run(&self, action: &str) {
        let status = Self::script()
            .arg(action)
            .env("REDIS_LOCAL_DIR", &self.dir)
            .status()
            .expect("infra/redis-local.sh");
        assert!(status.success(), "redis-local.sh {action} failed");
    }

    fn script() -> std::process::Command {
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/infra/redis-local.sh"))
    }
}

impl Drop for LocalRedis {
    fn drop(&mut self) {
        self.run("stop");
    }
}
