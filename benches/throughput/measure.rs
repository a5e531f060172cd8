//! Measuring a scenario: fresh instances and key prefixes per repetition,
//! requests and capacity units counted and time in DynamoDB Local summed per
//! row.

use std::collections::BTreeMap;
use std::time::Instant;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use exactly_once::engine::Work;
use exactly_once::lambda::Record;
use exactly_once::store::requests::RequestCounter;
use serde_json::Value;

use crate::Env;
use crate::batches::Batch;
use crate::capacity::{CapacityCounter, CapacityUnits};
use crate::latency::{ServiceTime, client_with};
use crate::processor::{Mode, Processor};
use crate::row::Row;

/// The scenario name of the warm-up, which BENCH_ONLY never skips.
pub const WARM_UP: &str = "warm-up";

/// What a scenario measures for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// New records, a fresh instance and key prefix per repetition.
    New,
    /// The batch processed once (not measured), then replayed to a fresh
    /// instance (cold cache), then to the instance that processed it (warm
    /// cache): two rows.
    Replay,
}

/// Counters of one row while it is measured.
struct Meter {
    counter: RequestCounter,
    capacity: CapacityCounter,
    served: ServiceTime,
    row: Row,
}

impl Meter {
    fn new(scenario: &'static str, mode: Mode, rtt_ms: u64) -> Self {
        Self {
            counter: RequestCounter::default(),
            capacity: CapacityCounter::default(),
            served: ServiceTime::default(),
            row: Row {
                scenario,
                mode,
                rtt_ms,
                records: 0,
                batch_ms: Vec::new(),
                requests: BTreeMap::new(),
                units: CapacityUnits::default(),
                served: (0, 0),
                overlaps: 0,
                refused: 0,
                failures: 0,
            },
        }
    }

    /// The run's client at a simulated round trip, with this row's counters
    /// attached.
    fn client(&self, env: &Env, rtt_ms: u64) -> Client {
        let client = client_with(&env.base, rtt_ms, &self.counter, &self.served);
        self.capacity.attach(&client)
    }

    async fn time(
        &mut self,
        processor: &Processor,
        batch: &Batch,
        event: &Value,
        works: &[Work<Record>],
    ) {
        self.counter.reset();
        self.capacity.reset();
        self.served.reset();
        let started = Instant::now();
        let unfinished = processor.process(batch, event, works).await;
        let row = &mut self.row;
        row.batch_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        row.records = batch.len();
        for (op, stats) in self.counter.stats() {
            *row.requests.entry(op).or_default() += stats.count;
        }
        row.units = row.units + self.capacity.total();
        let (requests, micros) = self.served.read();
        row.served = (row.served.0 + requests, row.served.1 + micros);
        let (overlaps, refused) = self.served.transactions();
        (row.overlaps, row.refused) = (row.overlaps + overlaps, row.refused + refused);
        row.failures += unfinished;
    }

    fn done(self) -> Row {
        let row = self.row;
        eprintln!(
            "  {:<22} {:<9} rtt {:>2} ms: p50 {:>9.1} ms  {:>6.3} req/record  {:>5.2} WCU/record  DynamoDB Local {:>5.1} ms/request  overlaps {} refused {}{}",
            row.scenario,
            row.mode.name(),
            row.rtt_ms,
            row.p(0.5),
            row.per_record(None),
            row.units_per_record().write,
            row.service_ms(),
            row.overlaps,
            row.refused,
            if row.failures > 0 {
                format!("  ({} records NOT finished)", row.failures)
            } else {
                String::new()
            }
        );
        row
    }
}

pub async fn measure(
    env: &Env,
    scenario: &'static str,
    make: &dyn Fn(&str) -> Batch,
    measure: Measure,
    mode: Mode,
    rtt_ms: u64,
    reps: usize,
) -> Vec<Row> {
    measure_grouped(env, scenario, make, measure, mode, rtt_ms, reps, None).await
}

/// [`measure`], with `MAX_RECORDS_PER_TRANSACTION` set to `group` (None:
/// the environment's, or the default).
#[allow(clippy::too_many_arguments)]
pub async fn measure_grouped(
    env: &Env,
    scenario: &'static str,
    make: &dyn Fn(&str) -> Batch,
    measure: Measure,
    mode: Mode,
    rtt_ms: u64,
    reps: usize,
    group: Option<usize>,
) -> Vec<Row> {
    let (cold_name, warm_name) = match measure {
        Measure::New => (scenario, scenario),
        Measure::Replay => (
            leak(format!("replay-cold-{scenario}")),
            leak(format!("replay-warm-{scenario}")),
        ),
    };
    let label = |name: &str| format!("{name}/{}/{rtt_ms}ms", mode.name());
    if scenario != WARM_UP && !env.selected(&label(cold_name)) && !env.selected(&label(warm_name)) {
        return Vec::new();
    }
    let mut cold = Meter::new(cold_name, mode, rtt_ms);
    let mut warm = Meter::new(warm_name, mode, rtt_ms);
    let cold_client = cold.client(env, rtt_ms);
    let warm_client = warm.client(env, rtt_ms);
    for _ in 0..reps {
        let tag = env.fresh_tag();
        let prefix = format!("bench-{tag}#");
        let batch = make(&tag);
        let (event, works) = (batch.event(), batch.works());
        match measure {
            Measure::New => {
                let processor = Processor::new(env, &cold_client, mode, &prefix, group);
                cold.time(&processor, &batch, &event, &works).await;
            }
            Measure::Replay => {
                let first = Processor::new(env, &warm_client, mode, &prefix, group);
                let unfinished = first.process(&batch, &event, &works).await;
                assert_eq!(unfinished, 0, "{scenario}: the first delivery must finish");
                let fresh = Processor::new(env, &cold_client, mode, &prefix, group);
                cold.time(&fresh, &batch, &event, &works).await;
                warm.time(&first, &batch, &event, &works).await;
            }
        }
    }
    match measure {
        Measure::New => vec![cold.done()],
        Measure::Replay => vec![cold.done(), warm.done()],
    }
}

fn leak(text: String) -> &'static str {
    Box::leak(text.into_boxed_str())
}

/// Mean time of `n` sequential GetItem calls at a simulated round trip, and
/// the mean part of it spent in DynamoDB Local.
pub async fn get_item_ms(env: &Env, rtt_ms: u64, n: u32) -> (f64, f64) {
    let served = ServiceTime::default();
    let client = client_with(&env.base, rtt_ms, &RequestCounter::default(), &served);
    let started = Instant::now();
    for i in 0..n {
        client
            .get_item()
            .table_name(&env.idempotency_table)
            .key("pk", AttributeValue::S(format!("bench-rtt-check-{i}")))
            .send()
            .await
            .expect("GetItem");
    }
    let (requests, micros) = served.read();
    (
        started.elapsed().as_secs_f64() * 1000.0 / f64::from(n),
        micros as f64 / 1000.0 / requests.max(1) as f64,
    )
}
