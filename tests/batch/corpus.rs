//! The bad-input corpus: every case in `tests/corpus/` (format in
//! `tests/corpus/README.md`) runs through the real function (the demo ledger
//! on DynamoDB Local, under a fresh key prefix per case, partition ordering)
//! and must end exactly as its file says: the invocation error, or the exact
//! records reported, every other record finished, the outcome and logged
//! detail of named records, and the idempotency items stored.
//!
//! For every case that is not an invocation error it also checks that
//! nothing is lost: the per-record log lines (captured from `tracing`) name
//! every record of the event exactly once, finished + reported = records,
//! and the reported log lines are exactly the response's failures.

use crate::support;

use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::store::Store;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use exactly_once::engine::{Engine, EngineConfig, PoisonPolicy};
use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy};
use exactly_once::lambda::{BatchFunction, FunctionSettings};
use lambda_runtime::{Context, LambdaEvent};
use ledger::{LedgerHandler, LedgerMode};
use serde_json::{Value, json};
use support::msk::{Rec, event_of, payment_json, record_json};
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

// ---------------------------------------------------------------------------
// Log capture: the per-record lines of src/lambda/report.rs
// ---------------------------------------------------------------------------

/// One event's fields, as text.
type Line = BTreeMap<String, String>;

/// A subscriber that keeps the INFO+ events' fields.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Line>>>);

struct Fields<'a>(&'a mut Line);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
}

impl Subscriber for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::INFO
    }
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut line = Line::new();
        event.record(&mut Fields(&mut line));
        self.0.lock().expect("log lock").push(line);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// A record's log line: coordinates, finished or not, outcome, detail.
#[derive(Debug)]
struct RecordLine {
    at: String,
    finished: bool,
    outcome: String,
    detail: String,
}

