//! The batch sources Lambda delivers at least once, each a thin edge of its
//! own beside the others: what its event looks like, the record it
//! delivers, its ordering unit, and how its partial batch response names a
//! record. The function recognises the source from the event itself
//! ([`decode_event`]); the engine knows none of them.
//!
//! | source | `eventSource` | ordering unit (a lane) | a record is named by |
//! | --- | --- | --- | --- |
//! | Kafka (MSK, self-managed) | `aws:kafka`, `SelfManagedKafka` | a partition | `{"partition": "<topic>-<n>", "offset": n}` |
//! | SQS standard | `aws:sqs` | none: each message alone | its `messageId` |
//! | SQS FIFO (`.fifo` queue) | `aws:sqs` | a message group | its `messageId` |
//! | Kinesis | `aws:kinesis` | a shard | its `kinesis.sequenceNumber` |
//! | DynamoDB Streams | `aws:dynamodb` | a shard (one per event) | its `dynamodb.SequenceNumber` |
//! | Amazon MQ for RabbitMQ | `aws:rmq` | a queue | none: the batch fails whole |
//! | Amazon MQ for ActiveMQ | `aws:mq`, `aws:amq` | a queue | none: the batch fails whole |
//!
//! Amazon MQ has no partial batch response: when a message is left
//! unfinished the invocation fails ([`Source::has_partial_batch_response`]),
//! and Lambda delivers the batch again whole, its finished messages as
//! duplicates.
//!
//! Records are read field by field, so that an error names the field and
//! never echoes a value: keys, attributes and payloads stay out of logs.

mod activemq;
mod dynamodb_streams;
mod kafka;
mod kinesis;
mod properties;
mod rabbitmq;
mod sqs;

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

pub use activemq::ActiveMqMessage;
pub use dynamodb_streams::{StreamRecord, unmarshal};
pub use kinesis::KinesisRecord;
pub use properties::PropertyValue;
pub use rabbitmq::{BasicProperties, RabbitMqMessage};
pub use sqs::{MessageAttribute, SqsMessage};

use crate::record::KafkaRecord;

/// A batch source whose events the function reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// Amazon MSK or self-managed Kafka.
    Kafka,
    /// Amazon SQS, standard or FIFO queues.
    Sqs,
    /// Amazon Kinesis Data Streams.
    Kinesis,
    /// Amazon DynamoDB Streams.
    DynamoDbStreams,
    /// Amazon MQ for RabbitMQ.
    RabbitMq,
    /// Amazon MQ for ActiveMQ.
    ActiveMq,
}

impl Source {
    /// Every source, in the order the docs list them.
    pub const ALL: [Source; 6] = [
        Source::Kafka,
        Source::Sqs,
        Source::Kinesis,
        Source::DynamoDbStreams,
        Source::RabbitMq,
        Source::ActiveMq,
    ];

