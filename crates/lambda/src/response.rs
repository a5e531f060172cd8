//! The partial batch response Lambda reads, for every source: the records
//! to deliver again, each named as its source names it.

use serde::{Deserialize, Serialize};

use super::sources::Coordinates;

/// `{"batchItemFailures":[{"itemIdentifier": ...}]}`; an empty list means
/// the whole batch succeeded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchResponse {
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

/// A record as its source's partial batch response names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ItemIdentifier {
    /// Kafka: `{"partition": "<topic>-<partition>", "offset": n}`.
    Kafka {
        /// `<topic>-<partition>`.
        partition: String,
        /// The record's offset.
        offset: i64,
    },
    /// SQS: the `messageId`; Kinesis and DynamoDB Streams: the sequence
    /// number.
    Id(String),
}

impl From<Coordinates> for BatchItemFailure {
    fn from(at: Coordinates) -> Self {
        let item_identifier = match at.id {
            Some(id) => ItemIdentifier::Id(id),
            None => ItemIdentifier::Kafka {
                partition: at.partition,
                offset: at.offset,
            },
        };
        Self { item_identifier }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_source_names_its_records_as_lambda_reads_them() {
        let response = BatchResponse {
            batch_item_failures: vec![
                Coordinates::kafka("payments-0", 15).into(),
                Coordinates {
                    partition: "orders".into(),
                    offset: 3,
                    id: Some("059f36b4-87a3-44ab-83d2-661975830a7d".into()),
                }
                .into(),
            ],
        };
        assert_eq!(
            serde_json::to_value(&response).expect("serializes"),
            json!({"batchItemFailures": [
                {"itemIdentifier": {"partition": "payments-0", "offset": 15}},
                {"itemIdentifier": "059f36b4-87a3-44ab-83d2-661975830a7d"}
            ]})
        );
        assert_eq!(
            serde_json::to_value(BatchResponse::default()).expect("serializes"),
            json!({"batchItemFailures": []})
        );
    }
}
