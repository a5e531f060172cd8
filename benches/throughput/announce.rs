//! Announcing every payment (exactly once out): 1,000 new payments over 4
//! partitions to 200 accounts, each applied payment announced to an SQS
//! queue (the ledger's `with_events`, one message per payment), against AWS
//! Powertools' idempotency with a `send_message` in the idempotent function
//! (`benches/powertools/bench.py --scenarios announce-1000x4p`, which
//! writes `bench/powertools-announce.csv`); and MSK in, MSK out: the same
//! announced to a Kafka topic of 4 partitions on the local broker
//! (`KAFKA_BOOTSTRAP_SERVERS`) through the function's `KafkaSender`,
//! against Powertools with a confluent_kafka `produce` + `flush` per payment
//! (`--scenarios announce-kafka-1000x4p`, `bench/powertools-announce-kafka.csv`).
//! The Kafka rows count produce requests (one per partition a send touches)
//! and read the topic back (`infra/poller.py read`).
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
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use exactly_once::lambda::destinations::kafka::partition_of;
use exactly_once::lambda::destinations::{KafkaSender, SqsSender};
use exactly_once::outbox::{Answers, Message, Outgoing, SendError, Sender};
use exactly_once::store::requests::RequestCounter;

use crate::Env;
use crate::batches::Batch;
use crate::latency::{ServiceTime, client_with, sqs_client_with};
use crate::processor::{Mode, Processor};
use crate::sizing::csv_rows;

/// Where the payments are announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Out {
    /// An SQS queue (moto's server, or benches/sqs_constant.py).
    Sqs,
    /// A Kafka topic of 4 partitions (infra/kafka-local.sh's broker).
    Kafka,
}

impl Out {
    /// The scenario's name, as Powertools' CSV has it; its labels' first
    /// part.
    pub fn scenario(self) -> &'static str {
        match self {
            Self::Sqs => "announce-1000x4p",
            Self::Kafka => "announce-kafka-1000x4p",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Sqs => "announce",
            Self::Kafka => "announce-kafka",
        }
    }

    fn powertools_csv(self) -> &'static str {
        match self {
            Self::Sqs => "powertools-announce.csv",
            Self::Kafka => "powertools-announce-kafka.csv",
        }
    }

    fn requests(self) -> &'static str {
        match self {
            Self::Sqs => "SQS requests / record (message)",
            Self::Kafka => "Kafka produce requests / record",
        }
    }
}

/// Partitions of the Kafka topic.
const PARTITIONS: usize = 4;

/// The paths measured: lock-free, and the locking path with the effect in
/// the completion's transaction.
const PATHS: [Mode; 2] = [Mode::LockFreePartition, Mode::Partition];

/// The round trip of the comparison.
const RTT_MS: u64 = 5;

/// One path's measured batches.
pub struct AnnounceRow {
    pub out: Out,
    pub mode: Mode,
    pub records: usize,
    pub batch_ms: Vec<f64>,
    /// DynamoDB requests of the measured batches, by operation.
    pub dynamodb: BTreeMap<String, u64>,
    /// SQS requests (Kafka produce requests) of the measured batches.
    pub sqs: u64,
    /// Time the SQS requests spent in the SQS server (without the
    /// simulated round trip), summed over the batches, ms; Kafka: the time
    /// inside the sender's sends.
    pub sqs_served_ms: f64,
    /// Messages the queues (the topic) held after their batch, and those
    /// expected (one per payment).
    pub queued: (u64, u64),
    pub unfinished: usize,
}

impl AnnounceRow {
    fn new(out: Out, mode: Mode) -> Self {
        Self {
            out,
            mode,
            records: 0,
            batch_ms: Vec::new(),
            dynamodb: BTreeMap::new(),
            sqs: 0,
            sqs_served_ms: 0.0,
            queued: (0, 0),
            unfinished: 0,
        }
    }

