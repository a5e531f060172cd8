//! Exactly-once processing of Kafka events (Amazon MSK, self-managed Kafka)
//! on AWS Lambda, and of SQS (standard and FIFO), Kinesis and DynamoDB
//! Streams events through the same engine. Every record's idempotency key is claimed with ONE
//! conditional write in the idempotency store (DynamoDB by default,
//! PostgreSQL or Redis), its work runs once, and its completion is fenced
//! on version + owner; Lambda is answered with the records that did not
//! finish, so nothing is lost and only what is needed comes again.
//!
//! # Your own handler
//!
//! ```toml
//! [dependencies]
//! # Not on crates.io yet: point it at a checkout, { path = "../msk-exactly-once" }.
//! exactly-once = "0.1"
//! serde = { version = "1", features = ["derive"] }
//! serde_json = "1"
//! tokio = { version = "1", features = ["macros"] }
//!
//! # The release profile the project's sizes are measured with: thin LTO,
//! # stripped (cargo's default profile builds a larger binary).
//! [profile.release]
//! lto = "thin"
//! codegen-units = 4
//! strip = true
//! ```
//!
//! ```no_run
//! use exactly_once::prelude::*;
//!
//! /// A payment as the producers write it.
//! #[derive(serde::Deserialize)]
//! struct Payment {
//!     payment_id: String,
//!     account_id: String,
//!     amount_cents: i64,
//! }
//!
//! /// Adds each payment to its account's balance, once per idempotency key.
//! struct Ledger {
//!     table: String,
//! }
//!
//! // Generic over the store's effect: runs on DynamoDB, PostgreSQL and Redis.
//! impl<E: Send + Sync + 'static> RecordHandler<E> for Ledger {
//!     type Record = Record;
//!
//!     fn commit_path(&self) -> CommitPath {
//!         // No side effect of its own: the increment below commits in ONE
//!         // transaction with the key's COMPLETED item (no claim, no lock).
//!         CommitPath::LockFree
//!     }
//!
//!     async fn handle(
//!         &self,
//!         _: &FencingToken,
//!         record: &Record,
//!     ) -> Result<Completion<E>, HandlerError> {
//!         let payment: Payment = serde_json::from_slice(&record.body())
//!             // Permanent: stored FAILED, never retried; names no value.
//!             .map_err(|e| HandlerError::Permanent(format!("not a payment: {}", json_error(&e))))?;
//!         let credit = Increment::new(&self.table, "account_id", &payment.account_id)
//!             .add("balance_cents", payment.amount_cents);
//!         Ok(Completion::done(format!("paid {}", payment.payment_id)).increment(credit))
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), StartError> {
//!     let table = required_var("LEDGER_TABLE")?;
//!     exactly_once::run(Ledger { table }).await
//! }
//!
//! #[cfg(test)]
//! mod tests;
//! ```
//!
//! [`run`] reads the function's environment (`IDEMPOTENCY_TABLE`,
//! `IDEMPOTENCY_STORE`, ...), connects the store and serves the handler.
//!
//! # Cargo features
//!
//! | feature | what it adds |
//! | --- | --- |
//! | `dynamodb` (default) | the DynamoDB store ([`dynamodb`]) |
//! | `postgres` | the PostgreSQL store (`exactly_once::postgres`) |
//! | `redis` | the Redis store and the shared duplicate cache (`exactly_once::redis`) |
//! | `avro`, `protobuf` | values framed by a schema registry ([`schema`]) |
//! | `opentelemetry` | spans over OTLP/HTTP (`TRACING_EXPORT=otlp`) |
//! | `sqs` | the SQS dead-letter queue (`DEAD_LETTER_QUEUE_URL`) |
//! | `conformance` | the store conformance suite (`exactly_once::store::conformance`) |
//! | `full` | all but `conformance` |
//!
//! (The modules of features a build leaves out are not in its
//! documentation; docs.rs documents every feature.) A variable that asks
//! for a part the build leaves out stops the function at start, naming the
//! feature; [`features::needed`] says which an environment asks for.
//! (`DEAD_LETTER_QUEUE_URL`, which the shipped and generated templates set
//! for their parked-records queue, needs `sqs`.)
//!
//! # Where things are
//!
//! - [`prelude`]: what a handler writer needs.
//! - [`run`], [`run_with`]: the function, as the environment configures
//!   it; [`Backend`]: the store it connected.
//! - [`engine`], [`lambda`]: the pieces `run` wires, for those who wire
//!   them themselves ([`engine::Engine`], [`lambda::BatchFunction`]).
//! - [`store`]: the store trait and what a store implementer needs;
//!   [`store::memory::MemoryStore`] for unit tests of a handler.
//!
//! # Examples
//!
//! - `examples/payment_api.rs`: the locking path, a payment API charged
//!   once per key (its fencing token as the API's idempotency key).
//! - `examples/transactional.rs`: DynamoDB writes committed with the key's
//!   completion, lock-free ([`dynamodb::only`]).
//! - `examples/postgres_receipts.rs`: SQL statements committed with the
//!   completion, on PostgreSQL.
//! - `examples/redis_counters.rs`: increments of Redis hashes committed
//!   with the completion.
//! - `examples/record_metadata.rs`: a handler reading the whole record
//!   (headers, key, coordinates), unit-tested on the in-memory store.
//! - `examples/schema_registry.rs`: Avro and Protobuf values framed by a
//!   schema registry.

#![deny(missing_docs)]

#[cfg(any(
    feature = "dynamodb",
    feature = "postgres",
    feature = "sqs",
    feature = "sns",
    feature = "eventbridge",
    feature = "kinesis",
    feature = "kafka"
))]
pub mod aws;
#[cfg(any(feature = "dynamodb", feature = "postgres", feature = "redis"))]
mod backend;
mod error;
pub mod features;
#[cfg(any(feature = "dynamodb", feature = "postgres", feature = "redis"))]
mod function;
#[cfg(any(feature = "dynamodb", feature = "postgres", feature = "redis"))]
mod init_error;
pub mod prelude;
#[cfg(any(feature = "dynamodb", feature = "postgres", feature = "redis"))]
mod run;
#[cfg(any(feature = "dynamodb", feature = "postgres", feature = "redis"))]
mod serve;

