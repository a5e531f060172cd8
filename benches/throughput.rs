//! Throughput of the real MSK function against DynamoDB Local.
//!
//!     infra/bench.sh                  # starts DynamoDB Local, creates the tables, runs this
//!
//! Drives `MskFunction::handle` (the code the Lambda runs) over generated MSK
//! batches, and a baseline that processes the same records strictly one after
//! another with `Engine::run_once` (one claim and one completion each, no
//! pre-check, no cache, no claim-ahead), the way common idempotency libraries
//! do. Prints per scenario, mode and simulated round trip: records per second,
//! DynamoDB requests per record by operation (counted by the SDK interceptor
//! `RequestCounter`, every HTTP request sent, retries included), p50/p99 batch
//! latency. Writes `bench/results.csv` and `bench/batch-time-vs-rtt.svg`.
//!
//! DynamoDB Local on loopback answers in about a millisecond; in AWS a request
//! costs a network round trip of several. Every DynamoDB HTTP request of the
//! benchmark's clients first waits the simulated round trip (`DelayedHttpClient`,
//! a wrapper around the SDK's HTTP connector), so concurrency shows as it would.
//!
//! Environment: IDEMPOTENCY_TABLE, LEDGER_TABLE and AWS_ENDPOINT_URL_DYNAMODB
//! (set by infra/bench.sh); BENCH_REPS multiplies the repetitions (default 1;
//! 0.5 halves them, at least one each); BENCH_OUT is the output directory
//! (default `bench`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use exactly_once::IdempotencyStore;
use exactly_once::dynamo::{self, RequestCounter};
use exactly_once::engine::{Deadline, Engine, EngineConfig, Outcome, Work, payload_hash};
use exactly_once::lambda::{MskFunction, Settings};
use exactly_once::ledger::{LedgerHandler, LedgerMode};
use serde_json::{Value, json};

/// Operations shown in their own column; anything else is counted as `other`.
const OPERATIONS: [&str; 5] = [
    "PutItem",
    "UpdateItem",
    "TransactWriteItems",
    "BatchGetItem",
    "GetItem",
];
/// Distinct Kafka record keys (= ledger accounts) of every generated batch.
const ACCOUNTS: usize = 200;
/// Simulated round trips of the main scenarios and of the chart.
const RTT_MAIN_MS: [u64; 2] = [0, 5];
const RTT_SWEEP_MS: [u64; 5] = [0, 1, 2, 5, 10];

// ---------------------------------------------------------------------------
// Simulated network round trip: a wrapper around the client's HTTP client.

/// An HTTP client whose every request first waits `delay`, and which times
/// the real request (DynamoDB Local's answer, without the simulated delay).
#[derive(Debug, Clone)]
struct DelayedHttpClient {
    inner: SharedHttpClient,
    delay: Duration,
    served: ServiceTime,
}

/// Requests sent to DynamoDB Local and the time they took there (from the
/// hand-over to the real HTTP client to the response: loopback, queueing in
/// the server and its work), excluding the simulated round trip.
#[derive(Debug, Clone, Default)]
struct ServiceTime {
    requests: Arc<AtomicU64>,
    micros: Arc<AtomicU64>,
}

impl ServiceTime {
    fn reset(&self) {
        self.requests.store(0, Relaxed);
        self.micros.store(0, Relaxed);
    }

    fn read(&self) -> (u64, u64) {
        (self.requests.load(Relaxed), self.micros.load(Relaxed))
    }
}

/// Tokio's timer has millisecond ticks and rounds a sleep up to the next
/// tick: sleeping half a tick less makes the mean delay the one asked for.
const TIMER_ROUNDING: Duration = Duration::from_micros(500);

impl HttpClient for DelayedHttpClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(DelayedConnector {
            inner: self.inner.http_connector(settings, components),
            delay: self.delay,
            served: self.served.clone(),
        })
    }
}

#[derive(Debug)]
struct DelayedConnector {
    inner: SharedHttpConnector,
    delay: Duration,
    served: ServiceTime,
}

