//! Per batch source, against AWS Powertools (Python): the demo function
//! (`BatchFunction` with the ledger, the default configuration) on 1,000
//! new payments delivered as MSK, SQS standard, SQS FIFO, Kinesis,
//! DynamoDB Streams, Amazon MQ for RabbitMQ and Amazon MQ for ActiveMQ
//! events, on the lock-free path (`LEDGER_MODE=lock-free`, the default) and
//! on the locking one (`transactional`), against Powertools'
//! `BatchProcessor` with `@idempotent_function` on the same records (Amazon
//! MQ, which has no Powertools batch processor: a loop over the messages
//! calling the `@idempotent_function`) (`benches/powertools/sources.py`,
//! run first by infra/bench.sh, which writes `bench/powertools-sources.csv`).
//!
//! A scenario is one container (one `BatchFunction`) that receives the
//! scenario's delivery (1,000 payments as `1,000 / batch size` events, one
//! invocation after another) once unmeasured (its first delivery, shown),
//! then `reps` measured deliveries of new payments: warm, as Powertools'
//! process is. Keys come from the payload (`IDEMPOTENCY_KEY_SOURCE=
//! json:/payment_id`, Powertools' `event_key_jmespath="payment_id"`): the
//! one part every source's record carries. DynamoDB Local's floor, the same
//! row with no simulated round trip, is beside each row.
//!
//! Amazon MQ has no partial batch response: while a message is unfinished
//! the invocation fails (`BatchNotFinished`) and Lambda delivers the batch
//! again whole. Its `-retry` scenarios measure that retry: each repetition
//! delivers 1,000 payments whose last is poison (`POISON_POLICY=report`:
//! the invocation fails, 999 payments done), then the identical batch again
//! to the same container, measured: 999 duplicates and the poison again.
//!
//! Prints the table and writes `bench/sources.csv`: its rows of the
//! scenarios, paths and round trips measured replaced, the others kept.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use aws_sdk_dynamodb::Client;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::Engine;
use exactly_once::lambda::{BatchFunction, InvocationError, Settings};
use exactly_once::store::requests::RequestCounter;
use ledger::{LedgerHandler, LedgerMode};
use serde_json::Value;

use crate::Env;
use crate::latency::{ServiceTime, client_with};
use crate::source_events::{Source, delivery, poisoned_delivery};

/// Payments of every delivery.
const RECORDS: usize = 1000;

/// Simulated round trips: the comparison's, and DynamoDB Local's floor.
const RTT_MS: u64 = 5;
const FLOOR_RTT_MS: u64 = 0;

/// A source's delivery of [`RECORDS`] payments.
#[derive(Debug)]
pub struct Scenario {
    /// `benches/powertools/sources.py`'s SCENARIOS: keep the two the same.
    pub name: &'static str,
    pub source: Source,
    /// Records per event.
    pub batch_size: usize,
    /// The delivery measured is the whole-batch retry of a batch whose last
    /// message is poison (`POISON_POLICY=report`), not new payments.
    pub retry: bool,
}

impl Scenario {
    pub fn batches(&self) -> usize {
        RECORDS.div_ceil(self.batch_size)
    }
}

/// SQS standard is delivered both ways a mapping can: one batch of 1,000
/// (a batching window lets up to 10,000 through) and batches of 10 (the
/// mapping's default `BatchSize`); a FIFO queue in batches of 10, Lambda's
/// maximum for FIFO queues; Kinesis and DynamoDB Streams as one shard's
/// batch of 1,000 (their maximum is 10,000); MSK as one batch of 4
/// partitions (the sizing scenario's records); Amazon MQ (RabbitMQ and
/// ActiveMQ) as one queue's batch of 1,000 (a mapping's maximum is 10,000),
/// new, and retried whole after one poison message.
pub const SCENARIOS: [Scenario; 10] = [
    Scenario {
        name: "kafka-b1000",
        source: Source::Kafka,
        batch_size: 1000,
        retry: false,
    },
    Scenario {
        name: "sqs-standard-b1000",
        source: Source::SqsStandard,
        batch_size: 1000,
        retry: false,
    },
    Scenario {
        name: "sqs-standard-b10",
        source: Source::SqsStandard,
        batch_size: 10,
        retry: false,
    },
    Scenario {
        name: "sqs-fifo-b10",
        source: Source::SqsFifo,
        batch_size: 10,
        retry: false,
    },
    Scenario {
        name: "kinesis-b1000",
        source: Source::Kinesis,
        batch_size: 1000,
        retry: false,
    },
    Scenario {
        name: "dynamodb-streams-b1000",
        source: Source::DynamoDbStreams,
        batch_size: 1000,
        retry: false,
    },
    Scenario {
        name: "rabbitmq-b1000",
        source: Source::RabbitMq,
        batch_size: 1000,
        retry: false,
    },
    Scenario {
        name: "activemq-b1000",
        source: Source::ActiveMq,
        batch_size: 1000,
        retry: false,
    },
    Scenario {
        name: "rabbitmq-b1000-retry",
        source: Source::RabbitMq,
        batch_size: 1000,
        retry: true,
    },
    Scenario {
        name: "activemq-b1000-retry",
        source: Source::ActiveMq,
        batch_size: 1000,
        retry: true,
    },
];

