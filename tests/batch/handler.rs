//! The MSK function end to end in-process: real events (built as JSON), the
//! real handler, the demo ledger, DynamoDB Local.

use crate::support;

use aws_sdk_dynamodb::types::TransactWriteItem;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::store::Store;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use exactly_once::engine::{CommitPath, Completion, FencingToken, HandlerError, RecordHandler};
use exactly_once::lambda::KafkaRecord;
use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy};
use exactly_once::store::Status;
use lambda_runtime::{Context, LambdaEvent};
use ledger::LedgerMode;
use serde_json::json;
use support::msk::{
    Rec, account, balance, event, event_of, header_keys, invoke, invoke_until_done,
    ledger_function, ledger_mode, payment, payment_json, record_json, reported,
    reporting_ledger_function,
};

#[tokio::test]
async fn replaying_every_batch_twice_applies_each_payment_once() {
    let function = ledger_function(header_keys()).await;
    let (a, b) = (account(), account());
    let first = event(vec![
        (
            "payments-0",
            vec![payment(0, "p-1", &a, 1250), payment(1, "p-2", &b, 300)],
        ),
        ("payments-1", vec![payment(7, "p-3", &a, 50)]),
    ]);
    let second = event(vec![("payments-0", vec![payment(2, "p-4", &b, 1)])]);
    for _ in 0..3 {
        for batch in [&first, &second] {
            assert_eq!(
                reported(&invoke(&function, batch).await),
                Vec::<String>::new()
            );
        }
    }
    assert_eq!((balance(&a).await, balance(&b).await), (1300, 301));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_batch_from_8_concurrent_invocations_applies_each_payment_once() {
    let function = Arc::new(ledger_function(header_keys()).await);
    let accounts: Vec<String> = (0..3).map(|_| account()).collect();
    let partitions: Vec<(&str, Vec<Rec>)> = ["payments-0", "payments-1"]
        .into_iter()
        .enumerate()
        .map(|(p, name)| {
            let records = (0..10)
                .map(|i| payment(i, &format!("p-{p}-{i}"), &accounts[i as usize % 3], 100 + i))
                .collect();
            (name, records)
        })
        .collect();
    let batch = Arc::new(event(partitions));
    let expected: Vec<i64> = (0..3)
        .map(|a| 2 * (0..10).filter(|i| i % 3 == a).map(|i| 100 + i).sum::<i64>())
        .collect();

    // Like Lambda after a rebalance: 8 pollers deliver the batch at once and
    // each retries what it was told to report, until nothing is reported.
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (function, batch) = (function.clone(), batch.clone());
            tokio::spawn(async move { invoke_until_done(&function, &batch).await })
        })
        .collect();
    for task in tasks {
        task.await.expect("invocation task");
    }
    for (account, expected) in accounts.iter().zip(expected) {
        assert_eq!(balance(account).await, expected, "{account}");
    }
}

/// A partition with a poison record at offset 11 between good payments to
/// `a`, and another partition of payments to `b`.
fn poisoned_batch(a: &str, b: &str) -> serde_json::Value {
    event(vec![
        (
            "payments-0",
            vec![
                payment(10, "p-1", a, 1),
                Rec {
                    offset: 11,
                    key: Some("p-bad".into()),
                    value: b"{not json".to_vec(),
                },
                payment(12, "p-3", a, 100),
                payment(13, "p-4", a, 1000),
            ],
        ),
        (
            "payments-1",
            vec![payment(3, "p-5", b, 7), payment(4, "p-6", b, 8)],
        ),
    ])
}

