//! The function in process, batch by batch: the real handler (`BatchFunction`
//! and the demo ledger) on events built as each source sends them, against
//! DynamoDB Local and the other servers `infra/test.sh` starts (the
//! in-memory store where a module says so), and the event-source
//! simulation. One module per subject; `infra/test-area.sh batch` runs each
//! module on its own, as its own binary did before.

#[path = "../support/mod.rs"]
mod support;

mod amazon_mq;
mod batch_sources;
mod contract;
mod corpus;
mod dead_letter;
mod decode_props;
mod duplicate_cache;
mod engine_memory;
mod handler;
mod hot_items;
mod lifecycle;
mod lock_free;
mod metrics;
mod outbox;
mod schema_registry;
mod secrets;
mod simulation;
mod throughput;
mod tracing;
mod transactional;
