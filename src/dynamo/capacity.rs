//! Consumed capacity in DynamoDB's JSON protocol: asking for it in a request
//! body (`"ReturnConsumedCapacity":"TOTAL"`) and reading it from a response
//! body, successful or not.
//!
//! DynamoDB Local (3.3.0) answers `TOTAL` with `TableName` and
//! `CapacityUnits` only: an object for single-item operations and Query/Scan,
//! a list (one entry per table) for BatchGetItem, BatchWriteItem and the
//! transactions. DynamoDB itself may add `ReadCapacityUnits` and
//! `WriteCapacityUnits`; when present they are used, otherwise
//! `CapacityUnits` count as read units for reads and write units for writes.

use std::ops::{Add, Sub};

use serde_json::{Map, Value};

/// The operations whose request accepts `ReturnConsumedCapacity`.
const ACCEPTING: [&str; 10] = [
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "GetItem",
    "BatchGetItem",
    "BatchWriteItem",
    "TransactWriteItems",
    "TransactGetItems",
    "Query",
    "Scan",
];

/// The operations among them that read.
const READS: [&str; 5] = [
    "GetItem",
    "BatchGetItem",
    "TransactGetItems",
    "Query",
    "Scan",
];

/// Capacity units consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CapacityUnits {
    /// Read capacity units.
    pub read: f64,
    /// Write capacity units.
    pub write: f64,
}

impl Add for CapacityUnits {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            read: self.read + other.read,
            write: self.write + other.write,
        }
    }
}

impl Sub for CapacityUnits {
    type Output = Self;

    fn sub(self, other: Self) -> Self {
        Self {
            read: self.read - other.read,
            write: self.write - other.write,
        }
    }
}

/// `body` with `"ReturnConsumedCapacity":"TOTAL"` added, if `operation`
/// accepts it and the body is a JSON object that does not choose already;
/// `None` leaves the request as it is.
pub fn ask_for_total(operation: &str, body: &[u8]) -> Option<Vec<u8>> {
    if !ACCEPTING.contains(&operation) {
        return None;
    }
    let mut request: Map<String, Value> = serde_json::from_slice(body).ok()?;
    if request.contains_key("ReturnConsumedCapacity") {
        return None;
    }
    request.insert("ReturnConsumedCapacity".into(), "TOTAL".into());
    serde_json::to_vec(&request).ok()
}

/// The capacity a response body of `operation` reports (`ConsumedCapacity`,
/// one object or a list of them), or `None` if it reports none.
pub fn consumed(operation: &str, body: &[u8]) -> Option<CapacityUnits> {
    let response: Map<String, Value> = serde_json::from_slice(body).ok()?;
    let entries = match response.get("ConsumedCapacity")? {
        Value::Array(entries) => entries.iter().collect(),
        entry => vec![entry],
    };
    let reads = READS.contains(&operation);
    Some(entries.into_iter().map(|entry| units(entry, reads)).fold(
        CapacityUnits::default(),
        |sum, units| CapacityUnits {
            read: sum.read + units.read,
            write: sum.write + units.write,
        },
    ))
}