#[tokio::test]
async fn with_poison_policy_report_the_rest_of_a_failed_records_partition_waits_and_is_reported() {
    let function = reporting_ledger_function(header_keys()).await;
    let (a, b) = (account(), account());
    let batch = poisoned_batch(&a, &b);
    let response = invoke(&function, &batch).await;
    assert_eq!(
        serde_json::to_value(&response).expect("serialize"),
        json!({"batchItemFailures": [
            {"itemIdentifier": {"partition": "payments-0", "offset": 11}},
            {"itemIdentifier": {"partition": "payments-0", "offset": 12}},
            {"itemIdentifier": {"partition": "payments-0", "offset": 13}},
        ]})
    );
    // Offsets 12 and 13 were not started; the other partition went on.
    assert_eq!((balance(&a).await, balance(&b).await), (1, 15));
    let store = function_store(&function);
    let bad = store.get("p-bad").await.expect("get").expect("item");
    assert_eq!(bad.status, Status::Failed);
    assert!(
        bad.error
            .as_deref()
            .unwrap_or_default()
            .starts_with("not a payment:"),
        "{bad:?}"
    );
    for key in ["p-3", "p-4"] {
        let item = store.get(key).await.expect("get");
        match ledger_mode() {
            // Nothing of offsets 12 and 13 was written.
            LedgerMode::LockFree => assert_eq!(item, None),
            // Offsets 12 and 13 were claimed ahead, then released when 11
            // failed: their work never ran, and their redelivery may claim
            // them at once.
            _ => {
                let item = item.expect("claimed ahead");
                assert_eq!(
                    (item.status, item.lock_expires_at_ms),
                    (Status::Started, Some(0))
                );
            }
        }
    }
}

#[tokio::test]
async fn with_the_default_poison_policy_park_a_failed_record_is_kept_failed_and_its_partition_goes_on()
 {
    let function = ledger_function(header_keys()).await;
    let (a, b) = (account(), account());
    let batch = poisoned_batch(&a, &b);
    for _ in 0..2 {
        let response = invoke(&function, &batch).await;
        assert_eq!(
            serde_json::to_value(&response).expect("serialize"),
            json!({"batchItemFailures": []})
        );
    }
    // Every good payment once; the poison record durably FAILED, with its
    // error, never run again.
    assert_eq!((balance(&a).await, balance(&b).await), (1101, 15));
    let bad = function_store(&function)
        .get("p-bad")
        .await
        .expect("get")
        .expect("item");
    assert_eq!((bad.status, bad.attempts), (Status::Failed, Some(1)));
    assert!(bad.error.unwrap_or_default().starts_with("not a payment:"));
}

fn function_store<H: RecordHandler<TransactWriteItem, Record: exactly_once::lambda::FromRecord>>(
    function: &exactly_once::lambda::BatchFunction<H, DynamoDbStore>,
) -> &exactly_once::dynamodb::DynamoDbStore {
    function.engine().store()
}

#[tokio::test]
async fn an_all_good_batch_answers_an_empty_failure_list() {
    let function = ledger_function(header_keys()).await;
    let response = invoke(
        &function,
        &event(vec![("t-0", vec![payment(0, "k", &account(), 1)])]),
    )
    .await;
    assert_eq!(
        serde_json::to_string(&response).expect("serialize"),
        r#"{"batchItemFailures":[]}"#
    );
}

#[tokio::test]
async fn a_redelivered_poison_record_is_answered_from_the_table_without_rerunning() {
    let function = ledger_function(header_keys()).await;
    let a = account();
    let bad = Rec {
        offset: 5,
        key: Some("p-poison".into()),
        value: payment_json("p-poison", &a, 0)
            .replace("0,", "12.5,")
            .into_bytes(),
    };
    let batch = event(vec![("payments-0", vec![bad])]);
    for _ in 0..3 {
        // Parked (the default poison policy): stored FAILED, not reported.
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
    }
    let item = function_store(&function)
        .get("p-poison")
        .await
        .expect("get")
        .expect("item");
    assert_eq!(
        (item.status, item.version, item.attempts),
        (Status::Failed, 1, Some(1))
    );
}

#[tokio::test]
async fn copies_of_a_key_inside_one_batch_run_once() {
    let function = ledger_function(header_keys()).await;
    let a = account();
    let batch = event(vec![
        (
            "payments-0",
            vec![payment(0, "p-dup", &a, 500), payment(1, "p-dup", &a, 500)],
        ),
        ("payments-1", vec![payment(9, "p-dup", &a, 500)]),
    ]);
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    assert_eq!(balance(&a).await, 500);
}

