//! Exactly-once out: the messages a handler emits commit with its effect
//! (on the key's COMPLETED item) and reach the next hop under a stable id,
//! against real parts: DynamoDB Local and moto's SQS (started by
//! `infra/test.sh`). The destination's faults (refusals, answers lost
//! after the send) are the real SQS behind a sender that refuses or drops
//! answers on demand; the next hop is a second function on this crate
//! reading the queue with its default key source.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use exactly_once::dynamodb::CountRequests as _;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::{Engine, EngineConfig};
use exactly_once::lambda::BatchFunction;
use exactly_once::lambda::destinations::SqsSender;
use exactly_once::outbox::{self, Answers, Message, Outgoing, SendError, Sender};
use exactly_once::prelude::*;
use exactly_once::store::{Status, Store};
use ledger::{LedgerHandler, LedgerMode};
use serde_json::{Value, json};
use support::msk::{account, balance, event, header_keys, invoke, payment, reported, settings};
use support::proxy::{Chaos, Proxy};

/// What the sender in front of SQS does to the next sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Fault {
    /// Passes them through.
    None = 0,
    /// Refuses each (a throttled or failing destination): nothing sent.
    Refuse = 1,
    /// Sends them, then loses the answers (a timeout after SQS took them).
    LoseAnswers = 2,
}

/// SQS, with faults on demand.
struct Faulty {
    sqs: SqsSender,
    fault: AtomicU8,
}

impl Faulty {
    async fn new() -> Arc<Self> {
        Arc::new(Self {
            sqs: SqsSender::new(support::sqs::client().await),
            fault: AtomicU8::new(Fault::None as u8),
        })
    }

    fn set(&self, fault: Fault) {
        self.fault.store(fault as u8, Ordering::SeqCst);
    }
}

impl Sender for Faulty {
    fn check(&self, message: &Message) -> Result<(), SendError> {
        self.sqs.check(message)
    }

    fn batch_limit(&self, destination: &str) -> usize {
        self.sqs.batch_limit(destination)
    }

    fn send<'a>(&'a self, destination: &'a str, messages: &'a [Outgoing]) -> Answers<'a> {
        Box::pin(async move {
            let fault = self.fault.load(Ordering::SeqCst);
            if fault == Fault::Refuse as u8 {
                let refused = || SendError::Refused {
                    code: "ServiceUnavailable".into(),
                    message: "try again".into(),
                };
                return messages.iter().map(|_| Err(refused())).collect();
            }
            let answers = self.sqs.send(destination, messages).await;
            if fault == Fault::LoseAnswers as u8 {
                let lost = || SendError::NoAnswer("the answer was lost".into());
                return answers.iter().map(|_| Err(lost())).collect();
            }
            answers
        })
    }
}

/// The demo ledger in `mode` announcing every applied payment to `url`,
/// through `sender`; with a floor of 0 where the mode keeps one.
async fn announcing(
    mode: LedgerMode,
    url: &str,
    sender: Arc<dyn Sender>,
) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let store = support::store(std::time::Duration::from_secs(30)).await;
    announcing_on(store, mode, url, sender).await
}

/// The same on `store`.
async fn announcing_on(
    store: DynamoDbStore,
    mode: LedgerMode,
    url: &str,
    sender: Arc<dyn Sender>,
) -> BatchFunction<LedgerHandler, DynamoDbStore> {
    let client = support::client().await;
    let floor = (mode != LedgerMode::Direct).then_some(0);
    let ledger = LedgerHandler::new(client, support::env("LEDGER_TABLE"), mode)
        .with_floor(floor)
        .with_events(Some(url.to_owned()));
    let engine = Engine::new(store, ledger, EngineConfig::default()).with_sender(sender);
    BatchFunction::new(engine, settings(header_keys())).without_metrics()
}

/// A message as the queue holds it: its `idempotency-key` and its body
/// (JSON, keys sorted).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Received {
    id: String,
    body: String,
}

/// Everything the queue holds (received, so no longer visible), as SQS
/// messages: what the next hop's event is made of.
async fn drain(url: &str) -> Vec<aws_sdk_sqs::types::Message> {
    support::sqs::receive_all(&support::sqs::client().await, url).await
}

fn received(messages: &[aws_sdk_sqs::types::Message]) -> Vec<Received> {
    let mut received: Vec<Received> = messages
        .iter()
        .map(|m| Received {
            id: match support::sqs::id_of(m) {
                "" => panic!("a message without its id: {m:?}"),
                id => id.to_owned(),
            },
            body: serde_json::from_str::<Value>(m.body().unwrap_or("null"))
                .expect("a JSON body")
                .to_string(),
        })
        .collect();
    received.sort();
    received
}

