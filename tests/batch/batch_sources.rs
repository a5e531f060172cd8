//! The demo function on every batch source, in process, on DynamoDB Local:
//! SQS (standard and FIFO), Kinesis and DynamoDB Streams events as Lambda
//! delivers them. What a user sees: the exact partial batch response (each
//! record named as its source names it), the balances, the order each
//! source redelivers in (a failed record reports itself alone on a standard
//! queue, the rest of its message group on a FIFO queue, the rest of its
//! shard on Kinesis and DynamoDB Streams), what a shard's retry from its
//! lowest reported record costs (nothing for the records finished after
//! it), poison records parked, keys from each source's own fields, and
//! events a function does not serve refused.
//! A record "fails" here because another worker holds its key under a live
//! lease: the function reports it in progress, as it would in production.

use crate::support;

use std::time::Duration;

use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy};
use exactly_once::lambda::{EventError, FunctionSettings, InvocationError, Source};
use exactly_once::store::{Status, Store as _};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};
use support::msk::{account, balance, header_keys, invoke, ledger_function, reported};
use support::sources::{
    Payment, activemq_event, hold, inserts_event, kinesis_event, message_id, rabbitmq_event,
    sequence, sqs_event, stream_record,
};

fn keys(source: &str) -> KeySpec {
    KeySpec::parse(source, "idempotency-key".into(), MissingKeyPolicy::Reject).expect("keys")
}

/// The demo function in key order, keyed on `payment_id`, with each
/// invocation's store requests.
async fn key_ordered() -> (
    exactly_once::lambda::BatchFunction<
        ledger::LedgerHandler,
        exactly_once::dynamodb::DynamoDbStore,
    >,
    std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
) {
    let settings = FunctionSettings {
        ordering: exactly_once::lambda::OrderingMode::Key,
        ..FunctionSettings::new(keys("json:/payment_id"))
    };
    support::msk::ledger_function_counted(settings, exactly_once::engine::EngineConfig::default())
        .await
}

#[tokio::test]
async fn a_standard_queue_reports_a_failed_message_alone() {
    let function = ledger_function(header_keys()).await;
    let acc = account();
    let payments: Vec<Payment> = (1..=4)
        .map(|n| Payment::new(&format!("sqs-{acc}-{n}"), &acc, n * 100))
        .collect();
    let event = sqs_event("payments", &payments);
    hold(&function, &payments[1].key, &event, 1).await;
    let response = invoke(&function, &event).await;
    assert_eq!(
        serde_json::to_value(&response).expect("json"),
        json!({"batchItemFailures": [{"itemIdentifier": message_id(&payments[1].key)}]})
    );
    // No order on a standard queue: the messages after it are applied.
    assert_eq!(balance(&acc).await, 100 + 300 + 400);
    // Delivered again: the others are duplicates.
    assert_eq!(
        reported(&invoke(&function, &event).await),
        [message_id(&payments[1].key)]
    );
    assert_eq!(balance(&acc).await, 800);
}

#[tokio::test]
async fn a_fifo_queue_stops_the_failed_messages_group_and_lets_the_others_go_on() {
    let function = ledger_function(header_keys()).await;
    let (a, b) = (account(), account());
    let payment = |acc: &str, n: i64| Payment::new(&format!("fifo-{acc}-{n}"), acc, n * 100);
    // Interleaved as SQS hands out a FIFO batch: each group in order.
    let payments = vec![
        payment(&a, 1),
        payment(&b, 1),
        payment(&a, 2),
        payment(&b, 2),
        payment(&a, 3),
    ];
    let event = sqs_event("payments.fifo", &payments);
    hold(&function, &payments[2].key, &event, 2).await;
    let response = invoke(&function, &event).await;
    // a-2 failed: it and a-3 after it in its group are reported; group b
    // went on.
    assert_eq!(
        reported(&response),
        [message_id(&payments[2].key), message_id(&payments[4].key)]
    );
    assert_eq!((balance(&a).await, balance(&b).await), (100, 300));
}

