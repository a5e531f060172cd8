//! Events of the other batch sources as Lambda delivers them (SQS standard
//! and FIFO, Kinesis, DynamoDB Streams, Amazon MQ), carrying the demo's payments: for
//! the tests, the kill storms and the simulation, which run the same
//! payments through every source.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use exactly_once::engine::RecordHandler;
use exactly_once::lambda::BatchFunction;
use exactly_once::store::{ClaimOutcome, ClaimRequest, Lease, Store as _};
use serde_json::{Value, json};

use super::msk::payment_json;

/// A payment in any source's event: its idempotency key (also its
/// `payment_id`), its account, its amount; or a poison record (its key
/// readable, its amount not a number: the ledger fails it permanently).
#[derive(Debug, Clone)]
pub struct Payment {
    pub key: String,
    pub account: String,
    pub amount: i64,
    pub poison: bool,
}

impl Payment {
    pub fn new(key: &str, account: &str, amount: i64) -> Self {
        Self {
            key: key.to_owned(),
            account: account.to_owned(),
            amount,
            poison: false,
        }
    }

    /// An amount that is not a number: the ledger fails it permanently.
    pub fn poison(key: &str) -> Self {
        Self {
            poison: true,
            ..Self::new(key, "-", 0)
        }
    }

    fn body(&self) -> String {
        match self.poison {
            true => serde_json::json!({"payment_id": self.key, "amount_cents": "not a number"})
                .to_string(),
            false => payment_json(&self.key, &self.account, self.amount),
        }
    }
}

/// The message id of a payment's message: a UUID, as SQS's, derived from
/// the key (so that a test can name it) without showing it.
pub fn message_id(key: &str) -> String {
    let hex = super::sha256_hex(key.as_bytes());
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// An SQS message of `queue` (a FIFO queue when it ends in `.fifo`: the
/// payment's account is its message group, its key the deduplication id),
/// the key also as the `idempotency-key` message attribute.
pub fn sqs_message(queue: &str, payment: &Payment) -> Value {
    let mut attributes = json!({
        "ApproximateReceiveCount": "1",
        "SentTimestamp": "1764076800000",
        "SenderId": "AIDAIENQZJOLO23YVJ4VO",
        "ApproximateFirstReceiveTimestamp": "1764076800001"
    });
    if queue.ends_with(".fifo") {
        attributes["MessageGroupId"] = json!(payment.account);
        attributes["MessageDeduplicationId"] = json!(payment.key);
        attributes["SequenceNumber"] = json!("18849496460467696128");
    }
    json!({
        "messageId": message_id(&payment.key),
        "receiptHandle": format!("AQEB-{}", payment.key),
        "body": payment.body(),
        "attributes": attributes,
        "messageAttributes": {
            "idempotency-key": {
                "stringValue": payment.key,
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": "String"
            }
        },
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": format!("arn:aws:sqs:us-east-1:123456789012:{queue}"),
        "awsRegion": "us-east-1"
    })
}

/// An SQS event of `queue` with `payments`, in order.
pub fn sqs_event(queue: &str, payments: &[Payment]) -> Value {
    let records: Vec<Value> = payments.iter().map(|p| sqs_message(queue, p)).collect();
    json!({ "Records": records })
}

/// A Kinesis record of `shard` at `sequence`: the payment's account is its
/// partition key.
pub fn kinesis_record(shard: &str, sequence: &str, payment: &Payment) -> Value {
    json!({
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": payment.account,
            "sequenceNumber": sequence,
            "data": STANDARD.encode(payment.body()),
            "approximateArrivalTimestamp": 1764076800.123
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": format!("{shard}:{sequence}"),
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": "arn:aws:iam::123456789012:role/lambda-role",
        "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/payments"
    })
}

/// A Kinesis event of one shard, sequence numbers `first`, `first + 1`, ...
pub fn kinesis_event(shard: &str, first: u128, payments: &[Payment]) -> Value {
    let records: Vec<Value> = payments
        .iter()
        .enumerate()
        .map(|(i, p)| kinesis_record(shard, &sequence(first + i as u128), p))
        .collect();
    json!({ "Records": records })
}

/// A sequence number as Kinesis spells them (56 digits, beyond 128 bits).
pub fn sequence(n: u128) -> String {
    format!("4959033827149025660855969253836157{n:022}")
}

/// A DynamoDB Streams record of the `payments` table: `event_name` of the
/// item keyed by the payment's key, its image the payment (typed JSON).
pub fn stream_record(event_name: &str, sequence: &str, payment: &Payment) -> Value {
    let image = match payment.poison {
        true => json!({"payment_id": {"S": payment.key}, "amount_cents": {"S": "not a number"}}),
        false => json!({
            "payment_id": {"S": payment.key},
            "account_id": {"S": payment.account},
            "amount_cents": {"N": payment.amount.to_string()},
            "currency": {"S": "EUR"}
        }),
    };
    json!({
        "eventID": format!("e-{sequence}"),
        "eventName": event_name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1764076800,
            "Keys": {"payment_id": {"S": payment.key}},
            "NewImage": image,
            "SequenceNumber": sequence,
            "SizeBytes": 90,
            "StreamViewType": "NEW_AND_OLD_IMAGES"
        },
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2026-11-25T00:00:00.000"
    })
}

