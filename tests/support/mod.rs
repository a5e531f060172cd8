//! Shared by the integration tests: a DynamoDB Local client and isolated keys.
//!
//! `infra/test.sh` starts DynamoDB Local, creates the tables from
//! template.yaml and exports their names; every test then works under its own
//! random key prefix, so tests run in parallel on one table.
#![allow(dead_code)] // each test binary uses its own part of this module

pub mod capacity;
pub mod charges;
pub mod faults;
pub mod figures;
pub mod kafka;
pub mod ops;
pub mod poller;
pub mod postgres;
pub mod proxy;
pub mod redis;
pub mod runtime_api;
pub mod sam;
pub mod shipped;
pub mod sources;
pub mod sqs;
pub mod transactions;

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::DynamoDbStore;

/// A binary of the workspace (`exactly-once-ops`, `msk-handler`), built
/// first if it is not up to date: this package's tests cannot name another
/// package's binary with `CARGO_BIN_EXE_*`.
pub fn binary(name: &str) -> std::path::PathBuf {
    built("--bin", name)
}

/// An example of this package (`examples/<name>.rs`), built first if it is
/// not up to date, with every feature.
pub fn example(name: &str) -> std::path::PathBuf {
    built("--example", name)
}

/// The executable of `cargo build <kind> <name>`, built once per test
/// process. Built with the workspace's test targets (`--workspace --tests`,
/// fresh after `cargo test`): its dependencies then resolve their features
/// as the tests' own build did (dev-dependencies included), and nothing is
/// compiled a second time with other features.
fn built(kind: &str, name: &str) -> std::path::PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, std::path::PathBuf)>> =
        std::sync::Mutex::new(Vec::new());
    let target = format!("{kind} {name}");
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, path)) = built.iter().find(|(built, _)| *built == target) {
        return path.clone();
    }
    let output = cargo(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--tests",
            kind,
            name,
            "--all-features",
        ])
        .arg("--message-format=json")
        .output()
        .expect("run cargo build");
    assert!(
        output.status.success(),
        "cargo build {target}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let path = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        // The binary itself, not the unit tests `--tests` builds of it.
        .filter(|message| message["target"]["name"] == name && message["profile"]["test"] == false)
        .find_map(|message| message["executable"].as_str().map(std::path::PathBuf::from))
        .unwrap_or_else(|| panic!("cargo build {target} named no executable"));
    built.push((target, path.clone()));
    path
}

/// `program` (cargo, or `cargo` for cargo-lambda) started from a test as
/// from the shell that ran `cargo test`: without the variables cargo sets
/// for a test process (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, `OUT_DIR`, ...).
/// Build scripts watch some of them (ring's `rerun-if-env-changed`), so a
/// build started with them rebuilds ring and every crate above it, and the
/// next `cargo test` rebuilds them back.
pub fn cargo(program: &str) -> std::process::Command {
    let mut command = std::process::Command::new(program);
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        let set_for_tests = [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix))
            || matches!(
                name,
                "CARGO_PRIMARY_PACKAGE"
                    | "CARGO_TARGET_TMPDIR"
                    | "CARGO_RUSTC_CURRENT_DIR"
                    | "OUT_DIR"
            );
        if set_for_tests {
            command.env_remove(name);
        }
    }
    command
}

/// A variable `infra/test.sh` exports; a clear failure without it.
pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run the tests with infra/test.sh (it starts DynamoDB Local)")
    })
}

/// A function's variables as `Function::from_vars` reads them: `vars`'
/// value of a name, `None` for one it does not set.
pub fn lookup<'a>(vars: &'a [(&str, String)]) -> impl Fn(&str) -> Option<String> + Copy + 'a {
    move |name| {
        vars.iter()
            .find(|(var, _)| *var == name)
            .map(|(_, value)| value.clone())
    }
}

pub async fn client() -> Client {
    env("AWS_ENDPOINT_URL_DYNAMODB");
    exactly_once::aws::dynamodb_client().await
}

