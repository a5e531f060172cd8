//! The shipped function (`msk-handler`, the demo ledger) on real local
//! servers of every batch source, driven as Lambda's event source mapping
//! drives it: payments are produced to a queue of moto's server (SQS
//! standard and FIFO), a stream of moto's server (Kinesis) or a table of
//! DynamoDB Local whose own stream is read (DynamoDB Streams), and
//! `infra/poller.py` polls them, hands the real binary each event through
//! a Lambda Runtime API stand-in and acts on its partial batch response
//! (deletes the messages not reported, moves the shard's checkpoint).
//!
//! What a user sees is asserted: the balances in the ledger table, the
//! items of the idempotency table, what the queue still holds and where a
//! stream resumes. Every payment is applied exactly once; one produced twice
//! is applied once; a poison record is stored FAILED and parked, its unit
//! going on. A record "fails" because this test holds its key under a live
//! lease, as another worker would: the function finds it in progress and
//! reports it (retryable), which exercises its real claim path. Then the
//! lease is released and the poller run until drained: the redelivery takes
//! the key over and applies it, in the source's order (a standard queue
//! reports the failed message alone; a FIFO queue the rest of its message
//! group, other groups going on; Kinesis and DynamoDB Streams the rest of
//! the shard, which resumes at the failed record).
//!
//! Needs what infra/test.sh provides: DynamoDB Local with its tables, moto's
//! server (`AWS_ENDPOINT_URL_SQS`, `AWS_ENDPOINT_URL_KINESIS`), python3 with
//! boto3 on PATH ($EXACTLY_ONCE_TOOLS/venv/bin).

use crate::support;

use std::collections::BTreeMap;

use exactly_once::lambda::Fingerprint;
use exactly_once::store::{Status, payload_hash};
use serde_json::{Value, json};
use support::msk::{account, balance};
use support::poller::{Batch, Run};

/// A payment's JSON text, as producers write it.
fn payment(id: &str, account: &str, amount: i64) -> String {
    json!({"payment_id": id, "account_id": account, "amount_cents": amount, "currency": "EUR"})
        .to_string()
}

/// An SQS message of a payment keyed by its id (`idempotency-key`).
fn sqs_payment(id: &str, account: &str, amount: i64) -> Value {
    json!({"body": payment(id, account, amount), "attributes": {"idempotency-key": id}})
}

/// Balances of `accounts`, in order.
async fn balances(accounts: &[String]) -> Vec<i64> {
    let mut out = Vec::new();
    for account in accounts {
        out.push(balance(account).await);
    }
    out
}

/// The poller stopped because everything was done, with no invocation error.
fn assert_drained(summary: &Value) {
    assert_eq!(summary["drained"], json!(true), "not drained: {summary}");
    assert_eq!(summary["invocation_errors"], json!(0), "{summary}");
    assert_eq!(summary["invalid_responses"], json!(0), "{summary}");
}