/// One `ConsumedCapacity` entry: its read and write units if it names them,
/// else its `CapacityUnits` as reads or writes.
fn units(entry: &Value, reads: bool) -> CapacityUnits {
    let field = |name: &str| entry.get(name).and_then(Value::as_f64);
    match (field("ReadCapacityUnits"), field("WriteCapacityUnits")) {
        (None, None) => {
            let total = field("CapacityUnits").unwrap_or(0.0);
            if reads {
                CapacityUnits {
                    read: total,
                    write: 0.0,
                }
            } else {
                CapacityUnits {
                    read: 0.0,
                    write: total,
                }
            }
        }
        (read, write) => CapacityUnits {
            read: read.unwrap_or(0.0),
            write: write.unwrap_or(0.0),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn asked(operation: &str, body: Value) -> Option<Value> {
        let bytes = serde_json::to_vec(&body).expect("json");
        ask_for_total(operation, &bytes).map(|b| serde_json::from_slice(&b).expect("json"))
    }

    #[test]
    fn total_is_asked_for_by_every_operation_that_accepts_it() {
        for operation in ACCEPTING {
            let body = asked(
                operation,
                json!({"TableName": "t", "Key": {"pk": {"S": "a"}}}),
            );
            assert_eq!(
                body,
                Some(
                    json!({"TableName": "t", "Key": {"pk": {"S": "a"}}, "ReturnConsumedCapacity": "TOTAL"})
                ),
                "{operation}"
            );
        }
    }

    #[test]
    fn other_operations_a_caller_s_choice_and_bodies_that_are_not_objects_stay_as_they_are() {
        assert_eq!(asked("DescribeTable", json!({"TableName": "t"})), None);
        assert_eq!(asked("CreateTable", json!({"TableName": "t"})), None);
        assert_eq!(
            asked("PutItem", json!({"ReturnConsumedCapacity": "INDEXES"})),
            None
        );
        assert_eq!(asked("PutItem", json!([1, 2])), None);
        assert_eq!(ask_for_total("PutItem", b""), None);
        assert_eq!(ask_for_total("PutItem", b"{not json"), None);
    }

    fn read(operation: &str, body: Value) -> Option<CapacityUnits> {
        consumed(operation, &serde_json::to_vec(&body).expect("json"))
    }

    #[test]
    fn capacity_units_of_one_table_count_as_reads_or_writes_by_operation() {
        // DynamoDB Local's answers.
        let one = json!({"ConsumedCapacity": {"TableName": "t", "CapacityUnits": 1.0}});
        assert_eq!(
            read("PutItem", one.clone()),
            Some(CapacityUnits {
                read: 0.0,
                write: 1.0
            })
        );
        let half =
            json!({"Item": {}, "ConsumedCapacity": {"TableName": "t", "CapacityUnits": 0.5}});
        assert_eq!(
            read("GetItem", half),
            Some(CapacityUnits {
                read: 0.5,
                write: 0.0
            })
        );
        assert_eq!(read("Query", one).map(|u| u.read), Some(1.0));
    }

    #[test]
    fn a_list_of_tables_is_summed() {
        let body = json!({"ConsumedCapacity": [
            {"TableName": "idempotency", "CapacityUnits": 2.0},
            {"TableName": "ledger", "CapacityUnits": 2.0},
        ]});
        assert_eq!(
            read("TransactWriteItems", body),
            Some(CapacityUnits {
                read: 0.0,
                write: 4.0
            })
        );
        let body = json!({"Responses": {}, "ConsumedCapacity": [
            {"TableName": "a", "CapacityUnits": 0.5},
            {"TableName": "b", "CapacityUnits": 0.0},
        ]});
        assert_eq!(read("BatchGetItem", body).map(|u| u.read), Some(0.5));
    }

    #[test]
    fn read_and_write_units_named_by_dynamodb_are_taken_as_they_are() {
        let body = json!({"ConsumedCapacity": {
            "TableName": "t", "CapacityUnits": 3.0, "ReadCapacityUnits": 1.0, "WriteCapacityUnits": 2.0,
            "Table": {"CapacityUnits": 3.0},
        }});
        assert_eq!(
            read("UpdateItem", body),
            Some(CapacityUnits {
                read: 1.0,
                write: 2.0
            })
        );
        let body = json!({"ConsumedCapacity": {"WriteCapacityUnits": 2.0}});
        assert_eq!(
            read("GetItem", body),
            Some(CapacityUnits {
                read: 0.0,
                write: 2.0
            })
        );
    }

    #[test]
    fn an_error_body_reports_capacity_if_it_has_some() {
        let failed = json!({
            "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
            "Message": "The conditional request failed",
        });
        assert_eq!(read("PutItem", failed.clone()), None);
        let mut with_capacity = failed;
        with_capacity["ConsumedCapacity"] = json!({"TableName": "t", "CapacityUnits": 1.0});
        assert_eq!(read("PutItem", with_capacity).map(|u| u.write), Some(1.0));
        assert_eq!(consumed("PutItem", b""), None);
        assert_eq!(consumed("PutItem", b"<html>"), None);
    }
}
