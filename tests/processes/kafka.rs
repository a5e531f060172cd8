//! The shipped function (`msk-handler`, the demo ledger) on a real
//! Kafka-protocol broker of the tests' own (`infra/kafka-local.sh`: tansu,
//! in memory, a free loopback port), driven by `infra/poller.py` as
//! Lambda's Kafka event source mapping drives it: one consumer group per
//! mapping, batches of one or more partitions, offsets committed only after
//! the function answered, a partition resuming at its lowest reported
//! offset, pollers of one group sharing the partitions.
//!
//! What a user sees is asserted: the balances, the items, what each batch
//! carried and where each partition resumed, and the group's committed
//! offsets at the end of every partition. A record "fails" because this test
//! holds its key under a live lease, as another worker would.
//!
//! Needs what infra/test.sh provides: DynamoDB Local with its tables,
//! `KAFKA_BOOTSTRAP_SERVERS`, python3 with kafka-python on PATH
//! ($EXACTLY_ONCE_TOOLS/venv/bin).

use crate::support;

use std::collections::BTreeMap;

use exactly_once::store::{Status, payload_hash};
use serde_json::{Value, json};
use support::kafka::DurableBroker;
use support::msk::{account, balance};
use support::poller::{Batch, Run};
use support::proxy::{Chaos, Proxy};

/// A payment's JSON text, as producers write it.
fn payment(id: &str, account: &str, amount: i64) -> String {
    json!({"payment_id": id, "account_id": account, "amount_cents": amount, "currency": "EUR"})
        .to_string()
}

/// A Kafka record of `value`, keyed by the account (its partition), the
/// payment's id in the `idempotency-key` header.
fn record(id: &str, account: &str, value: String) -> Value {
    json!({"key": account, "value": value, "headers": {"idempotency-key": id}})
}

/// Where each partition ends: one past the highest offset the broker
/// acknowledged in it.
fn ends(produced: &[Value]) -> BTreeMap<String, i64> {
    let mut ends = BTreeMap::new();
    for sent in produced {
        let partition = sent["partition"].as_i64().expect("a partition");
        let offset = sent["offset"].as_i64().expect("an offset");
        let end = ends.entry(partition.to_string()).or_insert(0);
        *end = (*end).max(offset + 1);
    }
    ends
}

/// The group's committed offsets of the poller's summary, by partition
/// number.
fn committed(summary: &Value, topic: &str) -> BTreeMap<String, i64> {
    summary["committed"]
        .as_object()
        .expect("committed offsets")
        .iter()
        .filter_map(|(name, offset)| {
            let partition = name.strip_prefix(topic)?.strip_prefix('-')?;
            // null: nothing ever committed (a partition without records).
            Some((partition.to_owned(), offset.as_i64()?))
        })
        .collect()
}

/// The poller's batches, each record named `partition:offset`.
fn delivered(batches: &[Batch]) -> Vec<String> {
    batches.iter().flat_map(Batch::ids).collect()
}

