//! Runs a batch of messages exactly once per idempotency key: claim, run the
//! business logic, record the outcome. Knows nothing of Kafka or Lambda.
//!
//! A batch is a list of lanes (a Kafka partition at the edge). Lanes run
//! concurrently; inside a lane messages run one after another, and after a
//! message that did not finish, the rest of its lane is not started.

mod coalesce;
mod deadline;
mod handler;
mod lease;
mod outcome;
mod record;

use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

pub use deadline::{Deadline, LEASE_GRACE, StopReason};
pub use handler::{Completion, ConditionFailure, FencingToken, HandlerError, RecordHandler};
pub use outcome::Outcome;

use crate::store::IdempotencyStore;
use coalesce::{InFlight, Settled, Turn};
use deadline::BatchGuard;

/// One message ready to run.
#[derive(Debug, Clone)]
pub struct Work {
    /// The idempotency key (without the table's prefix).
    pub key: String,
    pub payload: Vec<u8>,
    /// Hex SHA-256 of `payload`.
    pub payload_hash: String,
    /// Where it came from, kept on the item for operators.
    pub origin: String,
}

/// Hex SHA-256 of a payload, as stored in `payload_hash`.
pub fn payload_hash(payload: &[u8]) -> String {
    hex::encode(Sha256::digest(payload))
}

/// A message of a batch: ready to run, or unreadable (with the reason).
pub type Item = Result<Work, String>;

/// The outcomes of a batch, in the shape of its lanes.
#[derive(Debug)]
pub struct BatchResult {
    pub outcomes: Vec<Vec<Outcome>>,
    /// DynamoDB failed during the batch, so records were not started.
    pub store_unavailable: bool,
}

/// State shared by the lanes of one batch.
struct Batch {
    in_flight: InFlight,
    guard: BatchGuard,
}

/// The idempotency engine: a store and the business logic.
pub struct Engine<H> {
    store: IdempotencyStore,
    handler: H,
}

impl<H: RecordHandler> Engine<H> {
    pub fn new(store: IdempotencyStore, handler: H) -> Self {
        Self { store, handler }
    }

    pub fn store(&self) -> &IdempotencyStore {
        &self.store
    }

    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// Runs every lane; returns one outcome per item, in the lanes' shape,
    /// and whether DynamoDB failed during the batch.
    pub async fn run_batch(
        self: &Arc<Self>,
        lanes: Vec<Vec<Item>>,
        deadline: Deadline,
    ) -> BatchResult {
        let batch = Arc::new(Batch {
            in_flight: InFlight::default(),
            guard: BatchGuard::new(deadline),
        });
        let mut tasks = JoinSet::new();
        let lane_count = lanes.len();
        for (index, lane) in lanes.into_iter().enumerate() {
            let (engine, batch) = (Arc::clone(self), Arc::clone(&batch));
            tasks.spawn(async move { (index, engine.run_lane(lane, &batch).await) });
        }
        let mut results: Vec<Vec<Outcome>> = (0..lane_count).map(|_| Vec::new()).collect();
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok((index, outcomes)) => results[index] = outcomes,
                // A panicking handler: its lane's results are lost, so the
                // edge reports that lane whole (missing outcomes).
                Err(err) => tracing::error!(error = %err, "a lane's task failed"),
            }
        }
        BatchResult {
            outcomes: results,
            store_unavailable: batch.guard.is_store_down(),
        }
    }

    /// Runs a lane in order, stopping at the first message not finished.
    async fn run_lane(&self, lane: Vec<Item>, batch: &Batch) -> Vec<Outcome> {
        let mut outcomes = Vec::with_capacity(lane.len());
        let mut stopped = None;
        for item in lane {
            if let Some(reason) = stopped.or_else(|| batch.guard.stop_reason()) {
                stopped = Some(reason);
                outcomes.push(Outcome::NotStarted(reason));
                continue;
            }
            let outcome = match item {
                Ok(work) => self.run_coalesced(&work, batch).await,
                Err(reason) => Outcome::Invalid { reason },
            };
            if let Outcome::StoreFailed(err) = &outcome
                && err.is_retryable()
            {
                tracing::error!(error = %err, "DynamoDB unavailable: failing closed, no further record of this batch starts");
                batch.guard.store_failed();
            }
            if !outcome.is_finished() {
                stopped = Some(StopReason::EarlierRecordUnfinished);
            }
            outcomes.push(outcome);
        }
        outcomes
    }

    /// Runs the first copy of a key in this batch; later copies wait for it
    /// and are duplicates if it finished with the same payload.
    async fn run_coalesced(&self, work: &Work, batch: &Batch) -> Outcome {
        let deadline = batch.guard.deadline();
        match batch.in_flight.turn(&work.key) {
            Turn::First(sender) => {
                let outcome = self.run_once(work, deadline).await;
                sender.send_replace(Some(Settled {
                    payload_hash: work.payload_hash.clone(),
                    finished: outcome.is_finished(),
                }));
                outcome
            }
            Turn::Later(receiver) => match coalesce::settled(receiver).await {
                Some(first) if first.finished && first.payload_hash == work.payload_hash => {
                    Outcome::Duplicate
                }
                _ => self.run_once(work, deadline).await,
            },
        }
    }
}
