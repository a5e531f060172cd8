//! A container whose clock runs 90 s ahead, beside one in sync: two real
//! `msk-handler` processes, the first under libfaketime (`FAKETIME=+90s`:
//! its own wall clock, as on a host whose time sync failed, not a test
//! hook), handed the same payments, on every store and every path. What
//! each path keeps when a clock is out of bound (docs/guarantees.md), and
//! what the skewed container says of it.
//!
//! The container in sync reaches its store through a proxy answering each
//! request 100 to 150 ms late, so that its claims stay live a while; the
//! skewed one is handed the batch once the first of them is in the store,
//! in the same order, so that it meets them. By its clock those 30 s
//! leases ended a minute ago: on the locking paths it takes them over. On
//! the transactional path the fence refuses the holder's writes and each
//! payment is applied once; on the direct path the holder's effect is
//! already done, so a payment may be applied twice (as documented), and
//! every such takeover is preceded by the skewed container's warning. The
//! lock-free path has no lease to take: exact. Both containers' records
//! are delivered again, as the mapping would, until none is reported.

use crate::support;

use std::time::Duration;

use exactly_once::dynamodb::DynamoDbStore;
use serde_json::Value;
use support::msk::{event, payment};
use support::proxy::{Chaos, Proxy};
use support::runtime_api::{Function, RuntimeApi};
use support::shipped::{self, Store, metric, reported};

/// How far the skewed container's clock runs ahead.
const AHEAD: Duration = Duration::from_secs(90);
/// `LOCK_TIMEOUT_SECONDS`'s default.
const LOCK: Duration = Duration::from_secs(30);
/// The invocation's time, by the clock of the container's host.
const DEADLINE: Duration = Duration::from_secs(60);
const PAYMENTS: usize = 30;
const ACCOUNTS: usize = 5;
/// Deliveries of what a container reported, at most.
const ROUNDS: usize = 5;

/// The payments at `offsets` (keys `pay-<tag>-<n>`, 1 cent each to 5
/// accounts) of the partition `order` lays out.
fn delivery(tag: &str, order: &[usize], offsets: &[usize]) -> Value {
    let records = offsets
        .iter()
        .map(|&offset| {
            let n = order[offset];
            let account = format!("acc-{tag}-{}", n % ACCOUNTS);
            payment(offset as i64, &format!("pay-{tag}-{n}"), &account, 1)
        })
        .collect();
    event(vec![("payments-0", records)])
}

/// One container: its Runtime API, its process, the invocation deadline
/// its host's clock gives (the Runtime API runs on the same host: a
/// skewed host's deadlines are by the skewed clock).
struct Container {
    api: RuntimeApi,
    function: Function,
    deadline: Duration,
}

impl Container {
    /// Delivers `offsets` of `order`, then what it reports, again, until it
    /// reports nothing.
    async fn deliver(&self, tag: &str, order: &[usize], mut offsets: Vec<usize>) {
        for _ in 0..ROUNDS {
            let (answer, _) = self
                .api
                .invoke(&delivery(tag, order, &offsets), self.deadline)
                .await;
            let again = reported(&answer).expect("a response, not an error");
            if again.is_empty() {
                return;
            }
            offsets = again
                .iter()
                .map(|id| {
                    let (_, offset) = id.rsplit_once('@').expect("partition@offset");
                    offset.parse().expect("an offset")
                })
                .collect();
        }
        panic!("still reporting {offsets:?} after {ROUNDS} deliveries");
    }

    /// The sum of `name` over its EMF documents, and the largest
    /// `ClockSkewMs` among them.
    async fn metrics(&self, name: &str) -> (f64, Option<f64>) {
        let docs = self.function.documents(1, Duration::from_secs(10)).await;
        let sum = docs.iter().map(|doc| metric(doc, name)).sum();
        let skew = docs
            .iter()
            .filter_map(|doc| doc.get("ClockSkewMs").and_then(Value::as_f64))
            .reduce(f64::max);
        (sum, skew)
    }

    /// Its log lines warning of a takeover judged by a clock known off.
    fn skew_warnings(&self) -> Vec<Value> {
        self.function
            .lines()
            .iter()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|line| {
                line["fields"]["message"]
                    .as_str()
                    .is_some_and(|message| message.contains("clock known to be off"))
            })
            .collect()
    }
}

/// Waits until one of `keys` is in the store: the first write of the
/// container in sync (a claim, STARTED, on the locking paths).
async fn first_claim(store: Store, key_prefix: &str, keys: &[String]) {
    let config = exactly_once::config::StoreConfig {
        key_prefix: key_prefix.to_owned(),
        ..support::store_config(LOCK)
    };
    match store {
        Store::DynamoDb => {
            let store = DynamoDbStore::new(support::client().await, config);
            started(&store, keys).await;
        }
        Store::Postgres => {
            let store = support::postgres::store(LOCK).await.with_config(config);
            started(&store, keys).await;
        }
        Store::Redis => {
            let store = support::redis::store_with(&support::env("REDIS_URL"), config);
            started(&store, keys).await;
        }
    }
}

