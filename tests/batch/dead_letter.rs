//! Parked records forwarded whole to the dead-letter queue (a real SQS API:
//! moto's server, started by `infra/test.sh`), and a record that cannot be
//! sent there reported instead of parked.

use crate::support;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::EngineConfig;
use exactly_once::lambda::BatchFunction;
use exactly_once::lambda::dead_letter::DeadLetterQueue;
use exactly_once::store::Status;
use exactly_once::store::Store;
use ledger::LedgerHandler;
use serde_json::Value;
use support::msk::{
    Rec, account, balance, event, header_keys, invoke, ledger_function_with, ledger_mode, payment,
    reported, settings,
};

/// A good payment, a poison record (not a payment), a good payment.
fn poisoned(a: &str) -> Value {
    event(vec![(
        "payments-0",
        vec![
            payment(0, "p-1", a, 10),
            Rec {
                offset: 1,
                key: Some("p-bad".into()),
                value: b"{\"card\": \"4111\" not json".to_vec(),
            },
            payment(2, "p-3", a, 300),
        ],
    )])
}

/// The ledger with a dead-letter queue, refused records parked too (as
/// `DEAD_LETTER_QUEUE_URL` sets it).
async fn function_with(queue: DeadLetterQueue) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    parking_refused().await.with_dead_letter_queue(queue)
}

async fn parking_refused() -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let engine = EngineConfig {
        park_refused: true,
        ..EngineConfig::default()
    };
    ledger_function_with(ledger_mode(), settings(header_keys()), engine).await
}

/// A keyless record and a key reused with another payload between good
/// payments.
fn refused(a: &str) -> Value {
    event(vec![(
        "payments-0",
        vec![
            payment(0, "p-1", a, 10),
            Rec {
                offset: 1,
                key: None,
                value: support::msk::payment_json("p-2", a, 20).into_bytes(),
            },
            payment(2, "p-1", a, 999),
            payment(3, "p-4", a, 400),
        ],
    )])
}

#[tokio::test]
async fn refused_records_go_to_the_queue_whole_too_and_never_hold_up_good_ones() {
    let (sqs, url) = support::sqs::queue().await;
    let function = function_with(DeadLetterQueue::new(sqs.clone(), &url)).await;
    let a = account();
    let batch = refused(&a);
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    assert_eq!(balance(&a).await, 410);
    let mut reasons: Vec<(i64, String)> = support::sqs::drain(&sqs, &url)
        .await
        .iter()
        .map(|m| {
            let offset = m["offset"].as_i64().unwrap_or(-1);
            (offset, m["reason"].as_str().unwrap_or("").to_owned())
        })
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [(1, "invalid".to_owned()), (2, "rejected".to_owned())]
    );
}

#[tokio::test]
async fn without_a_queue_a_refused_record_is_reported_since_nothing_would_keep_it() {
    let function = parking_refused().await;
    let a = account();
    assert_eq!(
        reported(&invoke(&function, &refused(&a)).await),
        ["payments-0@1", "payments-0@2"],
        "reported, though the lane went on"
    );
    assert_eq!(balance(&a).await, 410);
}

#[tokio::test]
async fn a_parked_record_goes_to_the_dead_letter_queue_whole_and_its_partition_goes_on() {
    let (sqs, url) = support::sqs::queue().await;
    let function = function_with(DeadLetterQueue::new(sqs.clone(), &url)).await;
    let a = account();
    let batch = poisoned(&a);
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    assert_eq!(balance(&a).await, 310);

    let messages = support::sqs::drain(&sqs, &url).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    let message = &messages[0];
    assert_eq!(message["reason"], "failed");
    assert!(
        message["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("not a payment: not valid JSON")
    );
    assert_eq!(
        (&message["partition"], &message["offset"]),
        (&Value::from("payments-0"), &Value::from(1))
    );
    assert_eq!(message["eventSource"], "aws:kafka");
    // The record as Lambda delivered it: its value, its headers.
    assert_eq!(message["record"], batch["records"]["payments-0"][1]);
    let value = STANDARD
        .decode(message["record"]["value"].as_str().expect("base64 value"))
        .expect("base64");
    assert_eq!(value, b"{\"card\": \"4111\" not json");
    let item = function
        .engine()
        .store()
        .get("p-bad")
        .await
        .expect("get")
        .expect("item");
    assert_eq!(item.status, Status::Failed);
}

#[tokio::test]
async fn a_parked_record_that_cannot_reach_the_queue_is_reported_not_lost() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    let endpoint = format!("http://{}", listener.local_addr().expect("address"));
    drop(listener); // nothing listens there now
    let config = exactly_once::aws::sdk_config().await;
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&config)
            .endpoint_url(endpoint)
            .build(),
    );
    let function = function_with(DeadLetterQueue::new(sqs, "http://127.0.0.1:1/q/parked")).await;
    let a = account();
    let batch = poisoned(&a);
    // Reported, so that the mapping delivers it again (and its own
    // destination keeps it if that keeps failing); the lane went on.
    assert_eq!(reported(&invoke(&function, &batch).await), ["payments-0@1"]);
    assert_eq!(balance(&a).await, 310);
}

/// A parked SQS message and a parked Kinesis record go to the queue whole,
/// named by their source's identifiers.
#[tokio::test]
async fn parked_records_of_other_sources_go_to_the_queue_whole() {
    use support::sources::{Payment, kinesis_event, message_id, sequence, sqs_event};
    let (sqs, url) = support::sqs::queue().await;
    let function = function_with(DeadLetterQueue::new(sqs.clone(), &url)).await;
    let a = account();
    let sqs_batch = sqs_event(
        "payments",
        &[
            Payment::new(&format!("{a}-1"), &a, 10),
            Payment::poison(&format!("{a}-bad")),
        ],
    );
    assert_eq!(
        reported(&invoke(&function, &sqs_batch).await),
        Vec::<String>::new()
    );
    let kinesis_batch = kinesis_event(
        "shardId-000000000000",
        5,
        &[Payment::poison(&format!("{a}-k"))],
    );
    assert_eq!(
        reported(&invoke(&function, &kinesis_batch).await),
        Vec::<String>::new()
    );
    assert_eq!(balance(&a).await, 10);

    let letters = support::sqs::drain(&sqs, &url).await;
    assert_eq!(letters.len(), 2, "{letters:?}");
    let from = |source: &str| {
        letters
            .iter()
            .find(|letter| letter["eventSource"] == source)
            .unwrap_or_else(|| panic!("no letter from {source}: {letters:?}"))
    };
    let (sqs_letter, kinesis_letter) = (from("aws:sqs"), from("aws:kinesis"));
    assert_eq!(sqs_letter["reason"], "failed");
    assert_eq!(sqs_letter["partition"], "payments");
    assert_eq!(sqs_letter["id"], message_id(&format!("{a}-bad")));
    assert_eq!(sqs_letter["eventSource"], "aws:sqs");
    assert_eq!(sqs_letter["record"], sqs_batch["Records"][1]);
    // Keyed by a header, which Kinesis records have not: refused, parked.
    assert_eq!(kinesis_letter["reason"], "invalid");
    assert_eq!(kinesis_letter["partition"], "payments/shardId-000000000000");
    assert_eq!(kinesis_letter["id"], sequence(5));
    assert_eq!(kinesis_letter["record"], kinesis_batch["Records"][0]);
}
