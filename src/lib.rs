//! Exactly-once processing of Amazon MSK (Kafka) events on AWS Lambda, with
//! DynamoDB as the idempotency store.
//!
//! - [`store`]: the key state machine on DynamoDB (claim, take over, complete,
//!   fail, release, extend), every transition one conditional write.
//! - [`config`]: the store's settings.

pub mod clock;
pub mod config;
pub mod dynamo;
pub mod store;

pub use config::StoreConfig;
pub use store::{
    ClaimOutcome, ClaimRequest, IdempotencyStore, Lease, Status, StoreError, StoredItem,
};