/// Twelve payments over three accounts (the accounts are the record keys,
/// so the partitions), two of them produced twice (a producer's retry: the
/// same payment at two offsets) and a poison record; another worker holds
/// one payment. While it holds it, its partition stops there: the held
/// record and every later record of that partition are reported, batch
/// after batch, and nothing of them applied; every other partition is
/// applied and committed to its end. Once the worker lets go, the mapping
/// resumes that partition at the held record: it is applied, the copies
/// are found done, and every partition's committed offset is its end.
async fn a_partition_resumes_at_its_reported_record_and_every_payment_lands_once(
    source: &'static str,
) {
    let run = Run::new(source, &["--partitions", "3"], &[]);
    let topic = run.name.clone();
    let accounts = [account(), account(), account()];
    let id = |n: usize| format!("{}-{n}", run.prefix.trim_end_matches('#'));
    let amount = |n: usize| (n as i64 + 1) * 100;
    let bodies: Vec<String> = (0..12)
        .map(|n| payment(&id(n), &accounts[n % 3], amount(n)))
        .collect();
    let mut records: Vec<Value> = (0..12)
        .map(|n| record(&id(n), &accounts[n % 3], bodies[n].clone()))
        .collect();
    records.push(record(&id(0), &accounts[0], bodies[0].clone()));
    records.push(record(&id(4), &accounts[1], bodies[4].clone()));
    // Poison: not JSON, with a key.
    records.push(record(&id(99), &accounts[2], "{\"payment_id\":".to_owned()));
    let produced = run.produce(&Value::Array(records));
    let name = |i: usize| {
        format!(
            "{topic}-{}:{}",
            produced[i]["partition"], produced[i]["offset"]
        )
    };
    let partition = produced[4]["partition"].clone();
    let offset = |i: usize| produced[i]["offset"].as_i64().expect("an offset");
    // The held record and what follows it in its partition.
    let behind = |i: usize| produced[i]["partition"] == partition && offset(i) >= offset(4);
    let held = run.hold(&id(4), &payload_hash(bodies[4].as_bytes())).await;

    // Held: the partition is retried from the held record, batch after
    // batch, until the poller gives up (6 s).
    let (summary, batches) = run.poll_within(None, 6);
    assert_eq!(summary["drained"], json!(false), "{summary}");
    assert_eq!(summary["invocation_errors"], json!(0), "{summary}");
    let mut first: Vec<String> = delivered(&batches);
    first.sort();
    first.dedup();
    let mut all: Vec<String> = (0..produced.len()).map(name).collect();
    all.sort();
    assert_eq!(first, all, "every record delivered: {summary}");
    let mut reported: Vec<String> = batches.iter().flat_map(Batch::reported).collect();
    reported.sort();
    reported.dedup();
    let mut expected: Vec<String> = (0..produced.len())
        .filter(|&i| behind(i))
        .map(name)
        .collect();
    expected.sort();
    assert_eq!(reported, expected, "{summary}");
    let mut committed_now = ends(&produced);
    committed_now.insert(partition.to_string(), offset(4));
    assert_eq!(committed(&summary, &topic), committed_now, "{summary}");
    for (a, acc) in accounts.iter().enumerate() {
        let applied: i64 = (0..12)
            .filter(|&n| n % 3 == a && !behind(n))
            .map(amount)
            .sum();
        assert_eq!(balance(acc).await, applied, "{acc} while held");
    }
    assert_eq!(run.status(&id(4)).await, Some(Status::Started));

    run.release(&held).await;
    let (summary, batches) = run.poll(None);
    assert_eq!(summary["drained"], json!(true), "{summary}");
    assert_eq!(summary["invocation_errors"], json!(0), "{summary}");
    // Only the held record's partition comes again, from the held record.
    let again = delivered(&batches);
    assert_eq!(again.first(), Some(&name(4)), "{summary}");
    let mut again_sorted = again.clone();
    again_sorted.sort();
    assert_eq!(again_sorted, expected, "{summary}");
    assert!(batches.iter().all(|b| b.reported().is_empty()), "{summary}");
    assert_eq!(committed(&summary, &topic), ends(&produced), "{summary}");

    for (a, acc) in accounts.iter().enumerate() {
        let applied: i64 = (0..12).filter(|&n| n % 3 == a).map(amount).sum();
        assert_eq!(balance(acc).await, applied, "{acc}");
    }
    for n in 0..12 {
        assert_eq!(run.status(&id(n)).await, Some(Status::Completed), "{n}");
    }
    assert_eq!(run.status(&id(99)).await, Some(Status::Failed));
}

#[tokio::test]
async fn msk_partition_resumes_at_its_reported_record_and_every_payment_lands_once() {
    a_partition_resumes_at_its_reported_record_and_every_payment_lands_once("msk").await;
}