    /// Its name in `EVENT_SOURCES`, logs and messages (`kafka`, `sqs`,
    /// `kinesis`, `dynamodb-streams`, `rabbitmq`, `activemq`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Kafka => "kafka",
            Self::Sqs => "sqs",
            Self::Kinesis => "kinesis",
            Self::DynamoDbStreams => "dynamodb-streams",
            Self::RabbitMq => "rabbitmq",
            Self::ActiveMq => "activemq",
        }
    }

    /// Its name in prose: `Kafka`, `SQS`, `Kinesis`, `DynamoDB Streams`,
    /// `RabbitMQ`, `ActiveMQ`.
    pub fn title(self) -> &'static str {
        match self {
            Self::Kafka => "Kafka",
            Self::Sqs => "SQS",
            Self::Kinesis => "Kinesis",
            Self::DynamoDbStreams => "DynamoDB Streams",
            Self::RabbitMq => "RabbitMQ",
            Self::ActiveMq => "ActiveMQ",
        }
    }

    /// Whether Lambda reads a partial batch response for it: every source
    /// but Amazon MQ, whose batch fails whole when a message is unfinished.
    pub fn has_partial_batch_response(self) -> bool {
        !matches!(self, Self::RabbitMq | Self::ActiveMq)
    }

    /// Parses a name of [`Self::name`].
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|source| source.name() == text)
            .ok_or_else(|| {
                format!(
                    "unknown event source {text:?}; expected kafka, sqs, kinesis, \
                     dynamodb-streams, rabbitmq or activemq"
                )
            })
    }

    /// The source of `event`, from its `eventSource` (Kafka's and Amazon
    /// MQ's at the top, the others' on every record); `None` for an event
    /// without records.
    pub fn of(event: &Value) -> Result<Option<Self>, EventError> {
        if let Some(source) = Self::at_top(event) {
            return Ok(Some(source));
        }
        let top = event.get("eventSource");
        // A top-level `eventSource` that is not Kafka's decides only when
        // there are no `Records` to name their own source.
        let records = match (event.get("Records"), top) {
            (Some(Value::Array(records)), _) => records,
            (Some(_), _) => return Err(EventError::malformed(None, "Records is not a list")),
            (None, Some(source)) => return Err(EventError::UnknownSource(source.to_string())),
            (None, None) => return Err(EventError::UnknownSource("missing".into())),
        };
        let mut found = None;
        for record in records {
            // SNS spells it `EventSource`.
            let source = record
                .get("eventSource")
                .or_else(|| record.get("EventSource"))
                .unwrap_or(&Value::Null);
            let this = match source.as_str() {
                Some(sqs::EVENT_SOURCE) => Self::Sqs,
                Some(kinesis::EVENT_SOURCE) => Self::Kinesis,
                Some(dynamodb_streams::EVENT_SOURCE) => Self::DynamoDbStreams,
                _ => return Err(EventError::UnknownSource(source.to_string())),
            };
            if found.is_some_and(|found| found != this) {
                return Err(EventError::malformed(
                    None,
                    "its records come from different sources",
                ));
            }
            found = Some(this);
        }
        Ok(found)
    }
}

impl Source {
    /// The source an event names once, at its top (Kafka, Amazon MQ), read
    /// without walking its records.
    pub(crate) fn at_top(event: &Value) -> Option<Self> {
        match event.get("eventSource").and_then(Value::as_str)? {
            text if kafka::EVENT_SOURCES.contains(&text) => Some(Self::Kafka),
            rabbitmq::EVENT_SOURCE => Some(Self::RabbitMq),
            text if activemq::EVENT_SOURCES.contains(&text) => Some(Self::ActiveMq),
            _ => None,
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An event that cannot be processed at all: an invocation error, so Lambda
/// retries the whole batch and nothing is lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// `eventSource` is missing or names a source this library does not read.
    #[error(
        "not an event of a batch source: eventSource is {0}; expected aws:kafka, \
         SelfManagedKafka, aws:sqs, aws:kinesis, aws:dynamodb, aws:rmq or aws:mq"
    )]
    UnknownSource(String),
    /// The source is known, but this function does not serve it (its
    /// handler's record type, or `EVENT_SOURCES`).
    #[error("{event_source} events are not served by this function: {reason}")]
    NotServed {
        /// The event's source.
        event_source: Source,
        /// Why, and what to change.
        reason: String,
    },
    /// The event's shape is wrong (records not a list, a record that cannot
    /// be named in a partial batch response).
    #[error("malformed {0}")]
    Malformed(String),
}

impl EventError {
    /// A malformed event of `source` (`None`: not yet known): the message
    /// reads `malformed <Source> event: <problem>`.
    pub(crate) fn malformed(source: Option<Source>, problem: impl fmt::Display) -> Self {
        Self::Malformed(match source {
            Some(source) => format!("{} event: {problem}", source.title()),
            None => format!("event: {problem}"),
        })
    }
}

/// Where a record sits: its ordering unit, its place in it, and what
/// Lambda's partial batch response names it by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Coordinates {
    /// The ordering unit: Kafka's `<topic>-<partition>`; SQS's queue name
    /// (a FIFO queue's with `/<message group>`); Kinesis's
    /// `<stream>/<shard>`; DynamoDB Streams' `<table>/<stream label>`;
    /// RabbitMQ's `<queue>::<virtual host>`; ActiveMQ's queue.
    pub partition: String,
    /// Kafka: the record's offset. The other sources: its place in the
    /// event (RabbitMQ: in its queue's list; records of one unit run in
    /// this order).
    pub offset: i64,
    /// For the sources whose partial batch response names a record by one
    /// string: SQS's `messageId`, Kinesis's and DynamoDB Streams' sequence
    /// number. Amazon MQ's message id (ActiveMQ's `messageID`, RabbitMQ's
    /// `messageId` property), when the message has one. `None` for Kafka
    /// (named by partition and offset).
    pub id: Option<String>,
}

