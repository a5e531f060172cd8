//! The generated payments of `batches.rs` as events of each batch source
//! Lambda delivers (MSK, SQS standard and FIFO, Kinesis, DynamoDB Streams,
//! Amazon MQ for RabbitMQ and for ActiveMQ), shaped as `tests/support/sources.rs` builds them and as
//! `benches/powertools/sources.py` builds the same records for Powertools.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use crate::batches::{Batch, Record};

/// Partitions of a Kafka delivery (the other sources ignore them).
const KAFKA_PARTITIONS: usize = 4;

/// A batch source, as its events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// MSK events of 4 partitions (`payments-0` to `payments-3`).
    Kafka,
    /// SQS events of the standard queue `payments`.
    SqsStandard,
    /// SQS events of the FIFO queue `payments.fifo`: the account is the
    /// message group, the payment id the deduplication id.
    SqsFifo,
    /// Kinesis events of one shard; the account is the partition key.
    Kinesis,
    /// DynamoDB Streams events of INSERTs of the `payments` table (one shard).
    DynamoDbStreams,
    /// Amazon MQ for RabbitMQ events of ONE queue, `payments` of the virtual
    /// host `/` (`payments::/`): the key also as the AMQP string header
    /// `idempotency-key` (`{"bytes":[…]}`).
    RabbitMq,
    /// Amazon MQ for ActiveMQ events of ONE queue, `payments`: the key also
    /// as the message property `idempotency-key`.
    ActiveMq,
}

impl Source {
    pub fn label(self) -> &'static str {
        match self {
            Source::Kafka => "MSK (Kafka), 4 partitions",
            Source::SqsStandard => "SQS standard",
            Source::SqsFifo => "SQS FIFO, a group per account",
            Source::Kinesis => "Kinesis, one shard",
            Source::DynamoDbStreams => "DynamoDB Streams INSERTs, one shard",
            Source::RabbitMq => "Amazon MQ for RabbitMQ, one queue",
            Source::ActiveMq => "Amazon MQ for ActiveMQ, one queue",
        }
    }
}

/// The events that deliver `count` new payments of `tag` (payment n to
/// account n % 200, as [`Batch::new_payments`]), `batch_size` a batch, in
/// order.
pub fn delivery(source: Source, tag: &str, count: usize, batch_size: usize) -> Vec<Value> {
    events(
        source,
        &Batch::new_payments(tag, count, KAFKA_PARTITIONS).records,
        batch_size,
    )
}

/// [`delivery`]'s events, but the LAST message is poison: its
/// `payment_id` (its key) kept, its `amount_cents` not a number, which the
/// demo ledger fails permanently (as `tests/support/sources.rs`'
/// `Payment::poison`, its account `-`). Last, so that every other message
/// of its lane is finished before it on the first delivery.
pub fn poisoned_delivery(source: Source, tag: &str, count: usize, batch_size: usize) -> Vec<Value> {
    let mut payments = Batch::new_payments(tag, count, KAFKA_PARTITIONS).records;
    if let Some(last) = payments.last_mut() {
        "-".clone_into(&mut last.account);
        last.value = serde_json::to_vec(
            &json!({"payment_id": last.idempotency_key, "amount_cents": "not a number"}),
        )
        .expect("json");
    }
    events(source, &payments, batch_size)
}

fn events(source: Source, payments: &[Record], batch_size: usize) -> Vec<Value> {
    payments
        .chunks(batch_size)
        .enumerate()
        .map(|(index, chunk)| {
            let first = index * batch_size;
            match source {
                Source::Kafka => Batch {
                    partitions: KAFKA_PARTITIONS,
                    records: chunk.to_vec(),
                }
                .event(),
                Source::SqsStandard => sqs_event("payments", chunk),
                Source::SqsFifo => sqs_event("payments.fifo", chunk),
                Source::Kinesis => kinesis_event("shardId-000000000000", first, chunk),
                Source::DynamoDbStreams => inserts_event(first, chunk),
                Source::RabbitMq => rabbitmq_event(chunk),
                Source::ActiveMq => activemq_event(chunk),
            }
        })
        .collect()
}

fn body(record: &Record) -> String {
    String::from_utf8(record.value.clone()).expect("a payment is JSON text")
}

