//! The demo function on Amazon MQ events (RabbitMQ, ActiveMQ), in process,
//! on DynamoDB Local: the batch Lambda retries whole. What a user sees: the
//! invocation fails (`BatchNotFinished`, saying how many messages were left
//! and why) while a message is unfinished, and succeeds once every message
//! is done, a duplicate or parked; the retry applies nothing twice and its
//! finished messages cost no store request (the warm cache); a poison
//! message is parked (`POISON_POLICY=park`) or fails the batch until the
//! broker dead-letters it (`report`); keys come from headers, properties,
//! the body or the message id; a queue's messages run in order.
//! (The same events through real brokers: tests/processes/brokers.rs.)

use crate::support;

use std::sync::{Arc, Mutex};

use exactly_once::engine::{CommitPath, EngineConfig, PoisonPolicy};
use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy};
use exactly_once::lambda::{BatchFunction, Invocation, InvocationError, OrderingMode};
use exactly_once::store::{Status, Store as _};
use lambda_runtime::{Context, Diagnostic, LambdaEvent};
use serde_json::{Value, json};
use support::figures::figure;
use support::msk::{
    account, balance, commit_path, ledger_function_counted, ledger_function_with, ledger_mode,
    settings,
};
use support::sources::{Payment, activemq_event, hold, rabbitmq_event, rabbitmq_message};

fn keys(source: &str, missing: MissingKeyPolicy) -> KeySpec {
    KeySpec::parse(source, "idempotency-key".into(), missing).expect("keys")
}

/// The demo function keyed by the `idempotency-key` header or property,
/// under `poison`, its store requests per invocation read from its EMF
/// documents.
async fn function(
    poison: PoisonPolicy,
) -> (
    BatchFunction<ledger::LedgerHandler, exactly_once::dynamodb::DynamoDbStore>,
    Arc<Mutex<Vec<u64>>>,
) {
    let engine = EngineConfig {
        poison,
        ..EngineConfig::default()
    };
    ledger_function_counted(settings(keys("header", MissingKeyPolicy::Reject)), engine).await
}

async fn invoke<H, S>(function: &BatchFunction<H, S>, event: &Value) -> Invocation
where
    S: exactly_once::store::Operator,
    H: exactly_once::engine::RecordHandler<S::Effect, Record: exactly_once::lambda::FromRecord>,
{
    function
        .invoke(LambdaEvent::new(event.clone(), Context::default()))
        .await
        .expect("an MQ event")
}

/// Each message's outcome, by its place.
fn outcomes(invocation: &Invocation) -> Vec<(String, &'static str)> {
    invocation
        .records
        .iter()
        .map(|record| (record.at.to_string(), record.outcome))
        .collect()
}

/// What Lambda is told: the response, or the error as its runtime sends it.
fn answer(invocation: Invocation) -> Result<Value, Diagnostic> {
    invocation
        .into_answer()
        .map(|response| serde_json::to_value(response).expect("json"))
        .map_err(Diagnostic::from)
}

#[tokio::test]
async fn a_message_in_progress_fails_the_batch_whole_and_the_retry_applies_each_once() {
    let (function, requests) = function(PoisonPolicy::Park).await;
    let acc = account();
    let payments: Vec<Payment> = (1..=5)
        .map(|n| Payment::new(&format!("rmq-{acc}-{n}"), &acc, n * 100))
        .collect();
    let event = rabbitmq_event(&payments);
    // Another worker holds the third.
    let held = hold(&function, &payments[2].key, &event, 2).await;

    let first = invoke(&function, &event).await;
    // The queue is one lane: the messages after the held one wait for it.
    let later: Vec<&str> = outcomes(&first)[2..].iter().map(|(_, o)| *o).collect();
    assert_eq!(later, ["in-progress", "not-started", "not-started"]);
    assert_eq!(balance(&acc).await, 100 + 200);
    let error = answer(first).expect_err("the batch fails whole");
    assert_eq!(error.error_type, "BatchNotFinished");
    assert_eq!(
        error.error_message,
        "3 of 5 RabbitMQ messages not finished (1 in-progress, 2 not-started); RabbitMQ has \
         no partial batch response, so the batch fails whole: Lambda delivers it again, and the \
         finished messages come as duplicates, skipped"
    );

    // Lambda delivers the batch again once the other worker let go.
    function
        .engine()
        .store()
        .release(&held)
        .await
        .expect("release");
    let retry = invoke(&function, &event).await;
    let done: Vec<&str> = outcomes(&retry).iter().map(|(_, o)| *o).collect();
    // The locking path claimed the last two ahead on the first delivery
    // (STARTED, its own): the retry takes its own claims over.
    let after = match commit_path() {
        CommitPath::LockFree => "processed",
        CommitPath::Locking => "taken-over",
    };
    assert_eq!(done, ["duplicate", "duplicate", "taken-over", after, after]);
    assert_eq!(
        answer(retry).expect("every message finished"),
        json!({"batchItemFailures": []})
    );
    assert_eq!(balance(&acc).await, 1_500);

    // Delivered once more (the acknowledgement lost): every message a
    // duplicate of the warm container's cache, no store request at all
    // (the figure docs/sources/amazon-mq.md states).
    let again = invoke(&function, &event).await;
    assert!(outcomes(&again).iter().all(|(_, o)| *o == "duplicate"));
    let spent = requests.lock().expect("requests").last().copied();
    assert_eq!(
        spent.map(|n| n.to_string()),
        Some(figure("mq_warm_retry_requests"))
    );
    assert_eq!(balance(&acc).await, 1_500);
    for payment in &payments {
        let item = function
            .engine()
            .store()
            .get(&payment.key)
            .await
            .expect("get");
        assert_eq!(item.map(|i| i.status), Some(Status::Completed));
    }
}

