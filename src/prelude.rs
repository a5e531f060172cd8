//! What a handler writer needs, in one `use exactly_once::prelude::*;`:
//! the handler trait and what it is handed and returns, and `run`.
//!
//! A handler calling a payment API (docs/handlers.md shows it too):
//!
//! ```no_run
//! use exactly_once::prelude::*;
//! # // Yours: the payment type, and the payment API's client.
//! # #[derive(serde::Deserialize)] struct Payment { id: String }
//! # struct PaymentApi;
//! # impl PaymentApi {
//! #     async fn charge(&self, key: &str, p: &Payment) -> Result<String, String> { Ok(format!("{key} {}", p.id)) }
//! # }
//!
//! struct Payments { api: PaymentApi }
//!
//! // No writes for the store to commit: runs on every store.
//! impl<E: Send + Sync + 'static> RecordHandler<E> for Payments {
//!     type Record = Record; // any source's: Kafka, SQS, Kinesis, DynamoDB Streams
//!
//!     fn commit_path(&self) -> CommitPath {
//!         CommitPath::Locking // the effect is outside the store: claim, then call
//!     }
//!
//!     async fn handle(&self, token: &FencingToken, record: &Record) -> Result<Completion<E>, HandlerError> {
//!         let payment: Payment = serde_json::from_slice(&record.body())
//!             // Permanent: a poison record, stored FAILED. json_error names the
//!             // field and position, never the value (no card number in a log).
//!             .map_err(|e| HandlerError::Permanent(format!("not a payment: {}", json_error(&e))))?;
//!         // The same key for every delivery, takeover and release of this key:
//!         // the payment API applies the charge once.
//!         let receipt = self.api.charge(token.idempotency_key(), &payment).await
//!             .map_err(HandlerError::Retryable)?;
//!         Ok(Completion::done(receipt)) // stored (up to 64 KiB), given back to duplicates
//!     }
//!
//!     async fn on_duplicate(&self, record: &Record, result: Option<&str>) -> Result<(), HandlerError> {
//!         // A duplicate never runs `handle` again; a request-reply consumer
//!         // sends the stored reply again here.
//!         let _ = (record, result);
//!         Ok(())
//!     }
//! }
//! ```

pub use crate::StartError;
// From their module: `crate::run` is also the module's name, and rustdoc
// would list the re-export once per namespace.
#[cfg(any(feature = "dynamodb", feature = "postgres", feature = "redis"))]
pub use crate::run::{run, run_with};
pub use exactly_once_core::config::required_var;
pub use exactly_once_core::engine::{
    CommitPath, Completion, ConditionFailure, FencingToken, HandlerError, RecordHandler,
};
pub use exactly_once_core::outbox::Message;
pub use exactly_once_core::redact::json_error;
pub use exactly_once_core::store::Increment;
pub use exactly_once_lambda::{KafkaRecord, Record};
