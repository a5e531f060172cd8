//! Where the messages a handler emits go (feature `sqs`): the engine keeps
//! them on the key's COMPLETED item and sends them after the commit
//! ([`exactly_once_core::outbox`]); this module is the edge that sends.
//! One destination kind per file: SQS queues (standard and FIFO) so far.

mod sqs;

pub use sqs::SqsSender;
