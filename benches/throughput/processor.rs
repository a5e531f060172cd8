//! What processes a batch: the Lambda function in an ordering mode, or the
//! sequential baseline.

use std::collections::BTreeMap;
use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::{Deadline, Engine, EngineConfig, Outcome, Work};
use exactly_once::lambda::{BatchFunction, Record, Settings};
use exactly_once::outbox::Sender;
use ledger::{LedgerHandler, LedgerMode};
use serde_json::Value;

use crate::Env;
use crate::batches::Batch;

/// What processes the batch: the baseline, or the function on one commit
/// path in one ordering mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    Baseline,
    /// The locking path (claim, then the effect with the completion).
    Partition,
    Key,
    None,
    /// The locking path with the effect outside the store (`direct`: the
    /// ledger's own update between claim and completion), partition order.
    Direct,
    /// The lock-free path (the effect with the COMPLETED item, grouped).
    LockFreePartition,
    LockFreeKey,
    LockFreeNone,
}

impl Mode {
    pub const ALL: [Mode; 7] = [
        Mode::Baseline,
        Mode::Partition,
        Mode::Key,
        Mode::None,
        Mode::LockFreePartition,
        Mode::LockFreeKey,
        Mode::LockFreeNone,
    ];
    /// The function's modes on the locking path, then on the lock-free one.
    pub const LOCKING: [Mode; 3] = [Mode::Partition, Mode::Key, Mode::None];
    pub const LOCK_FREE: [Mode; 3] = [
        Mode::LockFreePartition,
        Mode::LockFreeKey,
        Mode::LockFreeNone,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Baseline => "baseline",
            Mode::Partition => "partition",
            Mode::Key => "key",
            Mode::None => "none",
            Mode::Direct => "direct",
            Mode::LockFreePartition => "lockfree-partition",
            Mode::LockFreeKey => "lockfree-key",
            Mode::LockFreeNone => "lockfree-none",
        }
    }

    /// `ORDERING_MODE` of the function (the baseline keeps offset order).
    fn ordering(self) -> &'static str {
        match self {
            Mode::Baseline | Mode::Partition | Mode::Direct | Mode::LockFreePartition => {
                "partition"
            }
            Mode::Key | Mode::LockFreeKey => "key",
            Mode::None | Mode::LockFreeNone => "none",
        }
    }

    fn ledger_mode(self) -> LedgerMode {
        match self {
            _ if Mode::LOCK_FREE.contains(&self) => LedgerMode::LockFree,
            Mode::Direct => LedgerMode::Direct,
            _ => LedgerMode::Transactional,
        }
    }

    /// The commit path, as the tables name it.
    pub fn path(self) -> &'static str {
        match self {
            _ if Mode::LOCK_FREE.contains(&self) => "lock-free",
            Mode::Direct => "direct",
            _ => "transactional",
        }
    }
}

/// One instance of what processes batches: the Lambda function as deployed,
/// or the baseline loop over `Engine::run_once`.
pub enum Processor {
    Function(Box<BatchFunction<LedgerHandler, DynamoDbStore>>),
    Baseline(Box<Engine<LedgerHandler, DynamoDbStore>>),
}

impl Processor {
    /// `group`: `MAX_RECORDS_PER_TRANSACTION` (None: the environment's).
    pub fn new(env: &Env, client: &Client, mode: Mode, prefix: &str, group: Option<usize>) -> Self {
        Self::announcing(env, client, mode, prefix, group, None)
    }

    /// [`Processor::new`], the ledger announcing every applied payment to
    /// the queue `events.0` through the sender `events.1` (None: nowhere).
    pub fn announcing(
        env: &Env,
        client: &Client,
        mode: Mode,
        prefix: &str,
        group: Option<usize>,
        events: Option<(String, Arc<dyn Sender>)>,
    ) -> Self {
        let (url, sender) = events.unzip();
        let vars: BTreeMap<&str, String> = BTreeMap::from([
            ("IDEMPOTENCY_TABLE", env.idempotency_table.clone()),
            ("IDEMPOTENCY_KEY_PREFIX", prefix.to_owned()),
            ("ORDERING_MODE", mode.ordering().to_owned()),
        ]);
        // The function's concurrency settings come from the environment, as in Lambda.
        let settings = Settings::from_lookup(|name| match name {
            "MAX_RECORDS_PER_TRANSACTION" if group.is_some() => group.map(|g| g.to_string()),
            "MAX_IN_FLIGHT" | "CLAIM_AHEAD" | "MAX_RECORDS_PER_TRANSACTION" => {
                std::env::var(name).ok()
            }
            _ => vars.get(name).cloned(),
        })
        .expect("bench settings");
        let store = DynamoDbStore::new(client.clone(), settings.store);
        // A merchant ledger: no balance below 0 (what the overdraft
        // scenario's debits meet).
        let handler =
            LedgerHandler::new(client.clone(), env.ledger_table.clone(), mode.ledger_mode())
                .with_floor(Some(0))
                .with_events(url);
        match mode {
            Mode::Baseline => {
                let config = EngineConfig {
                    completed_cache: 0,
                    ..Default::default()
                };
                let engine = Engine::new(store, handler, config);
                Self::Baseline(Box::new(match sender {
                    Some(sender) => engine.with_sender(sender),
                    None => engine,
                }))
            }
            _ => {
                let engine = Engine::new(store, handler, settings.engine);
                let engine = match sender {
                    Some(sender) => engine.with_sender(sender),
                    None => engine,
                };
                Self::Function(Box::new(
                    BatchFunction::new(engine, settings.function).without_metrics(),
                ))
            }
        }
    }

    /// Processes the batch; the records not finished.
    pub async fn process(&self, batch: &Batch, event: &Value, works: &[Work<Record>]) -> usize {
        match self {
            Self::Function(function) => {
                let invocation = lambda_runtime::LambdaEvent::new(
                    event.clone(),
                    lambda_runtime::Context::default(),
                );
                match function.handle(invocation).await {
                    Ok(response) => response.batch_item_failures.len(),
                    Err(err) => {
                        eprintln!("invocation error: {err}");
                        batch.len()
                    }
                }
            }
            Self::Baseline(engine) => {
                let mut unfinished = 0;
                for work in works {
                    let outcome: Outcome = engine.run_once(work, Deadline::NONE).await;
                    if !outcome.is_finished() {
                        unfinished += 1;
                    }
                }
                unfinished
            }
        }
    }
}