#[tokio::test]
async fn self_managed_kafka_partition_resumes_at_its_reported_record_and_every_payment_lands_once()
{
    a_partition_resumes_at_its_reported_record_and_every_payment_lands_once("self-managed-kafka")
        .await;
}

/// The event is Lambda's: the source's `eventSource` (and the MSK
/// cluster's ARN), the broker list, records by `<topic>-<partition>` in
/// offset order, the key and value in base64, the headers as Java's signed
/// bytes in their order (a repeated name twice), the timestamp type.
#[tokio::test]
async fn the_event_is_lambdas_kafka_event_with_every_header_in_order() {
    let run = Run::new("msk", &["--partitions", "1"], &[]);
    let acc = account();
    let id = format!("{}-1", run.prefix.trim_end_matches('#'));
    let body = payment(&id, &acc, 700);
    let produced = run.produce(&json!([{
        "key": acc, "value": body,
        "headers": [{"idempotency-key": id}, {"trace": "ключ"}, {"trace": {"bytes": [0, 255]}}],
    }]));
    let events = run.dir.join("events.jsonl");
    let (summary, _) = run.poll_with(None, &["--events", events.to_str().expect("UTF-8")]);
    assert_eq!(summary["drained"], json!(true), "{summary}");
    let event: Value = serde_json::from_str(
        std::fs::read_to_string(&events)
            .expect("the events")
            .lines()
            .next()
            .expect("one event"),
    )
    .expect("JSON");
    assert_eq!(event["eventSource"], json!("aws:kafka"));
    assert!(
        event["eventSourceArn"]
            .as_str()
            .is_some_and(|arn| arn.starts_with("arn:aws:kafka:")),
        "{event}"
    );
    assert_eq!(
        event["bootstrapServers"],
        json!(support::env("KAFKA_BOOTSTRAP_SERVERS"))
    );
    let records = &event["records"][format!("{}-0", run.name)];
    let r = &records[0];
    assert_eq!(r["topic"], json!(run.name));
    assert_eq!(
        (&r["partition"], &r["offset"]),
        (&json!(0), &produced[0]["offset"])
    );
    assert_eq!(r["timestampType"], json!("CREATE_TIME"));
    assert!(
        r["timestamp"]
            .as_i64()
            .is_some_and(|t| t > 1_700_000_000_000),
        "{r}"
    );
    let b64 = |text: &str| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(text)
    };
    assert_eq!(r["key"], json!(b64(&acc)));
    assert_eq!(r["value"], json!(b64(&body)));
    let signed = |bytes: &[u8]| -> Vec<i64> { bytes.iter().map(|&b| i64::from(b as i8)).collect() };
    assert_eq!(
        r["headers"],
        json!([
            {"idempotency-key": signed(id.as_bytes())},
            {"trace": signed("ключ".as_bytes())},
            {"trace": signed(&[0, 255])},
        ])
    );
    assert_eq!(balance(&acc).await, 700);
}

