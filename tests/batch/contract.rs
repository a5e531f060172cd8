//! The contract between the engine and a user's handler, end to end on
//! DynamoDB Local: the whole record in hand, the stored result given back
//! for duplicates (from every place a duplicate is recognised), results
//! bounded, fingerprints that ignore re-serialisation, long keys hashed.

use crate::support;

use aws_sdk_dynamodb::types::TransactWriteItem;
use exactly_once::store::Store;
use std::sync::Mutex;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use exactly_once::config::LongKeyPolicy;
use exactly_once::config::StoreConfig;
use exactly_once::dynamodb::CountRequests as _;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::{
    CommitPath, Completion, Engine, EngineConfig, FencingToken, HandlerError, RecordHandler,
};
use exactly_once::lambda::{
    BatchFunction, Fingerprint, FunctionSettings, KafkaRecord, SchemaMetadata,
};
use exactly_once::store::MAX_RESULT_BYTES;
use exactly_once::store::Status;
use exactly_once::store::requests::RequestCounter;
use serde_json::{Value, json};
use support::msk::{
    Rec, event, event_of, header, header_keys, invoke, ledger_function_with, ledger_mode, payment,
    reported,
};

/// Replies `reply to <value>` and remembers what it saw: every record it
/// ran, and every duplicate with the result handed back.
#[derive(Default)]
struct Replier {
    ran: Mutex<Vec<KafkaRecord>>,
    replayed: Mutex<Vec<(i64, Option<String>)>>,
    /// Result size in bytes instead of the reply.
    result_bytes: Option<usize>,
    /// `on_duplicate` fails while set.
    replay_fails: Mutex<bool>,
}

impl RecordHandler<TransactWriteItem> for Replier {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        support::msk::commit_path()
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<TransactWriteItem>, HandlerError> {
        self.ran.lock().expect("lock").push(record.clone());
        Ok(match self.result_bytes {
            Some(bytes) => Completion::done("r".repeat(bytes)),
            None => Completion::done(format!(
                "reply to {}",
                String::from_utf8_lossy(&record.value)
            )),
        })
    }

    async fn on_duplicate(
        &self,
        record: &KafkaRecord,
        result: Option<&str>,
    ) -> Result<(), HandlerError> {
        if *self.replay_fails.lock().expect("lock") {
            return Err(HandlerError::Retryable("reply topic unavailable".into()));
        }
        self.replayed
            .lock()
            .expect("lock")
            .push((record.offset, result.map(str::to_owned)));
        Ok(())
    }
}

impl Replier {
    fn ran(&self) -> usize {
        self.ran.lock().expect("lock").len()
    }

    fn take_replayed(&self) -> Vec<(i64, Option<String>)> {
        let mut replayed = std::mem::take(&mut *self.replayed.lock().expect("lock"));
        replayed.sort();
        replayed
    }
}

fn text(offset: i64, key: &str, value: &str) -> Rec {
    Rec {
        offset,
        key: Some(key.to_owned()),
        value: value.as_bytes().to_vec(),
    }
}

/// A function of `handler` on `config`, whose DynamoDB requests `counter`
/// counts (a new container each call: a cold cache).
async fn function_of<
    H: RecordHandler<TransactWriteItem, Record: exactly_once::lambda::FromRecord>,
>(
    config: &StoreConfig,
    handler: H,
    counter: &RequestCounter,
    settings: FunctionSettings,
) -> BatchFunction<H, DynamoDbStore> {
    let client = counter.attach(&support::client().await);
    BatchFunction::new(
        Engine::new(
            DynamoDbStore::new(client, config.clone()),
            handler,
            EngineConfig::default(),
        ),
        settings,
    )
    .without_metrics()
}

/// A [`Replier`] on `config` under header keys, counted by `counter`.
async fn replier_function(
    config: &StoreConfig,
    counter: &RequestCounter,
) -> BatchFunction<Replier, DynamoDbStore> {
    let settings = support::msk::settings(header_keys());
    function_of(config, Replier::default(), counter, settings).await
}

fn reply(value: &str) -> Option<String> {
    Some(format!("reply to {value}"))
}