/// The announcement of payment `id` and the id it travels under (its
/// item's in `store`).
fn announcement(store: &DynamoDbStore, id: &str, account: &str, amount: i64) -> Received {
    Received {
        id: outbox::message_id(&store.pk(id).expect("pk"), 0),
        body: json!({"payment_id": id, "account_id": account, "amount_cents": amount}).to_string(),
    }
}

/// The announcements of [`payments`]' payments the floor lets through
/// (+100, -30, +5), in emitting order.
fn announced(store: &DynamoDbStore, a: &str, prefix: &str) -> Vec<Received> {
    [(1, 100), (2, -30), (4, 5)]
        .into_iter()
        .map(|(n, amount)| announcement(store, &format!("{prefix}-{n}"), a, amount))
        .collect()
}

/// The modes the ledger runs in.
const MODES: [LedgerMode; 3] = [
    LedgerMode::LockFree,
    LedgerMode::Transactional,
    LedgerMode::Direct,
];

/// Payments +100, -30, -500 (refused by the floor where kept), +5.
fn payments(a: &str, prefix: &str) -> Value {
    event(vec![(
        "payments-0",
        vec![
            payment(0, &format!("{prefix}-1"), a, 100),
            payment(1, &format!("{prefix}-2"), a, -30),
            payment(2, &format!("{prefix}-3"), a, -500),
            payment(3, &format!("{prefix}-4"), a, 5),
        ],
    )])
}

#[tokio::test]
async fn every_applied_payment_is_announced_once_under_its_stable_id_on_every_path() {
    for mode in MODES {
        let (_, url) = support::sqs::queue().await;
        let function = announcing(mode, &url, Faulty::new().await).await;
        let (a, prefix) = (account(), format!("p-{}", uuid::Uuid::new_v4().simple()));
        let batch = payments(&a, &prefix);
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        let store = function.engine().store();
        let mut expected = announced(store, &a, &prefix);
        let mut total = 75;
        if mode == LedgerMode::Direct {
            // No floor: the debit applies, and is announced.
            expected.push(announcement(store, &format!("{prefix}-3"), &a, -500));
            total -= 500;
        }
        expected.sort();
        assert_eq!(received(&drain(&url).await), expected, "{mode:?}");
        assert_eq!(balance(&a).await, total, "{mode:?}");
        // Sent: nothing left on the items; a refused payment is FAILED,
        // with nothing to send.
        for n in 1..=4 {
            let item = store
                .get(&format!("{prefix}-{n}"))
                .await
                .expect("get")
                .expect("item");
            assert_eq!(item.outbox, None, "{mode:?} {n}");
            let refused = n == 3 && mode != LedgerMode::Direct;
            let status = if refused {
                Status::Failed
            } else {
                Status::Completed
            };
            assert_eq!(item.status, status, "{mode:?} {n}");
        }
        // Delivered again: duplicates, nothing announced again.
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        assert_eq!(drain(&url).await.len(), 0, "{mode:?}: announced again");
        assert_eq!(balance(&a).await, total, "{mode:?}");
    }
}

#[tokio::test]
async fn a_refusing_destination_gets_the_records_reported_and_their_redelivery_sends_them_once() {
    for mode in MODES {
        let (_, url) = support::sqs::queue().await;
        let sender = Faulty::new().await;
        let function = announcing(mode, &url, sender.clone()).await;
        let (a, prefix) = (account(), format!("p-{}", uuid::Uuid::new_v4().simple()));
        let batch = event(vec![(
            "payments-0",
            vec![
                payment(0, &format!("{prefix}-1"), &a, 100),
                payment(1, &format!("{prefix}-2"), &a, 20),
            ],
        )]);
        sender.set(Fault::Refuse);
        let first = reported(&invoke(&function, &batch).await);
        assert!(
            first.contains(&"payments-0@0".to_owned()),
            "{mode:?}: {first:?}"
        );
        assert_eq!(drain(&url).await.len(), 0, "{mode:?}");
        // Applied once, its announcement kept on the item.
        assert_eq!(balance(&a).await, 120, "{mode:?}");
        let store = function.engine().store();
        let item = store
            .get(&format!("{prefix}-1"))
            .await
            .expect("get")
            .expect("item");
        assert_eq!(item.status, Status::Completed);
        assert!(
            item.outbox.is_some(),
            "{mode:?}: the message waits on the item"
        );

        sender.set(Fault::None);
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        let mut expected = vec![
            announcement(store, &format!("{prefix}-1"), &a, 100),
            announcement(store, &format!("{prefix}-2"), &a, 20),
        ];
        expected.sort();
        assert_eq!(received(&drain(&url).await), expected, "{mode:?}");
        assert_eq!(balance(&a).await, 120, "{mode:?}: never applied again");
    }
}