async fn started<S: exactly_once::store::Store>(store: &S, keys: &[String]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        for key in keys {
            if store.get(key).await.expect("read the item").is_some() {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no write of the container in sync within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn a_clock_ahead_beside_one_in_sync(store: Store, mode: &str) {
    let tag = uuid::Uuid::new_v4().to_string();
    let slow = Proxy::start_with(store.address(), Chaos::slow(100, 150)).await;
    let in_sync_env = shipped::env(store, mode, LOCK, Some(&slow)).await;
    let mut skewed_env: Vec<(&str, String)> = in_sync_env
        .iter()
        .filter(|(name, _)| *name != "AWS_ENDPOINT_URL_DYNAMODB")
        .map(|(name, value)| (*name, value.replace(&slow.address(), &store.address())))
        .collect();
    skewed_env.extend([
        ("LD_PRELOAD", support::env("FAKETIME_LIB")),
        ("FAKETIME", format!("+{}s", AHEAD.as_secs())),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
    ]);
    let start = async |env: &[(&str, String)], deadline| {
        let (api, function) = shipped::start(env, 1, Duration::from_secs(60)).await;
        Container {
            api,
            function,
            deadline,
        }
    };
    let in_sync = start(&in_sync_env, DEADLINE).await;
    let skewed = start(&skewed_env, DEADLINE + AHEAD).await;

    let mut order: Vec<usize> = (0..PAYMENTS).collect();
    fastrand::shuffle(&mut order);
    let keys: Vec<String> = order.iter().map(|n| format!("pay-{tag}-{n}")).collect();
    let prefix = &in_sync_env
        .iter()
        .find(|(name, _)| *name == "IDEMPOTENCY_KEY_PREFIX")
        .expect("a key prefix")
        .1;
    let all: Vec<usize> = (0..PAYMENTS).collect();
    let began = std::time::Instant::now();
    tokio::join!(in_sync.deliver(&tag, &order, all.clone()), async {
        first_claim(store, prefix, &keys[..10]).await;
        skewed.deliver(&tag, &order, all.clone()).await;
    });

    let case = format!("{mode} on {store:?}");
    let (taken_over, skew) = skewed.metrics("TakenOver").await;
    let (_, in_sync_skew) = in_sync.metrics("TakenOver").await;
    let skew = skew.expect("the skewed container measured its clock");
    let ahead_ms = AHEAD.as_millis() as f64;
    assert!(
        skew <= ahead_ms && skew > ahead_ms - 6_000.0,
        "{case}: 90 s ahead read as {skew} ms"
    );
    assert_eq!(in_sync_skew, Some(0.0), "{case}: a clock in sync");
    let warnings = skewed.skew_warnings();
    assert!(in_sync.skew_warnings().is_empty(), "{case}");
    let mut balances = Vec::new();
    for a in 0..ACCOUNTS {
        balances.push(shipped::balance(store, &format!("acc-{tag}-{a}")).await);
    }
    let expected = (PAYMENTS / ACCOUNTS) as i64;
    eprintln!(
        "{case}: the skewed container read ClockSkewMs {skew}, took over {taken_over} key(s), warned {} time(s); balances {balances:?} (each {expected} once); settled in {:?}",
        warnings.len(),
        began.elapsed()
    );
    match mode {
        "lock-free" => {
            assert_eq!(taken_over, 0.0, "{case}: no lease to take");
            assert!(
                balances.iter().all(|&b| b == expected),
                "{case}: {balances:?}"
            );
        }
        "transactional" => {
            assert!(taken_over >= 1.0, "{case}: it met no live claim");
            assert!(warnings.len() as f64 >= taken_over, "{case}: {warnings:?}");
            // The fence: the holder's writes refused, each payment once.
            assert!(
                balances.iter().all(|&b| b == expected),
                "{case}: {balances:?}"
            );
        }
        _ => {
            assert!(taken_over >= 1.0, "{case}: it met no live claim");
            assert!(warnings.len() as f64 >= taken_over, "{case}: {warnings:?}");
            // The effect outside the store: never lost, perhaps twice.
            assert!(
                balances.iter().all(|&b| b >= expected),
                "{case}: {balances:?}"
            );
        }
    }
    for warning in &warnings {
        let skew_ms = warning["fields"]["skew_ms"].as_f64().expect("skew_ms");
        assert!(skew_ms > ahead_ms - 6_000.0, "{case}: {warning}");
        assert_eq!(warning["level"], "WARN", "{case}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_with_its_clock_ahead_keeps_each_paths_guarantee_and_says_so() {
    for store in [Store::DynamoDb, Store::Postgres, Store::Redis] {
        for mode in ["lock-free", "transactional", "direct"] {
            a_clock_ahead_beside_one_in_sync(store, mode).await;
        }
    }
}
