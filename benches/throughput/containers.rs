//! Many invocations per container (Lambda Managed Instances) against as
//! many single-invocation containers: the same batches, at once, on the
//! same DynamoDB Local at the same simulated round trip. One container
//! shares its connections, its warm cache, its holds on items in flight and
//! its `MAX_IN_FLIGHT` permits among its invocations; separate containers
//! share nothing.

use std::time::{Duration, Instant};

use exactly_once::store::requests::RequestCounter;
use futures_util::future::join_all;

use crate::Env;
use crate::batches::Batch;
use crate::latency::{ServiceTime, client_with};
use crate::processor::{Mode, Processor};

/// Invocations at once.
const CONCURRENCY: [usize; 3] = [1, 4, 8];
/// Records of each invocation's batch (2 partitions, its own accounts).
const RECORDS: usize = 250;
const RTT_MS: u64 = 5;

/// One measured setup.
pub struct ContainersRow {
    pub mode: Mode,
    pub invocations: usize,
    /// `true`: one container serves them all; `false`: one container each.
    pub shared: bool,
    /// Wall time of each repetition (every batch answered), ms.
    pub wall_ms: Vec<f64>,
    /// Each invocation's own time, ms.
    pub batch_ms: Vec<f64>,
    pub requests: u64,
    pub records: usize,
    pub unfinished: usize,
}

impl ContainersRow {
    fn p(values: &[f64], q: f64) -> f64 {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    pub fn records_per_s(&self) -> f64 {
        (self.invocations * RECORDS) as f64 / (Self::p(&self.wall_ms, 0.5) / 1000.0)
    }

    pub fn requests_per_record(&self) -> f64 {
        self.requests as f64 / self.records.max(1) as f64
    }

    pub fn p99_batch_ms(&self) -> f64 {
        Self::p(&self.batch_ms, 0.99)
    }

    fn setup(&self) -> String {
        match self.shared {
            true => format!("1 container, {} at once", self.invocations),
            false => format!("{} containers, 1 each", self.invocations),
        }
    }
}

/// Every setup, in both commit paths.
pub async fn run(env: &Env) -> Vec<ContainersRow> {
    let mut rows = Vec::new();
    for mode in [Mode::LockFreePartition, Mode::Partition] {
        for invocations in CONCURRENCY {
            for shared in [true, false] {
                if invocations == 1 && !shared {
                    continue; // the same as one container serving one
                }
                let label = format!("containers-{invocations}/{}/{RTT_MS}ms", mode.name());
                if !env.selected(&label) {
                    continue;
                }
                let row = measure(env, mode, invocations, shared).await;
                eprintln!(
                    "  {:<28} {:<18} {:>8.0} rec/s  {:>6.3} req/record  p99 batch {:>7.1} ms{}",
                    row.setup(),
                    mode.name(),
                    row.records_per_s(),
                    row.requests_per_record(),
                    row.p99_batch_ms(),
                    match row.unfinished {
                        0 => String::new(),
                        n => format!("  ({n} records NOT finished)"),
                    }
                );
                rows.push(row);
            }
        }
    }
    rows
}

async fn measure(env: &Env, mode: Mode, invocations: usize, shared: bool) -> ContainersRow {
    let counter = RequestCounter::default();
    let client = client_with(&env.base, RTT_MS, &counter, &ServiceTime::default());
    let mut row = ContainersRow {
        mode,
        invocations,
        shared,
        wall_ms: Vec::new(),
        batch_ms: Vec::new(),
        requests: 0,
        records: 0,
        unfinished: 0,
    };
    for _ in 0..env.reps(3) {
        let tag = env.fresh_tag();
        let prefix = format!("bench-{tag}#");
        let batches: Vec<Batch> = (0..invocations)
            .map(|i| Batch::new_payments(&format!("{tag}-{i}"), RECORDS, 2))
            .collect();
        let events: Vec<_> = batches.iter().map(|b| (b.event(), b.works())).collect();
        let containers: Vec<Processor> = match shared {
            true => vec![Processor::new(env, &client, mode, &prefix, None)],
            false => (0..invocations)
                .map(|_| Processor::new(env, &client, mode, &prefix, None))
                .collect(),
        };
        counter.reset();
        let started = Instant::now();
        let timed = join_all(batches.iter().zip(&events).enumerate().map(
            |(i, (batch, (event, works)))| {
                let container = &containers[i % containers.len()];
                async move {
                    let started = Instant::now();
                    let unfinished = container.process(batch, event, works).await;
                    (started.elapsed(), unfinished)
                }
            },
        ))
        .await;
        row.wall_ms.push(ms(started.elapsed()));
        for (elapsed, unfinished) in timed {
            row.batch_ms.push(ms(elapsed));
            row.unfinished += unfinished;
        }
        row.requests += counter.total();
        row.records += invocations * RECORDS;
    }
    row
}

fn ms(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}

/// The rows as a Markdown table.
pub fn table(rows: &[ContainersRow]) -> String {
    let mut out = format!(
        "| {RECORDS} new payments per invocation, {RTT_MS} ms RTT | path | records/s | requests / record | p99 batch |\n\
         | --- | --- | --- | --- | --- |\n"
    );
    for row in rows {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.3} | {:.0} ms |\n",
            row.setup(),
            row.mode.name(),
            row.records_per_s(),
            row.requests_per_record(),
            row.p99_batch_ms()
        ));
    }
    out
}

/// The rows as CSV.
pub fn csv(rows: &[ContainersRow]) -> String {
    let mut out =
        "invocations,shared_container,mode,rtt_ms,records_per_s,requests_per_record,p99_batch_ms\n"
            .to_owned();
    for row in rows {
        out.push_str(&format!(
            "{},{},{},{RTT_MS},{:.1},{:.4},{:.1}\n",
            row.invocations,
            row.shared,
            row.mode.name(),
            row.records_per_s(),
            row.requests_per_record(),
            row.p99_batch_ms()
        ));
    }
    out
}
