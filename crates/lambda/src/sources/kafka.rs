//! Kafka (Amazon MSK, self-managed Kafka): records by `<topic>-<partition>`
//! in a map, base64 key and value, headers as Java's signed bytes; a
//! partition is the ordering unit, a record is named by partition and
//! offset.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use std::borrow::Cow;

use super::record::{SourceRecord, one_source};
use super::{Coordinates, Decoded, Edge, EventError, Record, Shape, Source};
use crate::record::{KafkaRecord, SchemaMetadata};

/// Kafka: the `eventSource` of MSK and of self-managed Kafka (spelt both
/// ways seen in the wild), at the event's top; a dead-letter message also
/// carries the cluster's bootstrap servers.
pub(super) static EDGE: Edge = Edge {
    name: "kafka",
    title: "Kafka",
    event_sources: &["aws:kafka", "SelfManagedKafka", "aws:SelfManagedKafka"],
    partial_batch_response: true,
    messaging_system: "kafka",
    shape: Shape::Top {
        decode,
        raw_record,
        dead_letter_fields: &["bootstrapServers"],
    },
};

one_source!(KafkaRecord, Kafka, Kafka);

impl SourceRecord for KafkaRecord {
    fn body(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.value)
    }

    fn key(&self) -> Option<Cow<'_, [u8]>> {
        self.key.as_deref().map(Cow::Borrowed)
    }

    fn attribute(&self, name: &str) -> Option<&[u8]> {
        self.header(name)
    }

    fn attribute_names(&self) -> Vec<&str> {
        self.headers.iter().map(|(name, _)| name.as_str()).collect()
    }

    fn destination(&self) -> &str {
        &self.topic
    }
}

/// The event's partitions (sorted by name), each a list of records in
/// offset order.
fn decode(event: &Value) -> Result<Vec<Vec<Decoded>>, EventError> {
    let partitions: BTreeMap<&str, &Vec<Value>> = match event.get("records") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(name, records)| match records {
                Value::Array(list) => Ok((name.as_str(), list)),
                _ => Err(EventError::malformed(
                    Some(Source::Kafka),
                    format_args!("records of {name:?} are not a list"),
                )),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(EventError::malformed(
                Some(Source::Kafka),
                "records is not an object",
            ));
        }
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

/// The record at `at` as the event holds it.
fn raw_record<'a>(event: &'a Value, at: &Coordinates) -> Option<&'a Value> {
    event
        .get("records")?
        .get(&at.partition)?
        .as_array()?
        .iter()
        .find(|r| r.get("offset").and_then(Value::as_i64) == Some(at.offset))
}

fn decode_record(partition: &str, record: &Value) -> Result<Decoded, EventError> {
    // Without its offset a record cannot be reported: fail the invocation.
    let offset = record
        .get("offset")
        .and_then(Value::as_i64)
        .ok_or_else(|| {
            EventError::malformed(
                Some(Source::Kafka),
                format_args!("a record of {partition:?} has no integer offset"),
            )
        })?;
    let at = Coordinates::kafka(partition, offset);
    let fields = match record {
        Value::Object(fields) => Ok(fields),
        _ => Err("malformed record: not an object".to_owned()),
    };
    let decoded = fields
        .and_then(|fields| fields_of(partition, offset, fields))
        .map_err(|reason| format!("malformed record: {reason}"));
    // Base64 errors carry their own wording.
    let decoded = decoded.and_then(|fields| fields.map_err(str::to_owned));
    Ok((at, decoded.map(Record::Kafka)))
}

/// The record's fields; the outer error is a malformed field, the inner one
/// bytes that are not base64.
fn fields_of(
    partition: &str,
    offset: i64,
    fields: &Map<String, Value>,
) -> Result<Result<KafkaRecord, &'static str>, String> {
    let required = |name: &str| fields.get(name).ok_or(format!("missing field `{name}`"));
    let partition_number = required("partition")?
        .as_i64()
        .ok_or("field `partition` is not an integer")?;
    let timestamp_ms = timestamp(required("timestamp")?)?;
    let text = |name: &str| match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.as_str())),
        Some(_) => Err(format!("field `{name}` is not a string")),
    };
    let topic = match text("topic")? {
        Some(topic) => topic.to_owned(),
        // Older events carry only the map key `<topic>-<partition>`.
        None => partition
            .rsplit_once('-')
            .map_or(partition, |(topic, _)| topic)
            .to_owned(),
    };
    let timestamp_type = text("timestampType")?.map(str::to_owned);
    let (key, value) = (text("key")?, text("value")?);
    let headers = headers(required("headers")?)?;
    let base64 = |text: &str, what| STANDARD.decode(text).map_err(|_| what);
    let bytes = || -> Result<KafkaRecord, &'static str> {
        Ok(KafkaRecord {
            topic,
            partition: partition_number,
            offset,
            timestamp_ms,
            timestamp_type,
            key: key
                .map(|k| base64(k, "key is not valid base64"))
                .transpose()?,
            value: value
                .map(|v| base64(v, "value is not valid base64"))
                .transpose()?
                .unwrap_or_default(),
            headers,
            key_schema: schema(fields.get("keySchemaMetadata")),
            value_schema: schema(fields.get("valueSchemaMetadata")),
        })
    };
    Ok(bytes())
}

/// Epoch milliseconds: a whole number, or a string holding one.
fn timestamp(value: &Value) -> Result<i64, String> {
    let number = match value {
        Value::Number(n) => n.as_i64().map(|ms| ms as f64).or_else(|| n.as_f64()),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match number {
        Some(n) if n.fract() == 0.0 && n.abs() < 9.2e18 => Ok(n as i64),
        Some(_) => Err(format!(
            "timestamp {value} is not a whole number of milliseconds"
        )),
        None => Err("field `timestamp` is not a number".into()),
    }
}

/// `[{"name": [bytes...]}, ...]`, bytes as Java's signed bytes; every entry
/// of every map, in order.
fn headers(value: &Value) -> Result<Vec<(String, Vec<u8>)>, String> {
    let list = value.as_array().ok_or("field `headers` is not a list")?;
    let mut headers = Vec::new();
    for entry in list {
        let map = entry.as_object().ok_or("a header is not an object")?;
        for (name, bytes) in map {
            let bytes = bytes
                .as_array()
                .and_then(|bytes| {
                    bytes
                        .iter()
                        .map(|b| b.as_i64().and_then(|b| i8::try_from(b).ok()))
                        .map(|b| b.map(|b| b as u8))
                        .collect::<Option<Vec<u8>>>()
                })
                .ok_or_else(|| {
                    format!("header {name:?} is not a list of signed bytes (-128 to 127)")
                })?;
            headers.push((name.clone(), bytes));
        }
    }
    Ok(headers)
}

/// Schema registry metadata, when present; fields of another shape are
/// ignored (the record is processed normally).
fn schema(value: Option<&Value>) -> Option<SchemaMetadata> {
    let fields = value?.as_object()?;
    let text = |name: &str| match fields.get(name)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    Some(SchemaMetadata {
        data_format: text("dataFormat"),
        schema_id: text("schemaId"),
    })
}