/// The next hop: credits the mirror of each announced payment's account
/// (`<account>-mirror`) by the opposite amount, keyed by the
/// announcement's id (the default header, `idempotency-key`).
struct Mirror;

impl RecordHandler<exactly_once::dynamodb::TransactWriteItem> for Mirror {
    type Record = Record;

    fn commit_path(&self) -> CommitPath {
        CommitPath::LockFree
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &Record,
    ) -> Result<Completion<exactly_once::dynamodb::TransactWriteItem>, HandlerError> {
        let body: Value = serde_json::from_slice(&record.body())
            .map_err(|err| HandlerError::Permanent(json_error(&err)))?;
        let (Some(account), Some(amount)) =
            (body["account_id"].as_str(), body["amount_cents"].as_i64())
        else {
            return Err(HandlerError::Permanent("not an announcement".into()));
        };
        let mirror = Increment::new(
            support::env("LEDGER_TABLE"),
            "account_id",
            format!("{account}-mirror"),
        )
        .add("balance_cents", -amount);
        Ok(Completion::done("mirrored").increment(mirror))
    }
}

/// The SQS event Lambda would hand the next hop for `messages`.
fn sqs_event(messages: &[aws_sdk_sqs::types::Message]) -> Value {
    let records: Vec<Value> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let id = support::sqs::id_of(m);
            json!({
                "messageId": format!("00000000-0000-0000-0000-{i:012}"),
                "receiptHandle": format!("AQEB-{i}"),
                "body": m.body().unwrap_or_default(),
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {
                    "idempotency-key": {"stringValue": id, "stringListValues": [], "binaryListValues": [], "dataType": "String"}
                },
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:announcements",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({ "Records": records })
}

#[tokio::test]
async fn answers_lost_after_the_send_resend_under_the_same_ids_and_the_next_hop_applies_each_once()
{
    for mode in MODES {
        let (_, url) = support::sqs::queue().await;
        let sender = Faulty::new().await;
        let function = announcing(mode, &url, sender.clone()).await;
        let (a, prefix) = (account(), format!("p-{}", uuid::Uuid::new_v4().simple()));
        let batch = payments(&a, &prefix);
        // SQS takes the messages, the answers are lost: reported, sent
        // again by the redelivery (copies under the same ids).
        sender.set(Fault::LoseAnswers);
        assert!(!reported(&invoke(&function, &batch).await).is_empty());
        sender.set(Fault::None);
        assert_eq!(
            reported(&invoke(&function, &batch).await),
            Vec::<String>::new()
        );
        let messages = drain(&url).await;
        let copies = received(&messages);
        let applied = if mode == LedgerMode::Direct { 4 } else { 3 };
        assert_eq!(copies.len(), 2 * applied, "{mode:?}: {copies:?}");
        for pair in copies.chunks(2) {
            assert_eq!(pair[0], pair[1], "{mode:?}: both copies, one id");
        }
        let total = if mode == LedgerMode::Direct { -425 } else { 75 };
        assert_eq!(balance(&a).await, total, "{mode:?}");

        // The next hop, on this crate with its default key source: each
        // announcement applied once, however often it came.
        next_hop_applies_each_once(&messages, &a, total).await;
    }
}

/// The next hop, on this crate with its default key source, given every
/// copy in `messages` twice: `a`'s mirror ends at minus `total`.
async fn next_hop_applies_each_once(messages: &[aws_sdk_sqs::types::Message], a: &str, total: i64) {
    let store = support::store(std::time::Duration::from_secs(30)).await;
    let engine = Engine::new(store, Mirror, EngineConfig::default());
    let next = BatchFunction::new(engine, settings(header_keys())).without_metrics();
    let announced = sqs_event(messages);
    for _ in 0..2 {
        assert_eq!(
            reported(&invoke(&next, &announced).await),
            Vec::<String>::new()
        );
        assert_eq!(balance(&format!("{a}-mirror")).await, -total);
    }
}

/// SQS behind a partition that heals late: every request held 4 s by a
/// proxy, past the client's 3 s attempt timeout (each of its 3 attempts
/// given up), then delivered after all. The records are reported; the held
/// requests land once the function has given up on them; the redelivery
/// sends again. Every copy carries its message's id, and the next hop
/// applies each once.
#[tokio::test]
async fn a_partition_that_heals_late_lands_late_copies_under_the_same_ids_and_the_next_hop_applies_each_once()
 {
    let (_, url) = support::sqs::queue().await;
    let moto = support::env("AWS_ENDPOINT_URL_SQS");
    let proxy = Proxy::start_with(
        moto.trim_start_matches("http://").to_owned(),
        Chaos::slow(4_000, 4_000),
    )
    .await;
    let config = aws_sdk_sqs::config::Builder::from(&exactly_once::aws::sdk_config().await)
        .endpoint_url(proxy.endpoint())
        .build();
    let partitioned = SqsSender::new(aws_sdk_sqs::Client::from_conf(config));
    let function = announcing(LedgerMode::LockFree, &url, Arc::new(partitioned)).await;
    let (a, prefix) = (account(), format!("p-{}", uuid::Uuid::new_v4().simple()));
    let batch = payments(&a, &prefix);
    assert_eq!(
        reported(&invoke(&function, &batch).await).len(),
        3,
        "the applied payments, their messages unanswered"
    );
    // The partition heals: the held requests land, late.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let late = drain(&url).await;
    assert!(!late.is_empty(), "no held request landed");
    // Redelivered to a container that reaches SQS: sent again.
    let store = function.engine().store().clone();
    let healed = announcing_on(store, LedgerMode::LockFree, &url, Faulty::new().await).await;
    assert_eq!(
        reported(&invoke(&healed, &batch).await),
        Vec::<String>::new()
    );
    let again = drain(&url).await;
    let store = healed.engine().store();
    let mut expected = announced(store, &a, &prefix);
    expected.sort();
    for copies in [&late, &again] {
        let mut ids = received(copies);
        ids.dedup();
        assert_eq!(ids, expected, "each copy under its message's id");
    }
    assert_eq!(balance(&a).await, 75);
    let every: Vec<_> = late.into_iter().chain(again).collect();
    next_hop_applies_each_once(&every, &a, 75).await;
}

#[tokio::test]
async fn a_fifo_queue_gets_the_account_as_group_and_the_id_as_deduplication_id() {
    let client = support::sqs::client().await;
    let name = format!("announcements-{}.fifo", uuid::Uuid::new_v4().simple());
    let url = client
        .create_queue()
        .queue_name(&name)
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .expect("a FIFO queue")
        .queue_url()
        .expect("its URL")
        .to_owned();
    let function = announcing(LedgerMode::LockFree, &url, Faulty::new().await).await;
    let (a, prefix) = (account(), format!("p-{}", uuid::Uuid::new_v4().simple()));
    assert_eq!(
        reported(&invoke(&function, &payments(&a, &prefix)).await),
        Vec::<String>::new()
    );
    let messages = drain(&url).await;
    let store = function.engine().store();
    let expected = announced(store, &a, &prefix);
    // In order (one group), each with its group and deduplication id.
    assert_eq!(messages.len(), 3);
    for (message, expected) in messages.iter().zip(&expected) {
        let attributes = message.attributes().expect("system attributes");
        let get = |name| {
            attributes
                .get(&name)
                .map(String::as_str)
                .unwrap_or_default()
        };
        use aws_sdk_sqs::types::MessageSystemAttributeName as Name;
        assert_eq!(get(Name::MessageGroupId), a);
        assert_eq!(get(Name::MessageDeduplicationId), expected.id);
        assert_eq!(received(std::slice::from_ref(message))[0], *expected);
    }
}

/// [`payments`] through the ledger in `mode` while the destination refuses
/// every message: applied, reported, their messages left on the items. The
/// queue, the sender (still refusing), the function, the account and the
/// payments' prefix.
async fn left_unsent(
    mode: LedgerMode,
) -> (
    String,
    Arc<Faulty>,
    BatchFunction<LedgerHandler, DynamoDbStore>,
    (String, String),
) {
    let (_, url) = support::sqs::queue().await;
    let sender = Faulty::new().await;
    let function = announcing(mode, &url, sender.clone()).await;
    let (a, prefix) = (account(), format!("p-{}", uuid::Uuid::new_v4().simple()));
    sender.set(Fault::Refuse);
    assert!(!reported(&invoke(&function, &payments(&a, &prefix)).await).is_empty());
    (url, sender, function, (a, prefix))
}

#[tokio::test]
async fn the_scheduled_sweeper_sends_what_never_came_back_and_tells_what_is_left() {
    let (url, sender, function, (a, prefix)) = left_unsent(LedgerMode::LockFree).await;
    // The batch never comes back (past its retries). A quarter of an hour
    // later the schedule's sweep finds its messages, the destination still
    // refusing: what is left, and how old, is in the metrics.
    let store = function.engine().store().clone();
    let later_config = exactly_once::config::StoreConfig {
        clock_offset_ms: 16 * 60 * 1000,
        ..store.config().clone()
    };
    let later = DynamoDbStore::new(store.client().clone(), later_config);
    let lines = Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let written = Arc::clone(&lines);
    let sweeper = announcing_on(later, LedgerMode::LockFree, &url, sender.clone())
        .await
        .with_metrics_writer(move |line| {
            written
                .lock()
                .expect("lines")
                .push(serde_json::from_str(line).expect("an EMF document"));
        });
    let scheduled: Value =
        serde_json::from_str(include_str!("../../events/scheduled.json")).expect("JSON");
    // A scheduled check, and the sweep's metrics document it wrote.
    let swept = || async {
        let context = lambda_runtime::Context::default();
        let event = lambda_runtime::LambdaEvent::new(scheduled.clone(), context);
        sweeper.handle(event).await.expect("swept");
        let mut lines = lines.lock().expect("lines");
        lines.pop().expect("the sweep's document")
    };
    let sweep = swept().await;
    assert_eq!(sweep["UnsentRecords"], 3.0);
    assert_eq!(sweep["SweptRecords"], 0.0);
    let age = sweep["OldestUnsentAgeSeconds"].as_f64().expect("seconds");
    assert!((16.0 * 60.0..17.0 * 60.0).contains(&age), "{age}");
    assert_eq!(drain(&url).await.len(), 0);

    sender.set(Fault::None);
    let sweep = swept().await;
    assert_eq!(
        (
            &sweep["UnsentRecords"],
            &sweep["SweptRecords"],
            &sweep["OldestUnsentAgeSeconds"]
        ),
        (&json!(3.0), &json!(3.0), &json!(0.0))
    );
    let mut expected = announced(&store, &a, &prefix);
    expected.sort();
    assert_eq!(received(&drain(&url).await), expected);
    // Nothing left: the next sweep sends nothing, a redelivery neither.
    let sweep = swept().await;
    assert_eq!(sweep["UnsentRecords"], 0.0);
    assert_eq!(
        reported(&invoke(&function, &payments(&a, &prefix)).await),
        Vec::<String>::new()
    );
    assert_eq!(drain(&url).await.len(), 0);
    assert_eq!(balance(&a).await, 75);
}

#[tokio::test]
async fn the_operator_lists_what_is_left_unsent_and_sends_it() {
    let (url, _, function, (a, prefix)) = left_unsent(LedgerMode::Transactional).await;
    let store = function.engine().store();
    let config = store.config();
    let listed = support::ops::ops("dynamodb", config, &["unsent", "--older-than", "0s"]);
    assert_eq!(listed.code, 0, "{listed:?}");
    for n in [1, 2, 4] {
        let line = listed
            .stdout
            .lines()
            .find(|line| line.starts_with(&format!("{prefix}-{n}\t")))
            .unwrap_or_else(|| panic!("{prefix}-{n} listed: {listed:?}"));
        assert!(line.contains("\tmessages=1\t"), "{line}");
        assert!(line.contains(&format!("\tdestinations={url}\t")), "{line}");
    }
    assert!(
        listed.has("3 COMPLETED key(s) with messages not known sent"),
        "{listed:?}"
    );
    assert!(listed.has("of the index of unsent messages"), "{listed:?}");
    let key = format!("{prefix}-1");
    let inspected = support::ops::ops("dynamodb", config, &["inspect", &key]);
    assert!(
        inspected.has(&format!(
            "outbox           1 message(s) not yet sent, to {url}:"
        )),
        "{inspected:?}"
    );
    let young = support::ops::ops("dynamodb", config, &["unsent"]);
    assert!(
        young.has("0 COMPLETED key(s)"),
        "completed just now: {young:?}"
    );

    let sent = support::ops::ops(
        "dynamodb",
        config,
        &["unsent", "--older-than", "0s", "--send"],
    );
    assert_eq!(sent.code, 0, "{sent:?}");
    assert!(
        sent.has("sent the messages of 3 of 3 record(s) left unsent; none left"),
        "{sent:?}"
    );
    let mut expected = announced(store, &a, &prefix);
    expected.sort();
    assert_eq!(received(&drain(&url).await), expected);
    let after = support::ops::ops("dynamodb", config, &["unsent", "--older-than", "0s"]);
    assert!(after.has("0 COMPLETED key(s)"), "{after:?}");
}

/// 500 payments on the lock-free path, each announced: what the store is
/// sent for the announcements beside the payments' own transactions.
#[tokio::test]
async fn announcing_adds_at_most_a_tenth_of_a_store_request_per_message_on_the_lock_free_path() {
    let (_, url) = support::sqs::queue().await;
    let counter = exactly_once::store::requests::RequestCounter::default();
    let client = counter.attach(&support::client().await);
    let config = support::store_config(std::time::Duration::from_secs(30));
    let store = DynamoDbStore::new(client.clone(), config);
    let function = announcing_on(store, LedgerMode::LockFree, &url, Faulty::new().await).await;
    let prefix = format!("p-{}", uuid::Uuid::new_v4().simple());
    let accounts: Vec<String> = (0..50).map(|_| account()).collect();
    let names: Vec<String> = (0..4).map(|p| format!("payments-{p}")).collect();
    let partitions = names
        .iter()
        .enumerate()
        .map(|(p, name)| {
            let records = (0..125)
                .map(|i| {
                    let n = p * 125 + i;
                    let key = format!("{prefix}-{n}");
                    payment(i as i64, &key, &accounts[n % accounts.len()], 1)
                })
                .collect();
            (name.as_str(), records)
        })
        .collect();
    let batch = event(partitions);
    assert_eq!(
        reported(&invoke(&function, &batch).await),
        Vec::<String>::new()
    );
    let held = support::sqs::client()
        .await
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .expect("the queue's attributes");
    let held = held
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages))
        .map(String::as_str);
    assert_eq!(held, Some("500"), "one message per payment");
    let counts = counter.counts();
    // The messages ride on the items the payments' transactions write
    // anyway; the outbox's own requests are the clears, 25 a request.
    let clears = counts.get("BatchExecuteStatement").copied().unwrap_or(0);
    println!("store requests for 500 announced payments: {counts:?}");
    assert_eq!(clears, 20, "{counts:?}");
    assert!(clears as f64 / 500.0 <= 0.1);
    // Beside them: the batch's pre-check and the payments' transactions.
    let operations: Vec<&str> = counts.keys().map(String::as_str).collect();
    assert_eq!(
        operations,
        [
            "BatchExecuteStatement",
            "BatchGetItem",
            "TransactWriteItems"
        ]
    );
}

