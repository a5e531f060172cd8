//! Real processes: the shipped `msk-handler` binary and workers of this
//! binary started, killed (SIGKILL, SIGSTOP) and raced against each other,
//! behind Runtime API stand-ins, `cargo lambda watch`, proxies that cut or
//! slow a store, real brokers and a restarted server. `infra/test-area.sh
//! processes` runs each module on its own: a module restarts a server or
//! measures a store, which no other test may disturb.

#[path = "../support/mod.rs"]
mod support;

mod brokers;
mod clock;
mod concurrency;
mod flaky_start;
mod kafka;
mod kafka_out;
mod kill;
mod lambda_e2e;
mod overlap;
mod postgres_faults;
mod redis_faults;
mod run;
mod scopes;
mod slow_store;
mod sources;