impl Coordinates {
    /// A Kafka record's place.
    pub fn kafka(partition: impl Into<String>, offset: i64) -> Self {
        Self {
            partition: partition.into(),
            offset,
            id: None,
        }
    }
}

impl fmt::Display for Coordinates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.id {
            None => write!(f, "{}@{}", self.partition, self.offset),
            Some(id) => write!(f, "{}@{id}", self.partition),
        }
    }
}

/// One record as the source delivered it, decoded (base64 undone, a
/// DynamoDB image as plain JSON). A handler whose `Record` is this runs on
/// every source; its own fields are the variant's.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A Kafka record (MSK, self-managed Kafka).
    Kafka(KafkaRecord),
    /// An SQS message.
    Sqs(SqsMessage),
    /// A Kinesis record.
    Kinesis(KinesisRecord),
    /// A DynamoDB Streams record.
    DynamoDb(StreamRecord),
    /// An Amazon MQ for RabbitMQ message.
    RabbitMq(RabbitMqMessage),
    /// An Amazon MQ for ActiveMQ message.
    ActiveMq(ActiveMqMessage),
}

impl Record {
    /// Which source delivered it.
    pub fn source(&self) -> Source {
        match self {
            Self::Kafka(_) => Source::Kafka,
            Self::Sqs(_) => Source::Sqs,
            Self::Kinesis(_) => Source::Kinesis,
            Self::DynamoDb(_) => Source::DynamoDbStreams,
            Self::RabbitMq(_) => Source::RabbitMq,
            Self::ActiveMq(_) => Source::ActiveMq,
        }
    }

    /// The payload: Kafka's value, SQS's body, Kinesis's and Amazon MQ's
    /// data, DynamoDB Streams' new image as JSON (`{"N":"5"}` is `5`; a
    /// `REMOVE`'s old image, or the keys on a `KEYS_ONLY` stream).
    pub fn body(&self) -> Cow<'_, [u8]> {
        match self {
            Self::Kafka(record) => Cow::Borrowed(&record.value),
            Self::Sqs(message) => Cow::Borrowed(&message.body),
            Self::Kinesis(record) => Cow::Borrowed(&record.data),
            Self::DynamoDb(record) => Cow::Owned(record.body()),
            Self::RabbitMq(message) => Cow::Borrowed(&message.data),
            Self::ActiveMq(message) => Cow::Borrowed(&message.data),
        }
    }

    /// The record's key: Kafka's record key, Kinesis's partition key,
    /// DynamoDB Streams' item keys as JSON, an Amazon MQ message's JMS
    /// message group ([`MESSAGE_GROUP`]: an ActiveMQ property, a RabbitMQ
    /// header); `None` for SQS, and for a record without one.
    pub fn key(&self) -> Option<Cow<'_, [u8]>> {
        match self {
            Self::Kafka(record) => record.key.as_deref().map(Cow::Borrowed),
            Self::Sqs(_) => None,
            Self::Kinesis(record) => Some(Cow::Borrowed(record.partition_key.as_bytes())),
            Self::DynamoDb(record) => Some(Cow::Owned(record.keys.to_string().into_bytes())),
            Self::RabbitMq(_) | Self::ActiveMq(_) => {
                self.attribute(MESSAGE_GROUP).map(Cow::Borrowed)
            }
        }
    }

    /// A named attribute: Kafka's last header of that name, an SQS message
    /// attribute's value (a String or Number's text, a Binary's bytes), a
    /// RabbitMQ header's or an ActiveMQ property's (an AMQP string's bytes,
    /// a string's, a number's text).
    pub fn attribute(&self, name: &str) -> Option<&[u8]> {
        match self {
            Self::Kafka(record) => record.header(name),
            Self::Sqs(message) => message.attribute(name).map(|a| a.value.as_slice()),
            Self::Kinesis(_) | Self::DynamoDb(_) => None,
            Self::RabbitMq(message) => message.header(name)?.as_bytes(),
            Self::ActiveMq(message) => message.property(name)?.as_bytes(),
        }
    }

    /// The names of its attributes ([`Self::attribute`]).
    pub fn attribute_names(&self) -> Vec<&str> {
        match self {
            Self::Kafka(record) => record
                .headers
                .iter()
                .map(|(name, _)| name.as_str())
                .collect(),
            Self::Sqs(message) => message
                .message_attributes
                .keys()
                .map(String::as_str)
                .collect(),
            Self::Kinesis(_) | Self::DynamoDb(_) => Vec::new(),
            Self::RabbitMq(message) => message
                .properties
                .headers
                .keys()
                .map(String::as_str)
                .collect(),
            Self::ActiveMq(message) => message.properties.keys().map(String::as_str).collect(),
        }
    }
}