/// A record run alone (`Engine::run_once`, outside a batch) sends its
/// messages as a batch's records do, and is finished only then.
#[tokio::test]
async fn a_record_run_alone_sends_its_messages_too() {
    let (_, url) = support::sqs::queue().await;
    let sender = Faulty::new().await;
    let function = announcing(LedgerMode::LockFree, &url, sender.clone()).await;
    let (a, key) = (account(), format!("p-{}", uuid::Uuid::new_v4().simple()));
    let body = support::msk::payment_json(&key, &a, 100).into_bytes();
    let work = exactly_once::engine::Work {
        key: key.clone(),
        payload_hash: exactly_once::store::payload_hash(&body),
        origin: "payments-0@0".into(),
        record: exactly_once::lambda::Record::Kafka(support::msk::kafka_record(body)),
        span: tracing::Span::none(),
        holder: None,
    };
    let engine = function.engine();
    let deadline = exactly_once::engine::Deadline::NONE;
    sender.set(Fault::Refuse);
    let refused = engine.run_once(&work, deadline).await;
    assert_eq!(refused.name(), "unsent", "{refused:?}");
    sender.set(Fault::None);
    let again = engine.run_once(&work, deadline).await;
    assert_eq!(again.name(), "duplicate", "{again:?}");
    let expected = vec![announcement(engine.store(), &key, &a, 100)];
    assert_eq!(received(&drain(&url).await), expected);
    assert_eq!(balance(&a).await, 100);
}