#[tokio::test]
async fn a_kinesis_shard_stops_at_a_failed_record_and_reports_it_and_every_later_one() {
    let function = ledger_function(keys("json:/payment_id")).await;
    let acc = account();
    let payments: Vec<Payment> = (1..=4)
        .map(|n| Payment::new(&format!("kin-{acc}-{n}"), &acc, n * 100))
        .collect();
    let event = kinesis_event("shardId-000000000000", 0, &payments);
    hold(&function, &payments[1].key, &event, 1).await;
    let response = invoke(&function, &event).await;
    assert_eq!(
        serde_json::to_value(&response).expect("json"),
        json!({"batchItemFailures": [
            {"itemIdentifier": sequence(1)},
            {"itemIdentifier": sequence(2)},
            {"itemIdentifier": sequence(3)}
        ]})
    );
    // Nothing after the failed record is applied before it.
    assert_eq!(balance(&acc).await, 100);
}

#[tokio::test]
async fn in_key_order_a_kinesis_shard_stops_only_the_failed_records_partition_key() {
    let (function, _) = key_ordered().await;
    let (a, b) = (account(), account());
    let payments = vec![
        Payment::new(&format!("kk-{a}-1"), &a, 100),
        Payment::new(&format!("kk-{a}-2"), &a, 200),
        Payment::new(&format!("kk-{b}-1"), &b, 300),
    ];
    let event = kinesis_event("shardId-000000000000", 0, &payments);
    hold(&function, &payments[0].key, &event, 0).await;
    let response = invoke(&function, &event).await;
    assert_eq!(reported(&response), [sequence(0), sequence(1)]);
    assert_eq!((balance(&a).await, balance(&b).await), (0, 300));
}

#[tokio::test]
async fn a_kinesis_retry_from_the_lowest_reported_record_costs_no_request_for_the_records_it_finished()
 {
    let (function, requests) = key_ordered().await;
    let (a, b) = (account(), account());
    let payments = vec![
        Payment::new(&format!("kr-{a}-1"), &a, 100),
        Payment::new(&format!("kr-{b}-1"), &b, 300),
        Payment::new(&format!("kr-{b}-2"), &b, 400),
    ];
    let event = kinesis_event("shardId-000000000000", 0, &payments);
    let held = hold(&function, &payments[0].key, &event, 0).await;
    let first = function
        .invoke(LambdaEvent::new(event.clone(), Context::default()))
        .await
        .expect("a Kinesis event");
    let outcomes = |invocation: &exactly_once::lambda::Invocation| -> Vec<&'static str> {
        invocation
            .records
            .iter()
            .map(|record| record.outcome)
            .collect()
    };
    assert_eq!(outcomes(&first), ["in-progress", "processed", "processed"]);
    // Lambda checkpoints the shard before the lowest reported record and
    // delivers it again from there: the two finished records come back too.
    function
        .engine()
        .store()
        .release(&held)
        .await
        .expect("release");
    let retry = function
        .invoke(LambdaEvent::new(event.clone(), Context::default()))
        .await
        .expect("a Kinesis event");
    // The released lease is taken over; the finished records are duplicates.
    assert_eq!(outcomes(&retry), ["taken-over", "duplicate", "duplicate"]);
    assert_eq!((balance(&a).await, balance(&b).await), (100, 700));
    let spent = requests.lock().expect("requests").last().copied();
    // The same held record alone in a shard, retried: what its requests
    // cost without finished records beside it.
    let c = account();
    let alone = [Payment::new(&format!("kr-{c}-1"), &c, 100)];
    let event = kinesis_event("shardId-000000000001", 0, &alone);
    let held = hold(&function, &alone[0].key, &event, 0).await;
    for release in [true, false] {
        let _ = function
            .invoke(LambdaEvent::new(event.clone(), Context::default()))
            .await
            .expect("a Kinesis event");
        if release {
            function
                .engine()
                .store()
                .release(&held)
                .await
                .expect("release");
        }
    }
    assert_eq!(balance(&c).await, 100);
    let spent_alone = requests.lock().expect("requests").last().copied();
    // The finished records that came again add no request (the warm
    // container's cache answers them; without it, the read the retry makes
    // of its keys anyway would), and the retry costs what its one
    // unfinished record costs (the figure docs/sources.md states).
    assert_eq!(spent, spent_alone, "the finished records cost requests");
    let measured = match support::msk::commit_path() {
        exactly_once::engine::CommitPath::LockFree => "shard_retry_requests_lock_free",
        exactly_once::engine::CommitPath::Locking => "shard_retry_requests_locking",
    };
    assert_eq!(
        spent.map(|n| n.to_string()),
        Some(support::figures::figure(measured)),
        "{measured}"
    );
}