/// The JMS message group an Amazon MQ message belongs to, its record key
/// ([`Record::key`], read by `ORDERING_MODE=key` and
/// `IDEMPOTENCY_KEY_SOURCE=record-key`): an ActiveMQ property, and the
/// header of that name RabbitMQ's JMS client sends it as.
pub const MESSAGE_GROUP: &str = "JMSXGroupID";

/// A record type a handler may declare as its `Record`: the source-neutral
/// [`Record`] (every source), or one source's own ([`KafkaRecord`],
/// [`SqsMessage`], [`KinesisRecord`], [`StreamRecord`]), whose function
/// refuses the other sources' events with an error that says so.
pub trait FromRecord: Sized + Send + Sync + 'static {
    /// Whether records of `source` convert.
    fn accepts(source: Source) -> bool;

    /// The record as this type; `None` when its source is not one this
    /// type takes.
    fn from_record(record: Record) -> Option<Self>;
}

impl FromRecord for Record {
    fn accepts(_: Source) -> bool {
        true
    }

    fn from_record(record: Record) -> Option<Self> {
        Some(record)
    }
}

/// One source's own record type, as a handler's `Record`.
macro_rules! one_source {
    ($type:ty, $variant:ident, $source:ident) => {
        impl FromRecord for $type {
            fn accepts(source: Source) -> bool {
                source == Source::$source
            }

            fn from_record(record: Record) -> Option<Self> {
                match record {
                    Record::$variant(record) => Some(record),
                    _ => None,
                }
            }
        }
    };
}

one_source!(KafkaRecord, Kafka, Kafka);
one_source!(SqsMessage, Sqs, Sqs);
one_source!(KinesisRecord, Kinesis, Kinesis);
one_source!(StreamRecord, DynamoDb, DynamoDbStreams);
one_source!(RabbitMqMessage, RabbitMq, RabbitMq);
one_source!(ActiveMqMessage, ActiveMq, ActiveMq);

/// A record as decoded: its coordinates and the record, or why it could not
/// be read (an error of that record only).
pub type Decoded = (Coordinates, Result<Record, String>);

/// An event, decoded: its source and its records by ordering unit, each
/// unit in the order its records must run.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The source (`None` for an event without records).
    pub source: Option<Source>,
    /// The records, by ordering unit.
    pub units: Vec<Vec<Decoded>>,
}

impl Batch {
    /// Every record, unit after unit.
    pub fn records(&self) -> impl Iterator<Item = &Decoded> {
        self.units.iter().flatten()
    }
}

/// Decodes an event of any source into its records by ordering unit. A
/// record that cannot be decoded is an error of that record only; an event
/// of no known source, or a record that could not be named in the partial
/// batch response, is an [`EventError`].
pub fn decode_event(event: &Value) -> Result<Batch, EventError> {
    let source = Source::of(event)?;
    let units = match source {
        None => Vec::new(),
        Some(Source::Kafka) => kafka::decode(event)?,
        Some(Source::Sqs) => sqs::decode(records(event))?,
        Some(Source::Kinesis) => kinesis::decode(records(event))?,
        Some(Source::DynamoDbStreams) => dynamodb_streams::decode(records(event))?,
        Some(Source::RabbitMq) => rabbitmq::decode(event)?,
        Some(Source::ActiveMq) => activemq::decode(event)?,
    };
    Ok(Batch { source, units })
}

