//! The engine and the store trait of
//! [`exactly-once`](https://docs.rs/exactly-once), with no AWS, SQL or Redis
//! in it: teams depend on the facade crate `exactly-once`, which re-exports
//! what they need of this one.
//!
//! - [`store`]: the key state machine every backend implements
//!   ([`store::Store`]; [`store::Operator`] for the operator's transitions
//!   and listings), the items and their judge, the in-memory backend, and
//!   (feature `conformance`) the suite that holds a backend to the same
//!   semantics as the others.
//! - [`engine`]: runs a batch of messages through a store and the business
//!   logic ([`engine::RecordHandler`]); knows nothing of Kafka or of any one
//!   store.
//! - (feature `mutations`) `mutation`: guards weakened one at a time, for
//!   the model checker's tests.
//! - [`outbox`]: the messages a handler emits, kept on its COMPLETED item
//!   and sent after the commit under stable ids ([`outbox::Sender`]: the
//!   edge's).
//! - [`config`]: how the store names, locks and keeps items, and the helpers
//!   every reader of environment variables shares.

#![deny(missing_docs)]

/// Whether the guard mutation `$name` is active (feature `mutations`, for
/// the model checker's tests; `false` in every other build).
#[cfg(feature = "mutations")]
macro_rules! mutated {
    ($name:ident) => {
        $crate::mutation::active($crate::mutation::Mutation::$name)
    };
}
#[cfg(not(feature = "mutations"))]
macro_rules! mutated {
    ($name:ident) => {
        false
    };
}

pub mod clock;
pub mod config;
pub mod engine;
#[cfg(feature = "mutations")]
pub mod mutation;
pub mod outbox;
pub mod redact;
pub mod store;
