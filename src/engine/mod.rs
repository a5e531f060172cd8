//! Runs a batch of messages exactly once per idempotency key: claim, run the
//! business logic, record the outcome. Knows nothing of Kafka or Lambda.
//!
//! A batch is a list of lanes (a Kafka partition at the edge). Lanes run
//! concurrently; inside a lane messages run one after another, and after a
//! message that did not finish, the rest of its lane is not started.

mod coalesce;
mod handler;
mod outcome;

use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::task::JoinSet;

pub use handler::{Completion, ConditionFailure, FencingToken, HandlerError, RecordHandler};
pub use outcome::Outcome;

use crate::store::{ClaimOutcome, ClaimRequest, IdempotencyStore, Lease, StoreError};
use coalesce::{InFlight, Settled, Turn};

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

    /// Runs every lane; returns one outcome per item, in the lanes' shape.
    pub async fn run_batch(self: &Arc<Self>, lanes: Vec<Vec<Item>>) -> Vec<Vec<Outcome>> {
        let in_flight = Arc::new(InFlight::default());
        let mut tasks = JoinSet::new();
        let lane_count = lanes.len();
        for (index, lane) in lanes.into_iter().enumerate() {
            let (engine, in_flight) = (Arc::clone(self), Arc::clone(&in_flight));
            tasks.spawn(async move { (index, engine.run_lane(lane, &in_flight).await) });
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
        results
    }

    /// Runs a lane in order, stopping at the first message not finished.
    async fn run_lane(&self, lane: Vec<Item>, in_flight: &InFlight) -> Vec<Outcome> {
        let mut outcomes = Vec::with_capacity(lane.len());
        let mut stopped = false;
        for item in lane {
            if stopped {
                outcomes.push(Outcome::NotStarted);
                continue;
            }
            let outcome = match item {
                Ok(work) => self.run_coalesced(&work, in_flight).await,
                Err(reason) => Outcome::Invalid { reason },
            };
            stopped = !outcome.is_finished();
            outcomes.push(outcome);
        }
        outcomes
    }

    /// Runs the first copy of a key in this batch; later copies wait for it
    /// and are duplicates if it finished with the same payload.
    async fn run_coalesced(&self, work: &Work, in_flight: &InFlight) -> Outcome {
        match in_flight.turn(&work.key) {
            Turn::First(sender) => {
                let outcome = self.run_once(work).await;
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
                _ => self.run_once(work).await,
            },
        }
    }

    /// Claim, run, record: the life of one message.
    pub async fn run_once(&self, work: &Work) -> Outcome {
        let claim = self
            .store
            .claim(ClaimRequest {
                key: &work.key,
                payload_hash: &work.payload_hash,
                origin: Some(&work.origin),
            })
            .await;
        let lease = match claim {
            Ok(ClaimOutcome::Acquired(lease) | ClaimOutcome::TakenOver(lease)) => lease,
            Ok(ClaimOutcome::Duplicate(_)) => return Outcome::Duplicate,
            Ok(ClaimOutcome::InProgress(_)) => return Outcome::InProgress,
            Ok(ClaimOutcome::PayloadMismatch(_)) => return Outcome::PayloadMismatch,
            Ok(ClaimOutcome::PreviouslyFailed(item)) => {
                return Outcome::PreviouslyFailed { error: item.error };
            }
            Err(err) => return store_failure(err),
        };
        let completion = match self
            .handler
            .handle(&FencingToken::from(&lease), &work.payload)
            .await
        {
            Ok(completion) => completion,
            Err(error) => return self.settle_failure(&lease, error).await,
        };
        let policy = completion.on_condition_failure;
        let result = completion.result.as_deref();
        let recorded = if completion.writes.is_empty() {
            self.store.complete(&lease, result).await
        } else {
            self.store
                .complete_with(&lease, result, completion.writes)
                .await
        };
        match recorded {
            Ok(()) => Outcome::Processed {
                version: lease.version,
            },
            // Nothing was written: the effect's own condition decides.
            Err(err @ StoreError::EffectConditionFailed { .. }) => {
                let error = err.to_string();
                let error = match policy {
                    ConditionFailure::Permanent => HandlerError::Permanent(error),
                    ConditionFailure::Retryable => HandlerError::Retryable(error),
                };
                self.settle_failure(&lease, error).await
            }
            Err(err @ StoreError::TooManyWrites { .. }) => {
                self.settle_failure(&lease, HandlerError::Permanent(err.to_string()))
                    .await
            }
            Err(err) => store_failure(err),
        }
    }

    /// Records a failed attempt: FAILED for good, or released for a retry.
    async fn settle_failure(&self, lease: &Lease, error: HandlerError) -> Outcome {
        match error {
            HandlerError::Permanent(error) => match self.store.fail(lease, &error).await {
                Ok(()) => Outcome::Failed { error },
                Err(err) => store_failure(err),
            },
            HandlerError::Retryable(error) => {
                if let Err(err) = self.store.release(lease).await {
                    // The lease still ends by itself; the record is reported anyway.
                    tracing::warn!(key = %lease.pk, error = %err, "could not release the key");
                }
                Outcome::Retrying { error }
            }
        }
    }
}

fn store_failure(err: StoreError) -> Outcome {
    match err {
        StoreError::LockLost { .. } => Outcome::LockLost,
        err => Outcome::StoreFailed(err),
    }
}