#[tokio::test]
async fn the_handler_gets_the_whole_record_with_every_field_lambda_sends() {
    let config = support::store_config(std::time::Duration::from_secs(30));
    let counter = RequestCounter::default();
    let settings = support::msk::settings(header_keys());
    let function = function_of(&config, Replier::default(), &counter, settings).await;
    let record = json!({
        "topic": "orders",
        "partition": 3,
        "offset": 42,
        "timestamp": 1_700_000_000_123_i64,
        "timestampType": "LOG_APPEND_TIME",
        "key": STANDARD.encode("acc-9"),
        "value": STANDARD.encode(r#"{"order":1}"#),
        "headers": [
            header("idempotency-key", b"o-1"),
            header("trace", b"first"),
            {"trace": [115, 101, 99, 111, 110, 100], "ключ": [-48, -70]},
            header("empty", b""),
        ],
        "keySchemaMetadata": {"dataFormat": "AVRO", "schemaId": "1234"},
        "valueSchemaMetadata": {"dataFormat": "JSON", "schemaId": 5678},
        "aFieldOfNextYear": {"nested": [1, 2]},
    });
    let mut batch = event_of(vec![("orders-3", vec![record])]);
    batch["eventSource"] = json!("SelfManagedKafka");
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );

    let ran = function
        .engine()
        .handler()
        .ran
        .lock()
        .expect("lock")
        .clone();
    let mut headers = ran[0].headers.clone();
    // The two names of one header map come in the map's order.
    headers[2..4].sort();
    assert_eq!(
        KafkaRecord {
            headers,
            ..ran[0].clone()
        },
        KafkaRecord {
            topic: "orders".into(),
            partition: 3,
            offset: 42,
            timestamp_ms: 1_700_000_000_123,
            timestamp_type: Some("LOG_APPEND_TIME".into()),
            key: Some(b"acc-9".to_vec()),
            value: br#"{"order":1}"#.to_vec(),
            headers: vec![
                ("idempotency-key".into(), b"o-1".to_vec()),
                ("trace".into(), b"first".to_vec()),
                ("trace".into(), b"second".to_vec()),
                ("ключ".into(), vec![0xd0, 0xba]),
                ("empty".into(), Vec::new()),
            ],
            key_schema: Some(SchemaMetadata {
                data_format: Some("AVRO".into()),
                schema_id: Some("1234".into()),
            }),
            value_schema: Some(SchemaMetadata {
                data_format: Some("JSON".into()),
                schema_id: Some("5678".into()),
            }),
        }
    );
    let traces: Vec<&[u8]> = ran[0].headers_named("trace").collect();
    assert_eq!(traces, [&b"first"[..], &b"second"[..]]);
}

#[tokio::test]
async fn duplicates_get_the_stored_result_from_every_place_they_are_recognised() {
    let config = support::store_config(std::time::Duration::from_secs(30));
    let counter = RequestCounter::default();
    let function = replier_function(&config, &counter).await;
    let batch = event(vec![(
        "payments-0",
        vec![
            text(0, "k-1", "one"),
            text(1, "k-2", "two"),
            text(2, "k-1", "one"),
        ],
    )]);
    // In the batch: the second copy of k-1 waits for the first and gets its result.
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    let replier = function.engine().handler();
    assert_eq!(replier.ran(), 2);
    assert_eq!(replier.take_replayed(), [(2, reply("one"))]);

    // The same container again: from its warm cache, no request at all.
    counter.reset();
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    assert_eq!(
        counter.counts().values().sum::<u64>(),
        0,
        "{:?}",
        counter.counts()
    );
    assert_eq!(replier.ran(), 2, "never run again");
    let all = vec![(0, reply("one")), (1, reply("two")), (2, reply("one"))];
    assert_eq!(replier.take_replayed(), all);

    // Another container (cold cache): from the batch pre-check's read.
    let cold = replier_function(&config, &counter).await;
    counter.reset();
    assert_eq!(reported(&invoke(&cold, &batch).await), Vec::<String>::new());
    assert_eq!(
        counter.counts().into_iter().collect::<Vec<_>>(),
        [("BatchGetItem".to_owned(), 1)]
    );
    assert_eq!(cold.engine().handler().ran(), 0);
    assert_eq!(cold.engine().handler().take_replayed(), all);
}