    /// The row's line on stderr.
    fn log(&self) {
        let (requests, busy, held) = match self.out {
            Out::Sqs => ("SQS req/record", "SQS server busy", "queues held"),
            Out::Kafka => ("Kafka produce req/record", "in sends", "topic holds"),
        };
        eprintln!(
            "  {:<22} {:<18} rtt {RTT_MS} ms: p50 {:>7.0} ms p99 {:>7.0} ms  {:.3} DynamoDB + {:.3} {requests}  {busy} {:.0} ms a batch  {held} {} of {} messages{}",
            self.out.scenario(),
            self.mode.name(),
            self.p50(),
            self.p99(),
            self.dynamodb_per_record(),
            self.sqs_per_record(),
            self.sqs_served_ms / self.batch_ms.len().max(1) as f64,
            self.queued.0,
            self.queued.1,
            match self.unfinished {
                0 => String::new(),
                n => format!("  ({n} records NOT finished)"),
            }
        );
    }

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

/// The rows BENCH_ONLY selects (`announce/new-1000x4p/<mode>/5ms`,
/// `announce-kafka/new-1000x4p/<mode>/5ms`; the Kafka rows only with a
/// broker: `KAFKA_BOOTSTRAP_SERVERS`).
pub async fn run(env: &Env) -> Vec<AnnounceRow> {
    let mut rows = Vec::new();
    for out in [Out::Sqs, Out::Kafka] {
        for mode in PATHS {
            let label = format!("{}/new-1000x4p/{}/{RTT_MS}ms", out.label(), mode.name());
            if !env.selected(&label) {
                continue;
            }
            rows.push(match out {
                Out::Sqs => measure(env, mode, env.reps(3)).await,
                Out::Kafka => match std::env::var("KAFKA_BOOTSTRAP_SERVERS") {
                    Ok(servers) => measure_kafka(env, mode, env.reps(3), &servers).await,
                    Err(_) => {
                        eprintln!("  {label}: no KAFKA_BOOTSTRAP_SERVERS, skipped");
                        continue;
                    }
                },
            });
        }
    }
    rows
}

async fn measure(env: &Env, mode: Mode, reps: usize) -> AnnounceRow {
    let counter = RequestCounter::default();
    let client = client_with(&env.base, RTT_MS, &counter, &ServiceTime::default());
    let plain_sqs = aws_sdk_sqs::Client::new(&exactly_once::aws::sdk_config().await);
    let sqs_served = ServiceTime::default();
    let sqs = sqs_client_with(&plain_sqs, RTT_MS, &sqs_served);
    let mut row = AnnounceRow::new(Out::Sqs, mode);
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
    row.log();
    row
}

/// Kafka's `measure`: one topic of 4 partitions and one warm container
/// for the whole row (tansu's service time does not grow with a topic),
/// the function's `KafkaSender` behind a count of its produce requests.
async fn measure_kafka(env: &Env, mode: Mode, reps: usize, servers: &str) -> AnnounceRow {
    let counter = RequestCounter::default();
    let client = client_with(&env.base, RTT_MS, &counter, &ServiceTime::default());
    let topic = format!("bench-announce-{}", env.fresh_tag());
    poller(&[
        "create",
        "msk",
        &topic,
        "--partitions",
        &PARTITIONS.to_string(),
    ]);
    let sender = Arc::new(CountedKafka {
        kafka: KafkaSender::new(exactly_once::aws::sdk_config().await),
        produce_requests: AtomicU64::new(0),
        sending_micros: AtomicU64::new(0),
    });
    let processor = Processor::announcing(
        env,
        &client,
        mode,
        &format!("bench-{}#", env.fresh_tag()),
        None,
        Some((
            format!("kafka://{servers}/{topic}"),
            sender.clone() as Arc<dyn Sender>,
        )),
    );
    let warm = Batch::new_payments(&env.fresh_tag(), 1000, 4);
    let warm_unfinished = processor.process(&warm, &warm.event(), &warm.works()).await;
    let mut row = AnnounceRow::new(Out::Kafka, mode);
    for _ in 0..reps {
        let batch = Batch::new_payments(&env.fresh_tag(), 1000, 4);
        row.records = batch.len();
        let (event, works) = (batch.event(), batch.works());
        counter.reset();
        let produced_before = sender.produce_requests.load(Relaxed);
        let sending_before = sender.sending_micros.load(Relaxed);
        let started = Instant::now();
        row.unfinished += processor.process(&batch, &event, &works).await;
        row.batch_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        for (op, stats) in counter.stats() {
            *row.dynamodb.entry(op).or_default() += stats.count;
        }
        row.sqs += sender.produce_requests.load(Relaxed) - produced_before;
        row.sqs_served_ms += (sender.sending_micros.load(Relaxed) - sending_before) as f64 / 1000.0;
        row.queued.1 += batch.len() as u64;
    }
    // What reached the topic: the warm batch's records and the measured
    // ones (copies would show as more).
    let read = poller(&["read", "msk", &topic, "--timeout", "120"]);
    let records = read["records"].as_array().map_or(0, Vec::len) as u64;
    row.queued.0 = records.saturating_sub(warm.len() as u64 - warm_unfinished as u64);
    row.log();
    row
}

/// The function's Kafka sender, its produce requests counted: one per
/// partition the messages of a send land on (each partition's records go
/// in one request, under its size limit at these sizes).
struct CountedKafka {
    kafka: KafkaSender,
    produce_requests: AtomicU64,
    /// Time inside `send`, summed over the sends, µs.
    sending_micros: AtomicU64,
}

impl Sender for CountedKafka {
    fn check(&self, message: &Message) -> Result<(), SendError> {
        self.kafka.check(message)
    }

