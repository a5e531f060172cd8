//! The metrics an operator alarms on, read from the EMF lines the function
//! writes (one JSON document per line, as CloudWatch's log agent reads them
//! from stdout), on DynamoDB Local: store requests and their round trips
//! (`StoreRequests`, `StoreLatency` as one value per request, for
//! percentiles), failing closed (`FailedClosed`), an effect whose completion
//! was lost (`UnrecordedEffects`), and the scheduled stuck-key check
//! (`StartedKeys`, `StuckKeys`, `OldestStartedAgeSeconds`); and on every
//! store, how far the container's clock is known to be off the store's
//! (`ClockSkewMs`), with the warning a container whose clock is known off
//! logs before it takes over a lease.

use crate::support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_dynamodb::types::TransactWriteItem;
use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::CountRequests as _;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::{
    COMPLETION_LINGER, CommitPath, Completion, Engine, EngineConfig, FencingToken, HandlerError,
    RecordHandler,
};
use exactly_once::lambda::{BatchFunction, KafkaRecord};
use exactly_once::store::requests::RequestCounter;
use exactly_once::store::{ClaimOutcome, ClaimRequest, Operator, Store};
use lambda_runtime::{Config, Context, LambdaEvent};
use ledger::{LedgerHandler, LedgerMode};
use serde_json::{Value, json};
use support::charges::{self, ChargeApi};
use support::msk::{event, header_keys, payment, reported, settings};
use support::proxy::Proxy;

/// What the function wrote, one parsed EMF document per line.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<Value>>>);

impl Lines {
    fn writer(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let lines = self.0.clone();
        move |line: &str| {
            let doc = serde_json::from_str(line).expect("each line is one JSON document");
            lines.lock().expect("lock").push(doc);
        }
    }

    fn take(&self) -> Vec<Value> {
        std::mem::take(&mut *self.0.lock().expect("lock"))
    }
}

fn invocation(payload: Value) -> LambdaEvent<Value> {
    let mut context = Context::default();
    context.request_id = "8f5c2a4e-7d1b-4c3e-9a6f-0b1d2e3f4a5b".into();
    context.env_config = Arc::new(Config {
        function_name: "payments-exactly-once".into(),
        ..Config::default()
    });
    LambdaEvent::new(payload, context)
}

/// The names a document's directive declares, with their units.
fn declared(doc: &Value) -> Vec<(String, String)> {
    let directive = &doc["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], "MskExactlyOnce");
    assert_eq!(directive["Dimensions"], json!([["FunctionName"]]));
    assert_eq!(doc["FunctionName"], "payments-exactly-once");
    directive["Metrics"]
        .as_array()
        .expect("metrics")
        .iter()
        .map(|m| {
            (
                m["Name"].as_str().expect("name").into(),
                m["Unit"].as_str().expect("unit").into(),
            )
        })
        .collect()
}

fn latencies(docs: &[Value]) -> Vec<f64> {
    docs.iter()
        .filter_map(|doc| doc.get("StoreLatency"))
        .flat_map(|values| values.as_array().expect("StoreLatency: an array").clone())
        .map(|value| value.as_f64().expect("ms"))
        .collect()
}

/// `n` payments of 1 cent to a fresh account on `payments-0`.
fn payments(n: i64) -> Value {
    let account = support::msk::account();
    let records = (0..n).map(|i| payment(i, &format!("p-{i}"), &account, 1));
    event(vec![("payments-0", records.collect())])
}

/// The demo ledger (locking path) on `store`, its ledger written with
/// `client`, its EMF lines kept in `lines`, with `engine`'s settings.
fn ledger_function(
    store: DynamoDbStore,
    client: aws_sdk_dynamodb::Client,
    lines: &Lines,
    engine: EngineConfig,
) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let table = support::env("LEDGER_TABLE");
    let ledger = LedgerHandler::new(client, table, LedgerMode::Transactional);
    let engine = Engine::new(store, ledger, engine);
    BatchFunction::new(engine, settings(header_keys())).with_metrics_writer(lines.writer())
}