impl HttpConnector for DelayedConnector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let (inner, delay, served) = (self.inner.clone(), self.delay, self.served.clone());
        HttpConnectorFuture::new(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay.saturating_sub(TIMER_ROUNDING)).await;
            }
            let started = Instant::now();
            let response = inner.call(request).await;
            served.requests.fetch_add(1, Relaxed);
            served
                .micros
                .fetch_add(started.elapsed().as_micros() as u64, Relaxed);
            response
        })
    }
}

/// `base` with `rtt` added to every request, timed by `served`, and
/// `counter` attached.
fn client_with(
    base: &Client,
    rtt_ms: u64,
    counter: &RequestCounter,
    served: &ServiceTime,
) -> Client {
    let inner = base
        .config()
        .http_client()
        .expect("connect() sets an HTTP client");
    let delayed = DelayedHttpClient {
        inner,
        delay: Duration::from_millis(rtt_ms),
        served: served.clone(),
    };
    counter.attach(&Client::from_conf(
        base.config().to_builder().http_client(delayed).build(),
    ))
}

// ---------------------------------------------------------------------------
// Generated batches.

#[derive(Debug, Clone)]
struct Record {
    partition: usize,
    /// Kafka record key: the account (what ORDERING_MODE=key orders by).
    account: String,
    idempotency_key: String,
    value: Vec<u8>,
}

#[derive(Debug, Clone)]
struct Batch {
    partitions: usize,
    /// In generation order; each partition's records in offset order.
    records: Vec<Record>,
}

impl Batch {
    /// `count` new payments over `partitions` partitions and `ACCOUNTS`
    /// accounts (an account always in the same partition, as Kafka's key
    /// partitioner does), tagged with `tag` so runs never share accounts.
    fn new_payments(tag: &str, count: usize, partitions: usize) -> Self {
        let records = (0..count)
            .map(|n| payment(tag, n, n % ACCOUNTS, partitions))
            .collect();
        Self {
            partitions,
            records,
        }
    }

    /// `count` records of which `duplicates` are copies (same key, same
    /// payload, same partition) of earlier records, placed 1 to 50 records
    /// after their original.
    fn with_duplicates(tag: &str, count: usize, duplicates: usize, partitions: usize) -> Self {
        let mut rng = fastrand::Rng::with_seed(7);
        let unique = count - duplicates;
        let mut records: Vec<Record> = (0..unique)
            .map(|n| payment(tag, n, n % ACCOUNTS, partitions))
            .collect();
        let mut originals: Vec<usize> = (0..unique).collect();
        rng.shuffle(&mut originals);
        let mut copies: Vec<(usize, Record)> = originals[..duplicates]
            .iter()
            .map(|&n| (n + rng.usize(1..=50), records[n].clone()))
            .collect();
        // Insert from the back so that earlier positions stay valid.
        copies.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        for (at, copy) in copies {
            records.insert(at.min(records.len()), copy);
        }
        Self {
            partitions,
            records,
        }
    }

    fn len(&self) -> usize {
        self.records.len()
    }

    /// Per partition, in offset order, with the offsets.
    fn by_partition(&self) -> Vec<Vec<(i64, &Record)>> {
        let mut lists: Vec<Vec<(i64, &Record)>> = vec![Vec::new(); self.partitions];
        for record in &self.records {
            let list = &mut lists[record.partition];
            let offset = 1000 + list.len() as i64;
            list.push((offset, record));
        }
        lists
    }