#[tokio::test]
async fn a_key_reused_with_another_payload_is_applied_once_and_the_other_reported() {
    let function = ledger_function(header_keys()).await;
    let a = account();
    let batch = event(vec![
        ("payments-0", vec![payment(0, "p-same", &a, 100)]),
        ("payments-1", vec![payment(0, "p-same", &a, 999)]),
    ]);
    let response = invoke(&function, &batch).await;
    let reported = reported(&response);
    assert_eq!(reported.len(), 1, "{reported:?}");
    let applied = balance(&a).await;
    assert!(
        (applied == 100 && reported[0] == "payments-1@0")
            || (applied == 999 && reported[0] == "payments-0@0"),
        "{applied} {reported:?}"
    );
    // The loser stays rejected on every redelivery.
    assert_eq!(reported_again(&function, &batch).await, reported);
    assert_eq!(balance(&a).await, applied);
}

async fn reported_again<
    H: RecordHandler<TransactWriteItem, Record: exactly_once::lambda::FromRecord>,
>(
    function: &exactly_once::lambda::BatchFunction<H, DynamoDbStore>,
    batch: &serde_json::Value,
) -> Vec<String> {
    reported(&invoke(function, batch).await)
}

#[tokio::test]
async fn bad_records_fail_alone_and_their_neighbours_in_other_partitions_go_on() {
    let function = ledger_function(header_keys()).await;
    let a = account();
    let good = |p: &str, offset, key: &str| record_json(p, &payment(offset, key, &a, 1));
    let mut bad_base64 = good("bad-0", 0, "b-1");
    bad_base64["value"] = json!("%%% not base64 %%%");
    let mut no_headers = good("bad-1", 0, "b-2");
    no_headers
        .as_object_mut()
        .expect("object")
        .remove("headers");
    let no_key = record_json(
        "bad-2",
        &Rec {
            offset: 0,
            key: None,
            value: b"{}".to_vec(),
        },
    );
    let long_key = good("bad-3", 0, &"k".repeat(3000));
    let mut not_utf8 = good("bad-4", 0, "b-5");
    not_utf8["headers"] = json!([support::msk::header("idempotency-key", &[0xff, 0xfe])]);
    let batch = event_of(vec![
        ("bad-0", vec![bad_base64]),
        ("bad-1", vec![no_headers]),
        ("bad-2", vec![no_key]),
        ("bad-3", vec![long_key]),
        ("bad-4", vec![not_utf8]),
        (
            "good-0",
            vec![good("good-0", 0, "g-1"), good("good-0", 1, "g-2")],
        ),
    ]);
    let response = invoke(&function, &batch).await;
    assert_eq!(
        reported(&response),
        ["bad-0@0", "bad-1@0", "bad-2@0", "bad-3@0", "bad-4@0"]
    );
    assert_eq!(balance(&a).await, 2);
}