/// The EMF documents of `batch` through the demo ledger (locking path) on
/// DynamoDB Local, every record applied, and the requests its client sent.
async fn documents_of(batch: Value, engine: EngineConfig) -> (Vec<Value>, u64) {
    let counter = RequestCounter::default();
    let client = counter.attach(&support::client().await);
    let config = support::store_config(Duration::from_secs(30));
    let store = DynamoDbStore::new(client.clone(), config);
    let lines = Lines::default();
    let function = ledger_function(store, client, &lines, engine);
    let response = function.handle(invocation(batch)).await;
    assert!(response.expect("handled").batch_item_failures.is_empty());
    (lines.take(), counter.total())
}

#[tokio::test]
async fn an_invocation_writes_its_store_requests_and_each_round_trip() {
    let (docs, requests) = documents_of(payments(3), EngineConfig::default()).await;
    assert_eq!(docs.len(), 1, "up to 100 round trips: one document");
    let doc = &docs[0];
    let names = declared(doc);
    for (name, unit) in [
        ("StoreRequests", "Count"),
        ("StoreLatency", "Milliseconds"),
        ("FailedClosed", "Count"),
        ("UnrecordedEffects", "Count"),
        ("Processed", "Count"),
    ] {
        assert!(
            names.contains(&(name.into(), unit.into())),
            "{name} ({unit}) in {names:?}"
        );
    }
    assert_eq!(doc["Records"], 3.0);
    assert_eq!(doc["Processed"], 3.0);
    assert_eq!(
        (
            doc["FailedClosed"].clone(),
            doc["UnrecordedEffects"].clone()
        ),
        (json!(0.0), json!(0.0))
    );
    assert_eq!(
        doc["StoreRequests"], requests as f64,
        "every request the client sent"
    );
    let round_trips = latencies(&docs);
    assert_eq!(round_trips.len() as u64, requests, "one value per request");
    assert!(round_trips.iter().all(|ms| *ms > 0.0), "{round_trips:?}");
}

#[tokio::test]
async fn more_than_100_round_trips_are_split_over_documents() {
    // A transaction per record beside the batched claims: over 100 requests.
    let engine = EngineConfig {
        max_records_per_transaction: 1,
        ..EngineConfig::default()
    };
    let (docs, requests) = documents_of(payments(120), engine).await;
    assert!(requests > 100, "{requests} requests");
    assert_eq!(docs.len() as u64, requests.div_ceil(100));
    for extra in &docs[1..] {
        assert_eq!(
            declared(extra),
            [("StoreLatency".to_owned(), "Milliseconds".to_owned())]
        );
    }
    assert_eq!(latencies(&docs).len() as u64, requests);
    assert_eq!(docs[0]["StoreRequests"], requests as f64);
}

#[tokio::test]
async fn an_unreachable_store_fails_closed_and_says_so() {
    let store = DynamoDbStore::new(
        support::unreachable_client().await,
        support::store_config(Duration::from_secs(30)),
    );
    let lines = Lines::default();
    let function = ledger_function(
        store,
        support::client().await,
        &lines,
        EngineConfig::default(),
    );
    let batch = event(vec![("payments-0", vec![payment(0, "p-1", "acc", 1)])]);
    let answer = function.handle(invocation(batch)).await;
    assert!(
        matches!(
            answer,
            Err(exactly_once::lambda::InvocationError::StoreUnavailable { reported: 1 })
        ),
        "{answer:?}"
    );
    let docs = lines.take();
    assert_eq!(docs[0]["FailedClosed"], 1.0);
    assert_eq!(docs[0]["StoreError"], 1.0);
    assert_eq!(docs[0]["Reported"], 1.0);
}

