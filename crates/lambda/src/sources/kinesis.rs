//! Amazon Kinesis Data Streams: `Records` of one shard in sequence order,
//! the data in base64. The shard is the ordering unit: a failed record stops
//! the rest of its shard, and Lambda resumes the shard from the lowest
//! sequence number reported. A record is named by its
//! `kinesis.sequenceNumber`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use std::borrow::Cow;

use super::fields::{arn_resource, identified, text};
use super::record::{SourceRecord, one_source};
use super::{Coordinates, Decoded, Edge, EventError, Record, Shape, Source};

/// Kinesis: `aws:kinesis` on each record.
pub(super) static EDGE: Edge = Edge {
    name: "kinesis",
    title: "Kinesis",
    event_sources: &["aws:kinesis"],
    partial_batch_response: true,
    messaging_system: "aws_kinesis",
    shape: Shape::Records { decode },
};

one_source!(KinesisRecord, Kinesis, Kinesis);

/// No attributes: a Kinesis record has none.
impl SourceRecord for KinesisRecord {
    fn body(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }

    fn key(&self) -> Option<Cow<'_, [u8]>> {
        Some(Cow::Borrowed(self.partition_key.as_bytes()))
    }

    fn destination(&self) -> &str {
        self.stream_name()
    }
}

/// A Kinesis record, whole: what a handler gets for `aws:kinesis` events.
#[derive(Debug, Clone, PartialEq)]
pub struct KinesisRecord {
    /// The stream's ARN.
    pub event_source_arn: String,
    /// The shard (`shardId-000000000000`), from the record's `eventID`.
    pub shard_id: String,
    /// `<shard>:<sequence number>`.
    pub event_id: String,
    /// The partition key the producer gave.
    pub partition_key: String,
    /// The sequence number: what the partial batch response names it by.
    pub sequence_number: String,
    /// The data's bytes (base64 undone).
    pub data: Vec<u8>,
    /// When Kinesis received it, epoch seconds with a fraction.
    pub approximate_arrival_timestamp: Option<f64>,
    /// The stream's region.
    pub aws_region: Option<String>,
}

impl KinesisRecord {
    /// The stream's name (from its ARN, `...:stream/<name>`).
    pub fn stream_name(&self) -> &str {
        arn_resource(&self.event_source_arn, ":stream/").unwrap_or(&self.event_source_arn)
    }
}

/// The event's records by shard, each in sequence order.
fn decode(records: &[Value]) -> Result<Vec<Vec<Decoded>>, EventError> {
    let mut units: Vec<(String, Vec<Decoded>)> = Vec::new();
    for (index, record) in records.iter().enumerate() {
        fn id_of(fields: &Map<String, Value>) -> Option<&str> {
            fields.get("kinesis")?.get("sequenceNumber")?.as_str()
        }
        let (fields, sequence_number) = identified(
            Source::Kinesis,
            index,
            record,
            id_of,
            "kinesis.sequenceNumber",
        )?;
        let arn = text(fields, "eventSourceARN")
            .ok()
            .flatten()
            .unwrap_or_default();
        let event_id = text(fields, "eventID").ok().flatten().unwrap_or_default();
        let shard = event_id.split_once(':').map_or("", |(shard, _)| shard);
        let stream = arn_resource(arn, ":stream/").unwrap_or(arn);
        let unit = format!("{stream}/{shard}");
        let at = Coordinates {
            partition: unit.clone(),
            offset: index as i64,
            id: Some(sequence_number.clone()),
        };
        let decoded = (
            at,
            kinesis_record(fields, shard, sequence_number).map(Record::Kinesis),
        );
        match units.iter_mut().find(|(name, _)| *name == unit) {
            Some((_, unit)) => unit.push(decoded),
            None => units.push((unit, vec![decoded])),
        }
    }
    Ok(units.into_iter().map(|(_, unit)| unit).collect())
}

/// One record's fields, or why it cannot be read.
fn kinesis_record(
    fields: &Map<String, Value>,
    shard: &str,
    sequence_number: String,
) -> Result<KinesisRecord, String> {
    let malformed = |reason: String| format!("malformed Kinesis record: {reason}");
    let kinesis = fields
        .get("kinesis")
        .and_then(Value::as_object)
        .ok_or_else(|| malformed("field `kinesis` is not an object".into()))?;
    let data = text(kinesis, "data")
        .map_err(malformed)?
        .unwrap_or_default();
    let data = STANDARD
        .decode(data)
        .map_err(|_| "data is not valid base64".to_owned())?;
    let arrival = match kinesis.get("approximateArrivalTimestamp") {
        None | Some(Value::Null) => None,
        // Fractional seconds (a float), as Lambda sends it.
        Some(value) => Some(value.as_f64().ok_or_else(|| {
            malformed("field `approximateArrivalTimestamp` is not a number".into())
        })?),
    };
    Ok(KinesisRecord {
        event_source_arn: text(fields, "eventSourceARN")
            .map_err(malformed)?
            .unwrap_or_default()
            .to_owned(),
        shard_id: shard.to_owned(),
        event_id: text(fields, "eventID")
            .map_err(malformed)?
            .unwrap_or_default()
            .to_owned(),
        partition_key: text(kinesis, "partitionKey")
            .map_err(malformed)?
            .ok_or_else(|| malformed("missing field `partitionKey`".into()))?
            .to_owned(),
        sequence_number,
        data,
        approximate_arrival_timestamp: arrival,
        aws_region: text(fields, "awsRegion")
            .map_err(malformed)?
            .map(str::to_owned),
    })
}