/// `batch` delivered twice to `function` (the second time, duplicates):
/// nothing reported either time.
async fn delivered_twice<S, H>(function: &BatchFunction<H, S>, batch: &Value)
where
    S: exactly_once::store::Operator,
    H: RecordHandler<S::Effect, Record: exactly_once::lambda::FromRecord>,
{
    for _ in 0..2 {
        assert_eq!(
            reported(&invoke(function, batch).await),
            Vec::<String>::new()
        );
    }
}

/// The function's own sender: a sender of each destination kind, as
/// `exactly_once::run` builds it.
async fn destinations() -> Arc<dyn Sender> {
    for endpoint in [
        "AWS_ENDPOINT_URL_SNS",
        "AWS_ENDPOINT_URL_EVENTBRIDGE",
        "AWS_ENDPOINT_URL_KINESIS",
    ] {
        support::env(endpoint);
    }
    Arc::new(exactly_once::aws::destinations().await)
}

/// A queue's ARN (what SNS and EventBridge deliver to).
async fn queue_arn(url: &str) -> String {
    use aws_sdk_sqs::types::QueueAttributeName::QueueArn;
    let attributes = support::sqs::client()
        .await
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueArn)
        .send()
        .await
        .expect("the queue's attributes");
    attributes.attributes().expect("attributes")[&QueueArn].clone()
}