#[cfg(any(feature = "dynamodb", feature = "postgres", feature = "redis"))]
pub use backend::{Backend, Patience};
pub use error::{BoxError, StartError};
#[cfg(any(feature = "dynamodb", feature = "postgres", feature = "redis"))]
pub use function::Function;
#[cfg(any(feature = "dynamodb", feature = "postgres", feature = "redis"))]
pub use run::{run, run_with};
#[cfg(any(feature = "dynamodb", feature = "postgres", feature = "redis"))]
pub use serve::{Only, Serve};

pub use exactly_once_core::{clock, config, engine, outbox, redact};
/// The Lambda edge for every batch source (Kafka, SQS, Kinesis, DynamoDB
/// Streams): decoding, keys, fingerprints, settings, the partial batch
/// response, metrics, dead letters, spans.
pub use exactly_once_lambda as lambda;
pub use exactly_once_lambda::schema;
/// The Lambda runtime this crate is built with.
pub use lambda_runtime;
/// The OpenTelemetry SDK this crate is built with (feature
/// `opentelemetry`).
#[cfg(feature = "opentelemetry")]
pub use opentelemetry_sdk;

/// The key state machine every store implements, and what a store
/// implementer needs: [`store::Store`] (the engine's transitions),
/// [`store::Operator`] (listings and the operator's transitions), the
/// items and their judge, the in-memory store, and (feature
/// `conformance`) the suite that holds a store to the same semantics as
/// the others (`conformance_suite!`, `operator_conformance_suite!`).
pub mod store {
    pub use exactly_once_core::store::*;
    #[cfg(feature = "conformance")]
    pub use exactly_once_core::{conformance_suite, operator_conformance_suite};
}

/// The DynamoDB store (feature `dynamodb`).
#[cfg(feature = "dynamodb")]
pub mod dynamodb {
    pub use exactly_once_dynamodb::*;

    /// `handler`, whose effects are DynamoDB writes (`TransactWriteItem`s),
    /// for [`run`](crate::run) on DynamoDB alone: on another store the
    /// function stops at start ([`StartError::WrongStore`](crate::StartError::WrongStore)).
    pub fn only<H>(handler: H) -> crate::Only<DynamoDbStore, H> {
        crate::Only::new(handler)
    }
}

/// The PostgreSQL store (feature `postgres`).
#[cfg(feature = "postgres")]
pub mod postgres {
    pub use crate::backend::{START_CHECK_BUDGET, check_schema};
    pub use exactly_once_postgres::*;

    /// `handler`, whose effects are SQL statements ([`SqlEffect`]), for
    /// [`run`](crate::run) on PostgreSQL alone.
    pub fn only<H>(handler: H) -> crate::Only<PostgresStore, H> {
        crate::Only::new(handler)
    }
}

/// The Redis store and the duplicate cache every container shares
/// (feature `redis`).
#[cfg(feature = "redis")]
pub mod redis {
    pub use exactly_once_redis::*;

    /// `handler`, whose effects are Redis writes ([`RedisEffect`]), for
    /// [`run`](crate::run) on Redis alone.
    pub fn only<H>(handler: H) -> crate::Only<RedisStore, H> {
        crate::Only::new(handler)
    }
}

/// The manual's pages with Rust snippets (docs/), each the documentation of
/// an item that exists only when rustdoc collects doctests: `cargo test
/// --doc` compiles every ```rust block of them (hidden `# ` lines included)
/// against this crate with the features of its tests (`full`,
/// `conformance`).
#[cfg(doctest)]
pub mod manual {
    /// docs/handlers.md
    #[doc = include_str!("../docs/handlers.md")]
    pub struct Handlers;

    /// docs/schema-registry.md
    #[doc = include_str!("../docs/schema-registry.md")]
    pub struct SchemaRegistry;

    /// docs/stores.md
    #[doc = include_str!("../docs/stores.md")]
    pub struct Stores;

    /// docs/sources.md
    #[doc = include_str!("../docs/sources.md")]
    pub struct Sources;

    /// docs/outbox.md
    #[doc = include_str!("../docs/outbox.md")]
    pub struct Outbox;

    /// docs/local.md
    #[doc = include_str!("../docs/local.md")]
    pub struct Local;
}
