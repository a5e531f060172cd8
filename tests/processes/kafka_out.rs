//! MSK in, MSK out, through a real Kafka-protocol broker
//! (`infra/kafka-local.sh`) and Lambda's Kafka mapping as `infra/poller.py`
//! reproduces it: hop 1, the shipped ledger, consumes `payments` and
//! announces each applied payment to a topic of its own
//! (`LEDGER_EVENTS_DESTINATION=kafka://…`, the outbox's Kafka sender); hop
//! 2, the same function on a projection table, consumes those
//! announcements, keyed by the `idempotency-key` header a consumer on this
//! crate reads by default. Both hops run through a SIGKILL storm (the
//! poller kills the function mid-invocation or before its answer; the
//! mapping retries the batch), so a payment is applied and announced again
//! and again, and hop 2 gets copies and is retried over them: what a user
//! sees must still be exact.
//!
//! Needs what infra/test.sh provides: DynamoDB Local with its tables,
//! `KAFKA_BOOTSTRAP_SERVERS`, python3 with kafka-python on PATH.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use exactly_once::store::Status;
use serde_json::{Value, json};
use support::msk::{account, ledger_entry, ledger_entry_in, ledger_table};
use support::poller::Run;

/// A storm: about one invocation in three killed within 0.2 s.
const STORM: [&str; 6] = [
    "--kill-chance",
    "0.35",
    "--kill-within",
    "0.2",
    "--batch-size",
    "10",
];

/// A payment record keyed by its account, its id in the header.
fn payment(id: &str, account: &str, amount: i64) -> Value {
    let body =
        json!({"payment_id": id, "account_id": account, "amount_cents": amount, "currency": "EUR"});
    json!({"key": account, "value": body.to_string(), "headers": {"idempotency-key": id}})
}

