//! The shipped function (`msk-handler`, the demo ledger) on real Amazon MQ
//! brokers: a RabbitMQ node and an ActiveMQ broker of the tests' own
//! (`infra/rabbitmq-local.sh`, `infra/activemq-local.sh`, Debian's
//! packages, free loopback ports), driven by `infra/poller.py` as Lambda's
//! MQ event source mapping drives it: one consumer with manual
//! acknowledgement, the batch acknowledged when the invocation succeeds and
//! handed back to the broker when it fails, the broker counting the
//! redeliveries and dead-lettering past its limit (RabbitMQ: a quorum
//! queue's `x-delivery-limit` and dead-letter queue; ActiveMQ: its
//! redelivery plugin, 6 redeliveries, and `DLQ.<queue>`).
//!
//! What a user sees is asserted: the balances, the items, the invocations'
//! error types, what the broker redelivered and what it dead-lettered. A
//! message "fails" because this test holds its key under a live lease, as
//! another worker would.
//!
//! Needs what infra/test.sh provides: DynamoDB Local with its tables,
//! `RABBITMQ_URL`, `ACTIVEMQ_STOMP_URL`, python3 with pika and stomp.py on
//! PATH ($EXACTLY_ONCE_TOOLS/venv/bin).

use crate::support;

use exactly_once::store::{Status, payload_hash};
use serde_json::{Value, json};
use support::msk::{account, balance};
use support::poller::Run;

/// A payment's JSON text, as producers write it.
fn payment(id: &str, account: &str, amount: i64) -> String {
    json!({"payment_id": id, "account_id": account, "amount_cents": amount, "currency": "EUR"})
        .to_string()
}

/// A message of `body` keyed by `id`: the `idempotency-key` header (an AMQP
/// string on RabbitMQ, a JMS string property on ActiveMQ), and, on
/// RabbitMQ, the AMQP `message_id` property.
fn message(id: &str, body: String) -> Value {
    json!({"body": body, "headers": {"idempotency-key": id}, "message_id": id})
}

/// A payment whose amount is not a number: the ledger fails it permanently.
fn poison(id: &str) -> String {
    json!({"payment_id": id, "amount_cents": "not a number"}).to_string()
}

/// Another worker holds the third payment; the batch fails whole
/// (`BatchNotFinished`) and goes back to the broker, which redelivers it;
/// once the worker lets go, the redelivery applies what is left and skips
/// what finished, a producer's duplicate included.
async fn a_batch_left_unfinished_comes_back_whole_and_every_payment_lands_once(
    source: &'static str,
) {
    let run = Run::new(source, &[], &[]);
    let acc = account();
    let id = |n: i64| format!("{}-{n}", run.prefix.trim_end_matches('#'));
    let bodies: Vec<String> = (0..4)
        .map(|n| payment(&id(n), &acc, (n + 1) * 100))
        .collect();
    let mut messages: Vec<Value> = (0..4)
        .map(|n| message(&id(n), bodies[n as usize].clone()))
        .collect();
    // A producer's retry: the first payment again, same key, same body.
    messages.push(message(&id(0), bodies[0].clone()));
    run.produce(&Value::Array(messages));
    let held = run.hold(&id(2), &payload_hash(bodies[2].as_bytes())).await;

    let (summary, batches) = run.poll(Some(1));
    assert_eq!(summary["invocation_errors"], json!(1), "{summary}");
    assert_eq!(
        summary["error_types"],
        json!({"BatchNotFinished": 1}),
        "{summary}"
    );
    let delivered = batches[0].0["records"].as_array().map(Vec::len);
    assert_eq!(delivered, Some(5), "one batch of every message");
    // The queue is one lane: the first two applied, the rest behind the
    // held one not started.
    assert_eq!(balance(&acc).await, 100 + 200);

    run.release(&held).await;
    let (summary, batches) = run.poll(None);
    assert_eq!(summary["drained"], json!(true), "{summary}");
    assert_eq!(summary["invocation_errors"], json!(0), "{summary}");
    assert_eq!(summary["dead_lettered"], json!(0), "{summary}");
    // The broker delivered the batch again, each message flagged so.
    let redelivered: Vec<bool> = batches
        .iter()
        .flat_map(|batch| batch.0["records"].as_array().expect("records").clone())
        .map(|record| record["redelivered"].as_bool().expect("redelivered"))
        .collect();
    assert_eq!(redelivered, [true; 5], "{summary}");
    assert_eq!(balance(&acc).await, 100 + 200 + 300 + 400);
    for n in 0..4 {
        assert_eq!(run.status(&id(n)).await, Some(Status::Completed), "{n}");
    }
}

