//! The Lambda edge for Amazon MSK and self-managed Kafka: decode the event,
//! derive keys, run the engine, answer with a partial batch response.

pub mod decode;
pub mod keys;
pub mod response;
pub mod settings;

use std::sync::Arc;
use std::time::Duration;

use lambda_runtime::LambdaEvent;
use serde_json::Value;

use crate::engine::{Deadline, Engine, Item, Outcome, RecordHandler, StopReason, Work};
pub use decode::{Coordinates, EventError};
use keys::KeySpec;
pub use response::KafkaBatchResponse;
pub use settings::Settings;

/// Why an invocation failed as a whole (Lambda then retries the batch).
#[derive(Debug, thiserror::Error)]
pub enum InvocationError {
    #[error(transparent)]
    Event(#[from] EventError),
    /// DynamoDB was unavailable and no record could be finished.
    #[error(
        "DynamoDB unavailable: no record of the batch could be processed ({reported} reported)"
    )]
    StoreUnavailable { reported: usize },
}

impl From<InvocationError> for lambda_runtime::Diagnostic {
    fn from(err: InvocationError) -> Self {
        let error_type = match &err {
            InvocationError::Event(EventError::NotKafka(_)) => "NotKafkaEvent",
            InvocationError::Event(EventError::Malformed(_)) => "MalformedKafkaEvent",
            InvocationError::StoreUnavailable { .. } => "StoreUnavailable",
        };
        Self {
            error_type: error_type.into(),
            error_message: err.to_string(),
        }
    }
}

/// The MSK function: one per container, shared by every invocation.
pub struct MskFunction<H> {
    engine: Arc<Engine<H>>,
    keys: KeySpec,
    safety_margin: Duration,
}

impl<H: RecordHandler> MskFunction<H> {
    /// No record starts within `safety_margin` of the invocation's deadline.
    pub fn new(engine: Engine<H>, keys: KeySpec, safety_margin: Duration) -> Self {
        Self {
            engine: Arc::new(engine),
            keys,
            safety_margin,
        }
    }

    pub fn engine(&self) -> &Engine<H> {
        &self.engine
    }

    /// Handles one invocation. Every record is either finished (processed or
    /// a verified duplicate) or listed in the response's failures.
    pub async fn handle(
        &self,
        event: LambdaEvent<Value>,
    ) -> Result<KafkaBatchResponse, InvocationError> {
        let partitions = decode::decode_event(&event.payload)?;
        let coordinates: Vec<Vec<Coordinates>> = partitions
            .iter()
            .map(|records| records.iter().map(|(at, _)| at.clone()).collect())
            .collect();
        let lanes = partitions
            .into_iter()
            .map(|records| {
                records
                    .into_iter()
                    .map(|(at, record)| self.item(at, record))
                    .collect()
            })
            .collect();
        let deadline = Deadline::new(event.context.deadline, self.safety_margin);
        let batch = self.engine.run_batch(lanes, deadline).await;

        let mut response = KafkaBatchResponse::default();
        let (mut finished, mut reported) = (0usize, 0usize);
        for (records, outcomes) in coordinates.into_iter().zip(batch.outcomes) {
            let mut outcomes = outcomes.into_iter();
            for at in records {
                // A lane without an outcome for a record (its task failed) is
                // reported: nothing is lost.
                let outcome = outcomes
                    .next()
                    .unwrap_or(Outcome::NotStarted(StopReason::EarlierRecordUnfinished));
                log_outcome(&at, &outcome);
                if outcome.is_finished() {
                    finished += 1;
                } else {
                    reported += 1;
                    response.batch_item_failures.push(at.into());
                }
            }
        }
        tracing::info!(
            request_id = %event.context.request_id,
            finished,
            reported,
            store_unavailable = batch.store_unavailable,
            "batch done"
        );
        if batch.store_unavailable && finished == 0 && reported > 0 {
            // Nothing could be done: an invocation error retries the batch.
            return Err(InvocationError::StoreUnavailable { reported });
        }
        Ok(response)
    }

    fn item(&self, at: Coordinates, record: Result<decode::DecodedRecord, String>) -> Item {
        let record = record?;
        let payload_hash = crate::engine::payload_hash(&record.value);
        let key = self.keys.key_for(&record, &at, &payload_hash)?;
        Ok(Work {
            key,
            payload: record.value,
            payload_hash,
            origin: at.to_string(),
        })
    }
}

fn log_outcome(at: &Coordinates, outcome: &Outcome) {
    let detail = outcome.detail().unwrap_or_default();
    if outcome.is_finished() {
        tracing::info!(partition = %at.partition, offset = at.offset, outcome = outcome.name(), "record");
    } else {
        tracing::warn!(partition = %at.partition, offset = at.offset, outcome = outcome.name(), %detail, "record not finished, reported");
    }
}
