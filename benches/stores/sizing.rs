//! The default configuration on PostgreSQL and Redis, warmed, on every
//! commit path, beside DynamoDB's rows against Powertools
//! (`benches/throughput/sizing.rs`): per store, path, scenario and round
//! trip, [`CONTAINERS`] new containers each process a first batch (its
//! sizes where a new container starts them) and then the measured ones,
//! its sizes going on from where they stood. A row's first batch is the
//! p50 of its containers' first batches, its p50 that of every measured
//! batch: one first batch alone is as noisy as any single batch. Writes
//! `bench/sizing-stores.csv`, which the throughput benchmark's table reads.

use std::path::Path;

use exactly_once::lambda::{BatchFunction, OrderingMode};
use exactly_once::store::Operator;
use ledger::{LedgerHandler, LedgerMode};

use crate::{Backend, Scenario, Servers, deliver_to, function};

/// One store's row: a warm container's batches.
pub struct SizedRow {
    backend: Backend,
    scenario: Scenario,
    mode: LedgerMode,
    rtt_ms: u64,
    batch_ms: Vec<f64>,
    first_ms: f64,
    round_trips: u64,
}

impl SizedRow {
    fn p50(&self) -> f64 {
        crate::p50(&self.batch_ms)
    }
}

/// New containers per row.
const CONTAINERS: usize = 3;

/// The hot account and the 200 accounts on `backend`, behind the proxies
/// `round_trips` counts at.
pub async fn rows(
    servers: &Servers,
    backend: Backend,
    rtt_ms: u64,
    reps: usize,
    round_trips: &dyn Fn() -> u64,
    tag: &mut dyn FnMut() -> String,
) -> Vec<SizedRow> {
    let mut rows = Vec::new();
    let paths = [
        LedgerMode::LockFree,
        LedgerMode::Transactional,
        LedgerMode::Direct,
    ];
    for (mode, scenario) in paths
        .into_iter()
        .flat_map(|mode| [(mode, Scenario::Hot), (mode, Scenario::New)])
    {
        let ordering = OrderingMode::Partition;
        let mut row = SizedRow {
            backend,
            scenario,
            mode,
            rtt_ms,
            batch_ms: Vec::new(),
            first_ms: 0.0,
            round_trips: 0,
        };
        let mut firsts = Vec::new();
        for _ in 0..CONTAINERS {
            let prefix = format!("{}#", tag());
            let first = match backend {
                Backend::Redis => {
                    let (store, handler) = servers.redis(mode, &prefix);
                    let function = function(store, handler, None, ordering);
                    warm_container(&function, &mut row, reps, round_trips, tag).await
                }
                Backend::Postgres | Backend::PostgresCached => {
                    let (store, handler) = servers.postgres(mode, &prefix);
                    let function = function(store, handler, None, ordering);
                    warm_container(&function, &mut row, reps, round_trips, tag).await
                }
            };
            firsts.push(first);
        }
        row.first_ms = crate::p50(&firsts);
        eprintln!(
            "  default sizing {} {} {} {rtt_ms} ms: p50 {:.0} ms (first batch {:.0} ms), {:.3} round trips/record",
            backend.name(),
            scenario.name(),
            path(mode),
            row.p50(),
            row.first_ms,
            row.round_trips as f64 / (1000 * row.batch_ms.len()) as f64
        );
        rows.push(row);
    }
    rows
}

/// A new container's first batch (its time, returned), then `reps`
/// measured ones (into `row`).
async fn warm_container<S: Operator>(
    function: &BatchFunction<LedgerHandler, S>,
    row: &mut SizedRow,
    reps: usize,
    round_trips: &dyn Fn() -> u64,
    tag: &mut dyn FnMut() -> String,
) -> f64 {
    let first = deliver_to(function, &row.scenario.batch(&tag())).await;
    for _ in 0..reps {
        let batch = row.scenario.batch(&tag());
        let before = round_trips();
        row.batch_ms.push(deliver_to(function, &batch).await);
        row.round_trips += round_trips() - before;
    }
    first
}

/// `bench/sizing-stores.csv`: the rows in the columns the throughput
/// benchmark's table reads.
pub fn write(rows: &[SizedRow], out: &Path) {
    let mut csv = String::from(
        "store,scenario,rtt_ms,repetitions,p50_ms,first_batch_ms,requests_per_record\n",
    );
    for row in rows {
        csv.push_str(&format!(
            "{},{}/{},{},{},{:.1},{:.1},{:.4}\n",
            row.backend.name(),
            row.scenario.name(),
            path(row.mode),
            row.rtt_ms,
            row.batch_ms.len(),
            row.p50(),
            row.first_ms,
            row.round_trips as f64 / (1000 * row.batch_ms.len()) as f64
        ));
    }
    std::fs::write(out.join("sizing-stores.csv"), csv).expect("write sizing-stores.csv");
}

/// The commit path of `mode`, as the tables name it.
fn path(mode: LedgerMode) -> &'static str {
    match mode {
        LedgerMode::LockFree => "lock-free",
        LedgerMode::Transactional => "transactional",
        LedgerMode::Direct => "direct",
    }
}
