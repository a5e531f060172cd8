//! Exactly-once processing of Amazon MSK (Kafka) events on AWS Lambda, with
//! DynamoDB as the default idempotency store.
//!
//! - [`store`]: the key state machine ([`store::Store`]: claim, take over,
//!   complete, fail, release, extend, the lock-free commit), every transition
//!   one conditional write; backends in [`store::dynamodb`] and
//!   [`store::memory`].
//! - [`engine`]: runs a batch of messages through the store and the business
//!   logic ([`engine::RecordHandler`]); knows nothing of Kafka.
//! - [`lambda`]: the edge for MSK events: decoding, keys, the partial batch
//!   response, configuration from the environment.
//! - [`schema`]: values framed by a schema registry (Confluent, AWS Glue),
//!   read as Avro or Protobuf with a schema the function ships.
//!
//! A team depends on these four and writes its handler and a ten-line
//! `main` (see `examples/`). The demo ledger (`ledger`) and the operator
//! tool (`ops`) are the shipped binaries' own code, public only so that the
//! binaries and the tests can reach them: not part of the library's API.

#![warn(missing_docs)]

pub mod clock;
pub mod config;
pub mod dynamo;
pub mod engine;
pub mod lambda;
#[doc(hidden)]
pub mod ledger;
#[doc(hidden)]
pub mod ops;
pub mod redact;
pub mod schema;
pub mod store;

pub use config::{LongKeyPolicy, StoreConfig, StoreKind};
pub use store::dynamodb::DynamoDbStore;
pub use store::memory::MemoryStore;
pub use store::postgres::PostgresStore;
pub use store::redis::RedisStore;
pub use store::{ClaimOutcome, ClaimRequest, Lease, Status, Store, StoreError, StoredItem};
