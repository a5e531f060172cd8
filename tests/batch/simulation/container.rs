//! Lambda containers of one schedule: each a fresh `BatchFunction` (its own
//! engine and cache of COMPLETED keys) on the schedule's faulty client.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::Client;
use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::{Engine, EngineConfig};
use exactly_once::lambda::dead_letter::DeadLetterQueue;
use exactly_once::lambda::{BatchFunction, FunctionSettings};
use ledger::LedgerHandler;

use super::schedule::Schedule;
use super::slow::{SlowLedger, Slowness};
use crate::support::msk::header_keys;
use crate::support::sources::Encoding;

/// Where the records' idempotency key is: the `idempotency-key` header (a
/// Kafka header, an SQS message attribute, a RabbitMQ header), or a Kinesis record's
/// partition key (which the mapping sets to it).
fn keys(encoding: Encoding) -> exactly_once::lambda::keys::KeySpec {
    use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy};
    match encoding {
        Encoding::Kafka | Encoding::SqsFifo | Encoding::RabbitMq => header_keys(),
        Encoding::Kinesis => KeySpec::parse(
            "record-key",
            "idempotency-key".into(),
            MissingKeyPolicy::Reject,
        )
        .expect("valid keys"),
    }
}

pub struct Containers {
    /// The client every container uses, faults attached.
    pub client: Client,
    pub store: StoreConfig,
    pub ledger_table: String,
    pub schedule: Arc<Schedule>,
    pub slowness: Arc<Slowness>,
    pub skew: Arc<ClockSkew>,
    /// The schedule's dead-letter queue, if it has one (without faults).
    pub dead_letters: Option<DeadLetterQueue>,
    /// Every container started, for what they learned (their group sizes).
    pub started: Mutex<Vec<Arc<BatchFunction<SlowLedger, DynamoDbStore>>>>,
}

/// Each container's clock is off by up to `max_ms` either way (0: none):
/// the clock skew between concurrent workers, within the lock's margin.
pub struct ClockSkew {
    pub max_ms: u64,
    pub rng: Mutex<fastrand::Rng>,
    /// Containers started with a clock that is off.
    pub skewed: AtomicU64,
}

impl ClockSkew {
    fn offset_ms(&self) -> i64 {
        if self.max_ms == 0 {
            return 0;
        }
        let max = self.max_ms as i64;
        let offset = self
            .rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .i64(-max..=max);
        if offset != 0 {
            self.skewed.fetch_add(1, Ordering::Relaxed);
        }
        offset
    }
}

impl Containers {
    /// A cold container.
    pub fn start(&self) -> Arc<BatchFunction<SlowLedger, DynamoDbStore>> {
        let schedule = &self.schedule;
        let config = StoreConfig {
            clock_offset_ms: self.skew.offset_ms(),
            ..self.store.clone()
        };
        let store = DynamoDbStore::new(self.client.clone(), config);
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
            poison: schedule.poison,
            park_refused: self.dead_letters.is_some(),
            ..EngineConfig::default()
        };
        let settings = FunctionSettings {
            ordering: schedule.ordering,
            safety_margin: schedule.safety_margin,
            ..FunctionSettings::new(keys(schedule.encoding))
        };
        let function = BatchFunction::new(Engine::new(store, ledger, engine_config), settings)
            .without_metrics();
        let function = Arc::new(match &self.dead_letters {
            Some(queue) => function.with_dead_letter_queue(queue.clone()),
            None => function,
        });
        self.started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Arc::clone(&function));
        function
    }

    /// How often the containers' lock-free group sizes changed: the default
    /// sizing at work (it starts at the store's `START_SIZE` and follows its
    /// answers).
    pub fn resizes(&self) -> u64 {
        let started = self
            .started
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        started
            .iter()
            .map(|function| function.engine().group_sizes().len() as u64 - 1)
            .sum()
    }
}