    /// The MSK event Lambda would send (see events/generate.py).
    fn event(&self) -> Value {
        let mut records = serde_json::Map::new();
        for (partition, list) in self.by_partition().into_iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let list: Vec<Value> = list
                .into_iter()
                .map(|(offset, record)| {
                    let header: Vec<i8> = record.idempotency_key.bytes().map(|b| b as i8).collect();
                    json!({
                        "topic": "payments",
                        "partition": partition,
                        "offset": offset,
                        "timestamp": 1_735_689_600_000_i64 + offset,
                        "timestampType": "CREATE_TIME",
                        "key": BASE64.encode(&record.account),
                        "value": BASE64.encode(&record.value),
                        "headers": [{ "idempotency-key": header }],
                    })
                })
                .collect();
            records.insert(format!("payments-{partition}"), Value::Array(list));
        }
        json!({
            "eventSource": "aws:kafka",
            "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/bench/abc-1",
            "bootstrapServers": "b-1.bench.kafka.us-east-1.amazonaws.com:9092",
            "records": records,
        })
    }

    /// The baseline's input: the records flattened partition by partition,
    /// in offset order.
    fn works(&self) -> Vec<Work> {
        self.by_partition()
            .into_iter()
            .enumerate()
            .flat_map(|(partition, list)| {
                list.into_iter().map(move |(offset, record)| Work {
                    key: record.idempotency_key.clone(),
                    payload: record.value.clone(),
                    payload_hash: payload_hash(&record.value),
                    origin: format!("payments-{partition}@{offset}"),
                })
            })
            .collect()
    }
}

fn payment(tag: &str, n: usize, account: usize, partitions: usize) -> Record {
    let account_id = format!("acc-{tag}-{account:03}");
    let payment_id = format!("pay-{tag}-{n:05}");
    let value = json!({
        "payment_id": payment_id,
        "account_id": account_id,
        "amount_cents": 100 + (n % 900) as i64,
        "currency": "EUR",
    });
    Record {
        partition: account % partitions,
        account: account_id,
        idempotency_key: payment_id,
        value: serde_json::to_vec(&value).expect("json"),
    }
}

// ---------------------------------------------------------------------------
// The function under test, and the baseline.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    Baseline,
    Partition,
    Key,
    None,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Baseline, Mode::Partition, Mode::Key, Mode::None];

    fn name(self) -> &'static str {
        match self {
            Mode::Baseline => "baseline",
            Mode::Partition => "partition",
            Mode::Key => "key",
            Mode::None => "none",
        }
    }
}

struct Env {
    base: Client,
    idempotency_table: String,
    ledger_table: String,
    run_id: String,
    /// Makes every key prefix and account of the run unique.
    sequence: std::cell::Cell<u64>,
    reps_factor: f64,
}

impl Env {
    fn fresh_tag(&self) -> String {
        let n = self.sequence.get();
        self.sequence.set(n + 1);
        format!("{}-{n}", self.run_id)
    }

    fn reps(&self, wanted: usize) -> usize {
        ((wanted as f64 * self.reps_factor).round() as usize).max(1)
    }
}

/// One instance of what processes batches: the Lambda function as deployed,
/// or the baseline loop over `Engine::run_once`.
enum Processor {
    Function(MskFunction<LedgerHandler>),
    Baseline(Engine<LedgerHandler>),
}

impl Processor {
    fn new(env: &Env, client: &Client, mode: Mode, prefix: &str) -> Self {
        let ordering = match mode {
            Mode::Baseline | Mode::Partition => "partition",
            Mode::Key => "key",
            Mode::None => "none",
        };
        let vars: BTreeMap<&str, String> = BTreeMap::from([
            ("IDEMPOTENCY_TABLE", env.idempotency_table.clone()),
            ("IDEMPOTENCY_KEY_PREFIX", prefix.to_owned()),
            ("ORDERING_MODE", ordering.to_owned()),
        ]);
        let settings =
            Settings::from_lookup(|name| vars.get(name).cloned()).expect("bench settings");
        let store = IdempotencyStore::new(client.clone(), settings.store);
        let handler = LedgerHandler::new(
            client.clone(),
            env.ledger_table.clone(),
            LedgerMode::Transactional,
        );
        match mode {
            Mode::Baseline => {
                let config = EngineConfig {
                    completed_cache: 0,
                    ..Default::default()
                };
                Self::Baseline(Engine::new(store, handler, config))
            }
            _ => Self::Function(MskFunction::new(
                Engine::new(store, handler, settings.engine),
                settings.function,
            )),
        }
    }

