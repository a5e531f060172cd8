//! The stores: the conformance suite of the key state machine on DynamoDB
//! Local, PostgreSQL, Redis (and a Redis Cluster) and the in-memory backend,
//! each store's own behaviour and faults, the demo function on each store,
//! and the operator tool on each. `infra/test-area.sh stores` runs each
//! module on its own.

#[path = "../support/mod.rs"]
mod support;

mod ledger_stores;
mod ops;
mod ops_postgres;
mod ops_redis;
mod postgres_connect;
mod store;
mod store_memory;
mod store_postgres;
mod store_redis;
mod stuck_cost;