/// Two pollers of one consumer group (two pollers of the mapping, each with
/// a container of its own), the second joining while the first delivers
/// (its container's store answers 300 to 400 ms late, so each of its
/// batches takes most of a second, longer than its 0.5 s rebalance
/// timeout): the group rebalances and the partitions are shared. When the
/// join lands inside one of the first poller's invocations, that batch's
/// commit is refused (its member left the generation) and its records come
/// again, to whichever poller has their partition now: the same records in
/// two deliveries, for real (20 to 115 records in 5 of 6 runs here; when
/// the join lands between two invocations, none: counted, not asserted).
/// Every payment lands once and every partition's committed offset is its
/// end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poller_joining_the_group_rebalances_it_and_every_payment_lands_once() {
    let run = Run::new("msk", &["--partitions", "4"], &[]);
    let topic = run.name.clone();
    let accounts: Vec<String> = (0..8).map(|_| account()).collect();
    let id = |n: usize| format!("{}-{n}", run.prefix.trim_end_matches('#'));
    let records: Vec<Value> = (0..200)
        .map(|n| {
            let acc = &accounts[n % accounts.len()];
            record(&id(n), acc, payment(&id(n), acc, 100))
        })
        .collect();
    let produced = run.produce(&Value::Array(records));

    let slow = Proxy::start_with(support::dynamodb_address(), Chaos::slow(300, 400)).await;
    let slow_store = format!("AWS_ENDPOINT_URL_DYNAMODB={}", slow.endpoint());
    let batches = ["--batch-size", "20", "--batching-window", "0.05"];
    let first_args = [
        &batches[..],
        &["--env", &slow_store, "--rebalance-timeout", "0.5"],
    ]
    .concat();
    let (first, second) = tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            let first = s.spawn(|| run.poll_with(None, &first_args));
            std::thread::sleep(std::time::Duration::from_secs(3));
            let second = s.spawn(|| run.poll_with(None, &batches));
            (
                first.join().expect("the first poller"),
                second.join().expect("the second poller"),
            )
        })
    });
    for (summary, _) in [&first, &second] {
        assert_eq!(summary["drained"], json!(true), "{summary}");
        assert_eq!(summary["invocation_errors"], json!(0), "{summary}");
    }
    // The second poller took partitions over: both delivered.
    assert!(
        first.0["records"].as_i64() > Some(0) && second.0["records"].as_i64() > Some(0),
        "one poller delivered everything: {} / {}",
        first.0,
        second.0
    );
    assert!(
        first.0["rebalances"].as_i64() > Some(0),
        "the first poller gave nothing up: {}",
        first.0
    );
    let mut seen = delivered(&first.1);
    seen.extend(delivered(&second.1));
    let copies = seen.len() - 200;
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 200, "every record delivered");
    eprintln!(
        "kafka: {copies} records delivered twice across the rebalance ({} commits refused)",
        first.0["commits_refused"]
    );
    // The group's offsets as the poller that stopped last read them.
    let mut at_end = committed(&first.0, &topic);
    for (partition, offset) in committed(&second.0, &topic) {
        let end = at_end.entry(partition).or_insert(offset);
        *end = (*end).max(offset);
    }
    assert_eq!(at_end, ends(&produced), "{} / {}", first.0, second.0);
    for acc in &accounts {
        assert_eq!(balance(acc).await, 25 * 100, "{acc}");
    }
    for n in 0..200 {
        assert_eq!(run.status(&id(n)).await, Some(Status::Completed), "{n}");
    }
}