/// A direct-mode handler: charges a payment API (the effect lives outside
/// the store); after the charge of `p-2`, before its completion, DynamoDB
/// goes away.
struct ChargeThenOutage {
    api: SocketAddr,
    dynamodb: Arc<Proxy>,
}

impl RecordHandler<TransactWriteItem> for ChargeThenOutage {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        CommitPath::Locking
    }

    async fn handle(
        &self,
        token: &FencingToken,
        _: &KafkaRecord,
    ) -> Result<Completion<TransactWriteItem>, HandlerError> {
        let payment = token.key.rsplit('#').next().unwrap_or_default();
        charges::charge(self.api, &token.key, payment)
            .await
            .map_err(HandlerError::Retryable)?;
        // Work this slow has its completion sent at once, not held back for
        // its neighbours': p-1's is written while p-2 runs.
        tokio::time::sleep(COMPLETION_LINGER).await;
        if token.key.ends_with("#p-2") {
            self.dynamodb.cut();
        }
        Ok(Completion::default())
    }
}

#[tokio::test]
async fn an_effect_whose_completion_was_lost_is_counted_as_unrecorded() {
    let api = ChargeApi::start().await;
    let proxy = Arc::new(Proxy::start(support::dynamodb_address()).await);
    let store = DynamoDbStore::new(
        support::client_at(&proxy.endpoint()).await,
        support::store_config(Duration::from_secs(30)),
    );
    let handler = ChargeThenOutage {
        api: api.addr,
        dynamodb: proxy.clone(),
    };
    let lines = Lines::default();
    let function = BatchFunction::new(
        Engine::new(store, handler, EngineConfig::default()),
        settings(header_keys()),
    )
    .with_metrics_writer(lines.writer());
    let batch = event(vec![(
        "payments-0",
        vec![payment(0, "p-1", "acc", 1), payment(1, "p-2", "acc", 1)],
    )]);
    let invocation = function.invoke(invocation(batch)).await.expect("invoked");
    assert_eq!(reported(&invocation.response), ["payments-0@1"]);
    assert_eq!(invocation.records[0].outcome, "processed");
    assert_eq!(invocation.records[1].outcome, "unrecorded-effects");
    let detail = invocation.records[1].detail.clone().unwrap_or_default();
    assert!(
        detail.starts_with(
            "the work's effect happened but its completion was not recorded: store unavailable"
        ),
        "{detail}"
    );
    assert_eq!(api.charges("p-2"), 1, "the charge happened");
    let docs = lines.take();
    assert_eq!(docs[0]["UnrecordedEffects"], 1.0);
    assert_eq!(
        docs[0]["StoreError"], 0.0,
        "not counted as a plain store error"
    );
    assert_eq!(docs[0]["FailedClosed"], 1.0, "DynamoDB was gone");
}