/// A DynamoDB Streams event of INSERTs, sequence numbers from `first`.
pub fn inserts_event(first: u64, payments: &[Payment]) -> Value {
    let records: Vec<Value> = payments
        .iter()
        .enumerate()
        .map(|(i, p)| stream_record("INSERT", &(first + i as u64).to_string(), p))
        .collect();
    json!({ "Records": records })
}

/// The broker ARN Amazon MQ events name.
const BROKER_ARN: &str =
    "arn:aws:mq:us-east-1:123456789012:broker:payments:b-9bcfa592-423a-4942-879d-eb284b418fc8";

/// A RabbitMQ message of a payment, as Lambda delivers it: the key as the
/// AMQP string header `idempotency-key` (`{"bytes":[…]}`), the payment's
/// account as its `JMSXGroupID` header, a number header beside them, and
/// the key's [`message_id`] as its `messageId` property (none when
/// `with_id` is false).
pub fn rabbitmq_message(payment: &Payment, with_id: bool) -> Value {
    let body = payment.body();
    json!({
        "basicProperties": {
            "contentType": "application/json",
            "contentEncoding": null,
            "headers": {
                "idempotency-key": {"bytes": payment.key.as_bytes()},
                "JMSXGroupID": {"bytes": payment.account.as_bytes()},
                "attempt": 1
            },
            "deliveryMode": 2,
            "priority": 34,
            "correlationId": null,
            "replyTo": null,
            "expiration": "60000",
            "messageId": with_id.then(|| message_id(&payment.key)),
            "timestamp": "Nov 25, 2026, 12:00:00 AM",
            "type": null,
            "userId": "AIDACKCEVSQ6C2EXAMPLE",
            "appId": null,
            "clusterId": null,
            "bodySize": body.len()
        },
        "redelivered": false,
        "data": STANDARD.encode(body)
    })
}

/// A RabbitMQ event of `payments` in the queue `payments` of the virtual
/// host `/`, each message with its id.
pub fn rabbitmq_event(payments: &[Payment]) -> Value {
    let messages: Vec<Value> = payments.iter().map(|p| rabbitmq_message(p, true)).collect();
    json!({
        "eventSource": "aws:rmq",
        "eventSourceArn": BROKER_ARN,
        "rmqMessagesByQueue": {"payments::/": messages}
    })
}

