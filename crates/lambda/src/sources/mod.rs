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
//! Each source's file holds what the source knows: its facts (an `Edge`:
//! names, `eventSource` values, how its event holds its records, whether it
//! has a partial batch response), filled in once, and the behaviour of its
//! record (`SourceRecord`: body, key, attributes). [`Source`] and
//! [`Record`] dispatch to them, once each.
//!
//! Records are read field by field, so that an error names the field and
//! never echoes a value: keys, attributes and payloads stay out of logs.

mod activemq;
mod dynamodb_streams;
mod edge;
mod fields;
mod kafka;
mod kinesis;
mod properties;
mod rabbitmq;
mod record;
mod sqs;

use std::fmt;

use serde_json::Value;

pub use activemq::ActiveMqMessage;
pub use dynamodb_streams::{StreamRecord, unmarshal};
pub(crate) use edge::{Edge, Shape};
pub use kinesis::KinesisRecord;
pub use properties::PropertyValue;
pub use rabbitmq::{BasicProperties, RabbitMqMessage};
pub use record::{FromRecord, MESSAGE_GROUP, Record};
pub use sqs::{MessageAttribute, SqsMessage};

use fields::records;

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

    /// What the source knows of its events, from its own file: the one
    /// dispatch over the sources.
    pub(crate) fn edge(self) -> &'static Edge {
        match self {
            Self::Kafka => &kafka::EDGE,
            Self::Sqs => &sqs::EDGE,
            Self::Kinesis => &kinesis::EDGE,
            Self::DynamoDbStreams => &dynamodb_streams::EDGE,
            Self::RabbitMq => &rabbitmq::EDGE,
            Self::ActiveMq => &activemq::EDGE,
        }
    }

    /// Its name in `EVENT_SOURCES`, logs and messages (`kafka`, `sqs`,
    /// `kinesis`, `dynamodb-streams`, `rabbitmq`, `activemq`).
    pub fn name(self) -> &'static str {
        self.edge().name
    }

    /// Its name in prose: `Kafka`, `SQS`, `Kinesis`, `DynamoDB Streams`,
    /// `RabbitMQ`, `ActiveMQ`.
    pub fn title(self) -> &'static str {
        self.edge().title
    }

    /// Whether Lambda reads a partial batch response for it: every source
    /// but Amazon MQ, whose batch fails whole when a message is unfinished.
    pub fn has_partial_batch_response(self) -> bool {
        self.edge().partial_batch_response
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
            let this = source
                .as_str()
                .and_then(|text| Self::named(text, false))
                .ok_or_else(|| EventError::UnknownSource(source.to_string()))?;
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
        Self::named(event.get("eventSource").and_then(Value::as_str)?, true)
    }

    /// The source `text` (an `eventSource`) names, among those named at
    /// the event's top (`at_top`) or on each record.
    fn named(text: &str, at_top: bool) -> Option<Self> {
        Self::ALL.into_iter().find(|source| {
            let edge = source.edge();
            edge.at_top() == at_top && edge.event_sources.contains(&text)
        })
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
    let units = match source.map(|source| &source.edge().shape) {
        None => Vec::new(),
        Some(Shape::Top { decode, .. }) => decode(event)?,
        Some(Shape::Records { decode }) => decode(records(event))?,
    };
    Ok(Batch { source, units })
}

/// The record at `at` as `event` holds it (for a dead-letter message).
pub fn raw_record<'a>(event: &'a Value, at: &Coordinates) -> Option<&'a Value> {
    // Per parked record: the top of the event only, never its records.
    match Source::at_top(event).map(|source| &source.edge().shape) {
        Some(Shape::Top { raw_record, .. }) => raw_record(event, at),
        _ => records(event).get(usize::try_from(at.offset).ok()?),
    }
}

#[cfg(test)]
mod tests;
