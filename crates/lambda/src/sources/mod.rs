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
//!
//! Records are read field by field, so that an error names the field and
//! never echoes a value: keys, attributes and payloads stay out of logs.

mod dynamodb_streams;
mod kafka;
mod kinesis;
mod sqs;

use std::borrow::Cow;
use std::fmt;

use serde_json::Value;

pub use dynamodb_streams::{StreamRecord, unmarshal};
pub use kinesis::KinesisRecord;
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
}

impl Source {
    /// Every source, in the order the docs list them.
    pub const ALL: [Source; 4] = [
        Source::Kafka,
        Source::Sqs,
        Source::Kinesis,
        Source::DynamoDbStreams,
    ];

    /// Its name in `EVENT_SOURCES`, logs and messages (`kafka`, `sqs`,
    /// `kinesis`, `dynamodb-streams`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Kafka => "kafka",
            Self::Sqs => "sqs",
            Self::Kinesis => "kinesis",
            Self::DynamoDbStreams => "dynamodb-streams",
        }
    }

    /// Parses a name of [`Self::name`].
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|source| source.name() == text)
            .ok_or_else(|| {
                format!("unknown event source {text:?}; expected kafka, sqs, kinesis or dynamodb-streams")
            })
    }

    /// The source of `event`, from its `eventSource` (Kafka's at the top,
    /// the others' on every record); `None` for an event without records.
    pub fn of(event: &Value) -> Result<Option<Self>, EventError> {
        if let Some(source) = event.get("eventSource") {
            return match source.as_str() {
                Some(text) if kafka::EVENT_SOURCES.contains(&text) => Ok(Some(Self::Kafka)),
                _ => Err(EventError::UnknownSource(source.to_string())),
            };
        }
        let records = match event.get("Records") {
            Some(Value::Array(records)) => records,
            Some(_) => return Err(EventError::Malformed("Records is not a list".into())),
            None => return Err(EventError::UnknownSource("missing".into())),
        };
        let mut found = None;
        for record in records {
            let source = record.get("eventSource").unwrap_or(&Value::Null);
            let this = match source.as_str() {
                Some(sqs::EVENT_SOURCE) => Self::Sqs,
                Some(kinesis::EVENT_SOURCE) => Self::Kinesis,
                Some(dynamodb_streams::EVENT_SOURCE) => Self::DynamoDbStreams,
                _ => return Err(EventError::UnknownSource(source.to_string())),
            };
            if found.is_some_and(|found| found != this) {
                return Err(EventError::Malformed(
                    "its records come from different sources".into(),
                ));
            }
            found = Some(this);
        }
        Ok(found)
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
         SelfManagedKafka, aws:sqs, aws:kinesis or aws:dynamodb"
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
    #[error("malformed event: {0}")]
    Malformed(String),
}

/// Where a record sits: its ordering unit, its place in it, and what
/// Lambda's partial batch response names it by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Coordinates {
    /// The ordering unit: Kafka's `<topic>-<partition>`; SQS's queue name
    /// (a FIFO queue's with `/<message group>`); Kinesis's
    /// `<stream>/<shard>`; DynamoDB Streams' `<table>/<stream label>`.
    pub partition: String,
    /// Kafka: the record's offset. The other sources: its place in the
    /// event (records of one unit run in this order).
    pub offset: i64,
    /// For the sources whose partial batch response names a record by one
    /// string: SQS's `messageId`, Kinesis's and DynamoDB Streams' sequence
    /// number. `None` for Kafka (named by partition and offset).
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
}

impl Record {
    /// Which source delivered it.
    pub fn source(&self) -> Source {
        match self {
            Self::Kafka(_) => Source::Kafka,
            Self::Sqs(_) => Source::Sqs,
            Self::Kinesis(_) => Source::Kinesis,
            Self::DynamoDb(_) => Source::DynamoDbStreams,
        }
    }

    /// The payload: Kafka's value, SQS's body, Kinesis's data, DynamoDB
    /// Streams' new image as JSON (`{"N":"5"}` is `5`; empty without one).
    pub fn body(&self) -> Cow<'_, [u8]> {
        match self {
            Self::Kafka(record) => Cow::Borrowed(&record.value),
            Self::Sqs(message) => Cow::Borrowed(&message.body),
            Self::Kinesis(record) => Cow::Borrowed(&record.data),
            Self::DynamoDb(record) => Cow::Owned(record.body()),
        }
    }

    /// The record's key: Kafka's record key, Kinesis's partition key,
    /// DynamoDB Streams' item keys as JSON; `None` for SQS, and for a Kafka
    /// record without a key.
    pub fn key(&self) -> Option<Cow<'_, [u8]>> {
        match self {
            Self::Kafka(record) => record.key.as_deref().map(Cow::Borrowed),
            Self::Sqs(_) => None,
            Self::Kinesis(record) => Some(Cow::Borrowed(record.partition_key.as_bytes())),
            Self::DynamoDb(record) => Some(Cow::Owned(record.keys.to_string().into_bytes())),
        }
    }

    /// A named attribute: Kafka's last header of that name, an SQS message
    /// attribute's value (a String or Number's text, a Binary's bytes).
    pub fn attribute(&self, name: &str) -> Option<&[u8]> {
        match self {
            Self::Kafka(record) => record.header(name),
            Self::Sqs(message) => message.attribute(name).map(|a| a.value.as_slice()),
            Self::Kinesis(_) | Self::DynamoDb(_) => None,
        }
    }
}

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
    };
    Ok(Batch { source, units })
}

/// The record at `at` as `event` holds it (for a dead-letter message).
pub fn raw_record<'a>(event: &'a Value, at: &Coordinates) -> Option<&'a Value> {
    match &at.id {
        None => kafka::raw_record(event, at),
        Some(_) => records(event).get(usize::try_from(at.offset).ok()?),
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
        EventError::Malformed(format!(
            "{source} record {index} has no string {id_name}, so it could not be reported"
        ))
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
