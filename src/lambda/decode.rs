//! From Lambda's Kafka event to records: base64 key and value, headers as
//! bytes, the coordinates Lambda wants back in a partial batch response.

use std::collections::BTreeMap;
use std::fmt;

use aws_lambda_events::event::kafka::KafkaRecord;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// Event sources whose events this function reads.
const KAFKA_SOURCES: &[&str] = &["aws:kafka", "SelfManagedKafka"];

/// An event that cannot be processed at all: an invocation error, so Lambda
/// retries the whole batch and nothing is lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    #[error("not a Kafka event: eventSource is {0}; expected aws:kafka or SelfManagedKafka")]
    NotKafka(String),
    #[error("malformed Kafka event: {0}")]
    Malformed(String),
}

/// Where a record sits: what Lambda wants in `itemIdentifier`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Coordinates {
    /// `<topic>-<partition>`, the key of the event's `records` map.
    pub partition: String,
    pub offset: i64,
}

impl fmt::Display for Coordinates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.partition, self.offset)
    }
}

/// A record's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedRecord {
    pub key: Option<Vec<u8>>,
    /// The value; empty for a null value (a tombstone).
    pub value: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl DecodedRecord {
    /// The last header of that name (Kafka's `lastHeader`).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value.as_slice())
    }
}

/// A record as decoded: its coordinates and its bytes, or why they could not
/// be read.
pub type Decoded = (Coordinates, Result<DecodedRecord, String>);

/// Decodes an event into partitions (sorted by name), each a list of records
/// in offset order. A record that cannot be decoded is an error of that
/// record only; an event that is not a Kafka event is an [`EventError`].
pub fn decode_event(event: &Value) -> Result<Vec<Vec<Decoded>>, EventError> {
    match event.get("eventSource") {
        Some(Value::String(source)) if KAFKA_SOURCES.contains(&source.as_str()) => {}
        // A string shows quoted, anything else as JSON (42, null, {...}).
        Some(other) => return Err(EventError::NotKafka(other.to_string())),
        None => return Err(EventError::NotKafka("missing".into())),
    }
    let partitions: BTreeMap<&str, &Vec<Value>> = match event.get("records") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(name, records)| match records {
                Value::Array(list) => Ok((name.as_str(), list)),
                _ => Err(EventError::Malformed(format!(
                    "records of {name:?} are not a list"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(EventError::Malformed("records is not an object".into())),
    };
    partitions
        .into_iter()
        .map(|(name, records)| {
            let mut decoded = records
                .iter()
                .map(|record| decode_record(name, record))
                .collect::<Result<Vec<_>, _>>()?;
            decoded.sort_by_key(|(at, _)| at.offset);
            Ok(decoded)
        })
        .collect()
}

fn decode_record(partition: &str, record: &Value) -> Result<Decoded, EventError> {
    // Without its offset a record cannot be reported: fail the invocation.
    let offset = record
        .get("offset")
        .and_then(Value::as_i64)
        .ok_or_else(|| {
            EventError::Malformed(format!("a record of {partition:?} has no integer offset"))
        })?;
    let at = Coordinates {
        partition: partition.to_owned(),
        offset,
    };
    let bytes = fractional_timestamp(record)
        .and_then(|()| {
            serde_json::from_value::<KafkaRecord>(record.clone())
                .map_err(|err| format!("malformed record: {err}"))
        })
        .and_then(|record| decode_bytes(&record));
    Ok((at, bytes))
}

/// `aws_lambda_events` panics (an `assert_eq!`) on a timestamp with a
/// fractional part (`1.5`, `"1.5"`): refuse it before, as a malformed record.
fn fractional_timestamp(record: &Value) -> Result<(), String> {
    let number = match record.get("timestamp") {
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.parse::<f64>().ok(),
        _ => None,
    };
    match number {
        Some(n) if n.fract() != 0.0 => Err(format!(
            "malformed record: timestamp {} is not a whole number of milliseconds",
            record["timestamp"]
        )),
        _ => Ok(()),
    }
}

fn decode_bytes(record: &KafkaRecord) -> Result<DecodedRecord, String> {
    let base64 = |text: &str, what: &str| {
        STANDARD
            .decode(text)
            .map_err(|err| format!("{what} is not valid base64: {err}"))
    };
    Ok(DecodedRecord {
        key: record
            .key
            .as_deref()
            .map(|k| base64(k, "key"))
            .transpose()?,
        value: match record.value.as_deref() {
            Some(v) => base64(v, "value")?,
            None => Vec::new(),
        },
        headers: record
            .headers
            .iter()
            .flat_map(|header| header.iter())
            // Lambda sends header bytes as Java's signed bytes.
            .map(|(name, bytes)| (name.clone(), bytes.iter().map(|&b| b as u8).collect()))
            .collect(),
    })
}