#[tokio::test]
async fn an_sns_topic_gets_each_announcement_with_its_id_as_message_attribute() {
    let sns = aws_sdk_sns::Client::new(&exactly_once::aws::sdk_config().await);
    let topic = sns
        .create_topic()
        .name(format!("announcements-{}", uuid::Uuid::new_v4().simple()))
        .send()
        .await
        .expect("a topic")
        .topic_arn()
        .expect("its ARN")
        .to_owned();
    // The next hop: a queue subscribed with raw message delivery, whose
    // messages carry the notification's attributes as their own.
    let (_, url) = support::sqs::queue().await;
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(queue_arn(&url).await)
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .expect("a subscription");
    let function = announcing(LedgerMode::LockFree, &topic, destinations().await).await;
    let (a, prefix) = (account(), format!("p-{}", uuid::Uuid::new_v4().simple()));
    let batch = payments(&a, &prefix);
    delivered_twice(&function, &batch).await;
    // Once each (the second delivery was duplicates), under the ids a
    // consumer on this crate reads by default.
    let store = function.engine().store();
    let mut expected = announced(store, &a, &prefix);
    expected.sort();
    assert_eq!(received(&drain(&url).await), expected);
    assert_eq!(balance(&a).await, 75);
}

#[tokio::test]
async fn a_kinesis_stream_gets_each_announcement_keyed_by_its_id_on_its_accounts_shard() {
    let kinesis = aws_sdk_kinesis::Client::new(&exactly_once::aws::sdk_config().await);
    let name = format!("announcements-{}", uuid::Uuid::new_v4().simple());
    kinesis
        .create_stream()
        .stream_name(&name)
        .shard_count(4)
        .send()
        .await
        .expect("a stream");
    let stream = kinesis
        .describe_stream_summary()
        .stream_name(&name)
        .send()
        .await
        .expect("the stream")
        .stream_description_summary()
        .expect("its summary")
        .stream_arn()
        .to_owned();
    let function = announcing(LedgerMode::LockFree, &stream, destinations().await).await;
    let (a, prefix) = (account(), format!("p-{}", uuid::Uuid::new_v4().simple()));
    let batch = payments(&a, &prefix);
    delivered_twice(&function, &batch).await;
    // Every shard's records: the account's announcements all on one
    // shard, in the order applied, each keyed by its id.
    let shards = kinesis
        .list_shards()
        .stream_arn(&stream)
        .send()
        .await
        .expect("the shards");
    let mut on_shards = Vec::new();
    for shard in shards.shards() {
        let iterator = kinesis
            .get_shard_iterator()
            .stream_arn(&stream)
            .shard_id(shard.shard_id())
            .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("an iterator");
        let records = kinesis
            .get_records()
            .stream_arn(&stream)
            .set_shard_iterator(iterator.shard_iterator().map(str::to_owned))
            .send()
            .await
            .expect("the shard's records");
        let received: Vec<Received> = records
            .records()
            .iter()
            .map(|record| Received {
                id: record.partition_key().to_owned(),
                body: serde_json::from_slice::<Value>(record.data().as_ref())
                    .expect("a JSON body")
                    .to_string(),
            })
            .collect();
        if !received.is_empty() {
            on_shards.push(received);
        }
    }
    let store = function.engine().store();
    assert_eq!(on_shards, [announced(store, &a, &prefix)]);
}

