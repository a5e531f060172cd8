//! Keys and payloads stay out of logs and stored errors. A batch full of
//! planted secrets (in idempotency keys, payload fields, payloads that are
//! not JSON or not base64) runs through every outcome with `LOG_KEYS=hash`;
//! every log line of the batch (any level of this crate, INFO and above of
//! every other) and every stored error text is searched for them.

use crate::support;

use exactly_once::store::Store;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::{Engine, EngineConfig};
use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy};
use exactly_once::lambda::{BatchFunction, FunctionSettings, KeyLogging};
use exactly_once::store::Status;
use ledger::LedgerHandler;
use serde_json::json;
use support::msk::{
    Rec, event, event_of, header, header_keys, invoke, ledger_function_with, ledger_mode,
    payment_json, record_json, reported,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

const KEY_SECRET: &str = "KEYSECRET";
const PAYLOAD_SECRET: &str = "PAYSECRET";

/// Every event of this crate, and INFO and above of every other, as text.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
}

impl Subscriber for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("exactly_once") || *metadata.level() <= Level::INFO
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let line = format!(
            "{} {} {fields:?}",
            event.metadata().level(),
            event.metadata().target()
        );
        self.0.lock().expect("log lock").push(line);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Capture {
    fn lines(&self) -> Vec<String> {
        self.0.lock().expect("log lock").clone()
    }
}

fn rec(offset: i64, key: &str, value: &[u8]) -> Rec {
    Rec {
        offset,
        key: Some(key.to_owned()),
        value: value.to_vec(),
    }
}

fn hashed(keys: KeySpec) -> FunctionSettings {
    FunctionSettings {
        log_keys: KeyLogging::Hash,
        ..support::msk::settings(keys)
    }
}

/// Runs every batch of the scenario through functions logging keys as
/// `logging`; the captured lines, and the stored error texts.
async fn scenario(logging: KeyLogging) -> (Vec<String>, Vec<String>) {
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.clone());
    let a = support::msk::account();
    let settings = |keys| FunctionSettings {
        log_keys: logging,
        ..hashed(keys)
    };
    let function = ledger_function_with(
        ledger_mode(),
        settings(header_keys()),
        EngineConfig::default(),
    )
    .await;
    let long_key = format!("{KEY_SECRET}-{}", "x".repeat(3000));
    let wrong_type = json!({"payment_id": "p", "account_id": a, "amount_cents": format!("{PAYLOAD_SECRET}-amount"), "currency": "EUR"});
    let batch = event(vec![
        (
            "payments-0",
            vec![
                rec(
                    0,
                    &format!("{KEY_SECRET}-ok"),
                    payment_json("p-ok", &a, 5).as_bytes(),
                ),
                rec(
                    1,
                    &format!("{KEY_SECRET}-ok"),
                    payment_json("p-ok", &a, 5).as_bytes(),
                ),
                rec(
                    2,
                    &format!("{KEY_SECRET}-ok"),
                    payment_json("p-ok", &a, 9).as_bytes(),
                ),
            ],
        ),
        (
            "payments-1",
            vec![rec(
                0,
                &format!("{KEY_SECRET}-wrong-type"),
                wrong_type.to_string().as_bytes(),
            )],
        ),
        (
            "payments-2",
            vec![rec(
                0,
                &format!("{KEY_SECRET}-not-json"),
                format!("{{{PAYLOAD_SECRET} card").as_bytes(),
            )],
        ),
        (
            "payments-3",
            vec![rec(0, &long_key, payment_json("p-long", &a, 1).as_bytes())],
        ),
    ]);
    let response = invoke(&function, &batch).await;
    assert_eq!(
        reported(&response),
        // The two poison records are FAILED and parked; the reused key and
        // the key too long are reported.
        ["payments-0@2", "payments-3@0"]
    );
    // The same batch again: duplicates, refusals of what failed before.
    invoke(&function, &batch).await;

    // A value that is not base64, a key header that is not UTF-8.
    let mut not_base64 = record_json("payments-0", &rec(0, "k", b""));
    not_base64["value"] = json!(format!("{PAYLOAD_SECRET}!!"));
    let mut not_utf8 = record_json("payments-1", &rec(0, "k", b"{}"));
    let mut key_bytes = KEY_SECRET.as_bytes().to_vec();
    key_bytes.push(0xff);
    not_utf8["headers"] = json!([header("idempotency-key", &key_bytes)]);
    invoke(
        &function,
        &event_of(vec![
            ("payments-0", vec![not_base64]),
            ("payments-1", vec![not_utf8]),
        ]),
    )
    .await;

    // A key from a JSON field that holds an object with a secret.
    let json_keys = KeySpec::parse(
        "json:/payment_id",
        "idempotency-key".into(),
        MissingKeyPolicy::Reject,
    )
    .expect("valid");
    let by_field =
        ledger_function_with(ledger_mode(), settings(json_keys), EngineConfig::default()).await;
    let object_key = json!({"payment_id": {"card": PAYLOAD_SECRET}, "account_id": a});
    invoke(
        &by_field,
        &event(vec![(
            "payments-0",
            vec![rec(0, "k", object_key.to_string().as_bytes())],
        )]),
    )
    .await;

    // DynamoDB unreachable: the store's errors.
    let client = support::unreachable_client().await;
    let store = DynamoDbStore::new(
        client.clone(),
        support::store_config(std::time::Duration::from_secs(30)),
    );
    let ledger = LedgerHandler::new(client, support::env("LEDGER_TABLE"), ledger_mode());
    let down = BatchFunction::new(
        Engine::new(store, ledger, EngineConfig::default()),
        settings(header_keys()),
    )
    .without_metrics();
    let _ = down
        .handle(lambda_runtime::LambdaEvent::new(
            event(vec![(
                "payments-0",
                vec![rec(0, &format!("{KEY_SECRET}-down"), b"{}")],
            )]),
            lambda_runtime::Context::default(),
        ))
        .await;

    let store = DynamoDbStore::new(
        support::client().await,
        function.engine().store().config().clone(),
    );
    let mut errors = Vec::new();
    for key in ["wrong-type", "not-json"] {
        let item = store
            .get(&format!("{KEY_SECRET}-{key}"))
            .await
            .expect("get")
            .expect("item");
        assert_eq!(item.status, Status::Failed, "{key}");
        errors.extend(item.error);
    }
    drop(_guard);
    (capture.lines(), errors)
}

