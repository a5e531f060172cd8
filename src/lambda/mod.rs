//! The Lambda edge for Amazon MSK and self-managed Kafka: decode the event,
//! derive keys, run the engine, answer with a partial batch response.

pub mod decode;
pub mod keys;
pub mod response;
pub mod settings;

use std::sync::Arc;

use lambda_runtime::LambdaEvent;
use serde_json::Value;

use crate::engine::{Engine, Item, Outcome, RecordHandler, Work};
pub use decode::{Coordinates, EventError};
use keys::KeySpec;
pub use response::KafkaBatchResponse;
pub use settings::Settings;

/// The MSK function: one per container, shared by every invocation.
pub struct MskFunction<H> {
    engine: Arc<Engine<H>>,
    keys: KeySpec,
}

impl<H: RecordHandler> MskFunction<H> {
    pub fn new(engine: Engine<H>, keys: KeySpec) -> Self {
        Self {
            engine: Arc::new(engine),
            keys,
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
    ) -> Result<KafkaBatchResponse, EventError> {
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
        let outcomes = self.engine.run_batch(lanes).await;

        let mut response = KafkaBatchResponse::default();
        let (mut finished, mut reported) = (0usize, 0usize);
        for (records, outcomes) in coordinates.into_iter().zip(outcomes) {
            let mut outcomes = outcomes.into_iter();
            for at in records {
                // A lane without an outcome for a record (its task failed) is
                // reported: nothing is lost.
                let outcome = outcomes.next().unwrap_or(Outcome::NotStarted);
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
            "batch done"
        );
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