/// The record at `at` as `event` holds it (for a dead-letter message).
pub fn raw_record<'a>(event: &'a Value, at: &Coordinates) -> Option<&'a Value> {
    // Per parked record: the top of the event only, never its records.
    match Source::at_top(event) {
        Some(Source::Kafka) => kafka::raw_record(event, at),
        Some(Source::RabbitMq) => rabbitmq::raw_record(event, at),
        Some(Source::ActiveMq) => activemq::raw_record(event, at),
        _ => records(event).get(usize::try_from(at.offset).ok()?),
    }
}

/// The `Records` list of an SQS, Kinesis or DynamoDB Streams event
/// ([`Source::of`] checked that it is one).
fn records(event: &Value) -> &[Value] {
    event
        .get("Records")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A text field of a record's JSON object: `None` when absent or null.
fn text<'a>(
    fields: &'a serde_json::Map<String, Value>,
    name: &str,
) -> Result<Option<&'a str>, String> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text)),
        Some(_) => Err(format!("field `{name}` is not a string")),
    }
}

/// An integer field of a record's JSON object, given as a number or as its
/// text (Amazon MQ's events spell some both ways): `None` when absent or
/// null.
fn integer(fields: &serde_json::Map<String, Value>, name: &str) -> Result<Option<i64>, String> {
    let not_a_number = || format!("field `{name}` is not an integer");
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(number)) => number.as_i64().map(Some).ok_or_else(not_a_number),
        Some(Value::String(text)) => text.trim().parse().map(Some).map_err(|_| not_a_number()),
        Some(_) => Err(not_a_number()),
    }
}

/// A boolean field of a record's JSON object: `false` when absent or null.
fn flag(fields: &serde_json::Map<String, Value>, name: &str) -> Result<bool, String> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(flag)) => Ok(*flag),
        Some(_) => Err(format!("field `{name}` is not a boolean")),
    }
}

/// The `index`-th record of a `Records` event: its object, and the
/// identifier its partial batch response names it by (`id_of`). Without an
/// identifier the record cannot be reported: an invocation error.
fn identified<'a>(
    source: Source,
    index: usize,
    record: &'a Value,
    id_of: fn(&serde_json::Map<String, Value>) -> Option<&str>,
    id_name: &str,
) -> Result<(&'a serde_json::Map<String, Value>, String), EventError> {
    let missing = || {
        EventError::malformed(
            Some(source),
            format_args!("record {index} has no string {id_name}, so it could not be reported"),
        )
    };
    let fields = record.as_object().ok_or_else(missing)?;
    let id = id_of(fields)
        .filter(|id| !id.is_empty())
        .ok_or_else(missing)?;
    Ok((fields, id.to_owned()))
}