/// An SQS event of `queue` (FIFO when it ends in `.fifo`).
fn sqs_event(queue: &str, payments: &[Record]) -> Value {
    let records: Vec<Value> = payments
        .iter()
        .map(|payment| {
            let key = &payment.idempotency_key;
            let mut attributes = json!({
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "1764076800000",
                "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                "ApproximateFirstReceiveTimestamp": "1764076800001"
            });
            if queue.ends_with(".fifo") {
                attributes["MessageGroupId"] = json!(payment.account);
                attributes["MessageDeduplicationId"] = json!(key);
                attributes["SequenceNumber"] = json!("18849496460467696128");
            }
            json!({
                "messageId": format!("m-{key}"),
                "receiptHandle": format!("AQEB-{key}"),
                "body": body(payment),
                "attributes": attributes,
                "messageAttributes": {
                    "idempotency-key": {
                        "stringValue": key,
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
        })
        .collect();
    json!({ "Records": records })
}

/// A sequence number as Kinesis spells them (56 digits).
fn sequence(n: usize) -> String {
    format!("4959033827149025660855969253836157{n:022}")
}

/// A Kinesis event of one shard, sequence numbers from `first`.
fn kinesis_event(shard: &str, first: usize, payments: &[Record]) -> Value {
    let records: Vec<Value> = payments
        .iter()
        .enumerate()
        .map(|(i, payment)| {
            let sequence = sequence(first + i);
            json!({
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": payment.account,
                    "sequenceNumber": sequence,
                    "data": BASE64.encode(&payment.value),
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
        })
        .collect();
    json!({ "Records": records })
}

/// A DynamoDB Streams event of INSERTs, sequence numbers from `first`; the
/// new image is the payment, typed.
fn inserts_event(first: usize, payments: &[Record]) -> Value {
    let records: Vec<Value> = payments
        .iter()
        .enumerate()
        .map(|(i, payment)| {
            let fields: Value = serde_json::from_slice(&payment.value).expect("json");
            let sequence = (first + i).to_string();
            json!({
                "eventID": format!("e-{sequence}"),
                "eventName": "INSERT",
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "dynamodb": {
                    "ApproximateCreationDateTime": 1764076800,
                    "Keys": {"payment_id": {"S": fields["payment_id"]}},
                    "NewImage": {
                        "payment_id": {"S": fields["payment_id"]},
                        "account_id": {"S": fields["account_id"]},
                        "amount_cents": {"N": fields["amount_cents"].to_string()},
                        "currency": {"S": fields["currency"]}
                    },
                    "SequenceNumber": sequence,
                    "SizeBytes": 90,
                    "StreamViewType": "NEW_AND_OLD_IMAGES"
                },
                "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2026-11-25T00:00:00.000"
            })
        })
        .collect();
    json!({ "Records": records })
}

/// The broker ARN Amazon MQ events name.
const BROKER_ARN: &str =
    "arn:aws:mq:us-east-1:123456789012:broker:payments:b-9bcfa592-423a-4942-879d-eb284b418fc8";

/// A message id shaped as a UUID, derived from the key (FNV-1a, 128 bits
/// of two differently seeded hashes): distinct per payment.
fn message_id(key: &str) -> String {
    let fnv = |seed: u64| {
        key.bytes().fold(seed, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    let (high, low) = (fnv(0xcbf2_9ce4_8422_2325), fnv(0x6c62_272e_07bb_0142));
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xffff,
        high & 0xffff,
        low >> 48,
        low & 0xffff_ffff_ffff
    )
}

/// An Amazon MQ for RabbitMQ event of the queue `payments` of the virtual
/// host `/`, as `tests/support/sources.rs`' `rabbitmq_event` writes it: the
/// key as the AMQP string header `idempotency-key` (`{"bytes":[…]}`), the
/// account as the `JMSXGroupID` header, a number header, a `messageId`.
fn rabbitmq_event(payments: &[Record]) -> Value {
    let messages: Vec<Value> = payments
        .iter()
        .map(|payment| {
            json!({
                "basicProperties": {
                    "contentType": "application/json",
                    "contentEncoding": null,
                    "headers": {
                        "idempotency-key": {"bytes": payment.idempotency_key.as_bytes()},
                        "JMSXGroupID": {"bytes": payment.account.as_bytes()},
                        "attempt": 1
                    },
                    "deliveryMode": 2,
                    "priority": 34,
                    "correlationId": null,
                    "replyTo": null,
                    "expiration": "60000",
                    "messageId": message_id(&payment.idempotency_key),
                    "timestamp": "Nov 25, 2026, 12:00:00 AM",
                    "type": null,
                    "userId": "AIDACKCEVSQ6C2EXAMPLE",
                    "appId": null,
                    "clusterId": null,
                    "bodySize": payment.value.len()
                },
                "redelivered": false,
                "data": BASE64.encode(&payment.value)
            })
        })
        .collect();
    json!({
        "eventSource": "aws:rmq",
        "eventSourceArn": BROKER_ARN,
        "rmqMessagesByQueue": {"payments::/": messages}
    })
}

/// An Amazon MQ for ActiveMQ event of the queue `payments`, as
/// `tests/support/sources.rs`' `activemq_event` writes it: the key as the
/// property `idempotency-key`, the account as `JMSXGroupID`.
fn activemq_event(payments: &[Record]) -> Value {
    let messages: Vec<Value> = payments
        .iter()
        .map(|payment| {
            json!({
                "messageID": format!(
                    "ID:b-payments-1.mq.us-east-1.amazonaws.com-{}",
                    message_id(&payment.idempotency_key)
                ),
                "messageType": "jms/text-message",
                "deliveryMode": 1,
                "replyTo": null,
                "type": null,
                "expiration": "60000",
                "priority": 1,
                "correlationId": "myJMSCoID",
                "redelivered": false,
                "destination": {"physicalName": "payments"},
                "data": BASE64.encode(&payment.value),
                "timestamp": 1764028800000_i64,
                "brokerInTime": 1764028800000_i64,
                "brokerOutTime": 1764028800001_i64,
                "properties": {
                    "idempotency-key": payment.idempotency_key,
                    "JMSXGroupID": payment.account
                }
            })
        })
        .collect();
    json!({"eventSource": "aws:mq", "eventSourceArn": BROKER_ARN, "messages": messages})
}