    /// Processes the batch; the records not finished.
    async fn process(&self, batch: &Batch, event: &Value, works: &[Work]) -> usize {
        match self {
            Self::Function(function) => {
                let invocation = lambda_runtime::LambdaEvent::new(
                    event.clone(),
                    lambda_runtime::Context::default(),
                );
                match function.handle(invocation).await {
                    Ok(response) => response.batch_item_failures.len(),
                    Err(err) => {
                        eprintln!("invocation error: {err}");
                        batch.len()
                    }
                }
            }
            Self::Baseline(engine) => {
                let mut unfinished = 0;
                for work in works {
                    let outcome: Outcome = engine.run_once(work, Deadline::NONE).await;
                    if !outcome.is_finished() {
                        unfinished += 1;
                    }
                }
                unfinished
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Measurements.

#[derive(Debug, Clone)]
struct Row {
    scenario: &'static str,
    mode: Mode,
    rtt_ms: u64,
    records: usize,
    batch_ms: Vec<f64>,
    requests: BTreeMap<String, u64>,
    /// Requests that reached DynamoDB Local, and their time there (µs).
    served: (u64, u64),
    failures: usize,
}

impl Row {
    /// The measured columns of the table and the CSV, in order: p50 and p99
    /// batch ms, records/s, ms/record, requests/record in all and for
    /// PutItem, UpdateItem, TransactWriteItems, BatchGetItem, GetItem and
    /// other operations, DynamoDB Local's own ms per request.
    fn measures(&self) -> [f64; 12] {
        [
            self.p(0.5),
            self.p(0.99),
            self.records_per_s(),
            self.ms_per_record(),
            self.per_record(None),
            self.per_record(Some("PutItem")),
            self.per_record(Some("UpdateItem")),
            self.per_record(Some("TransactWriteItems")),
            self.per_record(Some("BatchGetItem")),
            self.per_record(Some("GetItem")),
            self.per_record(Some("other")),
            self.service_ms(),
        ]
    }

    fn p(&self, q: f64) -> f64 {
        let mut sorted = self.batch_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }

    /// Mean time of a request in DynamoDB Local (without the simulated RTT).
    fn service_ms(&self) -> f64 {
        self.served.1 as f64 / 1000.0 / self.served.0.max(1) as f64
    }

    fn records_per_s(&self) -> f64 {
        self.records as f64 / (self.p(0.5) / 1000.0)
    }

    fn ms_per_record(&self) -> f64 {
        self.p(0.5) / self.records as f64
    }

    /// Requests per record of `operation` (None: all).
    fn per_record(&self, operation: Option<&str>) -> f64 {
        let processed = (self.records * self.batch_ms.len()) as f64;
        let count: u64 = match operation {
            None => self.requests.values().sum(),
            Some("other") => self
                .requests
                .iter()
                .filter(|(op, _)| !OPERATIONS.contains(&op.as_str()))
                .map(|(_, n)| n)
                .sum(),
            Some(op) => self.requests.get(op).copied().unwrap_or(0),
        };
        count as f64 / processed
    }
}

/// What a scenario measures for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
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
    served: ServiceTime,
    row: Row,
}

impl Meter {
    fn new(scenario: &'static str, mode: Mode, rtt_ms: u64) -> Self {
        Self {
            counter: RequestCounter::default(),
            served: ServiceTime::default(),
            row: Row {
                scenario,
                mode,
                rtt_ms,
                records: 0,
                batch_ms: Vec::new(),
                requests: BTreeMap::new(),
                served: (0, 0),
                failures: 0,
            },
        }
    }

    async fn time(&mut self, processor: &Processor, batch: &Batch, event: &Value, works: &[Work]) {
        self.counter.reset();
        self.served.reset();
        let started = Instant::now();
        let unfinished = processor.process(batch, event, works).await;
        let row = &mut self.row;
        row.batch_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        row.records = batch.len();
        for (op, n) in self.counter.counts() {
            *row.requests.entry(op).or_default() += n;
        }
        let (requests, micros) = self.served.read();
        row.served = (row.served.0 + requests, row.served.1 + micros);
        row.failures += unfinished;
    }

    fn done(self) -> Row {
        let row = self.row;
        eprintln!(
            "  {:<22} {:<9} rtt {:>2} ms: p50 {:>9.1} ms  {:>6.3} req/record  DynamoDB Local {:>5.1} ms/request{}",
            row.scenario,
            row.mode.name(),
            row.rtt_ms,
            row.p(0.5),
            row.per_record(None),
            row.service_ms(),
            if row.failures > 0 {
                format!("  ({} records NOT finished)", row.failures)
            } else {
                String::new()
            }
        );
        row
    }
}

async fn measure(
    env: &Env,
    scenario: &'static str,
    make: &dyn Fn(&str) -> Batch,
    measure: Measure,
    mode: Mode,
    rtt_ms: u64,
    reps: usize,
) -> Vec<Row> {
    let (cold_name, warm_name) = match measure {
        Measure::New => (scenario, scenario),
        Measure::Replay => (
            leak(format!("replay-cold-{scenario}")),
            leak(format!("replay-warm-{scenario}")),
        ),
    };
    let mut cold = Meter::new(cold_name, mode, rtt_ms);
    let mut warm = Meter::new(warm_name, mode, rtt_ms);
    let cold_client = client_with(&env.base, rtt_ms, &cold.counter, &cold.served);
    let warm_client = client_with(&env.base, rtt_ms, &warm.counter, &warm.served);
    for _ in 0..reps {
        let tag = env.fresh_tag();
        let prefix = format!("bench/{tag}/");
        let batch = make(&tag);
        let (event, works) = (batch.event(), batch.works());
        match measure {
            Measure::New => {
                let processor = Processor::new(env, &cold_client, mode, &prefix);
                cold.time(&processor, &batch, &event, &works).await;
            }
            Measure::Replay => {
                let first = Processor::new(env, &warm_client, mode, &prefix);
                let unfinished = first.process(&batch, &event, &works).await;
                assert_eq!(unfinished, 0, "{scenario}: the first delivery must finish");
                let fresh = Processor::new(env, &cold_client, mode, &prefix);
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
async fn get_item_ms(env: &Env, rtt_ms: u64, n: u32) -> (f64, f64) {
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

// ---------------------------------------------------------------------------
// Output.

/// Repetitions of a scenario: 3 (scaled by BENCH_REPS), but one for the
/// baseline under a simulated round trip, which takes many seconds a run.
fn slow_once(env: &Env, mode: Mode, rtt: u64) -> usize {
    if mode == Mode::Baseline && rtt > 0 {
        1
    } else {
        env.reps(3)
    }
}

fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:<9} {:>3} {:>6} {:>3} {:>10} {:>10} {:>9} {:>8} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>8} {:>5}",
        "scenario",
        "mode",
        "rtt",
        "recs",
        "n",
        "p50 ms",
        "p99 ms",
        "rec/s",
        "ms/rec",
        "req/rec",
        "Put",
        "Upd",
        "Txn",
        "BGet",
        "other",
        "ddb ms",
        "speedup",
        "fail"
    );
    for row in rows {
        let baseline = rows.iter().find(|b| {
            b.mode == Mode::Baseline && b.scenario == row.scenario && b.rtt_ms == row.rtt_ms
        });
        let speedup = baseline.map_or_else(
            || "-".to_owned(),
            |b| format!("{:.1}x", b.p(0.5) / row.p(0.5)),
        );
        let m = row.measures();
        // GetItem and other operations share one column in the table.
        let shown = [
            m[0],
            m[1],
            m[2],
            m[3],
            m[4],
            m[5],
            m[6],
            m[7],
            m[8],
            m[9] + m[10],
            m[11],
        ];
        let widths = [
            (10, 1),
            (10, 1),
            (9, 0),
            (8, 3),
            (7, 3),
            (6, 3),
            (6, 3),
            (6, 3),
            (6, 3),
            (6, 3),
            (7, 2),
        ];
        let _ = write!(
            out,
            "{:<22} {:<9} {:>3} {:>6} {:>3}",
            row.scenario,
            row.mode.name(),
            row.rtt_ms,
            row.records,
            row.batch_ms.len()
        );
        for (value, (width, precision)) in shown.iter().zip(widths) {
            let _ = write!(out, " {value:>width$.precision$}");
        }
        let _ = writeln!(out, " {speedup:>8} {:>5}", row.failures);
    }
    out
}

fn csv(rows: &[Row]) -> String {
    let mut out = String::from(
        "scenario,mode,rtt_ms,records,repetitions,batch_ms_p50,batch_ms_p99,records_per_s,\
         ms_per_record,requests_per_record,put_item_per_record,update_item_per_record,\
         transact_write_items_per_record,batch_get_item_per_record,get_item_per_record,\
         other_per_record,dynamodb_local_ms_per_request,unfinished_records\n",
    );
    let precisions = [2, 2, 1, 4, 4, 4, 4, 4, 4, 4, 4, 3];
    for row in rows {
        let measures: Vec<String> = row
            .measures()
            .iter()
            .zip(precisions)
            .map(|(value, precision)| format!("{value:.precision$}"))
            .collect();
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{}",
            row.scenario,
            row.mode.name(),
            row.rtt_ms,
            row.records,
            row.batch_ms.len(),
            measures.join(","),
            row.failures,
        );
    }
    out
}

fn chart(rows: &[Row], scenario: &str, path: &std::path::Path) -> Result<(), String> {
    use plotters::prelude::*;

    let series: Vec<(Mode, Vec<(f64, f64)>)> = Mode::ALL
        .iter()
        .map(|&mode| {
            let mut points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.scenario == scenario && r.mode == mode)
                .map(|r| (r.rtt_ms as f64, r.p(0.5) / 1000.0))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (mode, points)
        })
        .collect();
    let all = series.iter().flat_map(|(_, p)| p.iter().map(|(_, y)| *y));
    let (lo, hi) = all.fold((f64::MAX, 0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    let (lo, hi) = (
        10f64.powf((lo.max(1e-3)).log10().floor()),
        10f64.powf(hi.max(1e-3).log10().ceil()),
    );

    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "1,000 new records over 4 partitions: batch time vs DynamoDB round trip",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..10.5f64, (lo..hi).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("simulated round trip per DynamoDB request (ms)")
        .y_desc("batch time, p50 (s, log scale)")
        .x_labels(11)
        .y_label_formatter(&|y| format!("{y}"))
        .draw()
        .map_err(|e| e.to_string())?;
    let colors = [RED, BLUE, GREEN, MAGENTA];
    for ((mode, points), color) in series.iter().zip(colors) {
        let style = ShapeStyle::from(&color).stroke_width(2);
        chart
            .draw_series(LineSeries::new(points.iter().copied(), style))
            .map_err(|e| e.to_string())?
            .label(mode.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
            )
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

fn targets(rows: &[Row]) -> String {
    let find = |scenario: &str, mode: Mode, rtt: u64| {
        rows.iter()
            .find(|r| r.scenario == scenario && r.mode == mode && r.rtt_ms == rtt)
    };
    let mut out = String::new();
    let mut line = |met: Option<bool>, text: String| {
        let mark = match met {
            Some(true) => "MET   ",
            Some(false) => "MISSED",
            None => "n/a   ",
        };
        let _ = writeln!(out, "[{mark}] {text}");
    };
    for mode in [Mode::Partition, Mode::Key, Mode::None] {
        if let Some(r) = find("new-1000x4p", mode, 0) {
            let put = r.per_record(Some("PutItem"));
            let txn = r.per_record(Some("TransactWriteItems"));
            let upd = r.per_record(Some("UpdateItem"));
            let bget = r.requests.get("BatchGetItem").copied().unwrap_or(0) as f64
                / r.batch_ms.len() as f64;
            let writes = put + txn + upd;
            line(
                Some((writes - 2.0).abs() < 1e-9),
                format!(
                    "2 writes per new record ({}): {writes:.3} (PutItem {put:.3} + TransactWriteItems {txn:.3} + UpdateItem {upd:.3}), BatchGetItem {bget:.1} per batch, {:.4} requests per record in all",
                    mode.name(),
                    r.per_record(None)
                ),
            );
        }
    }
    for scenario in ["replay-cold-1000x4p", "replay-warm-1000x4p"] {
        for mode in [Mode::Partition, Mode::Key, Mode::None] {
            if let Some(r) = find(scenario, mode, 0) {
                let v = r.per_record(None);
                line(
                    Some(v <= 0.02),
                    format!(
                        "replayed batch <= 0.02 requests/record ({scenario}, {}): {v:.4}",
                        mode.name()
                    ),
                );
            }
        }
    }
    for (mode, wanted) in [(Mode::Partition, 6.0), (Mode::Key, 25.0)] {
        let (b, m) = (
            find("new-1000x4p", Mode::Baseline, 5),
            find("new-1000x4p", mode, 5),
        );
        if let (Some(b), Some(m)) = (b, m) {
            let speedup = b.p(0.5) / m.p(0.5);
            line(
                Some(speedup >= wanted),
                format!(
                    "5 ms RTT, 1,000 new records over 4 partitions, {} >= {wanted}x faster than baseline: {speedup:.1}x ({:.0} ms vs {:.0} ms)",
                    mode.name(),
                    m.p(0.5),
                    b.p(0.5)
                ),
            );
        }
    }
    let sizes: Vec<(usize, f64)> = ["new-100x4p", "new-1000x4p", "new-10000x4p"]
        .iter()
        .filter_map(|s| find(s, Mode::Partition, 5))
        .map(|r| (r.records, r.ms_per_record()))
        .collect();
    if sizes.len() == 3 {
        let min = sizes.iter().map(|s| s.1).fold(f64::MAX, f64::min);
        let max = sizes.iter().map(|s| s.1).fold(0.0, f64::max);
        let text: Vec<String> = sizes
            .iter()
            .map(|(n, ms)| format!("{n}: {ms:.3} ms"))
            .collect();
        line(
            Some(max <= min * 1.25),
            format!(
                "time per record within 25% from 100 to 10,000 records (partition, 5 ms RTT): {} (max/min {:.2})",
                text.join(", "),
                max / min
            ),
        );
    }
    let unfinished: usize = rows.iter().map(|r| r.failures).sum();
    line(
        Some(unfinished == 0),
        format!("every record finished in every scenario: {unfinished} not finished"),
    );
    out
}

// ---------------------------------------------------------------------------

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(run());
}

async fn run() {
    let var = |name: &str| {
        std::env::var(name)
            .unwrap_or_else(|_| panic!("{name} is not set: run the benchmark with infra/bench.sh"))
    };
    let env = Env {
        base: dynamo::connect().await,
        idempotency_table: var("IDEMPOTENCY_TABLE"),
        ledger_table: var("LEDGER_TABLE"),
        run_id: format!(
            "{:x}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_millis()
        ),
        sequence: std::cell::Cell::new(0),
        reps_factor: std::env::var("BENCH_REPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1.0),
    };
    let out_dir = PathBuf::from(std::env::var("BENCH_OUT").unwrap_or_else(|_| "bench".into()));
    let started = Instant::now();

    // The simulated round trip really applies.
    eprintln!("simulated round trip check (100 sequential GetItem each):");
    for rtt in [0, 5] {
        let (ms, served) = get_item_ms(&env, rtt, 100).await;
        eprintln!(
            "  rtt {rtt} ms: {ms:.2} ms per GetItem, of which {served:.2} ms in DynamoDB Local: {:.2} ms added",
            ms - served
        );
        assert!(ms - served >= rtt as f64 * 0.9, "the delay is not applied");
    }

    // Warm-up (DynamoDB Local is a JVM): not recorded.
    eprintln!("warm-up...");
    let new_1000 = |tag: &str| Batch::new_payments(tag, 1000, 4);
    for mode in [
        Mode::Key,
        Mode::None,
        Mode::Partition,
        Mode::Baseline,
        Mode::Key,
    ] {
        measure(&env, "warm-up", &new_1000, Measure::New, mode, 0, 1).await;
    }

    let mut rows = Vec::new();
    let big = |tag: &str| Batch::new_payments(tag, 10_000, 4);
    let small = |tag: &str| Batch::new_payments(tag, 100, 4);
    let dup = |tag: &str| Batch::with_duplicates(tag, 1000, 100, 4);
    let chain = |tag: &str| Batch::new_payments(tag, 1000, 1);

    eprintln!("(1) 1,000 new records over 4 partitions, RTT sweep:");
    for rtt in RTT_SWEEP_MS {
        for mode in Mode::ALL {
            let reps = match (mode, rtt) {
                (Mode::Baseline, 0) => env.reps(3),
                (Mode::Baseline, _) => env.reps(1),
                _ => env.reps(5),
            };
            rows.extend(
                measure(
                    &env,
                    "new-1000x4p",
                    &new_1000,
                    Measure::New,
                    mode,
                    rtt,
                    reps,
                )
                .await,
            );
        }
    }
    eprintln!("(2) the same batch replayed:");
    for rtt in RTT_MAIN_MS {
        for mode in Mode::ALL {
            let reps = slow_once(&env, mode, rtt);
            rows.extend(
                measure(&env, "1000x4p", &new_1000, Measure::Replay, mode, rtt, reps).await,
            );
        }
    }
    eprintln!("(3) 1,000 records with 10% in-batch duplicates:");
    for rtt in RTT_MAIN_MS {
        for mode in Mode::ALL {
            let reps = slow_once(&env, mode, rtt);
            rows.extend(measure(&env, "dup10-1000x4p", &dup, Measure::New, mode, rtt, reps).await);
        }
    }
    eprintln!("(4) 10,000 new records over 4 partitions (baseline only without RTT):");
    for rtt in RTT_MAIN_MS {
        for mode in Mode::ALL {
            if mode == Mode::Baseline && rtt > 0 {
                continue;
            }
            rows.extend(measure(&env, "new-10000x4p", &big, Measure::New, mode, rtt, 1).await);
        }
    }
    eprintln!("(5) a long chain: 1,000 records in one partition:");
    for rtt in RTT_MAIN_MS {
        for mode in Mode::ALL {
            let reps = slow_once(&env, mode, rtt);
            rows.extend(
                measure(&env, "chain-1000x1p", &chain, Measure::New, mode, rtt, reps).await,
            );
        }
    }
    eprintln!("(6) 100 new records over 4 partitions (time per record vs batch size):");
    for rtt in RTT_MAIN_MS {
        for mode in Mode::ALL {
            rows.extend(
                measure(
                    &env,
                    "new-100x4p",
                    &small,
                    Measure::New,
                    mode,
                    rtt,
                    env.reps(10),
                )
                .await,
            );
        }
    }

    std::fs::create_dir_all(&out_dir).expect("output directory");
    let csv_path = out_dir.join("results.csv");
    std::fs::write(&csv_path, csv(&rows)).expect("write results.csv");
    let svg_path = out_dir.join("batch-time-vs-rtt.svg");
    chart(&rows, "new-1000x4p", &svg_path).expect("chart");

    println!();
    println!(
        "DynamoDB requests per record counted by RequestCounter (every HTTP request, retries included);"
    );
    println!(
        "batch time p50/p99 over n repetitions (nearest rank: with few repetitions p99 is the slowest); rec/s = records / p50."
    );
    println!("speedup = baseline p50 / p50 for the same scenario and RTT.");
    println!(
        "ddb ms = mean time a request spent in DynamoDB Local (loopback, queueing, work), without the simulated RTT."
    );
    println!();
    print!("{}", table(&rows));
    println!();
    print!("{}", targets(&rows));
    println!();
    println!(
        "wrote {} and {} in {:.0} s",
        csv_path.display(),
        svg_path.display(),
        started.elapsed().as_secs_f64()
    );
}
