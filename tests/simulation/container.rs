//! Lambda containers of one schedule: each a fresh `MskFunction` (its own
//! engine and cache of COMPLETED keys) on the schedule's faulty client.

use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use exactly_once::engine::{Engine, EngineConfig};
use exactly_once::lambda::{FunctionSettings, MskFunction};
use exactly_once::ledger::LedgerHandler;
use exactly_once::{IdempotencyStore, StoreConfig};

use super::schedule::Schedule;
use super::slow::{SlowLedger, Slowness};
use crate::support::msk::header_keys;

pub struct Containers {
    /// The client every container uses, faults attached.
    pub client: Client,
    pub store: StoreConfig,
    pub ledger_table: String,
    pub schedule: Arc<Schedule>,
    pub slowness: Arc<Slowness>,
}

impl Containers {
    /// A cold container.
    pub fn start(&self) -> Arc<MskFunction<SlowLedger>> {
        let schedule = &self.schedule;
        let store = IdempotencyStore::new(self.client.clone(), self.store.clone());
        let ledger = SlowLedger {
            ledger: LedgerHandler::new(
                self.client.clone(),
                self.ledger_table.clone(),
                schedule.ledger_mode,
            ),
            slowness: Arc::clone(&self.slowness),
        };
        let engine_config = EngineConfig {
            claim_ahead: schedule.claim_ahead,
            ..EngineConfig::default()
        };
        let settings = FunctionSettings {
            ordering: schedule.ordering,
            safety_margin: schedule.safety_margin,
            ..FunctionSettings::new(header_keys())
        };
        Arc::new(MskFunction::new(
            Engine::new(store, ledger, engine_config),
            settings,
        ))
    }
}