#[tokio::test]
async fn a_poison_message_is_parked_or_fails_the_batch_until_the_broker_dead_letters_it() {
    let acc = account();
    let batch = |tag: &str| -> Vec<Payment> {
        vec![
            Payment::new(&format!("amq-{tag}-{acc}-1"), &acc, 10),
            Payment::poison(&format!("amq-{tag}-{acc}-p")),
            Payment::new(&format!("amq-{tag}-{acc}-2"), &acc, 20),
        ]
    };

    // park: stored FAILED, the batch succeeds, the message after it applied.
    let (parking, requests) = function(PoisonPolicy::Park).await;
    let parked = batch("park");
    let event = activemq_event(&parked);
    let invocation = invoke(&parking, &event).await;
    let got: Vec<&str> = outcomes(&invocation).iter().map(|(_, o)| *o).collect();
    assert_eq!(got, ["processed", "failed", "processed"]);
    assert_eq!(
        answer(invocation).expect("parked"),
        json!({"batchItemFailures": []})
    );
    let item = parking
        .engine()
        .store()
        .get(&parked[1].key)
        .await
        .expect("get");
    assert_eq!(item.map(|i| i.status), Some(Status::Failed));
    assert_eq!(balance(&acc).await, 30);
    // Delivered again to the warm container (the acknowledgement lost):
    // the finished messages are answered from its cache, the parked one
    // (not cached: FAILED) is read from the store again, at the cost
    // docs/sources/amazon-mq.md states.
    let again = invoke(&parking, &event).await;
    let got: Vec<&str> = outcomes(&again).iter().map(|(_, o)| *o).collect();
    assert_eq!(got, ["duplicate", "previously-failed", "duplicate"]);
    assert_eq!(
        answer(again).expect("parked"),
        json!({"batchItemFailures": []})
    );
    let spent = requests.lock().expect("requests").last().copied();
    let measured = match commit_path() {
        CommitPath::LockFree => "mq_warm_retry_parked_requests_lock_free",
        CommitPath::Locking => "mq_warm_retry_parked_requests_locking",
    };
    assert_eq!(spent.map(|n| n.to_string()), Some(figure(measured)));
    assert_eq!(balance(&acc).await, 30);

    // report: the batch fails on every delivery (the FAILED key refused
    // from the table, the others duplicates) until the broker's
    // redelivery limit sends it to the dead-letter queue.
    let (reporting, _) = function(PoisonPolicy::Report).await;
    let reported = batch("report");
    let event = activemq_event(&reported);
    for delivery in 0..3 {
        let invocation = invoke(&reporting, &event).await;
        let error = answer(invocation).expect_err("the poison fails the batch");
        assert_eq!(error.error_type, "BatchNotFinished");
        let why = match delivery {
            0 => "2 of 3 ActiveMQ messages not finished (1 failed, 1 not-started)",
            _ => "2 of 3 ActiveMQ messages not finished (1 not-started, 1 previously-failed)",
        };
        assert!(
            error.error_message.starts_with(why),
            "{delivery}: {}",
            error.error_message
        );
    }
    assert_eq!(balance(&acc).await, 30 + 10);
}