#[tokio::test]
async fn a_dynamodb_stream_applies_inserts_in_order_and_takes_other_changes_as_no_payment() {
    let function = ledger_function(keys("json:/payment_id")).await;
    let acc = account();
    let first = Payment::new(&format!("ddb-{acc}-1"), &acc, 100);
    let second = Payment::new(&format!("ddb-{acc}-2"), &acc, 250);
    let mut event = inserts_event(100, &[first.clone(), second.clone()]);
    // A later MODIFY of the first item (a new key: its own record).
    let mut modify = stream_record(
        "MODIFY",
        "102",
        &Payment::new(&format!("ddb-{acc}-m"), &acc, 999),
    );
    modify["dynamodb"]["OldImage"] = modify["dynamodb"]["NewImage"].clone();
    event["Records"]
        .as_array_mut()
        .expect("records")
        .push(modify);
    let invocation = function
        .invoke(LambdaEvent::new(event.clone(), Context::default()))
        .await
        .expect("a DynamoDB Streams event");
    assert_eq!(invocation.response.batch_item_failures, []);
    assert_eq!(balance(&acc).await, 350);
    let outcomes: Vec<&str> = invocation.records.iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, ["processed", "processed", "processed"]);
    // The MODIFY, a change of its own keyed by its sequence number,
    // completed with nothing applied.
    let key = "record:payments/stream/2026-11-25T00:00:00.000@102";
    let item = function.engine().store().get(key).await.expect("get");
    assert_eq!(
        item.map(|i| (i.status, i.result)),
        Some((
            Status::Completed,
            Some("not a payment: MODIFY of an item".into())
        ))
    );

    // A failed insert stops the rest of the shard.
    let third = Payment::new(&format!("ddb-{acc}-3"), &acc, 1);
    let fourth = Payment::new(&format!("ddb-{acc}-4"), &acc, 2);
    let event = inserts_event(200, &[third.clone(), fourth]);
    hold(&function, &third.key, &event, 0).await;
    let response = invoke(&function, &event).await;
    assert_eq!(reported(&response), ["200", "201"]);
    assert_eq!(balance(&acc).await, 350);
}

#[tokio::test]
async fn a_poison_record_is_parked_on_every_source_and_its_unit_goes_on() {
    let function = ledger_function(keys("json:/payment_id")).await;
    let acc = account();
    let good = |n: i64| Payment::new(&format!("poison-{acc}-{n}"), &acc, n);
    let poison = |n: i64| Payment::poison(&format!("poison-{acc}-p{n}"));
    let events = [
        sqs_event("payments.fifo", &[good(1), poison(1), good(2)]),
        kinesis_event("shardId-000000000001", 10, &[good(3), poison(2), good(4)]),
        inserts_event(300, &[good(5), poison(3), good(6)]),
    ];
    for event in &events {
        let invocation = function
            .invoke(LambdaEvent::new(event.clone(), Context::default()))
            .await
            .expect("an event");
        // POISON_POLICY=park: FAILED, not reported, and its unit goes on.
        assert_eq!(invocation.response.batch_item_failures, [], "{event}");
        let mut outcomes: Vec<(String, &str)> = invocation
            .records
            .iter()
            .map(|r| (r.at.to_string(), r.outcome))
            .collect();
        outcomes.sort();
        let failed: Vec<&String> = outcomes
            .iter()
            .filter(|(_, o)| *o == "failed")
            .map(|(at, _)| at)
            .collect();
        assert_eq!(failed.len(), 1, "{outcomes:?}");
        assert_eq!(
            outcomes.iter().filter(|(_, o)| *o == "processed").count(),
            2,
            "{outcomes:?}"
        );
    }
    assert_eq!(balance(&acc).await, 1 + 2 + 3 + 4 + 5 + 6);
}