#[tokio::test]
async fn the_scheduled_check_writes_the_stuck_keys_and_the_oldest_age() {
    let store = support::store(Duration::from_secs(30)).await;
    let lines = Lines::default();
    let function = ledger_function(
        store.clone(),
        support::client().await,
        &lines,
        EngineConfig::default(),
    );
    let _working = support::ops::acquire(&store, "working").await;
    for key in ["abandoned-1", "abandoned-2"] {
        let lease = support::ops::acquire(&store, key).await;
        store.release(&lease).await.expect("release");
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let scheduled =
        serde_json::from_str(include_str!("../../events/scheduled.json")).expect("JSON");
    let response = function
        .handle(invocation(scheduled))
        .await
        .expect("checked");
    assert!(response.batch_item_failures.is_empty());
    let docs = lines.take();
    assert_eq!(docs.len(), 2, "the check's document and the sweep's");
    assert_eq!(
        declared(&docs[0]),
        [
            ("StartedKeys".to_owned(), "Count".to_owned()),
            ("StuckKeys".to_owned(), "Count".to_owned()),
            ("OldestStartedAgeSeconds".to_owned(), "Seconds".to_owned()),
        ]
    );
    assert_eq!(
        declared(&docs[1]),
        [
            ("UnsentRecords".to_owned(), "Count".to_owned()),
            ("SweptRecords".to_owned(), "Count".to_owned()),
            ("OldestUnsentAgeSeconds".to_owned(), "Seconds".to_owned()),
        ]
    );
    assert_eq!(docs[1]["UnsentRecords"], 0.0, "nothing emitted here");
    assert_eq!(docs[0]["StartedKeys"], 3.0);
    assert_eq!(docs[0]["StuckKeys"], 2.0);
    let age = docs[0]["OldestStartedAgeSeconds"]
        .as_f64()
        .expect("seconds");
    assert!((1.0..30.0).contains(&age), "{age}");
}

/// `ClockSkewMs` of one invocation of one record on `store`.
async fn clock_skew_metric<S: Operator>(store: S) -> Option<f64> {
    let lines = Lines::default();
    let engine = Engine::new(store, support::msk::Finish, EngineConfig::default());
    let function =
        BatchFunction::new(engine, settings(header_keys())).with_metrics_writer(lines.writer());
    let response = function.handle(invocation(payments(1))).await;
    assert!(response.expect("handled").batch_item_failures.is_empty());
    let docs = lines.take();
    docs[0]
        .get("ClockSkewMs")
        .map(|value| value.as_f64().expect("ms"))
}

/// `config` with its clock `offset_ms` ahead of this process's.
fn skewed(mut config: StoreConfig, offset_ms: i64) -> StoreConfig {
    config.clock_offset_ms = offset_ms;
    config
}

/// 90 s: a clock far beyond the 400 ms the guarantees assume.
const AHEAD_MS: i64 = 90_000;

#[tokio::test]
async fn every_store_measures_how_far_the_containers_clock_is_off_its_own() {
    let lease = Duration::from_secs(30);
    let dynamodb = |offset| async move {
        let config = skewed(support::store_config(lease), offset);
        DynamoDbStore::new(support::client().await, config)
    };
    let postgres = |offset| async move {
        let store = support::postgres::store(lease).await;
        store.with_config(skewed(store.config().clone(), offset))
    };
    let redis = |offset| {
        let store = support::redis::store(lease);
        store.with_config(skewed(store.config().clone(), offset))
    };
    // (store, how finely its answers give its time: what an in-sync clock
    // may still show, and how far below the true offset a skew may read)
    let measured = [
        (
            "DynamoDB (Date, whole seconds)",
            clock_skew_metric(dynamodb(0).await).await,
            clock_skew_metric(dynamodb(AHEAD_MS).await).await,
        ),
        (
            "PostgreSQL (clock_timestamp)",
            clock_skew_metric(postgres(0).await).await,
            clock_skew_metric(postgres(AHEAD_MS).await).await,
        ),
        (
            "Redis (TIME)",
            clock_skew_metric(redis(0)).await,
            clock_skew_metric(redis(AHEAD_MS)).await,
        ),
    ];
    for (store, in_sync, ahead) in measured {
        // The same host's clock: nothing beyond the answer's resolution and
        // round trip, so nothing proven.
        assert_eq!(in_sync, Some(0.0), "{store}: a clock in sync");
        // 90 s ahead: proven to within a second and a round trip below it,
        // never above it.
        let ahead = ahead.expect("a skew measured");
        assert!(
            ahead <= AHEAD_MS as f64 && ahead > (AHEAD_MS - 1_000) as f64 - 5_000.0,
            "{store}: a clock 90 s ahead read as {ahead} ms"
        );
    }
}

/// The log lines of what `work` does, as the function's JSON lines.
async fn logged<T>(work: impl Future<Output = T>) -> (T, String) {
    let buffer = Arc::new(Mutex::new(Vec::<u8>::new()));
    let writer = {
        let buffer = Arc::clone(&buffer);
        move || LogBuffer(Arc::clone(&buffer))
    };
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_writer(writer)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let result = work.await;
    let text = String::from_utf8(buffer.lock().expect("lock").clone()).expect("utf-8");
    (result, text)
}

/// A log line writer into a shared buffer.
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `key` claimed by `store` for a payload, as a container's claim, its
/// lease ending by `lease_cap_ms` if given.
async fn claim<S: Store>(
    store: &S,
    key: &str,
    owner: &str,
    lease_cap_ms: Option<u64>,
) -> ClaimOutcome {
    store
        .claim(ClaimRequest {
            key,
            payload_hash: "sha256:payment",
            origin: None,
            lease_cap_ms,
            owner: Some(owner),
        })
        .await
        .expect("a claim")
}

/// A container whose clock is 90 s ahead takes over a lease another holds
/// for 30 s more; before it does, it says so: its offset, the bound, the
/// lease. One in sync, taking over a lease that did end, says nothing.
async fn a_skewed_takeover_is_logged<S: Store>(name: &str, holder: S, skewed_taker: S, taker: S) {
    let key = uuid::Uuid::new_v4().to_string();
    assert!(matches!(
        claim(&holder, &key, "holder", None).await,
        ClaimOutcome::Acquired(_)
    ));
    let (outcome, log) = logged(claim(&skewed_taker, &key, "skewed", None)).await;
    assert!(
        matches!(outcome, ClaimOutcome::TakenOver(_)),
        "{name}: {outcome:?}"
    );
    let warning = log
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a JSON line"))
        .find(|line| {
            line["fields"]["message"]
                .as_str()
                .is_some_and(|message| message.contains("clock known to be off"))
        })
        .unwrap_or_else(|| panic!("{name}: no warning in {log}"));
    assert_eq!(warning["level"], "WARN", "{name}");
    let skew = warning["fields"]["skew_ms"].as_i64().expect("skew_ms");
    assert!(
        skew > AHEAD_MS - 6_000 && skew <= AHEAD_MS,
        "{name}: {skew}"
    );
    assert_eq!(warning["fields"]["bound_ms"], 400, "{name}");
    assert!(!log.contains(&key), "{name}: no key in the log line");

    // A lease that did end (200 ms, by the holder's clock, in sync): one
    // in sync takes it over, silently.
    let key = uuid::Uuid::new_v4().to_string();
    let cap = holder.now_ms() + 200;
    assert!(matches!(
        claim(&holder, &key, "holder", Some(cap)).await,
        ClaimOutcome::Acquired(_)
    ));
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (outcome, log) = logged(claim(&taker, &key, "in-sync", None)).await;
    assert!(
        matches!(outcome, ClaimOutcome::TakenOver(_)),
        "{name}: {outcome:?}"
    );
    assert!(!log.contains("clock known to be off"), "{name}: {log}");
}

#[tokio::test]
async fn a_container_whose_clock_is_known_ahead_says_so_before_taking_over_a_lease() {
    let lease = Duration::from_secs(30);
    let config = support::store_config(lease);
    let client = support::client().await;
    a_skewed_takeover_is_logged(
        "DynamoDB",
        DynamoDbStore::new(client.clone(), config.clone()),
        DynamoDbStore::new(client.clone(), skewed(config.clone(), AHEAD_MS)),
        DynamoDbStore::new(client, config),
    )
    .await;
    let postgres = support::postgres::store(lease).await;
    let config = postgres.config().clone();
    a_skewed_takeover_is_logged(
        "PostgreSQL",
        postgres.clone(),
        postgres.with_config(skewed(config.clone(), AHEAD_MS)),
        postgres.with_config(config),
    )
    .await;
    let redis = support::redis::store(lease);
    let config = redis.config().clone();
    a_skewed_takeover_is_logged(
        "Redis",
        redis.clone(),
        redis.with_config(skewed(config.clone(), AHEAD_MS)),
        redis.with_config(config),
    )
    .await;
}