#[tokio::test]
async fn keys_come_from_headers_properties_the_body_or_the_message_id() {
    let acc = account();
    let payment = Payment::new(&format!("mq-keys-{acc}"), &acc, 7);
    let one = std::slice::from_ref(&payment);
    let cases = [
        // An AMQP string header ({"bytes":[…]}), an ActiveMQ property.
        ("header", rabbitmq_event(one), payment.key.clone()),
        ("header", activemq_event(one), payment.key.clone()),
        ("json:/payment_id", rabbitmq_event(one), payment.key.clone()),
        // The JMS message group: a RabbitMQ header, an ActiveMQ property.
        ("record-key", activemq_event(one), acc.clone()),
    ];
    for (source, event, key) in cases {
        let function = ledger_function_with(
            ledger_mode(),
            settings(keys(source, MissingKeyPolicy::Reject)),
            EngineConfig::default(),
        )
        .await;
        let invocation = invoke(&function, &event).await;
        assert_eq!(outcomes(&invocation)[0].1, "processed", "{source}");
        let item = function.engine().store().get(&key).await.expect("get");
        assert_eq!(item.map(|i| i.status), Some(Status::Completed), "{source}");
    }

    // A number header is read as its text.
    let mut numbered = rabbitmq_event(one);
    numbered["rmqMessagesByQueue"]["payments::/"][0]["basicProperties"]["headers"]["idempotency-key"] =
        json!(4_242);
    let function = ledger_function_with(
        ledger_mode(),
        settings(keys("header", MissingKeyPolicy::Reject)),
        EngineConfig::default(),
    )
    .await;
    invoke(&function, &numbered).await;
    let item = function.engine().store().get("4242").await.expect("get");
    assert_eq!(item.map(|i| i.status), Some(Status::Completed));

    // MISSING_KEY_POLICY=record-coordinates: the message id, stable across
    // deliveries; a RabbitMQ message without one fails alone, saying why.
    let function = ledger_function_with(
        ledger_mode(),
        settings(keys("header", MissingKeyPolicy::RecordCoordinates)),
        EngineConfig::default(),
    )
    .await;
    let unkeyed = Payment::new(&format!("mq-unkeyed-{acc}"), &acc, 5);
    let mut event = activemq_event(std::slice::from_ref(&unkeyed));
    event["messages"][0]["properties"] = json!({});
    let id = event["messages"][0]["messageID"]
        .as_str()
        .expect("an id")
        .to_owned();
    let invocation = invoke(&function, &event).await;
    assert_eq!(outcomes(&invocation)[0].1, "processed");
    let key = format!("record:payments@{id}");
    let item = function.engine().store().get(&key).await.expect("get");
    assert_eq!(item.map(|i| i.status), Some(Status::Completed));
    let mut message = rabbitmq_message(&unkeyed, false);
    message["basicProperties"]["headers"] = json!({});
    event = json!({
        "eventSource": "aws:rmq",
        "eventSourceArn": "arn:aws:mq:us-east-1:123456789012:broker:payments:b-1",
        "rmqMessagesByQueue": {"payments::/": [message]}
    });
    let invocation = invoke(&function, &event).await;
    assert_eq!(invocation.records[0].outcome, "invalid");
    assert_eq!(
        invocation.records[0].detail.as_deref(),
        Some(
            "no idempotency key: header \"idempotency-key\" is missing or empty, and this \
             RabbitMQ message has no message id for MISSING_KEY_POLICY=record-coordinates (its \
             place in a batch changes between deliveries); have the producer set one, or key on \
             a header or the body"
        )
    );
    // Each function above its own key prefix: 5 payments of 7 applied,
    // and the one keyed by its message id.
    assert_eq!(balance(&acc).await, 5 * 7 + 5);
}

#[tokio::test]
async fn in_key_order_a_held_message_stops_only_its_message_group() {
    let function = ledger_function_with(
        ledger_mode(),
        exactly_once::lambda::FunctionSettings {
            ordering: OrderingMode::Key,
            ..settings(keys("header", MissingKeyPolicy::Reject))
        },
        EngineConfig::default(),
    )
    .await;
    let (first, second) = (account(), account());
    let payments = [
        Payment::new(&format!("grp-{first}-1"), &first, 1),
        Payment::new(&format!("grp-{second}-1"), &second, 10),
        Payment::new(&format!("grp-{first}-2"), &first, 2),
        Payment::new(&format!("grp-{second}-2"), &second, 20),
    ];
    let event = rabbitmq_event(&payments);
    hold(&function, &payments[0].key, &event, 0).await;
    let invocation = invoke(&function, &event).await;
    let got: Vec<&str> = outcomes(&invocation).iter().map(|(_, o)| *o).collect();
    // The held message's group (its account, JMSXGroupID) waits; the
    // other group goes on.
    assert_eq!(
        got,
        ["in-progress", "not-started", "processed", "processed"]
    );
    assert_eq!((balance(&first).await, balance(&second).await), (0, 30));
    assert!(matches!(
        invocation.into_answer(),
        Err(InvocationError::BatchNotFinished {
            left: 2,
            records: 4,
            ..
        })
    ));
}

/// The MQ events AWS's developer guide, Powertools' tests and
/// aws-lambda-events' fixtures show (events/fixtures/, named by origin):
/// every message read, none an error.
#[test]
fn every_published_sample_event_is_read_whole() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("events/fixtures");
    let mut read = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("events/fixtures") {
        let path = entry.expect("an entry").path();
        let event: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("JSON");
        let batch = exactly_once::lambda::decode_event(&event).expect("an MQ event");
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let source = batch.source.expect("messages");
        assert!(!source.has_partial_batch_response(), "{name}");
        let messages: Vec<_> = batch.records().collect();
        assert!(!messages.is_empty(), "{name}");
        for (at, message) in messages {
            let message = message
                .as_ref()
                .unwrap_or_else(|e| panic!("{name} {at}: {e}"));
            assert!(!message.body().is_empty(), "{name} {at}");
        }
        read.push((name, source.name()));
    }
    read.sort();
    let sources: std::collections::BTreeSet<&str> = read.iter().map(|(_, s)| *s).collect();
    assert_eq!(sources.len(), 2, "both brokers' samples: {read:?}");
    assert!(read.len() >= 6, "{read:?}");
}