/// A client whose endpoint nothing listens on.
pub async fn unreachable_client() -> Client {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let port = listener.local_addr().expect("local address").port();
    drop(listener);
    client_at(&format!("http://127.0.0.1:{port}")).await
}

/// A client of DynamoDB Local through `endpoint` (e.g. a [`proxy::Proxy`]).
pub async fn client_at(endpoint: &str) -> Client {
    let config = client()
        .await
        .config()
        .to_builder()
        .endpoint_url(endpoint)
        .build();
    Client::from_conf(config)
}

/// `host:port` of DynamoDB Local.
pub fn dynamodb_address() -> String {
    let endpoint = env("AWS_ENDPOINT_URL_DYNAMODB");
    endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned()
}

/// A store configuration on the test table under a fresh key prefix.
pub fn store_config(lock_timeout: Duration) -> StoreConfig {
    StoreConfig {
        key_prefix: format!("test-{}#", uuid::Uuid::new_v4()),
        lock_timeout,
        ..StoreConfig::new(env("IDEMPOTENCY_TABLE"))
    }
}

pub async fn store(lock_timeout: Duration) -> DynamoDbStore {
    DynamoDbStore::new(client().await, store_config(lock_timeout))
}

/// The raw item under `pk`, as DynamoDB holds it (TTL not applied).
pub async fn raw_item(
    client: &Client,
    table: &str,
    pk: &str,
) -> Option<HashMap<String, AttributeValue>> {
    client
        .get_item()
        .table_name(table)
        .key("pk", AttributeValue::S(pk.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("GetItem on DynamoDB Local")
        .item
}

pub fn number(item: &HashMap<String, AttributeValue>, name: &str) -> u64 {
    item[name]
        .as_n()
        .expect("a number")
        .parse()
        .expect("whole number")
}

pub fn string<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> &'a str {
    item[name].as_s().expect("a string")
}

pub fn sha256_hex(payload: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(payload))
}