#[tokio::test]
async fn sqs_standard_queue_reports_a_failed_message_alone_and_deletes_the_others() {
    let run = Run::new("sqs", &[], &[]);
    let (a, b) = (account(), account());
    let id = |n: &str| format!("{}-{n}", run.prefix.trim_end_matches('#'));
    let held = sqs_payment(&id("3"), &a, 300);
    let messages = json!([
        sqs_payment(&id("1"), &a, 100),
        sqs_payment(&id("2"), &b, 200),
        held,
        sqs_payment(&id("4"), &b, 400),
        // A producer's retry: the same payment again, a message of its own.
        sqs_payment(&id("2"), &b, 200),
        // Poison: not JSON, with a key.
        {"body": "{\"payment_id\": \"p-poison\",", "attributes": {"idempotency-key": id("poison")}},
    ]);
    let sent = run.produce(&messages);
    let message_id = |i: usize| sent[i]["message_id"].as_str().expect("an id").to_owned();
    let lease = run
        .hold(
            &id("3"),
            &payload_hash(held["body"].as_str().expect("a body").as_bytes()),
        )
        .await;

    let (summary, batches) = run.poll(Some(1));
    assert_eq!(batches.len(), 1, "{summary}");
    assert_eq!(
        batches[0].ids().len(),
        6,
        "every message in one batch: {summary}"
    );
    // The failed message alone is reported; the others are deleted.
    assert_eq!(batches[0].reported(), [message_id(2)]);
    assert_eq!(
        (summary["visible"].clone(), summary["in_flight"].clone()),
        (json!(0), json!(1))
    );
    assert_eq!(balances(&[a.clone(), b.clone()]).await, [100, 600]);
    assert_eq!(run.status(&id("poison")).await, Some(Status::Failed));
    assert_eq!(run.status(&id("3")).await, Some(Status::Started));

    // The lease is given up; the message comes back (its second receive).
    run.release(&lease).await;
    let (summary, batches) = run.poll(None);
    assert_drained(&summary);
    let again: Vec<String> = batches.iter().flat_map(Batch::ids).collect();
    assert_eq!(
        again,
        [message_id(2)],
        "only the reported message comes again"
    );
    assert_eq!(batches[0].receive_counts(), [2]);
    assert!(batches.iter().all(|b| b.reported().is_empty()));
    assert_eq!(
        (summary["visible"].clone(), summary["in_flight"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(balances(&[a, b]).await, [400, 600]);
    for n in ["1", "2", "3", "4"] {
        assert_eq!(run.status(&id(n)).await, Some(Status::Completed), "{n}");
    }
    assert_eq!(run.status(&id("poison")).await, Some(Status::Failed));
}

#[tokio::test]
async fn sqs_fifo_queue_holds_a_failed_messages_group_and_lets_the_others_go_on() {
    let run = Run::new("sqs-fifo", &[], &[]);
    let (a, b) = (account(), account());
    let id = |n: &str| format!("{}-{n}", run.prefix.trim_end_matches('#'));
    let fifo = |n: &str, account: &str, amount: i64, group: &str, dedup: &str| {
        let mut m = sqs_payment(&id(n), account, amount);
        m["group"] = json!(group);
        m["deduplication_id"] = json!(dedup);
        m
    };
    let held = fifo("a2", &a, 200, "g-a", "a2");
    let messages = json!([
        fifo("a1", &a, 100, "g-a", "a1"),
        held,
        fifo("a3", &a, 300, "g-a", "a3"),
        fifo("b1", &b, 10, "g-b", "b1"),
        {"body": "not a payment", "attributes": {"idempotency-key": id("poison")},
         "group": "g-b", "deduplication_id": "poison"},
        fifo("b2", &b, 20, "g-b", "b2"),
        // b1 again: with a new deduplication id (a producer's retry after
        // SQS's 5-minute window) it is delivered, a duplicate of the key;
        // with the same one SQS drops it.
        fifo("b1", &b, 10, "g-b", "b1-retry"),
        fifo("b1", &b, 10, "g-b", "b1"),
    ]);
    let sent = run.produce(&messages);
    let message_id = |i: usize| sent[i]["message_id"].as_str().expect("an id").to_owned();
    let lease = run
        .hold(
            &id("a2"),
            &payload_hash(held["body"].as_str().expect("a body").as_bytes()),
        )
        .await;

    let (summary, batches) = run.poll(Some(1));
    assert_eq!(batches.len(), 1, "{summary}");
    let delivered = batches[0].ids();
    assert_eq!(
        delivered,
        (0..7).map(message_id).collect::<Vec<_>>(),
        "the 7 messages SQS kept, in order"
    );
    // a2 fails: it and the rest of its group (a3) are reported; group g-b,
    // its poison parked, goes on.
    assert_eq!(batches[0].reported(), [message_id(1), message_id(2)]);
    assert_eq!(balances(&[a.clone(), b.clone()]).await, [100, 30]);
    assert_eq!(run.status(&id("poison")).await, Some(Status::Failed));
    assert_eq!(run.status(&id("a3")).await, None, "a3 was not started");

    // While a2 and a3 are in flight, a4 joins their group: SQS must not
    // hand it out before them.
    let later = run.produce(&json!([fifo("a4", &a, 400, "g-a", "a4")]));
    let a4 = later[0]["message_id"].as_str().expect("an id").to_owned();
    run.release(&lease).await;
    let (summary, batches) = run.poll(None);
    assert_drained(&summary);
    assert_eq!(summary["out_of_order"], json!(0), "{summary}");
    let again: Vec<String> = batches.iter().flat_map(Batch::ids).collect();
    assert_eq!(
        again,
        [message_id(1), message_id(2), a4],
        "the group comes back in order, a4 after a2 and a3"
    );
    assert!(batches.iter().all(|b| b.reported().is_empty()));
    assert_eq!(balances(&[a, b]).await, [1000, 30]);
    for n in ["a1", "a2", "a3", "a4", "b1", "b2"] {
        assert_eq!(run.status(&id(n)).await, Some(Status::Completed), "{n}");
    }
}

/// Per shard, the produced records (index into the produced list), in
/// sequence order.
fn by_shard(produced: &[Value]) -> BTreeMap<String, Vec<usize>> {
    let mut shards: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, p) in produced.iter().enumerate() {
        let shard = p["shard_id"].as_str().expect("a shard").to_owned();
        shards.entry(shard).or_default().push(i);
    }
    shards
}

#[tokio::test]
async fn kinesis_shard_resumes_at_a_failed_record_and_applies_nothing_after_it_before_it() {
    // Keys: the partition key, the payment id (so that a poison record
    // that is not JSON still has a key, is stored FAILED and parked).
    let run = Run::new(
        "kinesis",
        &["--shards", "2"],
        &["IDEMPOTENCY_KEY_SOURCE=record-key"],
    );
    let id = |n: usize| format!("{}-{n}", run.prefix.trim_end_matches('#'));
    // 12 payments, each to an account of its own: a balance says whether
    // that payment is applied.
    let accounts: Vec<String> = (0..12).map(|_| account()).collect();
    let record = |n: usize| json!({"data": payment(&id(n), &accounts[n], 100 + n as i64), "partition_key": id(n)});
    let mut messages: Vec<Value> = (0..12).map(record).collect();
    // Payment 0 produced twice (the same partition key: the same shard).
    messages.push(record(0));
    messages.push(json!({"data": "not JSON", "partition_key": id(99)}));
    let produced = run.produce(&Value::Array(messages.clone()));
    let shards = by_shard(&produced);
    // The record held: the second payment of the shard with most of them.
    let (shard, records) = shards
        .iter()
        .max_by_key(|(_, records)| records.len())
        .expect("a shard");
    let held = records[1];
    assert!(held < 12, "a payment");
    let held_sequence = produced[held]["sequence_number"]
        .as_str()
        .expect("a sequence number")
        .to_owned();
    let data = messages[held]["data"].as_str().expect("data");
    let lease = run.hold(&id(held), &payload_hash(data.as_bytes())).await;

    // One batch per shard.
    let (summary, batches) = run.poll(Some(shards.len()));
    assert_eq!(batches.len(), shards.len(), "{summary}");
    let mut expected: Vec<i64> = (0..12).map(|n| 100 + i64::from(n)).collect();
    for n in records.iter().skip(1).filter(|&&n| n < 12) {
        expected[*n] = 0; // the held payment and every later one of its shard
    }
    assert_eq!(
        balances(&accounts).await,
        expected,
        "after one batch per shard"
    );
    let failed = batches
        .iter()
        .find(|b| b.unit() == shard)
        .expect("the held shard's batch");
    // Reported: the held record and everything after it in its shard.
    let after: Vec<String> = records[1..]
        .iter()
        .map(|&i| {
            produced[i]["sequence_number"]
                .as_str()
                .expect("seq")
                .to_owned()
        })
        .collect();
    assert_eq!(failed.reported(), after);
    for b in batches.iter().filter(|b| b.unit() != shard) {
        assert!(b.reported().is_empty(), "the other shard goes on");
    }
    assert_eq!(
        summary["checkpoints"][shard],
        json!({"type": "AT_SEQUENCE_NUMBER", "sequence_number": held_sequence}),
        "the shard resumes at the failed record"
    );
    if produced[13]["shard_id"] != json!(shard) {
        assert_eq!(
            run.status(&id(99)).await,
            Some(Status::Failed),
            "poison parked"
        );
    }

    run.release(&lease).await;
    let (summary, batches) = run.poll(None);
    assert_drained(&summary);
    let resumed = batches
        .iter()
        .find(|b| b.unit() == shard)
        .expect("the held shard again");
    assert_eq!(
        resumed.ids().first(),
        Some(&held_sequence),
        "redelivered from the failed record"
    );
    assert_eq!(resumed.ids(), after);
    assert!(batches.iter().all(|b| b.reported().is_empty()));
    // Everything applied once; payment 0's second copy a duplicate.
    let all: Vec<i64> = (0..12).map(|n| 100 + i64::from(n)).collect();
    assert_eq!(balances(&accounts).await, all);
    assert_eq!(
        run.status(&id(99)).await,
        Some(Status::Failed),
        "poison parked"
    );
    for n in 0..12 {
        assert_eq!(run.status(&id(n)).await, Some(Status::Completed), "{n}");
    }
}

/// The new image's fingerprint under the DynamoDB Streams tests'
/// `PAYLOAD_HASH` (the payment's fields, not the request id).
const STREAM_PAYLOAD_HASH: &str = "json:/account_id,/amount_cents,/currency";

fn stream_hash(item: &Value) -> String {
    let body = item.to_string();
    Fingerprint::parse(STREAM_PAYLOAD_HASH)
        .expect("a fingerprint")
        .of(body.as_bytes(), Some(&Ok(item.clone())))
        .expect("a JSON value")
}

#[tokio::test]
async fn dynamodb_stream_resumes_at_a_failed_insert_and_applies_nothing_after_it_before_it() {
    // A table of payment requests (key request_id): a producer's retry
    // writes the payment again under a new request id. Keys: the payment
    // id; the fingerprint: the payment's fields.
    let run = Run::new(
        "dynamodb-streams",
        &["--key", "request_id"],
        &[
            "IDEMPOTENCY_KEY_SOURCE=json:/payment_id",
            &format!("PAYLOAD_HASH={STREAM_PAYLOAD_HASH}"),
        ],
    );
    let id = |n: usize| format!("{}-{n}", run.prefix.trim_end_matches('#'));
    let accounts: Vec<String> = (0..6).map(|_| account()).collect();
    let item = |request: &str, n: usize| {
        json!({"request_id": request, "payment_id": id(n), "account_id": accounts[n],
               "amount_cents": 100 + n as i64, "currency": "EUR"})
    };
    let put = |item: Value| json!({ "put": item });
    let poison = json!({"request_id": "r-poison", "payment_id": id(99), "account_id": accounts[0],
                        "amount_cents": "ten", "currency": "EUR"});
    let held = item("r-2", 2);
    let messages = json!([
        put(item("r-0", 0)),
        put(item("r-1", 1)),
        put(held.clone()),
        put(item("r-3", 3)),
        put(poison),
        put(item("r-4", 4)),
        // A producer's retry of payment 0: another item, the same payment.
        put(item("r-0-retry", 0)),
        put(item("r-5", 5)),
    ]);
    run.produce(&messages);
    let lease = run.hold(&id(2), &stream_hash(&held)).await;

    let (summary, batches) = run.poll(Some(1));
    assert_eq!(batches.len(), 1, "{summary}");
    let first = &batches[0];
    assert_eq!(first.ids().len(), 8, "one shard, every change in one batch");
    // Reported: the held INSERT and every later change of the shard.
    assert_eq!(first.reported(), first.ids()[2..].to_vec());
    assert_eq!(
        balances(&accounts).await,
        [100, 101, 0, 0, 0, 0],
        "nothing after the failed INSERT applied"
    );
    assert_eq!(
        run.status(&id(99)).await,
        None,
        "the poison was not started"
    );
    let shard = first.unit().to_owned();
    assert_eq!(
        summary["checkpoints"][&shard],
        json!({"type": "AT_SEQUENCE_NUMBER", "sequence_number": first.ids()[2]}),
    );

    run.release(&lease).await;
    let (summary, batches) = run.poll(None);
    assert_drained(&summary);
    assert_eq!(
        batches[0].ids(),
        first.ids()[2..].to_vec(),
        "the shard resumes at the failed INSERT"
    );
    assert!(batches.iter().all(|b| b.reported().is_empty()));
    assert!(
        batches[0].payloads()[0].contains("r-2"),
        "{:?}",
        batches[0].payloads()
    );
    assert_eq!(
        balances(&accounts).await,
        [100, 101, 102, 103, 104, 105],
        "each payment once, the retry of payment 0 a duplicate"
    );
    assert_eq!(
        run.status(&id(99)).await,
        Some(Status::Failed),
        "poison parked"
    );
}

/// A MODIFY and a REMOVE of a payment item already paid are changes of
/// their own (keyed by their sequence numbers, never by the INSERT's
/// payment id): done without effect, and the shard goes on.
#[tokio::test]
async fn dynamodb_stream_modify_and_remove_of_a_payment_are_done_without_effect() {
    let run = Run::new(
        "dynamodb-streams",
        &["--key", "payment_id"],
        &["IDEMPOTENCY_KEY_SOURCE=json:/payment_id"],
    );
    let id = |n: usize| format!("{}-{n}", run.prefix.trim_end_matches('#'));
    let (a, b) = (account(), account());
    let paid =
        json!({"payment_id": id(1), "account_id": a, "amount_cents": 100, "currency": "EUR"});
    let mut settled = paid.clone();
    settled["status"] = json!("settled");
    run.produce(&json!([
        {"put": paid},
        {"put": settled},
        {"delete": {"payment_id": id(1)}},
        {"put": {"payment_id": id(2), "account_id": b, "amount_cents": 200, "currency": "EUR"}},
    ]));

    let (summary, batches) = run.poll_within(None, 10);
    let reported: Vec<String> = batches.iter().flat_map(Batch::reported).collect();
    assert_eq!(reported, Vec::<String>::new(), "{summary}");
    assert_drained(&summary);
    assert_eq!(balances(&[a, b]).await, [100, 200]);
}

/// A function that cannot start (a setting it cannot serve) fails its
/// init: the stand-in's invocation error carries its init error and its
/// own last lines (what Lambda's log would show), not a bare
/// `Runtime.Gone`, and the message stays in the queue.
#[tokio::test]
async fn a_function_that_cannot_start_leaves_its_last_words_in_the_invocation_error() {
    let run = Run::new("sqs", &[], &["IDEMPOTENCY_STORE=carrier-pigeon"]);
    let acc = account();
    let id = format!("{}-0", run.prefix.trim_end_matches('#'));
    run.produce(&json!([sqs_payment(&id, &acc, 100)]));
    let (summary, batches) = run.poll_within(Some(1), 20);
    assert_eq!(summary["invocation_errors"], json!(1), "{summary}");
    let error = &batches[0].0["error"];
    assert_eq!(error["errorType"], json!("Runtime.Gone"), "{error}");
    let detail: Value =
        serde_json::from_str(error["errorMessage"].as_str().expect("a message")).expect("JSON");
    let init = detail["init_error"]["errorMessage"]
        .as_str()
        .unwrap_or_default();
    assert!(
        init.contains("IDEMPOTENCY_STORE") && init.contains("carrier-pigeon"),
        "{detail}"
    );
    let words: Vec<&str> = detail["last_words"]
        .as_array()
        .expect("last words")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        words.iter().any(|line| line.contains("carrier-pigeon")),
        "{words:?}"
    );
    assert_eq!(balance(&acc).await, 0);
    assert_eq!(batches[0].reported(), batches[0].ids(), "the message stays");
}

/// Settings that cannot fit the time an invocation has are named once, on
/// the container's first invocation: a safety margin longer than the
/// stand-in's 60 s leaves nothing, so the message is reported on every
/// delivery (no record starts) and the log says why, once.
#[tokio::test]
async fn settings_that_cannot_fit_the_invocation_are_named_once_in_the_log() {
    let run = Run::new("sqs", &[], &["SAFETY_MARGIN_MS=90000"]);
    let acc = account();
    let id = format!("{}-0", run.prefix.trim_end_matches('#'));
    run.produce(&json!([sqs_payment(&id, &acc, 100)]));
    let (summary, batches) = run.poll_within(Some(2), 30);
    assert_eq!(batches.len(), 2, "{summary}");
    for batch in &batches {
        assert_eq!(batch.reported(), batch.ids(), "nothing starts");
    }
    let log = std::fs::read_to_string(run.dir.join("function.log")).expect("the function's log");
    let named: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("SAFETY_MARGIN_MS=90000 leaves nothing of the invocation's"))
        .collect();
    assert_eq!(named.len(), 1, "{named:?}");
    assert!(named[0].contains("\"level\":\"WARN\""), "{}", named[0]);
    assert_eq!(balance(&acc).await, 0);
}