/// An ActiveMQ event of `payments` on the queue `payments`: the key as the
/// property `idempotency-key`, the account as `JMSXGroupID`, the message id
/// derived from the key.
pub fn activemq_event(payments: &[Payment]) -> Value {
    let messages: Vec<Value> = payments
        .iter()
        .map(|payment| {
            json!({
                "messageID": format!("ID:b-payments-1.mq.us-east-1.amazonaws.com-{}", message_id(&payment.key)),
                "messageType": "jms/text-message",
                "deliveryMode": 1,
                "replyTo": null,
                "type": null,
                "expiration": "60000",
                "priority": 1,
                "correlationId": "myJMSCoID",
                "redelivered": false,
                "destination": {"physicalName": "payments"},
                "data": STANDARD.encode(payment.body()),
                "timestamp": 1764028800000_i64,
                "brokerInTime": 1764028800000_i64,
                "brokerOutTime": 1764028800001_i64,
                "properties": {"idempotency-key": payment.key, "JMSXGroupID": payment.account}
            })
        })
        .collect();
    json!({"eventSource": "aws:mq", "eventSourceArn": BROKER_ARN, "messages": messages})
}

/// Which source's events a payment stream is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Encoding {
    /// MSK events over `payments-0` and `payments-1`.
    Kafka,
    /// SQS FIFO events of `payments.fifo`, a message group per account.
    SqsFifo,
    /// Kinesis events of one shard.
    Kinesis,
    /// RabbitMQ events of one queue (whole-batch retries).
    RabbitMq,
}

impl Encoding {
    /// Where the function reads the key: the `idempotency-key` header (a
    /// Kafka header, an SQS message attribute), or the payment's id in the
    /// payload (Kinesis records have no attributes).
    pub fn keys(self) -> exactly_once::lambda::keys::KeySpec {
        use exactly_once::lambda::keys::{KeySpec, MissingKeyPolicy};
        let source = match self {
            Encoding::Kafka | Encoding::SqsFifo | Encoding::RabbitMq => "header",
            Encoding::Kinesis => "json:/payment_id",
        };
        KeySpec::parse(source, "idempotency-key".into(), MissingKeyPolicy::Reject)
            .expect("valid keys")
    }
}

/// [`super::msk::payment_stream`]'s payments (the same keys, accounts and
/// amounts, so [`super::msk::stream_balances`] holds) as events of
/// `encoding`: 10 payments a batch.
pub fn payment_stream(
    encoding: Encoding,
    stream: &str,
    accounts: &[String],
    batches: i64,
) -> Vec<Value> {
    if encoding == Encoding::Kafka {
        return super::msk::payment_stream(stream, accounts, batches);
    }
    (0..batches)
        .map(|b| {
            let payments: Vec<Payment> = (0..10)
                .map(|i| {
                    let n = b * 10 + i;
                    let account = &accounts[n as usize % accounts.len()];
                    Payment::new(&format!("{stream}-{n}"), account, n + 1)
                })
                .collect();
            match encoding {
                Encoding::SqsFifo => sqs_event("payments.fifo", &payments),
                Encoding::RabbitMq => rabbitmq_event(&payments),
                _ => kinesis_event("shardId-000000000000", (b * 10) as u128, &payments),
            }
        })
        .collect()
}

/// Another worker holds `key` under a live lease (the store's lock
/// timeout) for the record at `index` of `event` (its real fingerprint;
/// Amazon MQ: the index in its queue): the function finds it in progress.
/// The lease, to release.
pub async fn hold<H>(
    function: &BatchFunction<H, exactly_once::dynamodb::DynamoDbStore>,
    key: &str,
    event: &Value,
    index: i64,
) -> Lease
where
    H: RecordHandler<exactly_once::dynamodb::TransactWriteItem>,
    H::Record: exactly_once::lambda::FromRecord,
{
    let batch = exactly_once::lambda::decode_event(event).expect("an event");
    let (_, record) = batch
        .records()
        .find(|(at, _)| at.offset == index)
        .expect("the record");
    let body = record.as_ref().expect("readable").body();
    let payload_hash = exactly_once::store::payload_hash(&body);
    let request = ClaimRequest {
        key,
        payload_hash: &payload_hash,
        origin: None,
        lease_cap_ms: None,
        owner: None,
    };
    let claimed = function
        .engine()
        .store()
        .claim(request)
        .await
        .expect("claim");
    match claimed {
        ClaimOutcome::Acquired(lease) => lease,
        other => panic!("not acquired: {other:?}"),
    }
}
