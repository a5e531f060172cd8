//! The Lambda edge for the batch sources Lambda delivers at least once:
//! Amazon MSK and self-managed Kafka, SQS (standard and FIFO), Kinesis,
//! DynamoDB Streams and Amazon MQ (RabbitMQ, ActiveMQ). Decode the event (the
//! source recognised from it), derive keys, run the engine, answer with the
//! source's partial batch response (Amazon MQ, which has none: an invocation
//! error while a message is unfinished, so the batch comes again whole).

#![deny(missing_docs)]

pub mod dead_letter;
pub mod destinations;
mod emf;
mod encode;
mod error;
mod fingerprint;
mod function;
mod invocation;
pub mod keys;
mod ordering;
mod record;
mod report;
mod response;
pub mod schema;
mod settings;
pub mod sources;
mod stuck_check;
pub mod telemetry;

pub use emf::METRICS_NAMESPACE;
pub use encode::encode_event;
pub use error::InvocationError;
pub use fingerprint::Fingerprint;
pub use function::{BatchFunction, MetricsWriter};
pub use invocation::{Invocation, RecordReport};
pub use ordering::OrderingMode;
pub use record::{KafkaRecord, SchemaMetadata};
pub use report::{KeyLogging, key_hash};
pub use response::{BatchItemFailure, BatchResponse, ItemIdentifier};
pub use settings::{DEFAULT_SAFETY_MARGIN, ENV_VARS, FunctionSettings, Settings, StoreKind};
pub use sources::{
    ActiveMqMessage, BasicProperties, Batch, Coordinates, Decoded, EventError, FromRecord,
    KinesisRecord, MessageAttribute, PropertyValue, RabbitMqMessage, Record, Source, SqsMessage,
    StreamRecord, decode_event,
};
pub use stuck_check::{SWEEP_AFTER, StartedKeys};

/// Every metric the function writes, by name: an invocation's documents
/// (the outcomes' counts included) and the scheduled stuck-key check's.
/// What alarms and dashboards may refer to.
pub fn metric_names() -> Vec<String> {
    report::metric_names()
        .chain(stuck_check::METRIC_NAMES.map(str::to_owned))
        .collect()
}
