//! The partial batch response Lambda reads for Kafka event sources.

use serde::{Deserialize, Serialize};

use super::decode::Coordinates;

/// `{"batchItemFailures":[{"itemIdentifier":{"partition":"t-0","offset":15}}]}`;
/// an empty list means the whole batch succeeded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KafkaBatchResponse {
    pub batch_item_failures: Vec<BatchItemFailure>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchItemFailure {
    pub item_identifier: ItemIdentifier,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemIdentifier {
    /// `<topic>-<partition>`.
    pub partition: String,
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