#[tokio::test]
async fn keys_come_from_each_sources_own_fields() {
    let acc = account();
    let payment = Payment::new(&format!("keys-{acc}"), &acc, 7);
    // The SQS message attribute `idempotency-key` (header), the FIFO
    // deduplication id, the Kinesis partition key (record-key).
    let cases = [
        (
            "header",
            sqs_event("payments", std::slice::from_ref(&payment)),
            payment.key.clone(),
        ),
        (
            "deduplication-id",
            sqs_event("payments.fifo", std::slice::from_ref(&payment)),
            payment.key.clone(),
        ),
        (
            "record-key",
            kinesis_event("shardId-000000000000", 0, std::slice::from_ref(&payment)),
            acc.clone(),
        ),
        // The message's own id: SQS's messageId, RabbitMQ's messageId
        // property, ActiveMQ's messageID (each derived from the key here).
        (
            "message-id",
            sqs_event("payments", std::slice::from_ref(&payment)),
            message_id(&payment.key),
        ),
        (
            "message-id",
            rabbitmq_event(std::slice::from_ref(&payment)),
            message_id(&payment.key),
        ),
        (
            "message-id",
            activemq_event(std::slice::from_ref(&payment)),
            format!(
                "ID:b-payments-1.mq.us-east-1.amazonaws.com-{}",
                message_id(&payment.key)
            ),
        ),
    ];
    for (source, event, key) in cases {
        let function = ledger_function(keys(source)).await;
        let invocation = function
            .invoke(LambdaEvent::new(event, Context::default()))
            .await
            .expect("an event");
        assert_eq!(invocation.response.batch_item_failures, [], "{source}");
        let item = function.engine().store().get(&key).await.expect("get");
        assert_eq!(item.map(|i| i.status), Some(Status::Completed), "{source}");
    }
    // A part the source does not have is a missing key: rejected alone (a
    // standard queue's message has no deduplication id, a Kinesis record no
    // message id).
    let missing = [
        (
            "deduplication-id",
            sqs_event("payments", std::slice::from_ref(&payment)),
            "the SQS FIFO deduplication id",
        ),
        (
            "message-id",
            kinesis_event("shardId-000000000000", 0, std::slice::from_ref(&payment)),
            "the message id",
        ),
    ];
    for (source, event, part) in missing {
        let function = ledger_function(keys(source)).await;
        let invocation = function
            .invoke(LambdaEvent::new(event, Context::default()))
            .await
            .expect("an event");
        assert_eq!(invocation.records[0].outcome, "invalid", "{source}");
        assert_eq!(
            invocation.records[0].detail.as_deref(),
            Some(
                format!(
                    "no idempotency key: {part} is missing or empty (MISSING_KEY_POLICY=reject)"
                )
                .as_str()
            ),
            "{source}"
        );
    }
}

#[tokio::test]
async fn a_source_the_function_does_not_serve_is_refused_as_an_invocation_error() {
    let event = sqs_event("payments", &[Payment::new("not-served", "acc", 1)]);
    let store = support::store(Duration::from_secs(30)).await;
    let function = support::msk::function_with(store, support::msk::Finish, header_keys());
    let refused = function
        .handle(LambdaEvent::new(event.clone(), Context::default()))
        .await
        .expect_err("refused");
    assert!(matches!(
        &refused,
        InvocationError::Event(EventError::NotServed {
            event_source: Source::Sqs,
            ..
        })
    ));
    let diagnostic = lambda_runtime::Diagnostic::from(refused);
    assert_eq!(diagnostic.error_type, "EventSourceNotServed");
    assert!(
        diagnostic
            .error_message
            .contains("KafkaRecord, which takes no sqs record"),
        "{}",
        diagnostic.error_message
    );

    // EVENT_SOURCES=kafka: the ledger (every source) refuses it too.
    let settings = FunctionSettings {
        sources: Some(vec![Source::Kafka]),
        ..FunctionSettings::new(header_keys())
    };
    let function = support::msk::ledger_function_with(
        support::msk::ledger_mode(),
        settings,
        exactly_once::engine::EngineConfig::default(),
    )
    .await;
    let refused = function
        .handle(LambdaEvent::new(event, Context::default()))
        .await
        .expect_err("refused");
    assert_eq!(
        refused.to_string(),
        "sqs events are not served by this function: EVENT_SOURCES is kafka"
    );
    let unknown: Value = json!({"Records": [{"EventSource": "aws:sns", "Sns": {"Message": "{}"}}]});
    let refused = function
        .handle(LambdaEvent::new(unknown, Context::default()))
        .await
        .expect_err("refused");
    assert_eq!(
        lambda_runtime::Diagnostic::from(refused).error_type,
        "UnknownEventSource"
    );
}