    fn batch_limit(&self, destination: &str) -> usize {
        self.kafka.batch_limit(destination)
    }

    fn send<'a>(&'a self, destination: &'a str, messages: &'a [Outgoing]) -> Answers<'a> {
        let partitions: std::collections::BTreeSet<i32> = messages
            .iter()
            .map(|message| partition_of(message, PARTITIONS))
            .collect();
        self.produce_requests
            .fetch_add(partitions.len() as u64, Relaxed);
        Box::pin(async move {
            let started = Instant::now();
            let answers = self.kafka.send(destination, messages).await;
            let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            self.sending_micros.fetch_add(micros, Relaxed);
            answers
        })
    }
}

/// `infra/poller.py ARGS`: its last line as JSON.
fn poller(args: &[&str]) -> serde_json::Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("infra/poller.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 infra/poller.py (the tools' venv on PATH)");
    assert!(
        out.status.success(),
        "infra/poller.py {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or("null")).expect("JSON")
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

/// Powertools' row (`bench/powertools-announce.csv`, `-kafka.csv`): p50,
/// p99, DynamoDB and SQS (Kafka produce) requests per record.
pub fn powertools(out_dir: &Path, out: Out) -> Option<(f64, f64, f64, f64)> {
    csv_rows(&out_dir.join(out.powertools_csv()))
        .find(|fields| fields.first().map(String::as_str) == Some(out.scenario()))
        .and_then(|fields| {
            let at = |i: usize| fields.get(i)?.parse().ok();
            Some((at(3)?, at(4)?, at(5)?, at(6)?))
        })
}

/// The table of `to`'s rows against Powertools + `send_message` (Kafka:
/// `produce` + `flush`).
pub fn table(rows: &[AnnounceRow], to: Out, powertools: Option<(f64, f64, f64, f64)>) -> String {
    let heading = match to {
        Out::Sqs => "each announced",
        Out::Kafka => "each announced to a Kafka topic",
    };
    let mut out = format!(
        "| 1,000 payments to 200 accounts, 4 partitions, {heading}, 5 ms RTT | p50 | p99 | DynamoDB requests / record | {} | vs Powertools p50 |\n\
         | --- | --- | --- | --- | --- | --- |\n",
        to.requests()
    );
    for row in rows.iter().filter(|row| row.out == to) {
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
    let sends = match to {
        Out::Sqs => "sqs.send_message",
        Out::Kafka => "confluent_kafka produce + flush",
    };
    match powertools {
        Some((p50, p99, dynamodb, sqs)) => out.push_str(&format!(
            "| Powertools @idempotent_function + {sends} | {p50:.0} ms | {p99:.0} ms | {dynamodb:.3} | {sqs:.3} | 1x |\n"
        )),
        None => out.push_str(&format!(
            "| Powertools: no bench/{} | | | | | |\n",
            to.powertools_csv()
        )),
    }
    // MSK in, MSK out (issue 54): the lock-free path at least 20x
    // Powertools' p50, measured in the same run.
    let lock_free = rows
        .iter()
        .find(|row| row.out == to && row.mode.path() == "lock-free");
    if let (Out::Kafka, Some(row), Some((p50, ..))) = (to, lock_free, powertools) {
        let speedup = p50 / row.p50();
        let verdict = if speedup >= 20.0 { "MET" } else { "MISSED" };
        out.push_str(&format!(
            "\n[{verdict:6}] lock-free at least 20x Powertools + produce + flush: {speedup:.1}x \
             ({:.3} DynamoDB + {:.3} Kafka produce requests / record against 3 + 1)\n",
            row.dynamodb_per_record(),
            row.sqs_per_record(),
        ));
    }
    out
}