#[tokio::test]
async fn no_key_and_no_payload_reaches_a_log_line_or_a_stored_error() {
    let (lines, errors) = scenario(KeyLogging::Hash).await;
    let record_lines = lines.iter().filter(|l| l.contains("record ")).count();
    assert!(
        record_lines >= 12,
        "{record_lines} record lines:\n{}",
        lines.join("\n")
    );
    assert!(
        lines.iter().any(|l| l.contains("\"key\": \"sha256:")),
        "hashed keys are logged:\n{}",
        lines.join("\n")
    );
    let leaks: Vec<&String> = lines
        .iter()
        .chain(&errors)
        .filter(|l| l.contains(KEY_SECRET) || l.contains(PAYLOAD_SECRET))
        .collect();
    assert!(
        leaks.is_empty(),
        "secrets in logs or stored errors:\n{leaks:#?}"
    );
    assert_eq!(errors.len(), 2);
    assert!(
        errors.iter().all(|e| e.starts_with("not a payment: ")),
        "{errors:?}"
    );
}

#[tokio::test]
async fn with_plain_keys_the_same_batch_does_log_its_keys() {
    // The capture sees what the function logs: plain keys do show.
    let (lines, _) = scenario(KeyLogging::Plain).await;
    assert!(lines.iter().any(|l| l.contains(KEY_SECRET)));
    assert!(
        !lines.iter().any(|l| l.contains(PAYLOAD_SECRET)),
        "payloads never"
    );
}

/// SQS, Kinesis and DynamoDB Streams records with planted secrets (in the
/// message attribute that is the key, in bodies that are not payments): no
/// secret in any line or stored error, and each record line names the
/// record by its unit and id, not by an offset.
#[tokio::test]
async fn other_sources_keep_keys_and_payloads_out_of_logs_and_name_records_by_id() {
    use support::sources::{Payment, inserts_event, kinesis_event, sqs_event};
    let capture = Capture::default();
    let _guard = tracing::subscriber::set_default(capture.clone());
    let a = support::msk::account();
    let function = ledger_function_with(
        ledger_mode(),
        hashed(header_keys()),
        EngineConfig::default(),
    )
    .await;
    let secret_key = format!("{KEY_SECRET}-{a}");
    let mut poison = Payment::poison(&format!("{KEY_SECRET}-poison-{a}"));
    poison.account = format!("{PAYLOAD_SECRET}-account");
    let sqs = sqs_event(
        "payments",
        &[Payment::new(&secret_key, &a, 5), poison.clone()],
    );
    assert_eq!(
        reported(&invoke(&function, &sqs).await),
        Vec::<String>::new()
    );
    // Keyed by the payment id (Kinesis and Streams records have no attributes).
    let json_keys = support::msk::ledger_function_with(
        ledger_mode(),
        hashed(
            KeySpec::parse(
                "json:/payment_id",
                "idempotency-key".into(),
                MissingKeyPolicy::Reject,
            )
            .expect("keys"),
        ),
        EngineConfig::default(),
    )
    .await;
    let kinesis = kinesis_event("shardId-000000000000", 0, &[poison.clone()]);
    let streams = inserts_event(7, &[poison]);
    for event in [kinesis, streams] {
        assert_eq!(
            reported(&invoke(&json_keys, &event).await),
            Vec::<String>::new()
        );
    }
    drop(_guard);
    let lines = capture.lines();
    let record_lines: Vec<&String> = lines.iter().filter(|l| l.contains("record ")).collect();
    assert_eq!(record_lines.len(), 4, "{lines:#?}");
    for line in &record_lines {
        assert!(
            line.contains("\"id\": ") && !line.contains("\"offset\": "),
            "named by id: {line}"
        );
    }
    let leaks: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains(KEY_SECRET) || l.contains(PAYLOAD_SECRET))
        .collect();
    assert!(leaks.is_empty(), "secrets in logs:\n{leaks:#?}");
}