#[tokio::test]
async fn rabbitmq_batch_left_unfinished_comes_back_whole_and_every_payment_lands_once() {
    a_batch_left_unfinished_comes_back_whole_and_every_payment_lands_once("rabbitmq").await;
}

#[tokio::test]
async fn activemq_batch_left_unfinished_comes_back_whole_and_every_payment_lands_once() {
    a_batch_left_unfinished_comes_back_whole_and_every_payment_lands_once("activemq").await;
}

/// A poison message after two payments. `POISON_POLICY=report`: every
/// batch that holds the poison fails (`BatchNotFinished`) and goes back to
/// the broker, until the broker's own limit dead-letters the poison after
/// 7 deliveries (the payments beside it dead-lettered too while they come
/// back with it, acknowledged as duplicates once they come without it:
/// ActiveMQ's redelivery plugin schedules each message on its own, so a
/// batch may come back split). `park` (the default): stored FAILED, the
/// batch succeeds at once, nothing dead-lettered. Each payment applied once
/// either way.
async fn a_poison_message_is_parked_or_dead_lettered_by_the_broker_after_its_limit(
    source: &'static str,
) {
    for policy in ["report", "park"] {
        let env = format!("POISON_POLICY={policy}");
        let run = Run::new(source, &[], &[&env]);
        let acc = account();
        let id = |n: i64| format!("{}-{n}", run.prefix.trim_end_matches('#'));
        let poisoned = poison(&id(2));
        run.produce(&json!([
            message(&id(0), payment(&id(0), &acc, 100)),
            message(&id(1), payment(&id(1), &acc, 200)),
            message(&id(2), poisoned.clone()),
        ]));
        let (summary, batches) = run.poll_within(None, 120);
        assert_eq!(summary["drained"], json!(true), "{policy}: {summary}");
        // A batch fails exactly when it holds the poison under `report`.
        let mut poison_deliveries = 0;
        for batch in &batches {
            let holds_poison = batch.payloads().contains(&poisoned);
            poison_deliveries += usize::from(holds_poison);
            let error = batch.0["error"]["errorType"].as_str();
            let failed = holds_poison && policy == "report";
            assert_eq!(
                error,
                failed.then_some("BatchNotFinished"),
                "{policy}: {summary}"
            );
        }
        let dead_lettered = summary["dead_lettered"].as_u64().expect("a count");
        match policy {
            // The broker's limit: 1 delivery and 6 redeliveries, then its
            // dead-letter queue (the poison, and what came back with it).
            "report" => {
                assert_eq!(poison_deliveries, 7, "{summary}");
                assert!((1..=3).contains(&dead_lettered), "{summary}");
            }
            _ => assert_eq!((poison_deliveries, dead_lettered), (1, 0), "{summary}"),
        }
        assert_eq!(balance(&acc).await, 300, "{policy}");
        assert_eq!(run.status(&id(2)).await, Some(Status::Failed), "{policy}");
        assert_eq!(
            run.status(&id(0)).await,
            Some(Status::Completed),
            "{policy}"
        );
        assert_eq!(
            run.status(&id(1)).await,
            Some(Status::Completed),
            "{policy}"
        );
    }
}

#[tokio::test]
async fn rabbitmq_poison_message_is_parked_or_dead_lettered_by_the_broker_after_its_limit() {
    a_poison_message_is_parked_or_dead_lettered_by_the_broker_after_its_limit("rabbitmq").await;
}

#[tokio::test]
async fn activemq_poison_message_is_parked_or_dead_lettered_by_the_broker_after_its_limit() {
    a_poison_message_is_parked_or_dead_lettered_by_the_broker_after_its_limit("activemq").await;
}
