//! Announcing every payment (exactly once out): 1,000 new payments over 4
//! partitions to 200 accounts, each applied payment announced to an SQS
//! queue (the ledger's `with_events`, one message per payment), against AWS
//! Powertools' idempotency with a `send_message` in the idempotent function
//! (`benches/powertools/bench.py --scenarios announce-1000x4p`, which
//! writes `bench/powertools-announce.csv`).
//!
//! The default configuration; each batch a new container whose messages go
//! to a new queue on the local SQS (moto's server, or benches/sqs_constant.py: AWS_ENDPOINT_URL_SQS)
//! through the function's `SqsSender`, whose client adds the same simulated
//! round trip to every SQS request as the bench adds to DynamoDB's. Counts
//! DynamoDB requests by operation (`RequestCounter`) and SQS requests
//! (every HTTP request the sender's client sends), and checks after each
//! batch that its queue holds one message per payment.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use exactly_once::lambda::destinations::SqsSender;
use exactly_once::store::requests::RequestCounter;

use crate::Env;
use crate::batches::Batch;
use crate::latency::{ServiceTime, client_with, sqs_client_with};
use crate::processor::{Mode, Processor};
use crate::sizing::csv_rows;

/// The scenario's name, as Powertools' CSV has it.
pub const SCENARIO: &str = "announce-1000x4p";

/// The paths measured: lock-free, and the locking path with the effect in
/// the completion's transaction.
const PATHS: [Mode; 2] = [Mode::LockFreePartition, Mode::Partition];

/// The round trip of the comparison.
const RTT_MS: u64 = 5;

/// One path's measured batches.
pub struct AnnounceRow {
    pub mode: Mode,
    pub records: usize,
    pub batch_ms: Vec<f64>,
    /// DynamoDB requests of the measured batches, by operation.
    pub dynamodb: BTreeMap<String, u64>,
    /// SQS requests of the measured batches.
    pub sqs: u64,
    /// Time the SQS requests spent in the SQS server (without the
    /// simulated round trip), summed over the batches, ms.
    pub sqs_served_ms: f64,
    /// Messages the queues held after their batch, and those expected (one
    /// per payment).
    pub queued: (u64, u64),
    pub unfinished: usize,
}

impl AnnounceRow {
    fn sorted(&self) -> Vec<f64> {
        let mut sorted = self.batch_ms.clone();
        sorted.sort_by(f64::total_cmp);
        sorted
    }

    pub fn p50(&self) -> f64 {
        let sorted = self.sorted();
        sorted[(sorted.len() - 1) / 2]
    }

    /// Nearest rank: with few repetitions, the slowest.
    pub fn p99(&self) -> f64 {
        let sorted = self.sorted();
        let rank = ((sorted.len() as f64 * 0.99).ceil() as usize).max(1);
        sorted[rank - 1]
    }

    fn measured_records(&self) -> f64 {
        (self.records * self.batch_ms.len()).max(1) as f64
    }

    pub fn dynamodb_per_record(&self) -> f64 {
        self.dynamodb.values().sum::<u64>() as f64 / self.measured_records()
    }

    pub fn sqs_per_record(&self) -> f64 {
        self.sqs as f64 / self.measured_records()
    }
}

/// The rows BENCH_ONLY selects (`announce/new-1000x4p/<mode>/5ms`).
pub async fn run(env: &Env) -> Vec<AnnounceRow> {
    let mut rows = Vec::new();
    for mode in PATHS {
        let label = format!("announce/new-1000x4p/{}/{RTT_MS}ms", mode.name());
        if !env.selected(&label) {
            continue;
        }
        rows.push(measure(env, mode, env.reps(3)).await);
    }
    rows
}

