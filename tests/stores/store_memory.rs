//! The in-memory backend held to the conformance suite (`exactly_once::store::conformance`):
//! what makes it fit for engine tests.

use exactly_once::store::conformance;
use exactly_once::store::{conformance_suite, operator_conformance_suite};

use std::time::Duration;

use exactly_once::config::StoreConfig;
use exactly_once::store::Increment;
use exactly_once::store::memory::{CounterEffect, MemoryStore};

struct Memory;

impl conformance::Backend for Memory {
    type S = MemoryStore;

    async fn store(&self, lock: Duration) -> MemoryStore {
        MemoryStore::new(StoreConfig {
            key_prefix: format!("test-{}#", uuid::Uuid::new_v4()),
            lock_timeout: lock,
            ..StoreConfig::new("memory")
        })
    }

    fn with_config(&self, store: &MemoryStore, config: StoreConfig) -> MemoryStore {
        store.with_config(config)
    }

    fn effect(
        &self,
        _: &MemoryStore,
        counter: &str,
        add: i64,
        floor: Option<i64>,
    ) -> CounterEffect {
        CounterEffect {
            counter: counter.to_owned(),
            add,
            floor,
        }
    }

    fn ledger_table(&self) -> String {
        "ledger".to_owned()
    }

    async fn number(&self, store: &MemoryStore, increment: &Increment, attribute: &str) -> i128 {
        store.number(&increment.item(), attribute)
    }

    async fn counter(&self, store: &MemoryStore, counter: &str) -> i64 {
        store.counter(counter)
    }
}

conformance_suite!(Memory);

operator_conformance_suite!(Memory);