/// The commit paths measured: the default, and the locking one.
const PATHS: [(&str, LedgerMode); 2] = [
    ("lock-free", LedgerMode::LockFree),
    ("transactional", LedgerMode::Transactional),
];

/// One scenario on one path at one round trip.
pub struct SourceRow {
    pub scenario: &'static Scenario,
    pub path: &'static str,
    pub rtt_ms: u64,
    /// Each measured delivery's time (the sum of its invocations'), ms.
    pub delivery_ms: Vec<f64>,
    pub requests: u64,
    /// The requests by operation (`TransactWriteItems`, ...).
    pub operations: BTreeMap<String, u64>,
    /// Records reported in a partial batch response, or left unfinished
    /// by a failed invocation, every delivery (a `-retry` scenario: beyond
    /// its poison message).
    pub unfinished: usize,
    /// The container's first delivery, ms (a `-retry` scenario: its first
    /// failed delivery).
    pub first_ms: f64,
    /// A `-retry` scenario: each measured retry's failed delivery (the
    /// batch with the poison, before the retry), ms.
    pub failed_ms: Vec<f64>,
}

impl SourceRow {
    pub fn p50(&self) -> f64 {
        let mut sorted = self.delivery_ms.clone();
        sorted.sort_by(f64::total_cmp);
        sorted[(sorted.len() - 1) / 2]
    }

    /// The failed deliveries' p50 (a `-retry` scenario), ms.
    pub fn failed_p50(&self) -> Option<f64> {
        let mut sorted = self.failed_ms.clone();
        sorted.sort_by(f64::total_cmp);
        sorted.get(sorted.len().checked_sub(1)? / 2).copied()
    }

    fn max(&self) -> f64 {
        self.delivery_ms.iter().copied().fold(0.0, f64::max)
    }

    pub fn requests_per_record(&self) -> f64 {
        self.requests as f64 / (RECORDS * self.delivery_ms.len()).max(1) as f64
    }

    /// Requests per record by operation, e.g. `BatchGetItem 0.100;
    /// TransactWriteItems 0.146`.
    pub fn operations(&self) -> String {
        let records = (RECORDS * self.delivery_ms.len()).max(1) as f64;
        let parts: Vec<String> = self
            .operations
            .iter()
            .map(|(op, count)| format!("{op} {:.3}", *count as f64 / records))
            .collect();
        parts.join("; ")
    }

    /// Its BENCH_ONLY label.
    fn label(scenario: &Scenario, path: &str, rtt_ms: u64) -> String {
        format!("sources/{}/{path}/{rtt_ms}ms", scenario.name)
    }
}

