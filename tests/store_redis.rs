//! The key state machine on a real redis-server (`infra/redis-local.sh`):
//! the conformance suite (`tests/conformance/`), and what only Redis has
//! (its hash fields, its own expiry, its errors).

mod conformance;
mod support;

use std::time::Duration;

use conformance::Backend;
use exactly_once::StoreConfig;
use exactly_once::store::Increment;
use exactly_once::store::redis::{RedisEffect, RedisStore};
use support::redis;

/// The test server; counters are hashes of the ledger table.
struct Redis;

impl Backend for Redis {
    type S = RedisStore;

    async fn store(&self, lock: Duration) -> RedisStore {
        redis::store(lock)
    }

    fn with_config(&self, store: &RedisStore, config: StoreConfig) -> RedisStore {
        store.with_config(config)
    }

    fn effect(&self, _: &RedisStore, counter: &str, add: i64, floor: Option<i64>) -> RedisEffect {
        let key = format!("{}:{counter}", support::env("LEDGER_TABLE"));
        RedisEffect::add(key, "balance_cents", add, floor)
    }

    async fn counter(&self, store: &RedisStore, counter: &str) -> i64 {
        let ledger = support::env("LEDGER_TABLE");
        redis::ledger_entry(store, &ledger, counter).await.0
    }

    fn ledger_table(&self) -> String {
        support::env("LEDGER_TABLE")
    }

    async fn number(&self, store: &RedisStore, increment: &Increment, attribute: &str) -> i128 {
        redis::number(store, increment, attribute).await.into()
    }
}

conformance_suite!(Redis);