#[tokio::test]
async fn a_duplicate_the_pre_check_did_not_read_gets_its_result_from_the_conditional_write() {
    let config = support::store_config(std::time::Duration::from_secs(30));
    let counter = RequestCounter::default();
    let first = replier_function(&config, &counter).await;
    let done = event(vec![("payments-0", vec![text(0, "z-done", "old")])]);
    assert_eq!(reported(&invoke(&first, &done).await), Vec::<String>::new());

    // 100 new keys sort before z-done: the pre-check reads only those (a new
    // batch), so z-done meets its COMPLETED item in the claim (locking path)
    // or in the commit's cancellation (lock-free path), which return it.
    let mut records: Vec<Rec> = (0..100)
        .map(|i| text(i, &format!("a-{i:03}"), "new"))
        .collect();
    records.push(text(100, "z-done", "old"));
    let batch = event(vec![("payments-0", records)]);
    let cold = replier_function(&config, &counter).await;
    counter.reset();
    assert_eq!(reported(&invoke(&cold, &batch).await), Vec::<String>::new());
    let replier = cold.engine().handler();
    // The lock-free path computes z-done's writes before its commit finds
    // the key taken (and drops them); the locking path's claim comes first.
    let ran = match support::msk::commit_path() {
        CommitPath::Locking => 100,
        CommitPath::LockFree => 101,
    };
    assert_eq!(replier.ran(), ran);
    assert_eq!(replier.take_replayed(), [(100, reply("old"))]);
    assert_eq!(
        counter.counts().get("BatchGetItem"),
        Some(&1),
        "only the sample was read"
    );
}

#[tokio::test]
async fn a_failing_replay_reports_the_record_and_stores_nothing() {
    let config = support::store_config(std::time::Duration::from_secs(30));
    let counter = RequestCounter::default();
    let function = replier_function(&config, &counter).await;
    let batch = event(vec![(
        "payments-0",
        vec![text(0, "k-1", "one"), text(1, "k-2", "two")],
    )]);
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    *function
        .engine()
        .handler()
        .replay_fails
        .lock()
        .expect("lock") = true;
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        ["payments-0@0", "payments-0@1"],
        "the replay failed at k-1, k-2 waits behind it"
    );
    *function
        .engine()
        .handler()
        .replay_fails
        .lock()
        .expect("lock") = false;
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    let store = DynamoDbStore::new(support::client().await, config);
    let item = store.get("k-1").await.expect("get").expect("item");
    assert_eq!(
        (item.status, item.version, item.result),
        (Status::Completed, 1, reply("one"))
    );
    assert_eq!(function.engine().handler().ran(), 2);
}

#[tokio::test]
async fn results_are_stored_whole_up_to_64_kib_and_a_larger_one_fails_the_record() {
    let config = support::store_config(std::time::Duration::from_secs(30));
    let counter = RequestCounter::default();
    let store = DynamoDbStore::new(support::client().await, config.clone());
    for (bytes, key) in [
        (MAX_RESULT_BYTES, "fits"),
        (MAX_RESULT_BYTES + 1, "too-large"),
    ] {
        let replier = Replier {
            result_bytes: Some(bytes),
            ..Replier::default()
        };
        let function = function_of(
            &config,
            replier,
            &counter,
            support::msk::settings(header_keys()),
        )
        .await;
        let batch = event(vec![("payments-0", vec![text(0, key, "v")])]);
        let response = invoke(&function, &batch).await;
        let item = store.get(key).await.expect("get").expect("item");
        if bytes <= MAX_RESULT_BYTES {
            assert_eq!(reported(&response), Vec::<String>::new());
            assert_eq!(
                item.result.map(|r| r.len()),
                Some(bytes),
                "stored whole, not cut"
            );
        } else {
            assert_eq!(reported(&response), Vec::<String>::new(), "FAILED, parked");
            assert_eq!(item.status, Status::Failed);
            assert_eq!(
                item.error.as_deref(),
                Some("the handler's result is 65537 bytes; at most 65536 are stored")
            );
        }
    }
}

/// The ledger's settings with `PAYLOAD_HASH` set to `mode`.
fn fingerprinted(mode: &str) -> FunctionSettings {
    FunctionSettings {
        fingerprint: Fingerprint::parse(mode).expect("a valid mode"),
        ..support::msk::settings(header_keys())
    }
}