/// The broker killed (SIGKILL) and started again while the mapping
/// delivers: a broker of the test's own whose log is on S3
/// (`kafka-local.sh start --durable`), restarted while the third batch's
/// invocation runs (the function's store 150 to 250 ms late, so batches of
/// five take about half a second). The poller's group joins again; a commit
/// sent while the broker is down fails ("commits_failed") and its batch
/// comes again. Nothing is lost: batches delivered after the restart,
/// every payment (three produced twice) applied once, every committed
/// offset at its partition's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restarted_mid_stream_loses_nothing_and_every_payment_lands_once() {
    let broker = DurableBroker::start();
    let run = Run::on_broker("msk", &broker.servers, &["--partitions", "2"], &[]);
    let topic = run.name.clone();
    let accounts: Vec<String> = (0..4).map(|_| account()).collect();
    let id = |n: usize| format!("{}-{n}", run.prefix.trim_end_matches('#'));
    let mut records: Vec<Value> = (0..40)
        .map(|n| {
            let acc = &accounts[n % accounts.len()];
            record(&id(n), acc, payment(&id(n), acc, 100))
        })
        .collect();
    for n in [3, 17, 30] {
        records.push(records[n].clone());
    }
    let produced = run.produce(&Value::Array(records));

    let slow = Proxy::start_with(support::dynamodb_address(), Chaos::slow(150, 250)).await;
    let slow_store = format!("AWS_ENDPOINT_URL_DYNAMODB={}", slow.endpoint());
    let events = run.dir.join("events.jsonl");
    let events_arg = events.to_str().expect("UTF-8 path").to_owned();
    let args = [
        "--batch-size",
        "5",
        "--batching-window",
        "0.05",
        "--env",
        &slow_store,
        "--events",
        &events_arg,
    ];
    let invoked = || {
        std::fs::read_to_string(&events)
            .map(|text| text.lines().count())
            .unwrap_or(0)
    };
    let ((summary, batches), before) = tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            let poller = s.spawn(|| run.poll_with(None, &args));
            // The third invocation has started: the broker dies under it.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while invoked() < 3 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let before = invoked();
            broker.restart();
            (poller.join().expect("the poller"), before)
        })
    });
    eprintln!("kafka: the broker restarted after {before} invocations: {summary}");
    assert_eq!(summary["drained"], json!(true), "{summary}");
    assert!(before >= 3, "the poller never got going: {summary}");
    assert!(
        batches.len() > before,
        "nothing delivered after the restart: {summary}"
    );
    let mut seen = delivered(&batches);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), produced.len(), "every record delivered");
    assert_eq!(committed(&summary, &topic), ends(&produced), "{summary}");
    for acc in &accounts {
        assert_eq!(balance(acc).await, 10 * 100, "{acc}");
    }
    for n in 0..40 {
        assert_eq!(run.status(&id(n)).await, Some(Status::Completed), "{n}");
    }
}