/// The last segment of an ARN's resource (`arn:...:table/t/stream/x` →
/// after `prefix`).
fn arn_resource<'a>(arn: &'a str, prefix: &str) -> Option<&'a str> {
    arn.split_once(prefix).map(|(_, rest)| rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sqs_message(id: &str, queue: &str, group: Option<&str>, body: &str) -> Value {
        let mut attributes = json!({"ApproximateReceiveCount": "1"});
        if let Some(group) = group {
            attributes["MessageGroupId"] = json!(group);
            attributes["MessageDeduplicationId"] = json!(format!("d-{id}"));
        }
        json!({
            "messageId": id,
            "receiptHandle": "AQEB",
            "body": body,
            "attributes": attributes,
            "messageAttributes": {
                "idempotency-key": {"stringValue": format!("k-{id}"), "dataType": "String"},
                "blob": {"binaryValue": "AAH/", "dataType": "Binary"}
            },
            "eventSource": "aws:sqs",
            "eventSourceARN": format!("arn:aws:sqs:us-east-1:123456789012:{queue}"),
            "awsRegion": "us-east-1"
        })
    }

    fn units(batch: &Batch) -> Vec<Vec<String>> {
        let unit = |records: &Vec<Decoded>| records.iter().map(|(at, _)| at.to_string()).collect();
        batch.units.iter().map(unit).collect()
    }

    #[test]
    fn a_standard_queue_has_no_order_and_a_fifo_queue_orders_each_group() {
        let standard = json!({"Records": [
            sqs_message("m-1", "payments", None, "a"),
            sqs_message("m-2", "payments", None, "b"),
        ]});
        let batch = decode_event(&standard).expect("an SQS event");
        assert_eq!(batch.source, Some(Source::Sqs));
        assert_eq!(units(&batch), [["payments@m-1"], ["payments@m-2"]]);
        let Ok(Record::Sqs(message)) = &batch.units[0][0].1 else {
            panic!("an SQS message: {:?}", batch.units[0][0]);
        };
        assert_eq!(message.body, b"a");
        assert_eq!(
            message.attribute("blob").map(|a| a.value.clone()),
            Some(vec![0, 1, 255])
        );
        assert_eq!(
            Record::Sqs(message.clone()).attribute("idempotency-key"),
            Some(&b"k-m-1"[..])
        );
        assert!(!message.is_fifo());

        let fifo = json!({"Records": [
            sqs_message("m-1", "payments.fifo", Some("acc-1"), "a"),
            sqs_message("m-2", "payments.fifo", Some("acc-2"), "b"),
            sqs_message("m-3", "payments.fifo", Some("acc-1"), "c"),
            // Unreadable (the body is not text): a unit of its own.
            json!({"messageId": "m-4", "body": 7, "eventSource": "aws:sqs",
                   "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:payments.fifo"}),
        ]});
        let batch = decode_event(&fifo).expect("an SQS event");
        assert_eq!(
            units(&batch),
            [
                vec!["payments.fifo/acc-1@m-1", "payments.fifo/acc-1@m-3"],
                vec!["payments.fifo/acc-2@m-2"],
                vec!["payments.fifo@m-4"],
            ]
        );
        let Ok(Record::Sqs(message)) = &batch.units[0][1].1 else {
            panic!("a message");
        };
        assert_eq!(
            (
                message.message_group_id(),
                message.deduplication_id(),
                message.is_fifo()
            ),
            (Some("acc-1"), Some("d-m-3"), true)
        );
        assert_eq!(
            batch.units[2][0].1,
            Err("malformed SQS message: field `body` is not a string".into())
        );
        // The response names each message by its id.
        assert_eq!(batch.units[2][0].0.id.as_deref(), Some("m-4"));
    }

    #[test]
    fn kinesis_records_run_per_shard_with_their_data_decoded() {
        let record = |shard: &str, seq: &str, key: &str, data: &str| {
            json!({
                "kinesis": {"kinesisSchemaVersion": "1.0", "partitionKey": key,
                            "sequenceNumber": seq, "data": data,
                            "approximateArrivalTimestamp": 1545084650.987},
                "eventSource": "aws:kinesis", "eventID": format!("{shard}:{seq}"),
                "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/payments",
                "awsRegion": "us-east-1"
            })
        };
        let event = json!({"Records": [
            record("shardId-000000000000", "101", "acc-1", "eyJhIjoxfQ=="),
            record("shardId-000000000001", "201", "acc-2", "e30="),
            record("shardId-000000000000", "102", "acc-1", "not base64!"),
        ]});
        let batch = decode_event(&event).expect("a Kinesis event");
        assert_eq!(batch.source, Some(Source::Kinesis));
        assert_eq!(
            units(&batch),
            [
                vec![
                    "payments/shardId-000000000000@101",
                    "payments/shardId-000000000000@102"
                ],
                vec!["payments/shardId-000000000001@201"],
            ]
        );
        let Ok(record) = &batch.units[0][0].1 else {
            panic!("a record");
        };
        assert_eq!(record.body().as_ref(), br#"{"a":1}"#);
        assert_eq!(record.key().as_deref(), Some(&b"acc-1"[..]));
        let Record::Kinesis(kinesis) = record else {
            panic!("a Kinesis record");
        };
        assert_eq!(
            (
                kinesis.stream_name(),
                kinesis.shard_id.as_str(),
                kinesis.approximate_arrival_timestamp
            ),
            ("payments", "shardId-000000000000", Some(1545084650.987))
        );
        assert_eq!(batch.units[0][1].1, Err("data is not valid base64".into()));
        // A record without a sequence number cannot be reported.
        let mut unnamed = event.clone();
        unnamed["Records"][1]["kinesis"]["sequenceNumber"] = Value::Null;
        assert!(matches!(
            decode_event(&unnamed),
            Err(EventError::Malformed(_))
        ));
    }

    #[test]
    fn a_dynamodb_stream_record_carries_its_images_as_plain_json() {
        let event = json!({"Records": [{
            "eventID": "1", "eventName": "INSERT", "eventVersion": "1.1",
            "eventSource": "aws:dynamodb", "awsRegion": "us-east-1",
            "dynamodb": {
                "Keys": {"payment_id": {"S": "p-1"}},
                "NewImage": {"payment_id": {"S": "p-1"}, "amount_cents": {"N": "250"}},
                "SequenceNumber": "111", "SizeBytes": 26, "StreamViewType": "NEW_AND_OLD_IMAGES",
                "ApproximateCreationDateTime": 1428537600
            },
            "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2015-06-27T00:48:05.899"
        }]});
        let batch = decode_event(&event).expect("a DynamoDB Streams event");
        assert_eq!(batch.source, Some(Source::DynamoDbStreams));
        assert_eq!(
            units(&batch),
            [["payments/stream/2015-06-27T00:48:05.899@111"]]
        );
        let Ok(record) = &batch.units[0][0].1 else {
            panic!("a record");
        };
        let body: Value = serde_json::from_slice(&record.body()).expect("JSON");
        assert_eq!(body, json!({"payment_id": "p-1", "amount_cents": 250}));
        assert_eq!(
            record.key().as_deref(),
            Some(&br#"{"payment_id":"p-1"}"#[..])
        );
        let Record::DynamoDb(change) = record else {
            panic!("a stream record");
        };
        assert_eq!(
            (change.event_name.as_str(), change.table_name()),
            ("INSERT", "payments")
        );
    }

    #[test]
    fn an_event_of_no_known_source_is_refused_and_an_empty_one_has_no_records() {
        let sns = json!({"Records": [{"EventSource": "aws:sns", "Sns": {}}]});
        assert!(matches!(
            decode_event(&sns),
            Err(EventError::UnknownSource(_))
        ));
        assert!(matches!(
            decode_event(&json!({})),
            Err(EventError::UnknownSource(_))
        ));
        let mixed = json!({"Records": [
            sqs_message("m-1", "payments", None, "a"),
            {"eventSource": "aws:kinesis", "kinesis": {}}
        ]});
        assert!(matches!(
            decode_event(&mixed),
            Err(EventError::Malformed(_))
        ));
        let empty = decode_event(&json!({"Records": []})).expect("no records");
        assert_eq!((empty.source, empty.units.len()), (None, 0));
        assert_eq!(
            Source::parse("dynamodb-streams"),
            Ok(Source::DynamoDbStreams)
        );
        assert!(Source::parse("sns").is_err());
    }

    #[test]
    fn a_record_is_found_again_in_its_event_by_its_coordinates() {
        let event = json!({"Records": [
            sqs_message("m-1", "payments", None, "a"),
            sqs_message("m-2", "payments", None, "b"),
        ]});
        let batch = decode_event(&event).expect("an SQS event");
        let at = &batch.units[1][0].0;
        assert_eq!(
            raw_record(&event, at).map(|r| &r["messageId"]),
            Some(&json!("m-2"))
        );
    }

    #[test]
    fn a_handler_takes_the_sources_its_record_type_takes() {
        assert!(Source::ALL.iter().all(|&source| Record::accepts(source)));
        assert!(KafkaRecord::accepts(Source::Kafka) && !KafkaRecord::accepts(Source::Sqs));
        assert!(SqsMessage::accepts(Source::Sqs) && !SqsMessage::accepts(Source::Kinesis));
        assert!(StreamRecord::accepts(Source::DynamoDbStreams));
    }
}
