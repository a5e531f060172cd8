//! From records to the MSK event Lambda would deliver with them: for a
//! handler's tests (on the in-memory store, say), which cannot build
//! `aws_lambda_events`' non-exhaustive types and should not spell base64
//! and signed header bytes by hand.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::record::{KafkaRecord, SchemaMetadata};

/// The MSK event Lambda delivers with `records` (grouped by `<topic>-<partition>`,
/// in the order given): base64 keys and values, headers as Java's signed
/// bytes, the schema registry's metadata where a record has it. What
/// [`crate::decode_event`] reads back whole.
///
/// ```
/// use exactly_once_lambda::{KafkaRecord, encode_event};
///
/// let record = KafkaRecord {
///     topic: "payments".into(),
///     partition: 0,
///     offset: 15,
///     timestamp_ms: 1_545_084_650_987,
///     timestamp_type: Some("CREATE_TIME".into()),
///     key: Some(b"acc-1".to_vec()),
///     value: br#"{"payment_id":"p-1"}"#.to_vec(),
///     headers: vec![("idempotency-key".into(), b"p-1".to_vec())],
///     key_schema: None,
///     value_schema: None,
/// };
/// let event = encode_event(&[record]);
/// assert_eq!(event["records"]["payments-0"][0]["key"], "YWNjLTE=");
/// assert_eq!(event["records"]["payments-0"][0]["headers"][0]["idempotency-key"][0], 112);
/// ```
pub fn encode_event(records: &[KafkaRecord]) -> Value {
    let mut partitions: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for record in records {
        let name = format!("{}-{}", record.topic, record.partition);
        partitions
            .entry(name)
            .or_default()
            .push(encode_record(record));
    }
    json!({
        "eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/test/00000000-0000-0000-0000-000000000000-1",
        "bootstrapServers": "b-1.test.kafka.us-east-1.amazonaws.com:9092",
        "records": partitions,
    })
}

fn encode_record(record: &KafkaRecord) -> Value {
    let headers: Vec<Value> = record
        .headers
        .iter()
        .map(|(name, bytes)| {
            let signed: Vec<i8> = bytes.iter().map(|b| *b as i8).collect();
            json!({ name: signed })
        })
        .collect();
    let mut encoded = json!({
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp_ms,
        "timestampType": record.timestamp_type,
        "key": record.key.as_ref().map(|key| STANDARD.encode(key)),
        "value": STANDARD.encode(&record.value),
        "headers": headers,
    });
    for (field, schema) in [
        ("keySchemaMetadata", &record.key_schema),
        ("valueSchemaMetadata", &record.value_schema),
    ] {
        if let Some(SchemaMetadata {
            data_format,
            schema_id,
        }) = schema
        {
            encoded[field] = json!({ "dataFormat": data_format, "schemaId": schema_id });
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::{FromRecord as _, decode_event};

    #[test]
    fn an_encoded_event_decodes_to_the_same_records() {
        let record = |partition, offset, key: Option<&[u8]>| KafkaRecord {
            topic: "payments".into(),
            partition,
            offset,
            timestamp_ms: 1_545_084_650_987,
            timestamp_type: None,
            key: key.map(<[u8]>::to_vec),
            value: "ключ".as_bytes().to_vec(),
            headers: vec![
                ("idempotency-key".into(), "ключ-1".as_bytes().to_vec()),
                ("tag".into(), vec![0, 127, 128, 255]),
                ("tag".into(), Vec::new()),
            ],
            key_schema: None,
            value_schema: Some(SchemaMetadata {
                data_format: Some("AVRO".into()),
                schema_id: Some("42".into()),
            }),
        };
        let records = [
            record(0, 15, Some(b"acc-1")),
            record(0, 16, None),
            record(1, 3, Some(b"")),
        ];
        let decoded: Vec<KafkaRecord> = decode_event(&encode_event(&records))
            .expect("a Kafka event")
            .units
            .into_iter()
            .flatten()
            .map(|(_, record)| KafkaRecord::from_record(record.expect("readable")).expect("Kafka"))
            .collect();
        assert_eq!(decoded, records);
    }
}