/// Every scenario on both paths, at the round trip and at the floor.
pub async fn run(env: &Env) -> Vec<SourceRow> {
    let mut rows = Vec::new();
    for scenario in &SCENARIOS {
        for (path, mode) in PATHS {
            for rtt_ms in [RTT_MS, FLOOR_RTT_MS] {
                if !env.selected(&SourceRow::label(scenario, path, rtt_ms)) {
                    continue;
                }
                let row = match scenario.retry {
                    false => measure(env, scenario, path, mode, rtt_ms, env.reps(3)).await,
                    true => measure_retry(env, scenario, path, mode, rtt_ms, env.reps(3)).await,
                };
                eprintln!(
                    "  {:<24} {:<13} rtt {rtt_ms} ms: p50 {:>7.0} ms (first delivery {:>6.0} ms{})  {:.3} req/record ({}){}",
                    scenario.name,
                    path,
                    row.p50(),
                    row.first_ms,
                    row.failed_p50().map_or(String::new(), |ms| format!(
                        "; the failed deliveries before the retries: p50 {ms:.0} ms"
                    )),
                    row.requests_per_record(),
                    row.operations(),
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

/// The demo function as deployed with the default configuration, but keys
/// from the payload, on `mode`'s commit path; `POISON_POLICY=report` when
/// `report_poison` (a poison message fails the invocation).
fn function(
    env: &Env,
    client: &Client,
    mode: LedgerMode,
    prefix: &str,
    report_poison: bool,
) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let mut vars: BTreeMap<&str, String> = BTreeMap::from([
        ("IDEMPOTENCY_TABLE", env.idempotency_table.clone()),
        ("IDEMPOTENCY_KEY_PREFIX", prefix.to_owned()),
        ("IDEMPOTENCY_KEY_SOURCE", "json:/payment_id".to_owned()),
    ]);
    if report_poison {
        vars.insert("POISON_POLICY", "report".to_owned());
    }
    // The concurrency settings come from the environment, as in Lambda.
    let settings = Settings::from_lookup(|name| match name {
        "MAX_IN_FLIGHT" | "CLAIM_AHEAD" | "MAX_RECORDS_PER_TRANSACTION" => std::env::var(name).ok(),
        _ => vars.get(name).cloned(),
    })
    .expect("bench settings");
    let store = DynamoDbStore::new(client.clone(), settings.store);
    // The demo's default ledger: unbounded (LEDGER_MIN_BALANCE_CENTS unset).
    let handler = LedgerHandler::new(client.clone(), env.ledger_table.clone(), mode);
    BatchFunction::new(
        Engine::new(store, handler, settings.engine),
        settings.function,
    )
    .without_metrics()
}

/// Invokes `function` with each event in turn: the time of them all (ms)
/// and the records reported (in a partial batch response, or left
/// unfinished by an Amazon MQ invocation that failed whole).
async fn deliver(
    function: &BatchFunction<LedgerHandler, DynamoDbStore>,
    events: Vec<Value>,
) -> (f64, usize) {
    let mut unfinished = 0;
    let started = Instant::now();
    for event in events {
        let records = records_in(&event);
        let invocation =
            lambda_runtime::LambdaEvent::new(event, lambda_runtime::Context::default());
        unfinished += match function.handle(invocation).await {
            Ok(response) => response.batch_item_failures.len(),
            Err(InvocationError::BatchNotFinished { left, .. }) => left,
            Err(err) => {
                eprintln!("invocation error: {err}");
                records
            }
        };
    }
    (started.elapsed().as_secs_f64() * 1000.0, unfinished)
}

/// The records of an event: `Records`, or an MSK event's lists.
fn records_in(event: &Value) -> usize {
    match (&event["Records"], &event["records"]) {
        (Value::Array(records), _) => records.len(),
        (_, Value::Object(lists)) => lists
            .values()
            .map(|list| list.as_array().map_or(0, Vec::len))
            .sum(),
        _ => 0,
    }
}

async fn measure(
    env: &Env,
    scenario: &'static Scenario,
    path: &'static str,
    mode: LedgerMode,
    rtt_ms: u64,
    reps: usize,
) -> SourceRow {
    let counter = RequestCounter::default();
    let client = client_with(&env.base, rtt_ms, &counter, &ServiceTime::default());
    let prefix = format!("bench-{}#", env.fresh_tag());
    let function = function(env, &client, mode, &prefix, false);
    let events = |tag: &str| delivery(scenario.source, tag, RECORDS, scenario.batch_size);
    // The container's first delivery: not measured, shown.
    let (first_ms, first_unfinished) = deliver(&function, events(&env.fresh_tag())).await;
    let mut row = SourceRow {
        scenario,
        path,
        rtt_ms,
        delivery_ms: Vec::new(),
        requests: 0,
        operations: BTreeMap::new(),
        unfinished: first_unfinished,
        first_ms,
        failed_ms: Vec::new(),
    };
    for _ in 0..reps {
        let events = events(&env.fresh_tag());
        counter.reset();
        let (ms, unfinished) = deliver(&function, events).await;
        row.delivery_ms.push(ms);
        row.requests += counter.total();
        for (op, stats) in counter.stats() {
            *row.operations.entry(op).or_default() += stats.count;
        }
        row.unfinished += unfinished;
    }
    row
}

/// A `-retry` scenario: each repetition delivers [`RECORDS`] new payments
/// whose last is poison to the warm container (`POISON_POLICY=report`: the
/// invocation fails with `BatchNotFinished`, the poison alone left), then
/// the identical events again, as Lambda retries an Amazon MQ batch whole:
/// that retry is measured (999 duplicates, the poison failing again).
async fn measure_retry(
    env: &Env,
    scenario: &'static Scenario,
    path: &'static str,
    mode: LedgerMode,
    rtt_ms: u64,
    reps: usize,
) -> SourceRow {
    let counter = RequestCounter::default();
    let client = client_with(&env.base, rtt_ms, &counter, &ServiceTime::default());
    let prefix = format!("bench-{}#", env.fresh_tag());
    let function = function(env, &client, mode, &prefix, true);
    let events = |tag: &str| poisoned_delivery(scenario.source, tag, RECORDS, scenario.batch_size);
    // Every delivery leaves the poison, and the poison alone, unfinished.
    let beyond_poison = |left: usize| left.abs_diff(1);
    // The container's first delivery and its retry: not measured, the
    // first shown.
    let tag = env.fresh_tag();
    let (first_ms, first_left) = deliver(&function, events(&tag)).await;
    let (_, retry_left) = deliver(&function, events(&tag)).await;
    let mut row = SourceRow {
        scenario,
        path,
        rtt_ms,
        delivery_ms: Vec::new(),
        requests: 0,
        operations: BTreeMap::new(),
        unfinished: beyond_poison(first_left) + beyond_poison(retry_left),
        first_ms,
        failed_ms: Vec::new(),
    };
    for _ in 0..reps {
        let tag = env.fresh_tag();
        let (failed_ms, left) = deliver(&function, events(&tag)).await;
        row.failed_ms.push(failed_ms);
        row.unfinished += beyond_poison(left);
        let retry = events(&tag);
        counter.reset();
        let (ms, left) = deliver(&function, retry).await;
        row.delivery_ms.push(ms);
        row.requests += counter.total();
        for (op, stats) in counter.stats() {
            *row.operations.entry(op).or_default() += stats.count;
        }
        row.unfinished += beyond_poison(left);
    }
    row
}

/// `csv` (this run's rows, [`csv`]) merged into the CSV at `path`: its rows
/// of the same scenario, path and round trip replaced in place, the others
/// kept, new ones appended (a BENCH_ONLY run adds or updates its rows).
pub fn merged_csv(path: &Path, csv: &str) -> String {
    let key = |line: &str| -> Vec<String> {
        let fields: Vec<&str> = line.split(',').collect();
        [0, 3, 4]
            .iter()
            .map(|&i| fields.get(i).copied().unwrap_or_default().to_owned())
            .collect()
    };
    let mut lines = csv.lines();
    let header = lines.next().unwrap_or_default();
    let new: Vec<&str> = lines.collect();
    let mut used = vec![false; new.len()];
    let mut out = format!("{header}\n");
    let old = std::fs::read_to_string(path).unwrap_or_default();
    for line in old.lines().skip(1).filter(|line| !line.is_empty()) {
        match new.iter().position(|row| key(row) == key(line)) {
            Some(i) => {
                out.push_str(new[i]);
                used[i] = true;
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    for (row, _) in new.iter().zip(&used).filter(|(_, used)| !**used) {
        out.push_str(row);
        out.push('\n');
    }
    out
}

/// Powertools' p50 and requests per record by scenario, at the comparison's
/// round trip and on as many records, from `bench/powertools-sources.csv`
/// (written by benches/powertools/sources.py).
pub fn powertools(out_dir: &Path) -> BTreeMap<String, (f64, f64)> {
    let number = |field: Option<&String>| field.and_then(|text| text.parse::<f64>().ok());
    crate::sizing::csv_rows(&out_dir.join("powertools-sources.csv"))
        .filter(|fields| {
            number(fields.get(1)) == Some(RTT_MS as f64)
                && number(fields.get(8)) == Some(RECORDS as f64)
        })
        .filter_map(|fields| {
            Some((
                fields.first()?.clone(),
                (fields.get(3)?.parse().ok()?, fields.get(5)?.parse().ok()?),
            ))
        })
        .collect()
}

/// The row at the floor for `row`'s scenario and path.
fn floor<'a>(rows: &'a [SourceRow], row: &SourceRow) -> Option<&'a SourceRow> {
    rows.iter().find(|r| {
        r.scenario.name == row.scenario.name && r.path == row.path && r.rtt_ms == FLOOR_RTT_MS
    })
}

/// The table against Powertools: a line per scenario and path at the
/// comparison's round trip, the floor beside it.
pub fn table(rows: &[SourceRow], powertools: &BTreeMap<String, (f64, f64)>) -> String {
    let mut out = format!(
        "| 1,000 new payments, {RTT_MS} ms RTT | batches | path | p50 (warm container) | requests / record | floor ({FLOOR_RTT_MS} ms) | Powertools p50 | Powertools requests / record | vs Powertools | first delivery of a new container |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    );
    for row in rows.iter().filter(|r| r.rtt_ms == RTT_MS) {
        let scenario = row.scenario;
        let theirs = powertools.get(scenario.name);
        out.push_str(&format!(
            "| {}{} | {} x {} | {} | {:.0} ms | {:.3} | {} | {} | {} | {} | {:.0} ms |{}\n",
            scenario.source.label(),
            match scenario.retry {
                true => ", the batch retried after one poison message",
                false => "",
            },
            scenario.batches(),
            scenario.batch_size.min(RECORDS),
            row.path,
            row.p50(),
            row.requests_per_record(),
            floor(rows, row).map_or("-".into(), |f| format!("{:.0} ms", f.p50())),
            theirs.map_or("-".into(), |(p50, _)| format!("{p50:.0} ms")),
            theirs.map_or("-".into(), |(_, per)| format!("{per:.3}")),
            theirs.map_or("-".into(), |(p50, _)| format!("{:.1}x", p50 / row.p50())),
            row.first_ms,
            match row.unfinished {
                0 => String::new(),
                n => format!(" {n} records NOT finished"),
            },
        ));
    }
    if powertools.is_empty() {
        out.push_str(
            "(no bench/powertools-sources.csv: run benches/powertools/sources.py first)\n",
        );
    }
    out
}

/// Every row, and at the comparison's round trip its floor and Powertools'
/// figures.
pub fn csv(rows: &[SourceRow], powertools: &BTreeMap<String, (f64, f64)>) -> String {
    let mut out = String::from(
        "scenario,batch_size,batches,path,rtt_ms,reps,p50_ms,max_ms,first_delivery_ms,requests_per_record,requests_by_operation,unfinished,floor_p50_ms,powertools_p50_ms,powertools_requests_per_record,vs_powertools\n",
    );
    for row in rows {
        let scenario = row.scenario;
        let at_rtt = row.rtt_ms == RTT_MS;
        let theirs = powertools.get(scenario.name).filter(|_| at_rtt);
        out.push_str(&format!(
            "{},{},{},{},{},{},{:.1},{:.1},{:.1},{:.4},{},{},{},{},{},{}\n",
            scenario.name,
            scenario.batch_size,
            scenario.batches(),
            row.path,
            row.rtt_ms,
            row.delivery_ms.len(),
            row.p50(),
            row.max(),
            row.first_ms,
            row.requests_per_record(),
            row.operations(),
            row.unfinished,
            floor(rows, row)
                .filter(|_| at_rtt)
                .map_or(String::new(), |f| format!("{:.1}", f.p50())),
            theirs.map_or(String::new(), |(p50, _)| format!("{p50:.1}")),
            theirs.map_or(String::new(), |(_, per)| format!("{per:.4}")),
            theirs.map_or(String::new(), |(p50, _)| format!("{:.2}", p50 / row.p50())),
        ));
    }
    out
}