#[tokio::test]
async fn a_json_fingerprint_takes_a_re_serialised_payment_as_a_duplicate() {
    let a = support::msk::account();
    let payment = |id: &str| json!({"payment_id": id, "account_id": a, "amount_cents": 500, "currency": "EUR"});
    let original = |id: &str| payment(id).to_string();
    let reserialised = |id: &str| {
        format!(
            "{{ \"currency\" : \"EUR\",\n  \"amount_cents\": 500, \"account_id\": {}, \"payment_id\": \"{id}\" }}",
            Value::String(a.clone())
        )
    };
    let restamped = |id: &str, at: &str| {
        let mut value = payment(id);
        value["sent_at"] = json!(at);
        value.to_string()
    };
    // (mode, first delivery, the producer's retry, the retry's outcome)
    let cases = [
        (
            "raw",
            original("p-raw"),
            reserialised("p-raw"),
            Some("rejected"),
        ),
        (
            "canonical-json",
            original("p-jcs"),
            reserialised("p-jcs"),
            None,
        ),
        (
            "canonical-json",
            restamped("p-jcs-sent", "10:00"),
            restamped("p-jcs-sent", "10:05"),
            Some("rejected"),
        ),
        (
            "json:/payment_id,/account_id,/amount_cents,/currency",
            restamped("p-fields", "10:00"),
            restamped("p-fields", "10:05"),
            None,
        ),
    ];
    for (mode, first, retry, outcome) in cases {
        let function =
            ledger_function_with(ledger_mode(), fingerprinted(mode), EngineConfig::default()).await;
        let key: Value = serde_json::from_str(&first).expect("json");
        let key = key["payment_id"].as_str().expect("id").to_owned();
        let deliver =
            |offset, value: &str| event(vec![("payments-0", vec![text(offset, &key, value)])]);
        assert_eq!(
            reported(&invoke(&function, &deliver(0, &first)).await),
            Vec::<String>::new(),
            "{mode}"
        );
        let response = invoke(&function, &deliver(1, &retry)).await;
        match outcome {
            None => assert_eq!(
                reported(&response),
                Vec::<String>::new(),
                "{mode}: a duplicate"
            ),
            Some(_) => assert_eq!(
                reported(&response),
                ["payments-0@1"],
                "{mode}: another payload"
            ),
        }
    }
    assert_eq!(
        support::msk::balance(&a).await,
        4 * 500,
        "each payment applied once"
    );
}

#[tokio::test]
async fn a_value_that_is_not_json_fails_alone_under_a_json_fingerprint() {
    let function = ledger_function_with(
        ledger_mode(),
        fingerprinted("canonical-json"),
        EngineConfig::default(),
    )
    .await;
    let a = support::msk::account();
    let batch = event(vec![
        ("payments-0", vec![text(0, "not-json", "card 4111 1111")]),
        ("payments-1", vec![payment(0, "p-ok", &a, 7)]),
    ]);
    assert_eq!(reported(&invoke(&function, &batch).await), ["payments-0@0"]);
    assert_eq!(support::msk::balance(&a).await, 7);
}

#[tokio::test]
async fn a_key_longer_than_dynamodb_allows_is_hashed_when_asked() {
    let long_key = "k".repeat(3000);
    let config = StoreConfig {
        long_keys: LongKeyPolicy::Hash,
        ..support::store_config(std::time::Duration::from_secs(30))
    };
    let counter = RequestCounter::default();
    let function = replier_function(&config, &counter).await;
    let batch = event(vec![(
        "payments-0",
        vec![text(0, &long_key, "v"), text(1, &long_key, "v")],
    )]);
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    assert_eq!(
        function.engine().handler().ran(),
        1,
        "the second copy is a duplicate"
    );
    let pk = format!(
        "{}sha256:{}",
        config.key_prefix,
        support::sha256_hex(long_key.as_bytes())
    );
    let item = support::raw_item(&support::client().await, &config.table_name, &pk)
        .await
        .expect("the hashed item");
    assert_eq!(support::string(&item, "status"), "COMPLETED");
    // Under the default policy the same key fails alone.
    let rejecting = support::store_config(std::time::Duration::from_secs(30));
    let function = replier_function(&rejecting, &counter).await;
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        ["payments-0@0", "payments-0@1"]
    );
}