/// Builders of MSK events and readers of the demo ledger.
pub mod msk {
    use aws_sdk_dynamodb::types::TransactWriteItem;
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use exactly_once::dynamodb::DynamoDbStore;
    use exactly_once::engine::EngineConfig;
    use exactly_once::engine::{
        CommitPath, Completion, Engine, FencingToken, HandlerError, RecordHandler,
    };
    use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy};
    use exactly_once::lambda::{
        BatchFunction, BatchResponse, FunctionSettings, ItemIdentifier, KafkaRecord, OrderingMode,
    };
    use exactly_once::store::Operator;
    use lambda_runtime::{Context, LambdaEvent};
    use ledger::{LedgerHandler, LedgerMode};
    use serde_json::{Value, json};

    /// A record: offset, idempotency-key header (if any), value bytes.
    pub struct Rec {
        pub offset: i64,
        pub key: Option<String>,
        pub value: Vec<u8>,
    }

    /// A handler of Kafka records that finishes each one, on the locking
    /// path (any store's).
    pub struct Finish;

    impl<E: Send + Sync + 'static> RecordHandler<E> for Finish {
        type Record = KafkaRecord;

        fn commit_path(&self) -> CommitPath {
            CommitPath::Locking
        }

        async fn handle(
            &self,
            _: &FencingToken,
            _: &KafkaRecord,
        ) -> Result<Completion<E>, HandlerError> {
            Ok(Completion::done("finished"))
        }
    }

    pub fn payment(offset: i64, key: &str, account: &str, amount: i64) -> Rec {
        Rec {
            offset,
            key: Some(key.to_owned()),
            value: payment_json(key, account, amount).into_bytes(),
        }
    }

    pub fn payment_json(id: &str, account: &str, amount: i64) -> String {
        json!({"payment_id": id, "account_id": account, "amount_cents": amount, "currency": "EUR"})
            .to_string()
    }

    /// A header as Lambda sends it: a one-entry map of signed bytes.
    pub fn header(name: &str, value: &[u8]) -> Value {
        json!({ name: value.iter().map(|&b| b as i8).collect::<Vec<_>>() })
    }

    pub fn record_json(partition: &str, rec: &Rec) -> Value {
        let (topic, number) = partition.rsplit_once('-').expect("<topic>-<partition>");
        let headers: Vec<Value> = rec
            .key
            .iter()
            .map(|key| header("idempotency-key", key.as_bytes()))
            .collect();
        json!({
            "topic": topic,
            "partition": number.parse::<i64>().expect("partition number"),
            "offset": rec.offset,
            "timestamp": 1_545_084_650_987_i64,
            "timestampType": "CREATE_TIME",
            "key": STANDARD.encode("acc"),
            "value": STANDARD.encode(&rec.value),
            "headers": headers,
        })
    }

    /// `batches` batches of a payment stream over `payments-0` and
    /// `payments-1`, 5 records each per partition: payment `n` (key
    /// `<stream>-<n>`) pays `n + 1` cents to `accounts[n % accounts.len()]`.
    pub fn payment_stream(stream: &str, accounts: &[String], batches: i64) -> Vec<Value> {
        (0..batches)
            .map(|b| {
                let partition = |p: i64| {
                    (0..5)
                        .map(|i| {
                            let n = b * 10 + p * 5 + i;
                            let account = &accounts[n as usize % accounts.len()];
                            payment(b * 5 + i, &format!("{stream}-{n}"), account, n + 1)
                        })
                        .collect()
                };
                event(vec![
                    ("payments-0", partition(0)),
                    ("payments-1", partition(1)),
                ])
            })
            .collect()
    }

    /// The balances a [`payment_stream`] of `batches` leaves, per account.
    pub fn stream_balances(accounts: &[String], batches: usize) -> Vec<i64> {
        let mut expected = vec![0i64; accounts.len()];
        for n in 0..batches * 10 {
            expected[n % accounts.len()] += n as i64 + 1;
        }
        expected
    }

    /// An MSK event from raw record JSON per partition.
    pub fn event_of(partitions: Vec<(&str, Vec<Value>)>) -> Value {
        let records: serde_json::Map<String, Value> = partitions
            .into_iter()
            .map(|(name, records)| (name.to_owned(), Value::Array(records)))
            .collect();
        json!({
            "eventSource": "aws:kafka",
            "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/demo/abc-1",
            "bootstrapServers": "b-1.demo.kafka.us-east-1.amazonaws.com:9092",
            "records": records,
        })
    }

    pub fn event(partitions: Vec<(&str, Vec<Rec>)>) -> Value {
        event_of(
            partitions
                .into_iter()
                .map(|(name, recs)| (name, recs.iter().map(|r| record_json(name, r)).collect()))
                .collect(),
        )
    }

    /// `keys` in the ordering mode `TEST_ORDERING_MODE` names (`partition`
    /// when unset): `infra/test.sh` runs the batch tests in `key` mode too.
    pub fn settings(keys: KeySpec) -> FunctionSettings {
        let ordering = std::env::var("TEST_ORDERING_MODE")
            .map_or(OrderingMode::Partition, |mode| {
                OrderingMode::parse(&mode).expect("TEST_ORDERING_MODE: partition, key or none")
            });
        FunctionSettings {
            ordering,
            ..FunctionSettings::new(keys)
        }
    }

    pub fn header_keys() -> KeySpec {
        KeySpec::parse("header", "idempotency-key".into(), MissingKeyPolicy::Reject)
            .expect("valid key spec")
    }

    /// The ledger mode `TEST_LEDGER_MODE` names (`lock-free`, the default,
    /// when unset): `infra/test.sh` runs the batch tests on the locking path
    /// (`transactional`) too.
    pub fn ledger_mode() -> LedgerMode {
        std::env::var("TEST_LEDGER_MODE").map_or(LedgerMode::LockFree, |mode| {
            LedgerMode::parse(&mode).expect("TEST_LEDGER_MODE: lock-free, transactional or direct")
        })
    }

    /// The commit path of [`ledger_mode`], for the tests' own handlers.
    pub fn commit_path() -> CommitPath {
        match ledger_mode() {
            LedgerMode::LockFree => CommitPath::LockFree,
            LedgerMode::Transactional | LedgerMode::Direct => CommitPath::Locking,
        }
    }

    /// The demo function on the test tables, under a fresh key prefix, in
    /// the ledger mode of [`ledger_mode`].
    pub async fn ledger_function(keys: KeySpec) -> BatchFunction<LedgerHandler, DynamoDbStore> {
        ledger_function_in(ledger_mode(), keys).await
    }

    pub async fn ledger_function_in(
        mode: LedgerMode,
        keys: KeySpec,
    ) -> BatchFunction<LedgerHandler, DynamoDbStore> {
        ledger_function_with(mode, settings(keys), EngineConfig::default()).await
    }

    /// The demo function with `POISON_POLICY=report` (a FAILED record stops
    /// its lane), in the ledger mode of [`ledger_mode`].
    pub async fn reporting_ledger_function(
        keys: KeySpec,
    ) -> BatchFunction<LedgerHandler, DynamoDbStore> {
        let engine = EngineConfig {
            poison: exactly_once::engine::PoisonPolicy::Report,
            ..EngineConfig::default()
        };
        ledger_function_with(ledger_mode(), settings(keys), engine).await
    }

    /// The demo function under `settings` and `engine`, on a fresh key prefix.
    pub async fn ledger_function_with(
        mode: LedgerMode,
        settings: FunctionSettings,
        engine: EngineConfig,
    ) -> BatchFunction<LedgerHandler, DynamoDbStore> {
        let client = super::client().await;
        let store = exactly_once::dynamodb::DynamoDbStore::new(
            client.clone(),
            super::store_config(std::time::Duration::from_secs(30)),
        );
        let ledger = LedgerHandler::new(client, super::env("LEDGER_TABLE"), mode);
        BatchFunction::new(Engine::new(store, ledger, engine), settings).without_metrics()
    }

    /// The demo function under `settings` and `engine`, with each
    /// invocation's `StoreRequests` (read from its EMF document) in order.
    pub async fn ledger_function_counted(
        settings: FunctionSettings,
        engine: EngineConfig,
    ) -> (
        BatchFunction<LedgerHandler, DynamoDbStore>,
        std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
    ) {
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = requests.clone();
        let function = ledger_function_with(ledger_mode(), settings, engine)
            .await
            .with_metrics_writer(move |line: &str| {
                let document: Value = serde_json::from_str(line).expect("an EMF document");
                if let Some(count) = document["StoreRequests"].as_f64() {
                    seen.lock().expect("requests").push(count as u64);
                }
            });
        (function, requests)
    }

    /// A record of `payments-0` at offset 0 holding `value`, no key, no
    /// headers (for tests that hand messages to the engine directly).
    pub fn kafka_record(value: Vec<u8>) -> KafkaRecord {
        KafkaRecord {
            topic: "payments".into(),
            partition: 0,
            offset: 0,
            timestamp_ms: 0,
            timestamp_type: None,
            key: None,
            value,
            headers: Vec::new(),
            key_schema: None,
            value_schema: None,
        }
    }

    pub fn function_with<
        H: RecordHandler<TransactWriteItem, Record: exactly_once::lambda::FromRecord>,
    >(
        store: exactly_once::dynamodb::DynamoDbStore,
        handler: H,
        keys: KeySpec,
    ) -> BatchFunction<H, DynamoDbStore> {
        BatchFunction::new(
            Engine::new(store, handler, EngineConfig::default()),
            settings(keys),
        )
        .without_metrics()
    }

    pub async fn invoke<
        S: Operator,
        H: RecordHandler<S::Effect, Record: exactly_once::lambda::FromRecord>,
    >(
        function: &BatchFunction<H, S>,
        event: &Value,
    ) -> BatchResponse {
        function
            .handle(LambdaEvent::new(event.clone(), Context::default()))
            .await
            .expect("a Kafka event is never an invocation error")
    }

    /// Delivers `event` again and again, as Lambda does with what a
    /// response reports (or the whole batch after an invocation error, e.g.
    /// DynamoDB timing out under a load of concurrent workers), until nothing
    /// is reported.
    pub async fn invoke_until_done<
        S: Operator,
        H: RecordHandler<S::Effect, Record: exactly_once::lambda::FromRecord>,
    >(
        function: &BatchFunction<H, S>,
        event: &Value,
    ) {
        for _ in 0..200 {
            let response = function
                .handle(LambdaEvent::new(event.clone(), Context::default()))
                .await;
            if response.is_ok_and(|response| response.batch_item_failures.is_empty()) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("the batch never finished");
    }

    /// The reported records: a Kafka record as `partition@offset`, another
    /// source's by its id.
    pub fn reported(response: &BatchResponse) -> Vec<String> {
        response
            .batch_item_failures
            .iter()
            .map(|f| match &f.item_identifier {
                ItemIdentifier::Kafka { partition, offset } => format!("{partition}@{offset}"),
                ItemIdentifier::Id(id) => id.clone(),
            })
            .collect()
    }

    /// The records of a Kafka event, decoded, unit after unit (each
    /// readable).
    pub fn decoded(event: &Value) -> Vec<(exactly_once::lambda::Coordinates, KafkaRecord)> {
        use exactly_once::lambda::{FromRecord as _, decode_event};
        decode_event(event)
            .expect("a Kafka event")
            .units
            .into_iter()
            .flatten()
            .map(|(at, record)| {
                let record = KafkaRecord::from_record(record.expect("readable"));
                (at, record.expect("a Kafka record"))
            })
            .collect()
    }

    /// An account id no other test uses.
    pub fn account() -> String {
        format!("acc-{}", uuid::Uuid::new_v4())
    }

    /// The balance of `account` in the ledger (0 if it has none).
    pub async fn balance(account: &str) -> i64 {
        ledger_entry(account).await.0
    }

    /// `(balance_cents, payment_count)` of `account` (zeros if it has none).
    pub async fn ledger_entry(account: &str) -> (i64, i64) {
        ledger_entry_with(&super::client().await, account).await
    }

    /// [`ledger_entry`] read with `client`.
    pub async fn ledger_entry_with(client: &aws_sdk_dynamodb::Client, account: &str) -> (i64, i64) {
        ledger_entry_in(client, &super::env("LEDGER_TABLE"), account).await
    }

    /// A ledger table of its own, named `name`, as template.yaml defines
    /// the ledger's (`infra/local_tables.py`): a projection's.
    pub fn ledger_table(name: &str) {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("infra/local_tables.py");
        let status = std::process::Command::new("python3")
            .arg(script)
            .args(["--table", &format!("LedgerTable={name}")])
            .status()
            .expect("run python3 infra/local_tables.py");
        assert!(status.success(), "infra/local_tables.py: {status}");
    }

    /// `(balance_cents, payment_count)` of `account` in the ledger table
    /// `table`.
    pub async fn ledger_entry_in(
        client: &aws_sdk_dynamodb::Client,
        table: &str,
        account: &str,
    ) -> (i64, i64) {
        let item = client
            .get_item()
            .table_name(table)
            .key(
                "account_id",
                aws_sdk_dynamodb::types::AttributeValue::S(account.to_owned()),
            )
            .consistent_read(true)
            .send()
            .await
            .expect("read the ledger")
            .item;
        // Absent attributes count as 0 (an effect may set only the balance).
        let number = |name: &str| -> i64 {
            item.as_ref()
                .and_then(|item| item.get(name))
                .map_or(0, |n| n.as_n().expect("a number").parse().expect("whole"))
        };
        (number("balance_cents"), number("payment_count"))
    }
}