/// Hop 1 in `mode` through a storm, announcing to hop 2's topic; hop 2
/// onto its projection through a storm too (retried from inside the
/// sender's batches of several records). 48 payments over 4 accounts (the
/// first 4 produced twice, as a producer's retry writes them), and per
/// account a debit the minimum balance refuses; six announcements copied
/// into hop 2's topic, as a retried produce writes them.
async fn every_payment_is_applied_announced_and_projected_once(mode: &str) {
    let projection = format!("projection-{}", uuid::Uuid::new_v4().simple());
    ledger_table(&projection);
    let hop2 = Run::new(
        "msk",
        &["--partitions", "4"],
        &[&format!("LEDGER_TABLE={projection}")],
    );
    let destination = format!(
        "kafka://{}/{}",
        support::env("KAFKA_BOOTSTRAP_SERVERS"),
        hop2.name
    );
    let hop1 = Run::new(
        "msk",
        &["--partitions", "3"],
        &[
            &format!("LEDGER_EVENTS_DESTINATION={destination}"),
            &format!("LEDGER_MODE={mode}"),
            "LEDGER_MIN_BALANCE_CENTS=0",
        ],
    );
    let accounts: Vec<String> = (0..4).map(|_| account()).collect();
    let id = |n: usize| format!("{}-{n}", hop1.prefix.trim_end_matches('#'));
    let amount = |n: usize| (n as i64 % 5 + 1) * 100;
    let mut records: Vec<Value> = Vec::new();
    for n in 0..48 {
        records.push(payment(&id(n), &accounts[n % 4], amount(n)));
        if n == 23 {
            // Halfway, each account's refused debit.
            for (a, acc) in accounts.iter().enumerate() {
                records.push(payment(&id(100 + a), acc, -1_000_000));
            }
        }
    }
    for n in 0..4 {
        records.push(payment(&id(n), &accounts[n % 4], amount(n)));
    }
    hop1.produce(&Value::Array(records));

    let (summary, _) = hop1.poll_with(None, &STORM);
    assert_eq!(summary["drained"], json!(true), "hop 1: {summary}");
    assert!(
        summary["kills"].as_i64() > Some(0),
        "hop 1 killed nothing: {summary}"
    );
    for n in 0..48 {
        assert_eq!(hop1.status(&id(n)).await, Some(Status::Completed), "{n}");
    }
    for a in 0..4 {
        assert_eq!(
            hop1.status(&id(100 + a)).await,
            Some(Status::Failed),
            "debit {a}"
        );
    }

    // At the next hop: each applied payment under one id, on its account's
    // partition, in its account's order; no refused debit.
    let announced = hop2.read();
    let mut ids: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut partitions: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    let mut order: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for record in &announced {
        let value: Value =
            serde_json::from_str(record["value"].as_str().expect("text")).expect("JSON");
        let payment_id = value["payment_id"]
            .as_str()
            .expect("a payment id")
            .to_owned();
        let acc = value["account_id"].as_str().expect("an account").to_owned();
        let n: usize = payment_id
            .rsplit('-')
            .next()
            .and_then(|n| n.parse().ok())
            .expect("ours");
        assert_eq!(
            value,
            json!({"payment_id": payment_id, "account_id": acc, "amount_cents": amount(n)}),
            "{record}"
        );
        assert_eq!(record["key"], json!(acc), "keyed by the account: {record}");
        let headers = record["headers"].as_array().expect("headers");
        let [header] = headers.as_slice() else {
            panic!("one header: {record}")
        };
        assert_eq!(header[0], json!("idempotency-key"), "{record}");
        ids.entry(payment_id.clone())
            .or_default()
            .insert(header[1].as_str().expect("text").to_owned());
        partitions
            .entry(acc.clone())
            .or_default()
            .insert(record["partition"].as_i64().expect("a partition"));
        let seen = order.entry(acc).or_default();
        if !seen.contains(&payment_id) {
            seen.push(payment_id);
        }
    }
    let applied: BTreeSet<String> = (0..48).map(id).collect();
    assert_eq!(ids.keys().cloned().collect::<BTreeSet<_>>(), applied);
    assert!(
        ids.values().all(|ids| ids.len() == 1),
        "one id per payment: {ids:?}"
    );
    let distinct: BTreeSet<&String> = ids.values().flatten().collect();
    assert_eq!(distinct.len(), 48, "no id shared");
    assert!(partitions.values().all(|p| p.len() == 1), "{partitions:?}");
    for (a, acc) in accounts.iter().enumerate() {
        let expected: Vec<String> = (0..48).filter(|n| n % 4 == a).map(id).collect();
        assert_eq!(order[acc], expected, "{acc}'s announcements in its order");
    }
    eprintln!(
        "kafka out: {} records for 48 payments (copies from the kills)",
        announced.len()
    );

    // Copies of six announcements, as a producer's retry writes them (the
    // sender has no idempotent producer): hop 2 finds their ids done.
    let copies: Vec<Value> = announced
        .iter()
        .take(6)
        .map(|record| {
            json!({"key": record["key"], "value": record["value"],
                   "headers": {"idempotency-key": record["headers"][0][1]},
                   "partition": record["partition"]})
        })
        .collect();
    hop2.produce(&Value::Array(copies));

    let (summary, _) = hop2.poll_with(None, &STORM);
    assert!(
        summary["kills"].as_i64() > Some(0),
        "hop 2 killed nothing: {summary}"
    );
    assert_eq!(summary["drained"], json!(true), "hop 2: {summary}");
    assert!(summary["records"].as_i64() >= Some(54), "hop 2: {summary}");
    let client = support::client().await;
    for (a, acc) in accounts.iter().enumerate() {
        let paid: Vec<i64> = (0..48).filter(|n| n % 4 == a).map(amount).collect();
        let expected = (paid.iter().sum::<i64>(), paid.len() as i64);
        assert_eq!(ledger_entry(acc).await, expected, "{acc} at hop 1");
        assert_eq!(
            ledger_entry_in(&client, &projection, acc).await,
            expected,
            "{acc} projected"
        );
    }
}

#[tokio::test]
async fn msk_in_msk_out_lock_free_through_kill_storms_every_payment_lands_once_at_both_hops() {
    every_payment_is_applied_announced_and_projected_once("lock-free").await;
}

#[tokio::test]
async fn msk_in_msk_out_transactional_through_kill_storms_every_payment_lands_once_at_both_hops() {
    every_payment_is_applied_announced_and_projected_once("transactional").await;
}
