//! The partial batch response Lambda reads for Kafka event sources.

use serde::{Deserialize, Serialize};

use super::decode::Coordinates;

/// `{"batchItemFailures":[{"itemIdentifier":{"partition":"t-0","offset":15}}]}`;
/// an empty list means the whole batch succeeded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaBatchResponse {
    /// The records to deliver again; empty when none.
    pub batch_item_failures: Vec<BatchItemFailure>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
/// One record to deliver again.
pub struct BatchItemFailure {
    /// Which record.
    pub item_identifier: ItemIdentifier,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
/// A record's place, as Lambda names it for Kafka.
pub struct ItemIdentifier {
    /// `<topic>-<partition>`.
    pub partition: String,
    /// The record's offset.
    pub offset: i64,
}

impl From<Coordinates> for BatchItemFailure {
    fn from(at: Coordinates) -> Self {
        Self {
            item_identifier: ItemIdentifier {
                partition: at.partition,
                offset: at.offset,
            },
        }
    }
}