#[tokio::test]
async fn an_event_of_no_batch_source_is_an_invocation_error() {
    let function = ledger_function(header_keys()).await;
    let sns = json!({"Records": [{"EventSource": "aws:sns", "Sns": {"Message": "{}"}}]});
    let err = function
        .handle(LambdaEvent::new(sns, Context::default()))
        .await
        .expect_err("not a batch source");
    assert_eq!(
        err.to_string(),
        "not an event of a batch source: eventSource is \"aws:sns\"; expected aws:kafka, \
         SelfManagedKafka, aws:sqs, aws:kinesis, aws:dynamodb, aws:rmq or aws:mq"
    );
    let mut wrong = event(vec![]);
    wrong["eventSource"] = json!("aws:sqs");
    let err = function
        .handle(LambdaEvent::new(wrong, Context::default()))
        .await
        .expect_err("not a batch source");
    assert!(
        err.to_string().contains(r#"eventSource is "aws:sqs""#),
        "{err}"
    );
}

#[tokio::test]
async fn self_managed_kafka_events_are_processed_alike() {
    let function = ledger_function(header_keys()).await;
    let a = account();
    let mut batch = event(vec![("orders-3", vec![payment(42, "p-1", &a, 10)])]);
    batch["eventSource"] = json!("SelfManagedKafka");
    batch
        .as_object_mut()
        .expect("object")
        .remove("eventSourceArn");
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    assert_eq!(balance(&a).await, 10);
}

#[tokio::test]
async fn a_utf8_key_header_with_bytes_above_127_is_the_key() {
    let function = ledger_function(header_keys()).await;
    let a = account();
    let batch = event(vec![("payments-0", vec![payment(0, "платёж-ключ", &a, 3)])]);
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    let item = function_store(&function)
        .get("платёж-ключ")
        .await
        .expect("get");
    assert_eq!(item.map(|i| i.status), Some(Status::Completed));
}

#[tokio::test]
async fn keys_from_a_json_field_the_record_key_or_both() {
    let a = account();
    let rec = |offset| Rec {
        offset,
        key: None,
        value: payment_json(&format!("pay-{offset}"), &a, 10).into_bytes(),
    };
    for (source, expected_key) in [
        ("json:/payment_id", "pay-0"),
        ("record-key", "acc"),
        ("record-key,json:/payment_id", "acc|pay-0"),
    ] {
        let keys = KeySpec::parse(source, "idempotency-key".into(), MissingKeyPolicy::Reject)
            .expect("valid");
        let function = ledger_function(keys).await;
        let batch = event(vec![("payments-0", vec![rec(0)])]);
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        let item = function_store(&function)
            .get(expected_key)
            .await
            .expect("get");
        assert_eq!(item.map(|i| i.status), Some(Status::Completed), "{source}");
    }
    assert_eq!(balance(&a).await, 30);
}

#[tokio::test]
async fn missing_keys_follow_the_configured_policy() {
    let a = account();
    let keyless = |offset, amount| Rec {
        offset,
        key: None,
        value: payment_json("p", &a, amount).into_bytes(),
    };
    let batch = event(vec![("payments-0", vec![keyless(0, 1), keyless(1, 20)])]);
    let same_payload_elsewhere = event(vec![("payments-1", vec![keyless(5, 1)])]);

    // record-coordinates: Lambda's redelivery of the same offsets is deduped,
    // the same payload at another offset is new.
    let by_coordinates = ledger_function(
        KeySpec::parse(
            "header",
            "idempotency-key".into(),
            MissingKeyPolicy::RecordCoordinates,
        )
        .expect("valid"),
    )
    .await;
    for batch in [&batch, &batch, &same_payload_elsewhere] {
        assert_eq!(
            reported(&invoke(&by_coordinates, batch).await),
            Vec::<String>::new()
        );
    }
    assert_eq!(balance(&a).await, 22);
    let item = function_store(&by_coordinates)
        .get("record:payments-0@1")
        .await
        .expect("get");
    assert_eq!(item.map(|i| i.status), Some(Status::Completed));

    // payload-hash: equal payloads count once wherever they are.
    let by_hash = ledger_function(
        KeySpec::parse(
            "header",
            "idempotency-key".into(),
            MissingKeyPolicy::PayloadHash,
        )
        .expect("valid"),
    )
    .await;
    for batch in [&batch, &same_payload_elsewhere] {
        assert_eq!(
            reported(&invoke(&by_hash, batch).await),
            Vec::<String>::new()
        );
    }
    assert_eq!(balance(&a).await, 22 + 21);
}

/// Fails the first `failures` calls with a retryable error, then succeeds.
struct Flaky {
    failures: usize,
    calls: AtomicUsize,
    seen: std::sync::Mutex<Vec<FencingToken>>,
}

impl RecordHandler<TransactWriteItem> for Flaky {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        CommitPath::Locking
    }

    async fn handle(
        &self,
        token: &FencingToken,
        _: &KafkaRecord,
    ) -> Result<Completion<TransactWriteItem>, HandlerError> {
        self.seen.lock().expect("lock").push(token.clone());
        if self.calls.fetch_add(1, Ordering::SeqCst) < self.failures {
            return Err(HandlerError::Retryable("payment API timed out".into()));
        }
        Ok(Completion::default())
    }
}

