//! The shipped function (`msk-handler`) as Lambda runs it: the real binary
//! started against a Runtime API stand-in (`runtime_api.rs`), on each
//! store's real server, reached directly or through a [`Proxy`] that slows
//! or breaks the connection. One process is one container.

use std::time::Duration;

use exactly_once::redis::RedisStore;
use serde_json::Value;

use super::proxy::Proxy;
use super::runtime_api::{Answer, Function, RuntimeApi};

/// The stores the function runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    DynamoDb,
    Postgres,
    Redis,
}

impl Store {
    /// `host:port` of the store's server.
    pub fn address(self) -> String {
        match self {
            Store::DynamoDb => super::dynamodb_address(),
            Store::Postgres => authority(&super::env("DATABASE_URL")),
            Store::Redis => authority(&super::env("REDIS_URL")),
        }
    }
}

/// The `host:port` of a URL (`scheme://[user@]host:port[/...]`).
fn authority(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?']).next().unwrap_or(rest).to_owned()
}

/// The function's variables on `store` under a fresh key prefix, in ledger
/// `mode`, with leases of `lock`; through `proxy` when given (the store's
/// URL or endpoint then names the proxy).
pub async fn env(
    store: Store,
    mode: &str,
    lock: Duration,
    proxy: Option<&Proxy>,
) -> Vec<(&'static str, String)> {
    let config = super::store_config(lock);
    let mut env = vec![
        ("IDEMPOTENCY_TABLE", config.table_name),
        ("IDEMPOTENCY_KEY_PREFIX", config.key_prefix),
        ("LEDGER_TABLE", super::env("LEDGER_TABLE")),
        ("LEDGER_MODE", mode.to_owned()),
        ("LOCK_TIMEOUT_SECONDS", lock.as_secs().max(1).to_string()),
    ];
    let through = |url: String| match proxy {
        Some(proxy) => url.replacen(&store.address(), &proxy.address(), 1),
        None => url,
    };
    match store {
        Store::DynamoDb => {
            if let Some(proxy) = proxy {
                env.push(("AWS_ENDPOINT_URL_DYNAMODB", proxy.endpoint()));
            }
        }
        Store::Postgres => {
            super::postgres::migrate(&super::postgres::pool().await).await;
            env.push(("IDEMPOTENCY_STORE", "postgres".to_owned()));
            env.push(("DATABASE_URL", through(super::env("DATABASE_URL"))));
        }
        Store::Redis => {
            env.push(("IDEMPOTENCY_STORE", "redis".to_owned()));
            env.push(("REDIS_URL", through(super::env("REDIS_URL"))));
        }
    }
    env
}

/// The ledger's balance of `account` on `store` (read directly).
pub async fn balance(store: Store, account: &str) -> i64 {
    match store {
        Store::DynamoDb => super::msk::balance(account).await,
        Store::Postgres => {
            super::postgres::ledger_entry(&super::postgres::pool().await, account)
                .await
                .0
        }
        Store::Redis => {
            let config = super::store_config(Duration::from_secs(30));
            let store: RedisStore = super::redis::store_with(&super::env("REDIS_URL"), config);
            super::redis::ledger_entry(&store, &super::env("LEDGER_TABLE"), account)
                .await
                .0
        }
    }
}

/// The shipped function started on `env` (one container), once `workers`
/// of its runtime's workers poll for events (at most `within`).
pub async fn start(
    env: &[(&str, String)],
    workers: usize,
    within: Duration,
) -> (RuntimeApi, Function) {
    start_binary(&super::binary("msk-handler"), env, workers, within).await
}

/// [`start`] for another function binary (an example of the crate's).
pub async fn start_binary(
    binary: &std::path::Path,
    env: &[(&str, String)],
    workers: usize,
    within: Duration,
) -> (RuntimeApi, Function) {
    let api = RuntimeApi::start().await;
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let function = Function::start(binary, &api, &env);
    api.wait_for_polls(workers, within).await;
    (api, function)
}

/// The records an answer reports (`partition@offset`), or the invocation's
/// error.
pub fn reported(answer: &Answer) -> Result<Vec<String>, Value> {
    match answer {
        Answer::Response(response) => Ok(response["batchItemFailures"]
            .as_array()
            .map(|failures| {
                failures
                    .iter()
                    .map(|failure| {
                        let id = &failure["itemIdentifier"];
                        format!(
                            "{}@{}",
                            id["partition"].as_str().unwrap_or(""),
                            id["offset"]
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()),
        Answer::Error(error) => Err(error.clone()),
    }
}

/// The number `name` of an EMF document.
pub fn metric(doc: &Value, name: &str) -> f64 {
    doc[name]
        .as_f64()
        .unwrap_or_else(|| panic!("{name} in {doc}"))
}