/// Bounded retries, bisection, a maximum record age and a Kafka topic as
/// the on-failure destination (the mapping in provisioned mode): every
/// invocation is killed (`--kill-chance 1`: mid-invocation, or after the
/// function answered and before the answer reaches the mapping), so every
/// batch fails; each is cut in halves down to single records
/// (`--bisect-batch-on-function-error`), each record retried once
/// (`--maximum-retry-attempts 1`), then discarded to the destination topic
/// with its failure metadata and its own event, keyed as the record, and
/// the group's offsets committed past it. Three payments produced two
/// hours ago are discarded unsent (`--maximum-record-age 60`). Some
/// payments were applied before their kill; replaying the destination's
/// records (what a team does with its dead-letter topic) applies every
/// payment once: the ones applied already are found done.
#[tokio::test]
async fn discarded_records_reach_the_on_failure_topic_and_replaying_them_applies_each_payment_once()
{
    let run = Run::new("msk", &["--partitions", "2"], &[]);
    let dead_letters = Run::new("msk", &["--partitions", "1"], &[]);
    let topic = run.name.clone();
    let accounts = [account(), account(), account()];
    let id = |n: usize| format!("{}-{n}", run.prefix.trim_end_matches('#'));
    let two_hours_ago = (std::time::SystemTime::now() - std::time::Duration::from_secs(7200))
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    let records: Vec<Value> = (0..11)
        .map(|n| {
            let acc = &accounts[n % 3];
            let mut r = record(&id(n), acc, payment(&id(n), acc, 100));
            if n < 3 {
                r["timestamp_ms"] = json!(two_hours_ago);
            }
            r
        })
        .collect();
    let produced = run.produce(&Value::Array(records));
    let on_failure = format!("kafka://{}", dead_letters.name);
    let (summary, batches) = run.poll_with(
        None,
        &[
            "--batch-size",
            "4",
            "--kill-chance",
            "1",
            "--kill-within",
            "0.1",
            "--maximum-retry-attempts",
            "1",
            "--bisect-batch-on-function-error",
            "--maximum-record-age",
            "60",
            "--on-failure",
            &on_failure,
        ],
    );
    assert_eq!(summary["drained"], json!(true), "{summary}");
    assert_eq!(summary["discarded"], json!(11), "{summary}");
    assert_eq!(committed(&summary, &topic), ends(&produced), "{summary}");
    // Bisected down to single records, each tried twice.
    let sizes: BTreeMap<usize, usize> = batches.iter().fold(BTreeMap::new(), |mut sizes, b| {
        *sizes.entry(b.ids().len()).or_insert(0) += 1;
        sizes
    });
    assert_eq!(sizes.get(&1), Some(&(8 * 2)), "{sizes:?}: {summary}");
    let sent: Vec<String> = delivered(&batches);
    let name = |i: usize| {
        format!(
            "{topic}-{}:{}",
            produced[i]["partition"], produced[i]["offset"]
        )
    };
    for old in 0..3 {
        assert!(
            !sent.contains(&name(old)),
            "{} was too old to send",
            name(old)
        );
    }

    // One dead letter per record: the metadata, the record's own event.
    let letters = dead_letters.read();
    assert_eq!(letters.len(), 11, "{letters:?}");
    let mut replayed = Vec::new();
    for letter in &letters {
        let value: Value =
            serde_json::from_str(letter["value"].as_str().expect("text")).expect("JSON");
        let condition = value["requestContext"]["condition"]
            .as_str()
            .expect("a condition");
        let records = value["payload"]["records"]
            .as_object()
            .expect("the event's records");
        let (partition, records) = records.iter().next().expect("one partition");
        let record = &records[0];
        let offset = record["offset"].as_i64().expect("an offset");
        let i = (0..produced.len())
            .find(|&i| {
                format!("{topic}-{}", produced[i]["partition"]) == *partition
                    && produced[i]["offset"] == json!(offset)
            })
            .expect("a produced record");
        assert_eq!(value["KafkaBatchInfo"]["batchSize"], json!(1), "{value}");
        assert_eq!(
            value["KafkaBatchInfo"]["recordInfo"]["offset"],
            json!(offset.to_string()),
            "{value}"
        );
        assert_eq!(letter["key"], json!(accounts[i % 3]), "keyed as the record");
        if i < 3 {
            assert_eq!(condition, "RecordAgeExceeded", "{value}");
            assert_eq!(value["responseContext"], Value::Null, "{value}");
        } else {
            assert_eq!(condition, "RetryAttemptsExhausted", "{value}");
            assert_eq!(value["requestContext"]["approximateInvokeCount"], json!(2));
            assert_eq!(
                value["responseContext"]["functionError"],
                json!("Unhandled")
            );
        }
        let headers: Vec<Value> = record["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|h| {
                let (name, bytes) = h.as_object().expect("a header").iter().next().expect("one");
                json!({name: {"bytes": bytes}})
            })
            .collect();
        replayed.push(
            json!({"key_base64": record["key"], "value_base64": record["value"],
                             "headers": headers}),
        );
    }
    let applied_before: i64 = {
        let mut total = 0;
        for acc in &accounts {
            total += balance(acc).await;
        }
        total
    };
    assert!(applied_before < 11 * 100, "nothing was left to replay");

    // The same function: the same keys.
    let same_keys = format!("IDEMPOTENCY_KEY_PREFIX={}", run.prefix);
    let replay = Run::new("msk", &["--partitions", "2"], &[&same_keys]);
    replay.produce(&Value::Array(replayed));
    let (summary, _) = replay.poll(None);
    assert_eq!(summary["drained"], json!(true), "{summary}");
    for (a, acc) in accounts.iter().enumerate() {
        let payments = (0..11).filter(|n| n % 3 == a).count() as i64;
        assert_eq!(balance(acc).await, payments * 100, "{acc}");
    }
    for n in 0..11 {
        assert_eq!(run.status(&id(n)).await, Some(Status::Completed), "{n}");
    }
    eprintln!(
        "kafka: {} cents applied before the replay of 11 dead letters",
        applied_before
    );
}