async fn measure(env: &Env, mode: Mode, reps: usize) -> AnnounceRow {
    let counter = RequestCounter::default();
    let client = client_with(&env.base, RTT_MS, &counter, &ServiceTime::default());
    let plain_sqs = aws_sdk_sqs::Client::new(&exactly_once::aws::sdk_config().await);
    let sqs_served = ServiceTime::default();
    let sqs = sqs_client_with(&plain_sqs, RTT_MS, &sqs_served);
    let mut row = AnnounceRow {
        mode,
        records: 0,
        batch_ms: Vec::new(),
        dynamodb: BTreeMap::new(),
        sqs: 0,
        sqs_served_ms: 0.0,
        queued: (0, 0),
        unfinished: 0,
    };
    // On moto, a new queue a batch: its server takes longer per message the
    // more its queue holds (about 12 ms a SendMessage on an empty queue,
    // 160 ms on one of 4,000), which SQS does not. So a new container a
    // batch too (the ledger's queue is fixed), as in the throughput
    // table: its groups start where a new container's do. On an SQS that
    // answers in constant time (ANNOUNCE_SQS=constant:
    // benches/sqs_constant.py), one queue and one warm container, warmed
    // by a batch first, as Powertools' function is.
    let warm = std::env::var("ANNOUNCE_SQS").is_ok_and(|sqs| sqs == "constant");
    let container = async || {
        let tag = env.fresh_tag();
        let queue = plain_sqs
            .create_queue()
            .queue_name(format!("bench-announce-{tag}"))
            .send()
            .await
            .expect("create the queue (is AWS_ENDPOINT_URL_SQS set?)");
        let url = queue.queue_url().expect("a queue URL").to_owned();
        let processor = Processor::announcing(
            env,
            &client,
            mode,
            &format!("bench-{tag}#"),
            None,
            Some((url.clone(), Arc::new(SqsSender::new(sqs.clone())))),
        );
        (url, processor)
    };
    let mut warmed = None;
    if warm {
        let (url, processor) = container().await;
        let batch = Batch::new_payments(&env.fresh_tag(), 1000, 4);
        processor
            .process(&batch, &batch.event(), &batch.works())
            .await;
        warmed = Some((url, processor));
    }
    for _ in 0..reps {
        let fresh;
        let (url, processor) = match &warmed {
            Some((url, processor)) => (url, processor),
            None => {
                fresh = container().await;
                (&fresh.0, &fresh.1)
            }
        };
        let batch = Batch::new_payments(&env.fresh_tag(), 1000, 4);
        row.records = batch.len();
        let (event, works) = (batch.event(), batch.works());
        let held_before = queued(&plain_sqs, url).await;
        counter.reset();
        sqs_served.reset();
        let started = Instant::now();
        row.unfinished += processor.process(&batch, &event, &works).await;
        row.batch_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        for (op, stats) in counter.stats() {
            *row.dynamodb.entry(op).or_default() += stats.count;
        }
        let (requests, micros) = sqs_served.read();
        row.sqs += requests;
        row.sqs_served_ms += micros as f64 / 1000.0;
        row.queued.1 += batch.len() as u64;
        row.queued.0 += queued(&plain_sqs, url).await - held_before;
        if warmed.is_none() {
            let _ = plain_sqs.delete_queue().queue_url(url).send().await;
        }
    }
    eprintln!(
        "  {SCENARIO:<16} {:<18} rtt {RTT_MS} ms: p50 {:>7.0} ms p99 {:>7.0} ms  {:.3} DynamoDB + {:.3} SQS req/record  SQS server busy {:.0} ms a batch  queues held {} of {} messages{}",
        mode.name(),
        row.p50(),
        row.p99(),
        row.dynamodb_per_record(),
        row.sqs_per_record(),
        row.sqs_served_ms / row.batch_ms.len().max(1) as f64,
        row.queued.0,
        row.queued.1,
        match row.unfinished {
            0 => String::new(),
            n => format!("  ({n} records NOT finished)"),
        }
    );
    row
}

/// The messages the queue at `url` holds.
async fn queued(sqs: &aws_sdk_sqs::Client, url: &str) -> u64 {
    let name = aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages;
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(name.clone())
        .send()
        .await
        .expect("the queue's attributes");
    attributes
        .attributes()
        .and_then(|a| a.get(&name))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Powertools' row (`bench/powertools-announce.csv`): p50, p99, DynamoDB
/// and SQS requests per record.
pub fn powertools(out_dir: &Path) -> Option<(f64, f64, f64, f64)> {
    csv_rows(&out_dir.join("powertools-announce.csv"))
        .find(|fields| fields.first().map(String::as_str) == Some(SCENARIO))
        .and_then(|fields| {
            let at = |i: usize| fields.get(i)?.parse().ok();
            Some((at(3)?, at(4)?, at(5)?, at(6)?))
        })
}

/// The table against Powertools + `send_message`.
pub fn table(rows: &[AnnounceRow], powertools: Option<(f64, f64, f64, f64)>) -> String {
    let mut out = String::from(
        "| 1,000 payments to 200 accounts, 4 partitions, each announced, 5 ms RTT | p50 | p99 | DynamoDB requests / record | SQS requests / record (message) | vs Powertools p50 |\n\
         | --- | --- | --- | --- | --- | --- |\n",
    );
    for row in rows {
        let ops: Vec<String> = row
            .dynamodb
            .iter()
            .map(|(op, n)| format!("{op} {:.3}", *n as f64 / row.measured_records()))
            .collect();
        out.push_str(&format!(
            "| {} | {:.0} ms | {:.0} ms | {:.3} ({}) | {:.3} | {} |\n",
            row.mode.path(),
            row.p50(),
            row.p99(),
            row.dynamodb_per_record(),
            ops.join(", "),
            row.sqs_per_record(),
            powertools.map_or("-".into(), |(p50, ..)| format!("{:.1}x", p50 / row.p50())),
        ));
    }
    match powertools {
        Some((p50, p99, dynamodb, sqs)) => out.push_str(&format!(
            "| Powertools @idempotent_function + sqs.send_message | {p50:.0} ms | {p99:.0} ms | {dynamodb:.3} | {sqs:.3} | 1x |\n"
        )),
        None => out.push_str("| Powertools: no bench/powertools-announce.csv | | | | | |\n"),
    }
    out
}
