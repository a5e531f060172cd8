//! The record of any source ([`Record`]), and what each source's record
//! answers ([`SourceRecord`], implemented in the source's own file):
//! [`Record`] dispatches to it once.

use std::borrow::Cow;

use super::Source;
use super::{ActiveMqMessage, KinesisRecord, RabbitMqMessage, SqsMessage, StreamRecord};
use crate::record::KafkaRecord;

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

/// What a source's own record answers, as [`Record`] asks it: each
/// source's file implements it for the record it delivers.
pub(crate) trait SourceRecord {
    /// The payload ([`Record::body`]).
    fn body(&self) -> Cow<'_, [u8]>;

    /// The record's key ([`Record::key`]); none by default.
    fn key(&self) -> Option<Cow<'_, [u8]>> {
        None
    }

    /// A named attribute ([`Record::attribute`]); none by default.
    fn attribute(&self, _name: &str) -> Option<&[u8]> {
        None
    }

    /// The names of its attributes ([`Record::attribute_names`]); none by
    /// default.
    fn attribute_names(&self) -> Vec<&str> {
        Vec::new()
    }

    /// The message's own id ([`Record::message_id`]); none by default.
    fn message_id(&self) -> Option<&str> {
        None
    }

    /// Where it was delivered from, as its span names it: a topic, a queue,
    /// a stream, a table.
    fn destination(&self) -> &str;
}

impl Record {
    /// The source that delivered it, and its record as that source's file
    /// reads it: the one dispatch over the variants.
    fn delivered(&self) -> (Source, &dyn SourceRecord) {
        match self {
            Self::Kafka(record) => (Source::Kafka, record),
            Self::Sqs(message) => (Source::Sqs, message),
            Self::Kinesis(record) => (Source::Kinesis, record),
            Self::DynamoDb(record) => (Source::DynamoDbStreams, record),
            Self::RabbitMq(message) => (Source::RabbitMq, message),
            Self::ActiveMq(message) => (Source::ActiveMq, message),
        }
    }

    /// Which source delivered it.
    pub fn source(&self) -> Source {
        self.delivered().0
    }

    /// The payload: Kafka's value, SQS's body, Kinesis's and Amazon MQ's
    /// data, DynamoDB Streams' new image as JSON (`{"N":"5"}` is `5`; a
    /// `REMOVE`'s old image, or the keys on a `KEYS_ONLY` stream).
    pub fn body(&self) -> Cow<'_, [u8]> {
        self.delivered().1.body()
    }

    /// The record's key: Kafka's record key, Kinesis's partition key,
    /// DynamoDB Streams' item keys as JSON, an Amazon MQ message's JMS
    /// message group ([`MESSAGE_GROUP`]: an ActiveMQ property, a RabbitMQ
    /// header); `None` for SQS, and for a record without one.
    pub fn key(&self) -> Option<Cow<'_, [u8]>> {
        self.delivered().1.key()
    }

    /// A named attribute: Kafka's last header of that name, an SQS message
    /// attribute's value (a String or Number's text, a Binary's bytes), a
    /// RabbitMQ header's or an ActiveMQ property's (an AMQP string's bytes,
    /// a string's, a number's text).
    pub fn attribute(&self, name: &str) -> Option<&[u8]> {
        self.delivered().1.attribute(name)
    }

    /// The names of its attributes ([`Self::attribute`]).
    pub fn attribute_names(&self) -> Vec<&str> {
        self.delivered().1.attribute_names()
    }

    /// The message's own id, on the sources whose messages have one: SQS's
    /// `messageId` (SQS's, new on each send), RabbitMQ's `messageId`
    /// property (the producer's, when it sets one), ActiveMQ's `messageID`
    /// (the JMS client's, new on each send). `None` for Kafka, Kinesis and
    /// DynamoDB Streams, whose records are named by where they are.
    pub fn message_id(&self) -> Option<&str> {
        self.delivered().1.message_id()
    }

    /// Where it was delivered from: Kafka's topic, SQS's and RabbitMQ's
    /// queue, Kinesis's stream, DynamoDB Streams' table, ActiveMQ's
    /// destination.
    pub(crate) fn destination(&self) -> &str {
        self.delivered().1.destination()
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

/// One source's own record type, as a handler's `Record` (each source's
/// file says it of its record).
macro_rules! one_source {
    ($type:ty, $variant:ident, $source:ident) => {
        impl $crate::sources::FromRecord for $type {
            fn accepts(source: $crate::sources::Source) -> bool {
                source == $crate::sources::Source::$source
            }

            fn from_record(record: $crate::sources::Record) -> Option<Self> {
                match record {
                    $crate::sources::Record::$variant(record) => Some(record),
                    _ => None,
                }
            }
        }
    };
}

pub(super) use one_source;