fn record_lines(lines: &[Line]) -> Vec<RecordLine> {
    lines
        .iter()
        .filter_map(|line| {
            let finished = match line.get("message").map(String::as_str) {
                Some("record finished") => true,
                Some("record not finished, reported") => false,
                _ => return None,
            };
            Some(RecordLine {
                at: format!("{}@{}", line.get("partition")?, line.get("offset")?),
                finished,
                outcome: line.get("outcome")?.clone(),
                detail: line.get("detail").cloned().unwrap_or_default(),
            })
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn case_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("tests/corpus")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
}

/// The events too large to keep as files.
fn generated(name: &str) -> Value {
    match name {
        // 10 partitions x offsets 0..999; the record at offset 5 of each has
        // a value that is not base64.
        "10000-records" => event_of(
            (0..10)
                .map(|p| {
                    let name: &'static str = format!("payments-{p}").leak();
                    let records = (0..1000)
                        .map(|offset| {
                            let key = format!("k-{p}-{offset}");
                            let value = payment_json(&key, "corpus-acc-10k", 1).into_bytes();
                            let mut json = record_json(
                                name,
                                &Rec {
                                    offset,
                                    key: Some(key),
                                    value,
                                },
                            );
                            if offset == 5 {
                                json["value"] = json!("%%%");
                            }
                            json
                        })
                        .collect();
                    (name, records)
                })
                .collect(),
        ),
        // One payment of 1 MiB + its fields.
        "payload-1mb" => {
            let value = json!({
                "payment_id": "k-big", "account_id": "corpus-acc-big", "amount_cents": 1,
                "currency": "EUR", "padding": "x".repeat(1 << 20),
            });
            let rec = Rec {
                offset: 0,
                key: Some("k-big".into()),
                value: value.to_string().into_bytes(),
            };
            event_of(vec![("payments-0", vec![record_json("payments-0", &rec)])])
        }
        other => panic!("unknown generator {other:?}"),
    }
}

/// The event of a case, or (for `raw` text that is not JSON) the error
/// lambda_runtime meets before calling the handler.
fn event_of_case(case: &Value) -> Result<Value, String> {
    if let Some(raw) = case.get("raw") {
        let raw = raw.as_str().expect("raw is a string");
        return serde_json::from_str(raw).map_err(|err| format!("payload is not JSON: {err}"));
    }
    if let Some(name) = case.get("generate") {
        return Ok(generated(name.as_str().expect("generate is a name")));
    }
    Ok(case.get("event").cloned().expect("event, raw or generate"))
}

/// `partition@offset` of every record of the event that has an integer
/// offset (the cases that are not invocation errors have only those).
fn event_records(event: &Value) -> Vec<String> {
    let mut all = Vec::new();
    if let Some(Value::Object(partitions)) = event.get("records") {
        for (name, records) in partitions {
            for record in records.as_array().into_iter().flatten() {
                if let Some(offset) = record.get("offset").and_then(Value::as_i64) {
                    all.push(format!("{name}@{offset}"));
                }
            }
        }
    }
    all.sort();
    all
}

async fn function(case: &Value) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let policy = case
        .get("missing_key_policy")
        .and_then(Value::as_str)
        .map_or(MissingKeyPolicy::Reject, |p| {
            MissingKeyPolicy::parse(p).expect("missing_key_policy")
        });
    let source = case.get("keys").and_then(Value::as_str).unwrap_or("header");
    let keys = KeySpec::parse(source, "idempotency-key".into(), policy).expect("keys");
    let client = support::client().await;
    let store = exactly_once::dynamodb::DynamoDbStore::new(
        client.clone(),
        support::store_config(std::time::Duration::from_secs(30)),
    );
    let ledger = LedgerHandler::new(
        client,
        support::env("LEDGER_TABLE"),
        LedgerMode::Transactional,
    );
    // Partition ordering, whatever TEST_ORDERING_MODE says: the expectations
    // are written for it.
    BatchFunction::new(
        // POISON_POLICY=report: a failed record's effect on its partition
        // is part of what each case pins (parking: tests/batch/handler.rs).
        Engine::new(
            store,
            ledger,
            EngineConfig {
                poison: PoisonPolicy::Report,
                ..EngineConfig::default()
            },
        ),
        FunctionSettings::new(keys),
    )
}

/// Runs one case; `Err` lists what differs from its expectation.
async fn run_case(case: Value, logs: Capture) -> Result<(), String> {
    let expect = case.get("expect").cloned().expect("expect");
    let event = event_of_case(&case);
    let wanted_error = expect.get("invocation_error").and_then(Value::as_str);
    let event = match (event, wanted_error) {
        (Err(err), Some(wanted)) if err.contains(wanted) => return Ok(()),
        (Err(err), _) => return Err(format!("event: {err}")),
        (Ok(event), _) => event,
    };
    let function = function(&case).await;
    let result = function
        .handle(LambdaEvent::new(event.clone(), Context::default()))
        .await;
    let response = match (result, wanted_error) {
        (Err(err), Some(wanted)) if err.to_string().contains(wanted) => return Ok(()),
        (Err(err), _) => return Err(format!("invocation error: {err}")),
        (Ok(response), Some(wanted)) => {
            return Err(format!(
                "wanted an invocation error {wanted:?}, got {response:?}"
            ));
        }
        (Ok(response), None) => response,
    };
    let mut problems = Vec::new();
    let mut check = |ok: bool, what: String| {
        if !ok {
            problems.push(what);
        }
    };
    let reported = support::msk::reported(&response);
    if let Some(wanted) = expect.get("reported") {
        let wanted: Vec<String> = serde_json::from_value(wanted.clone()).expect("reported");
        check(
            reported == wanted,
            format!("reported {reported:?}, wanted {wanted:?}"),
        );
    }
    if let Some(count) = expect.get("reported_count").and_then(Value::as_u64) {
        check(
            reported.len() as u64 == count,
            format!("{} reported, wanted {count}", reported.len()),
        );
    }

    // Nothing lost: one log line per record of the event.
    let lines = record_lines(&logs.0.lock().expect("log lock"));
    let mut logged: Vec<String> = lines.iter().map(|l| l.at.clone()).collect();
    logged.sort();
    let records = event_records(&event);
    check(
        logged == records,
        format!(
            "log lines for {} records, the event has {}",
            logged.len(),
            records.len()
        ),
    );
    let finished = lines.iter().filter(|l| l.finished).count();
    let mut reported_lines: Vec<String> = lines
        .iter()
        .filter(|l| !l.finished)
        .map(|l| l.at.clone())
        .collect();
    reported_lines.sort();
    let mut sorted_response = reported.clone();
    sorted_response.sort();
    check(
        reported_lines == sorted_response,
        format!("log says reported {reported_lines:?}, response {sorted_response:?}"),
    );
    check(
        finished + reported.len() == records.len(),
        format!(
            "finished {finished} + reported {} != {} records",
            reported.len(),
            records.len()
        ),
    );
    if let Some(wanted) = expect.get("finished").and_then(Value::as_u64) {
        check(
            finished as u64 == wanted,
            format!("finished {finished}, wanted {wanted}"),
        );
    }

    // Outcomes and logged details of named records; every other finished
    // record is plainly processed.
    let outcomes = expect.get("outcomes").and_then(Value::as_object);
    for line in &lines {
        match outcomes
            .and_then(|o| o.get(&line.at))
            .and_then(Value::as_str)
        {
            Some(wanted) => check(
                line.outcome == wanted,
                format!("{}: outcome {}, wanted {wanted}", line.at, line.outcome),
            ),
            None if line.finished => check(
                line.outcome == "processed",
                format!("{}: outcome {}, wanted processed", line.at, line.outcome),
            ),
            None => {}
        }
    }
    for (at, wanted) in expect
        .get("logged")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let wanted = wanted.as_str().expect("logged detail");
        let details: Vec<&str> = lines
            .iter()
            .filter(|l| &l.at == at)
            .map(|l| l.detail.as_str())
            .collect();
        check(
            !details.is_empty() && details.iter().all(|d| d.contains(wanted)),
            format!("{at}: logged {details:?}, wanted {wanted:?}"),
        );
    }

    // The idempotency items.
    for (key, wanted) in expect
        .get("stored")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let item = function
            .engine()
            .store()
            .get(key)
            .await
            .map_err(|err| format!("read {key:?}: {err}"))?;
        let shown = |k: &str| k.chars().take(40).collect::<String>();
        match (wanted, item) {
            (Value::Null, None) => {}
            // A claim made ahead and released: no effect, claimable at once.
            (Value::String(wanted), item) if wanted == "released" => match item {
                None => {}
                Some(item) => check(
                    item.status.as_str() == "STARTED" && item.lock_expires_at_ms == Some(0),
                    format!(
                        "{:?}: {} lock {:?}, wanted released",
                        shown(key),
                        item.status.as_str(),
                        item.lock_expires_at_ms
                    ),
                ),
            },
            (Value::Null, Some(item)) => {
                check(false, format!("{:?} stored: {:?}", shown(key), item.status));
            }
            (_, None) => check(false, format!("{:?} not stored", shown(key))),
            (wanted, Some(item)) => {
                let status = wanted
                    .as_str()
                    .or_else(|| wanted.get("status").and_then(Value::as_str))
                    .expect("a status");
                check(
                    item.status.as_str() == status,
                    format!(
                        "{:?}: {}, wanted {status}",
                        shown(key),
                        item.status.as_str()
                    ),
                );
                if let Some(error) = wanted.get("error").and_then(Value::as_str) {
                    let stored = item.error.unwrap_or_default();
                    check(
                        stored.contains(error),
                        format!("{:?}: error {stored:?}, wanted {error:?}", shown(key)),
                    );
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n    "))
    }
}

#[tokio::test]
async fn every_corpus_case_ends_exactly_as_its_file_says() {
    let files = case_files();
    assert!(files.len() >= 30, "{} corpus cases", files.len());
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().expect("a name").to_string_lossy();
        let case: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("read case"))
            .unwrap_or_else(|err| panic!("{name}: not a JSON case: {err}"));
        let logs = Capture::default();
        // Thread-local: this current-thread runtime runs the spawned case on
        // this thread, so its log lines come here and only here.
        let _guard = tracing::subscriber::set_default(logs.clone());
        let started = Instant::now();
        // Spawned so that a panic is reported as the case's failure.
        let result = tokio::spawn(run_case(case, logs))
            .await
            .unwrap_or_else(|panic| Err(format!("panicked: {panic}")));
        eprintln!("{name}: {:.2} s", started.elapsed().as_secs_f64());
        if let Err(problem) = result {
            failures.push(format!("{name}:\n    {problem}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}