#[tokio::test]
async fn a_retryable_failure_releases_the_key_and_the_redelivery_takes_it_over() {
    let store = support::store(Duration::from_secs(30)).await;
    let flaky = Flaky {
        failures: 1,
        calls: AtomicUsize::new(0),
        seen: std::sync::Mutex::default(),
    };
    let function = support::msk::function_with(store.clone(), flaky, header_keys());
    let batch = event(vec![(
        "payments-0",
        vec![payment(0, "p-1", "acc", 1), payment(1, "p-2", "acc", 1)],
    )]);

    assert_eq!(
        reported(&invoke(&function, &batch).await),
        ["payments-0@0", "payments-0@1"]
    );
    let released = store.get("p-1").await.expect("get").expect("item");
    assert_eq!(
        (released.status, released.lock_expires_at_ms),
        (Status::Started, Some(0))
    );

    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    let item = store.get("p-1").await.expect("get").expect("item");
    assert_eq!((item.status, item.version), (Status::Completed, 2));
    // Each attempt got its own fencing number (the takeover raised the
    // version), and the same downstream key: the retry after the release is
    // the same request to a payment API, not a new one.
    let seen = function
        .engine()
        .handler()
        .seen
        .lock()
        .expect("lock")
        .clone();
    let attempts: Vec<(String, u64)> = seen
        .iter()
        .map(|t| (t.idempotency_key().to_owned(), t.version))
        .collect();
    let p = &store.config().key_prefix;
    assert_eq!(
        attempts,
        [
            (format!("{p}p-1"), 1),
            (format!("{p}p-1"), 2),
            // p-2 was claimed ahead (v1) and released unrun when p-1 failed.
            (format!("{p}p-2"), 2)
        ]
    );
}

#[tokio::test]
async fn a_ledger_built_once_the_store_is_connected_runs_as_run_with_serves_it_on_every_store() {
    use support::shipped::{Store, balance, env};
    use support::sources::{Payment, sqs_event};
    for store in [Store::DynamoDb, Store::Postgres, Store::Redis] {
        // Direct mode: the ledger writes each balance itself, through the
        // client or pool `run_with` hands its build.
        let mut vars = env(store, "direct", Duration::from_secs(30), None).await;
        vars.push(("EVENT_SOURCES", "sqs".to_owned()));
        let lookup = support::lookup(&vars);
        let function = exactly_once::Function::from_vars_with(lookup, async |backend| {
            let settings =
                ledger::LedgerSettings::from_lookup(lookup).map_err(|err| err.to_string())?;
            ledger::LedgerHandler::connect(backend, settings).await
        })
        .await
        .unwrap_or_else(|err| panic!("{store:?}: the function starts: {err}"));
        let a = account();
        let payments = [
            Payment::new(&format!("{a}-1"), &a, 100),
            Payment::new(&format!("{a}-2"), &a, 250),
        ];
        let event = sqs_event("payments", &payments);
        for delivery in 1..=2 {
            let answer = function.invoke(event.clone()).await.expect("an SQS batch");
            assert_eq!(
                answer,
                json!({"batchItemFailures": []}),
                "{store:?}, delivery {delivery}"
            );
        }
        assert_eq!(balance(store, &a).await, 350, "{store:?}: applied once");
    }
}

#[tokio::test]
async fn a_handler_whose_build_fails_stops_the_function_with_its_reason() {
    let mut vars = support::shipped::env(
        support::shipped::Store::Postgres,
        "direct",
        Duration::from_secs(30),
        None,
    )
    .await;
    vars.retain(|(name, _)| *name != "LEDGER_TABLE");
    vars.push(("LEDGER_TABLE", "no_such_ledger".to_owned()));
    let lookup = support::lookup(&vars);
    let built = exactly_once::Function::from_vars_with(lookup, async |backend| {
        let settings =
            ledger::LedgerSettings::from_lookup(lookup).map_err(|err| err.to_string())?;
        ledger::LedgerHandler::connect(backend, settings).await
    })
    .await;
    match built {
        Err(err @ exactly_once::StartError::Handler(_)) => {
            assert!(err.to_string().contains("no_such_ledger"), "{err}");
        }
        Err(other) => panic!("expected the handler's start-up error, got {other}"),
        Ok(_) => panic!("a ledger table that does not exist started"),
    }
}