/// Emits each payment to an EventBridge bus as the event
/// `PaymentApplied` of source `payments`, its detail the payment.
struct PublishingPayments {
    bus: String,
}

impl<E: Send + Sync + 'static> RecordHandler<E> for PublishingPayments {
    type Record = KafkaRecord;

    fn commit_path(&self) -> CommitPath {
        CommitPath::LockFree
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &KafkaRecord,
    ) -> Result<Completion<E>, HandlerError> {
        let payment: Value = serde_json::from_slice(&record.value)
            .map_err(|e| HandlerError::Permanent(format!("not a payment: {}", json_error(&e))))?;
        let event =
            json!({"source": "payments", "detail-type": "PaymentApplied", "detail": payment});
        Ok(Completion::done("published").emit(&self.bus, event.to_string()))
    }
}

#[tokio::test]
async fn an_eventbridge_bus_gets_each_event_with_its_id_in_the_detail() {
    let events = aws_sdk_eventbridge::Client::new(&exactly_once::aws::sdk_config().await);
    let name = format!("announcements-{}", uuid::Uuid::new_v4().simple());
    let bus = events
        .create_event_bus()
        .name(&name)
        .send()
        .await
        .expect("a bus")
        .event_bus_arn()
        .expect("its ARN")
        .to_owned();
    // The next hop: a queue behind a rule taking the bus's payments.
    let (_, url) = support::sqs::queue().await;
    events
        .put_rule()
        .name("payments")
        .event_bus_name(&name)
        .event_pattern(json!({"source": ["payments"]}).to_string())
        .send()
        .await
        .expect("a rule");
    events
        .put_targets()
        .rule("payments")
        .event_bus_name(&name)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("queue")
                .arn(queue_arn(&url).await)
                .build()
                .expect("a target"),
        )
        .send()
        .await
        .expect("the queue as target");
    let store = support::store(std::time::Duration::from_secs(30)).await;
    let engine = Engine::new(store, PublishingPayments { bus }, EngineConfig::default())
        .with_sender(destinations().await);
    let function = BatchFunction::new(engine, settings(header_keys())).without_metrics();
    let (a, prefix) = (account(), format!("p-{}", uuid::Uuid::new_v4().simple()));
    let batch = payments(&a, &prefix);
    delivered_twice(&function, &batch).await;
    // Each payment's event once, its id in the detail beside the payment.
    let store = function.engine().store();
    let mut published: Vec<(String, Value)> = drain(&url)
        .await
        .iter()
        .map(|m| {
            let event: Value = serde_json::from_str(m.body().unwrap_or("null")).expect("an event");
            assert_eq!(event["detail-type"], "PaymentApplied");
            let mut detail = event["detail"].clone();
            let id = detail
                .as_object_mut()
                .and_then(|d| d.remove("idempotency-key"))
                .and_then(|id| id.as_str().map(str::to_owned))
                .expect("the id in the detail");
            (id, detail)
        })
        .collect();
    published.sort_by(|x, y| x.0.cmp(&y.0));
    let mut expected: Vec<(String, Value)> = [(1, 100), (2, -30), (3, -500), (4, 5)]
        .into_iter()
        .map(|(n, amount)| {
            let id = format!("{prefix}-{n}");
            let payment: Value =
                serde_json::from_str(&support::msk::payment_json(&id, &a, amount)).expect("JSON");
            (outbox::message_id(&store.pk(&id).expect("pk"), 0), payment)
        })
        .collect();
    expected.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(published, expected);
}