/// An SQS source queue that would show a message again while an invocation
/// still works on it (its visibility timeout under six times the function's
/// timeout, as AWS asks) is named once, on the container's first SQS
/// invocation, read from the queue itself: a queue outside the stack, which
/// no deploy-time guard sees. The poller's queues show a message again after
/// 60 s: with 60 s invocations it is named (two batches, one line); with
/// 10 s invocations it fits and nothing is said.
#[tokio::test]
async fn an_sqs_queue_visible_again_too_soon_is_named_once_in_the_log() {
    for (invoke_timeout, lines) in [("60", 1), ("10", 0)] {
        let run = Run::new("sqs", &[], &[]);
        let acc = account();
        let prefix = run.prefix.trim_end_matches('#').to_owned();
        run.produce(&json!([
            sqs_payment(&format!("{prefix}-0"), &acc, 100),
            sqs_payment(&format!("{prefix}-1"), &acc, 20)
        ]));
        let (summary, batches) = run.poll_with(
            None,
            &["--invoke-timeout", invoke_timeout, "--batch-size", "1"],
        );
        assert_eq!(batches.len(), 2, "{summary}");
        assert_eq!(balance(&acc).await, 120);
        let log =
            std::fs::read_to_string(run.dir.join("function.log")).expect("the function's log");
        let named: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("has VisibilityTimeout=60 s, under 6 times"))
            .collect();
        assert_eq!(named.len(), lines, "{invoke_timeout} s: {named:?}");
        for line in named {
            assert!(line.contains("\"level\":\"WARN\""), "{line}");
            assert!(
                line.contains("function's timeout (60 s)") && line.contains("at least 360 s"),
                "{line}"
            );
        }
        assert!(!log.contains("could not be read"), "{log}");
    }
}