/// Announces each payment (a JSON body with a numeric `amount_cents`) to
/// `queue`; anything else is not a payment: a permanent failure, parked.
struct Announce {
    queue: String,
}

impl<E: Send + Sync + 'static> RecordHandler<E> for Announce {
    type Record = Record;

    fn commit_path(&self) -> CommitPath {
        CommitPath::LockFree
    }

    async fn handle(
        &self,
        _: &FencingToken,
        record: &Record,
    ) -> Result<Completion<E>, HandlerError> {
        let body = String::from_utf8(record.body().into_owned())
            .ok()
            .filter(|body| {
                serde_json::from_str::<Value>(body).is_ok_and(|p| p["amount_cents"].is_i64())
            })
            .ok_or_else(|| HandlerError::Permanent("not a payment".into()))?;
        Ok(Completion::done("announced").emit(&self.queue, body))
    }
}

#[tokio::test]
async fn a_function_built_as_run_builds_it_sends_what_its_handler_emits_and_parks_what_it_refuses()
{
    use support::sources::{Payment, sqs_event};
    let (client, announcements) = support::sqs::queue().await;
    let (_, parked) = support::sqs::queue().await;
    let prefix = format!("from-vars-{}#", uuid::Uuid::new_v4().simple());
    let vars = [
        ("IDEMPOTENCY_TABLE", support::env("IDEMPOTENCY_TABLE")),
        ("IDEMPOTENCY_KEY_PREFIX", prefix.clone()),
        ("EVENT_SOURCES", "sqs".to_owned()),
        ("DEAD_LETTER_QUEUE_URL", parked.clone()),
    ];
    // Exactly what `run` would serve with these variables: the store, the
    // senders of the build, the dead-letter queue.
    let function = exactly_once::Function::from_vars(
        Announce {
            queue: announcements.clone(),
        },
        support::lookup(&vars),
    )
    .await
    .expect("the function starts");
    let a = account();
    let payments = vec![
        Payment::new(&format!("{a}-1"), &a, 100),
        Payment::poison(&format!("{a}-p")),
        Payment::new(&format!("{a}-2"), &a, 250),
    ];
    let event = sqs_event("payments", &payments);
    for delivery in 1..=2 {
        let answer = function.invoke(event.clone()).await.expect("an SQS batch");
        assert_eq!(
            answer,
            json!({"batchItemFailures": []}),
            "delivery {delivery}"
        );
    }
    // One announcement per payment over both deliveries, each under its
    // stable id; the refused record parked whole on each delivery (stored
    // FAILED the first time, found FAILED the second).
    let sent = support::sqs::receive_all(&client, &announcements).await;
    let mut ids: Vec<&str> = sent.iter().map(support::sqs::id_of).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!((sent.len(), ids.len()), (2, 2), "{ids:?}");
    let dead = support::sqs::drain(&client, &parked).await;
    let mut reasons: Vec<&str> = dead.iter().filter_map(|d| d["reason"].as_str()).collect();
    reasons.sort_unstable();
    assert_eq!(reasons, ["failed", "previously-failed"]);
    for copy in &dead {
        assert_eq!(
            copy["record"], event["Records"][1],
            "the refused record, whole"
        );
    }
}
