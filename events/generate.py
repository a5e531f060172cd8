#!/usr/bin/env python3
"""Writes the sample events of events/ (python3 standard library only).

    python3 events/generate.py            # (re)writes events/*.json
    python3 events/generate.py --check    # fails if a file differs from what it would write
    python3 events/generate.py --balances [FILE]   # FILE's expected balances

Deterministic: same input, same bytes (fixed timestamps, no randomness), so the
files can be committed and regenerated without noise. events/README.md says
what each file shows and the response it should get.

The events look like what Lambda sends for Amazon MSK: `records` keyed by
"<topic>-<partition>", each list in offset order, base64 `key` and `value`,
headers as lists of Java's signed bytes (bytes >= 128 become negative).
sqs.json, sqs-fifo.json, kinesis.json and dynamodb-streams.json are shaped
as Lambda delivers those sources (`Records`, each with its `eventSource`),
as in AWS's samples and Powertools' test events; rabbitmq.json and
activemq.json as Lambda delivers Amazon MQ's (`rmqMessagesByQueue`,
`messages`). events/fixtures/ holds other projects' MQ samples, copied, not
written here.
"""

import argparse
import base64
import datetime
import hashlib
import json
import pathlib
import sys
import uuid
import zlib

HERE = pathlib.Path(__file__).resolve().parent

CLUSTER_ARN = "arn:aws:kafka:us-east-1:123456789012:cluster/demo/abc-1"
BOOTSTRAP = "b-1.demo.kafka.us-east-1.amazonaws.com:9092,b-2.demo.kafka.us-east-1.amazonaws.com:9092"
TOPIC = "payments"
# 2025-01-01T00:00:00Z; record n of a file is stamped BASE_MS + n seconds.
BASE_MS = 1735689600000
HEADER = "idempotency-key"


def signed_bytes(text):
    """UTF-8 bytes as Java's signed bytes, the way Lambda sends header values."""
    return [b - 256 if b >= 128 else b for b in text.encode("utf-8")]


def b64(data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return base64.b64encode(data).decode("ascii")


def payment(payment_id, account_id, amount_cents, currency="EUR"):
    """A payment's JSON bytes, compact and in a fixed field order."""
    value = {
        "payment_id": payment_id,
        "account_id": account_id,
        "amount_cents": amount_cents,
        "currency": currency,
    }
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


# The schema registry's ids of events/schemas/payment.avsc and payment.proto.
CONFLUENT_AVRO_ID = "42"
CONFLUENT_PROTOBUF_ID = "43"
GLUE_AVRO_ID = "6d3c9bd0-4d5e-4b7a-9a3e-1c2f4e5d6a7b"
GLUE_PROTOBUF_ID = "0f1e2d3c-4b5a-4697-8877-665544332211"


def varint(n):
    """An unsigned varint (Avro, Protobuf and Kafka all use this base)."""
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def zigzag(n):
    return varint((n << 1) ^ (n >> 63))


def avro_payment(payment_id, account_id, amount_cents, currency="EUR"):
    """One datum of events/schemas/payment.avsc (Avro binary encoding)."""
    def string(text):
        data = text.encode("utf-8")
        return zigzag(len(data)) + data
    return string(payment_id) + string(account_id) + zigzag(amount_cents) + string(currency)


def protobuf_payment(payment_id, account_id, amount_cents, currency="EUR"):
    """One Payment of events/schemas/payment.proto (Protobuf encoding)."""
    def string(field, text):
        data = text.encode("utf-8")
        return varint(field << 3 | 2) + varint(len(data)) + data
    return (string(1, payment_id) + string(2, account_id)
            + varint(3 << 3) + varint(amount_cents) + string(4, currency))


def confluent_header(schema_id):
    return b"\x00" + int(schema_id).to_bytes(4, "big")


def glue_header(schema_id, compression=0):
    return bytes([3, compression]) + uuid.UUID(schema_id).bytes


def schema_metadata(data_format, schema_id):
    return {"dataFormat": data_format, "schemaId": schema_id}


class Batch:
    """Builds one event: records are added partition by partition, in offset order."""

    def __init__(self, source="aws:kafka"):
        self.source = source
        self.records = {}
        self.count = 0

    def add(self, partition, offset, value, key=None, idempotency_key=None, headers=None,
            value_schema=None):
        """value: str (the payload, UTF-8) or bytes; key: the Kafka record key;
        value_schema: the valueSchemaMetadata of a mapping with a schema registry."""
        all_headers = []
        if idempotency_key is not None:
            all_headers.append({HEADER: signed_bytes(idempotency_key)})
        for name, text in headers or []:
            all_headers.append({name: signed_bytes(text)})
        record = {
            "topic": TOPIC,
            "partition": partition,
            "offset": offset,
            "timestamp": BASE_MS + 1000 * self.count,
            "timestampType": "CREATE_TIME",
            "key": b64(key) if key is not None else None,
            "value": b64(value),
            "headers": all_headers,
        }
        if value_schema is not None:
            record["valueSchemaMetadata"] = value_schema
        self.count += 1
        self.records.setdefault(f"{TOPIC}-{partition}", []).append(record)
        return self

    def pay(self, partition, offset, idempotency_key, payment_id, account_id, amount_cents):
        """A well-formed payment record keyed (Kafka key) by its payment id."""
        return self.add(
            partition,
            offset,
            payment(payment_id, account_id, amount_cents),
            key=payment_id,
            idempotency_key=idempotency_key,
        )

    def event(self):
        event = {"eventSource": self.source}
        if self.source == "aws:kafka":
            event["eventSourceArn"] = CLUSTER_ARN
            event["bootstrapServers"] = BOOTSTRAP
        else:
            event["bootstrapServers"] = "kafka-1.internal.example:9092,kafka-2.internal.example:9092"
        event["records"] = self.records
        return event


# Two partitions of an MSK topic: (partition, offset, idempotency key,
# payment id, account, cents). acc-1: 1250 + 250 + 2000 = 3500 (3
# payments); acc-2: 500 + 1000 + 75 = 1575 (3 payments).
TWO_PARTITIONS = [
    (0, 100, "pay-2p-001", "p-001", "acc-1", 1250),
    (0, 101, "pay-2p-002", "p-002", "acc-2", 500),
    (0, 102, "pay-2p-003", "p-003", "acc-1", 250),
    (1, 200, "pay-2p-004", "p-004", "acc-2", 1000),
    (1, 201, "pay-2p-005", "p-005", "acc-1", 2000),
    (1, 202, "pay-2p-006", "p-006", "acc-2", 75),
]


def two_partitions():
    batch = Batch()
    for record in TWO_PARTITIONS:
        batch.pay(*record)
    return batch.event()


def in_batch_duplicates():
    # pay-dup-1 three times (twice in payments-0, once in payments-1), same payload.
    # acc-3: 400 (once) + 100 = 500 (2 payments)
    return (
        Batch()
        .pay(0, 300, "pay-dup-1", "p-dup-1", "acc-3", 400)
        .pay(0, 301, "pay-dup-2", "p-dup-2", "acc-3", 100)
        .pay(0, 302, "pay-dup-1", "p-dup-1", "acc-3", 400)
        .pay(1, 400, "pay-dup-1", "p-dup-1", "acc-3", 400)
        .event()
    )


def missing_key():
    # payments-0@501 has no idempotency-key header (only a trace header): reported,
    # and payments-0@502 after it is not started. acc-4: 100 + 800 = 900 (2 payments)
    return (
        Batch()
        .pay(0, 500, "pay-nokey-1", "p-nokey-1", "acc-4", 100)
        .add(0, 501, payment("p-nokey-2", "acc-4", 200), key="p-nokey-2",
             headers=[("trace-id", "trace-0001")])
        .pay(0, 502, "pay-nokey-3", "p-nokey-3", "acc-4", 400)
        .pay(1, 600, "pay-nokey-4", "p-nokey-4", "acc-4", 800)
        .event()
    )


def bad_payload():
    # payments-0@701: not JSON; payments-1@801: amount_cents 12.5. Both FAILED
    # (permanent) and parked (POISON_POLICY=park, the default): @702 and @802
    # are applied. acc-5: 100 + 200 + 1000 + 2000 = 3300 (4 payments). With
    # POISON_POLICY=report each stops its partition (acc-5 1100).
    return (
        Batch()
        .pay(0, 700, "pay-bad-1", "p-bad-1", "acc-5", 100)
        .add(0, 701, '{"payment_id":"p-bad-2","account_id":"acc-5",', key="p-bad-2",
             idempotency_key="pay-bad-2")
        .pay(0, 702, "pay-bad-3", "p-bad-3", "acc-5", 200)
        .pay(1, 800, "pay-bad-4", "p-bad-4", "acc-5", 1000)
        .add(1, 801, '{"payment_id":"p-bad-5","account_id":"acc-5","amount_cents":12.5,"currency":"EUR"}',
             key="p-bad-5", idempotency_key="pay-bad-5")
        .pay(1, 802, "pay-bad-6", "p-bad-6", "acc-5", 2000)
        .event()
    )


def utf8_key():
    # The key "платёж-ключ-1" in UTF-8: its header bytes are mostly negative.
    # acc-6: 4200 (1 payment)
    return Batch().pay(0, 900, "платёж-ключ-1", "p-utf8-1", "acc-6", 4200).event()


def same_key_different_payload():
    # pay-conflict-1 with 1500 on payments-0 and 9900 on payments-1. payments-1
    # first processes another payment, so payments-0's copy normally claims the
    # key first; the other copy is rejected (payload mismatch) and reported.
    # acc-7: 1500 + 300 = 1800 (2 payments) when payments-0's copy wins.
    return (
        Batch()
        .pay(0, 1000, "pay-conflict-1", "p-conflict-1", "acc-7", 1500)
        .pay(1, 1100, "pay-conflict-2", "p-conflict-2", "acc-7", 300)
        .pay(1, 1101, "pay-conflict-1", "p-conflict-1", "acc-7", 9900)
        .event()
    )


LARGE_PARTITIONS = 4
LARGE_RECORDS = 1200
LARGE_ACCOUNTS = ["acc-large-1", "acc-large-2", "acc-large-3", "acc-large-4", "acc-large-5"]


def large_amount(n):
    return 100 + 25 * (n % 7)


def large_batch():
    batch = Batch()
    per_partition = LARGE_RECORDS // LARGE_PARTITIONS
    for partition in range(LARGE_PARTITIONS):
        for i in range(per_partition):
            n = partition * per_partition + i + 1
            batch.pay(partition, 5000 + i, f"pay-large-{n:04d}", f"p-large-{n:04d}",
                      LARGE_ACCOUNTS[n % len(LARGE_ACCOUNTS)], large_amount(n))
    return batch.event()


def large_batch_balances():
    totals = {}
    for n in range(1, LARGE_RECORDS + 1):
        account = LARGE_ACCOUNTS[n % len(LARGE_ACCOUNTS)]
        balance, count = totals.get(account, (0, 0))
        totals[account] = (balance + large_amount(n), count + 1)
    return totals


def self_managed():
    # acc-9: 600 + 150 = 750 (2 payments)
    return (
        Batch(source="SelfManagedKafka")
        .pay(0, 40, "pay-smk-1", "p-smk-1", "acc-9", 600)
        .pay(0, 41, "pay-smk-2", "p-smk-2", "acc-9", 150)
        .event()
    )


def schema_json():
    # A mapping with SchemaRegistryConfig and EventRecordFormat JSON: the
    # registry's Avro values arrive as JSON text (base64, like any value),
    # with their metadata. acc-12: 2500 + 125 + 300 = 2925 (3 payments).
    batch = Batch()
    for partition, offset, n, schema in [
        (0, 60, 1, schema_metadata("AVRO", CONFLUENT_AVRO_ID)),
        (0, 61, 2, schema_metadata("AVRO", CONFLUENT_AVRO_ID)),
        (1, 70, 3, schema_metadata("PROTOBUF", GLUE_PROTOBUF_ID)),
    ]:
        amount = {1: 2500, 2: 125, 3: 300}[n]
        batch.add(partition, offset, payment(f"p-sr-{n}", "acc-12", amount),
                  key=f"p-sr-{n}", idempotency_key=f"pay-sr-{n}", value_schema=schema)
    return batch.event()


def schema_source_avro():
    # EventRecordFormat SOURCE: Lambda validated each value against the
    # registry, removed the registry header and names the schema in
    # valueSchemaMetadata. payments-0: Confluent, payments-1: AWS Glue.
    # For examples/schema_registry.rs; acc-13: 1000 + 2000 + 3000 = 6000.
    batch = Batch()
    for partition, offset, n, schema_id in [
        (0, 80, 1, CONFLUENT_AVRO_ID),
        (0, 81, 2, CONFLUENT_AVRO_ID),
        (1, 90, 3, GLUE_AVRO_ID),
    ]:
        batch.add(partition, offset, avro_payment(f"p-avro-{n}", "acc-13", 1000 * n),
                  key=f"p-avro-{n}", idempotency_key=f"pay-avro-{n}",
                  value_schema=schema_metadata("AVRO", schema_id))
    return batch.event()


def schema_source_protobuf():
    # As schema-source-avro.json, Protobuf: the message indexes stay in the
    # bytes (Confluent: 0x00 for the first message; Glue: varint 0).
    # acc-14: 400 + 500 = 900.
    batch = Batch()
    confluent = b"\x00" + protobuf_payment("p-proto-1", "acc-14", 400)
    glue = varint(0) + protobuf_payment("p-proto-2", "acc-14", 500)
    batch.add(0, 85, confluent, key="p-proto-1", idempotency_key="pay-proto-1",
              value_schema=schema_metadata("PROTOBUF", CONFLUENT_PROTOBUF_ID))
    batch.add(1, 95, glue, key="p-proto-2", idempotency_key="pay-proto-2",
              value_schema=schema_metadata("PROTOBUF", GLUE_PROTOBUF_ID))
    return batch.event()


def schema_framed_avro():
    # A mapping without SchemaRegistryConfig: the values as the producers'
    # serializers wrote them, registry header included, no metadata.
    # payments-0: Confluent; payments-1: AWS Glue, zlib-compressed.
    # acc-15: 700 + 800 = 1500.
    confluent = confluent_header(CONFLUENT_AVRO_ID) + avro_payment("p-framed-1", "acc-15", 700)
    glue = glue_header(GLUE_AVRO_ID, compression=5) + zlib.compress(
        avro_payment("p-framed-2", "acc-15", 800))
    return (
        Batch()
        .add(0, 88, confluent, key="p-framed-1", idempotency_key="pay-framed-1")
        .add(1, 98, glue, key="p-framed-2", idempotency_key="pay-framed-2")
        .event()
    )


def scheduled():
    # EventBridge's scheduled event (template.yaml's StuckKeyCheck, every 5
    # minutes): the function runs the stuck-key check instead of a batch.
    return {
        "version": "0",
        "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2026-11-23T12:00:00Z",
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/msk-exactly-once-FunctionStuckKeyCheck"],
        "detail": {},
    }


REGION = "us-east-1"
ACCOUNT = "123456789012"
# SQS's SenderId of a producer (an IAM user's id), as in AWS's samples.
SENDER_ID = "AIDAIENQZJOLO23YVJ4VO"


def stable_uuid(name):
    """A fixed UUID for `name` (messageId, eventID): deterministic files."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"exactly-once/events/{name}"))


def receipt_handle(name):
    """A receipt handle's shape (base64 text after "AQEB"), fixed for `name`."""
    digest = hashlib.sha256(name.encode("utf-8")).digest() + hashlib.sha256(name[::-1].encode("utf-8")).digest()
    return "AQEB" + base64.b64encode(digest).decode("ascii").rstrip("=")


def tally(payments):
    """Expected balances: {account: (cents, payments)} of unique payment ids."""
    totals, seen = {}, set()
    for payment_id, account, amount in payments:
        if payment_id in seen:
            continue
        seen.add(payment_id)
        balance, count = totals.get(account, (0, 0))
        totals[account] = (balance + amount, count + 1)
    return totals


# SQS standard: 5 payments and a producer's retry of one of them (the same
# payment and key in a message of its own). acc-sqs-1: 1250 + 250 + 2000 =
# 3500 (3 payments); acc-sqs-2: 500 + 1000 = 1500 (2).
SQS_PAYMENTS = [
    ("pay-sqs-1", "acc-sqs-1", 1250),
    ("pay-sqs-2", "acc-sqs-2", 500),
    ("pay-sqs-3", "acc-sqs-1", 250),
    ("pay-sqs-2", "acc-sqs-2", 500),
    ("pay-sqs-4", "acc-sqs-2", 1000),
    ("pay-sqs-5", "acc-sqs-1", 2000),
]

# SQS FIFO: one message group per account, interleaved; each payment's id is
# its deduplication id. acc-fifo-1: 1250 + 250 + 2000 = 3500 (3);
# acc-fifo-2: 500 + 1000 + 75 = 1575 (3).
FIFO_PAYMENTS = [
    ("pay-fifo-1", "acc-fifo-1", 1250),
    ("pay-fifo-2", "acc-fifo-2", 500),
    ("pay-fifo-3", "acc-fifo-1", 250),
    ("pay-fifo-4", "acc-fifo-2", 1000),
    ("pay-fifo-5", "acc-fifo-1", 2000),
    ("pay-fifo-6", "acc-fifo-2", 75),
]

# Kinesis: one shard's records (an event holds one shard), the partition
# key the payment id; the producer's PutRecord of pay-kin-2 retried (a
# record of its own, a later sequence number). acc-kinesis-1: 1250 + 250 +
# 2000 = 3500 (3); acc-kinesis-2: 500 + 1000 = 1500 (2).
KINESIS_PAYMENTS = [
    ("pay-kin-1", "acc-kinesis-1", 1250),
    ("pay-kin-2", "acc-kinesis-2", 500),
    ("pay-kin-3", "acc-kinesis-1", 250),
    ("pay-kin-2", "acc-kinesis-2", 500),
    ("pay-kin-4", "acc-kinesis-2", 1000),
    ("pay-kin-5", "acc-kinesis-1", 2000),
]

# DynamoDB Streams: INSERTs of payment items into a table `payments` (hash
# key payment_id), one shard. acc-ddb-1: 1250 + 250 + 2000 = 3500 (3);
# acc-ddb-2: 500 + 1000 + 75 = 1575 (3).
STREAM_PAYMENTS = [
    ("pay-ddb-1", "acc-ddb-1", 1250),
    ("pay-ddb-2", "acc-ddb-2", 500),
    ("pay-ddb-3", "acc-ddb-1", 250),
    ("pay-ddb-4", "acc-ddb-2", 1000),
    ("pay-ddb-5", "acc-ddb-1", 2000),
    ("pay-ddb-6", "acc-ddb-2", 75),
]


def sqs_message(name, n, payment_id, account_id, amount_cents, queue, fifo=None):
    """Message n of an SQS event as Lambda delivers it (the shape of AWS's
    and Powertools' samples); `fifo`: (group, deduplication id, sequence
    number)."""
    body = payment(payment_id.replace("pay-", "p-"), account_id, amount_cents)
    sent = BASE_MS + 1000 * n
    attributes = {"ApproximateReceiveCount": "1", "SentTimestamp": str(sent)}
    if fifo:
        group, deduplication_id, sequence_number = fifo
        attributes.update({"SequenceNumber": sequence_number, "MessageGroupId": group})
    attributes["SenderId"] = SENDER_ID
    if fifo:
        attributes["MessageDeduplicationId"] = deduplication_id
    attributes["ApproximateFirstReceiveTimestamp"] = str(sent + 37)
    return {
        "messageId": stable_uuid(f"{name}/{n}"),
        "receiptHandle": receipt_handle(f"{name}/{n}"),
        "body": body,
        "attributes": attributes,
        "messageAttributes": {
            HEADER: {
                "stringValue": payment_id,
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": "String",
            }
        },
        "md5OfBody": hashlib.md5(body.encode("utf-8")).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue}",
        "awsRegion": REGION,
    }


def sqs_event():
    return {"Records": [sqs_message("sqs", n, *p, queue="payments")
                        for n, p in enumerate(SQS_PAYMENTS)]}


def sqs_fifo_event():
    records = []
    for n, (payment_id, account_id, amount) in enumerate(FIFO_PAYMENTS):
        sequence_number = str(18849496460467696128 + n)
        records.append(sqs_message("sqs-fifo", n, payment_id, account_id, amount, queue="payments.fifo",
                                   fifo=(account_id, payment_id, sequence_number)))
    return {"Records": records}


KINESIS_SHARD = "shardId-000000000000"
# A sequence number of the shape Kinesis gives (56 digits); record n adds n * 10^24.
KINESIS_SEQUENCE = 49590338271490256608559692538361571095921575989136588898


def kinesis_event():
    records = []
    for n, (payment_id, account_id, amount) in enumerate(KINESIS_PAYMENTS):
        sequence_number = str(KINESIS_SEQUENCE + n * 10**24)
        records.append({
            "kinesis": {
                "kinesisSchemaVersion": "1.0",
                "partitionKey": payment_id,
                "sequenceNumber": sequence_number,
                "data": b64(payment(payment_id.replace("pay-", "p-"), account_id, amount)),
                "approximateArrivalTimestamp": BASE_MS / 1000 + n + 0.123,
            },
            "eventSource": "aws:kinesis",
            "eventVersion": "1.0",
            "eventID": f"{KINESIS_SHARD}:{sequence_number}",
            "eventName": "aws:kinesis:record",
            "invokeIdentityArn": f"arn:aws:iam::{ACCOUNT}:role/lambda-role",
            "awsRegion": REGION,
            "eventSourceARN": f"arn:aws:kinesis:{REGION}:{ACCOUNT}:stream/payments",
        })
    return {"Records": records}


STREAM_ARN = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/payments/stream/2025-01-01T00:00:00.000"


def dynamodb_streams_event():
    records = []
    for n, (payment_id, account_id, amount) in enumerate(STREAM_PAYMENTS):
        image = {
            "payment_id": {"S": payment_id},
            "account_id": {"S": account_id},
            "amount_cents": {"N": str(amount)},
            "currency": {"S": "EUR"},
        }
        records.append({
            "eventID": hashlib.md5(f"dynamodb-streams/{n}".encode()).hexdigest(),
            "eventName": "INSERT",
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": REGION,
            "dynamodb": {
                "ApproximateCreationDateTime": BASE_MS // 1000 + n,
                "Keys": {"payment_id": {"S": payment_id}},
                "NewImage": image,
                "SequenceNumber": str(4421584500000000017450439091 + 100 * n),
                "SizeBytes": len(json.dumps(image, separators=(",", ":"))),
                "StreamViewType": "NEW_AND_OLD_IMAGES",
            },
            "eventSourceARN": STREAM_ARN,
        })
    return {"Records": records}


# Amazon MQ: 5 payments and a producer's retry of one of them (the same
# payment and key in a message of its own), as sqs.json. acc-rmq-1 (acc-amq-1):
# 1250 + 250 + 2000 = 3500 (3 payments); acc-rmq-2 (acc-amq-2): 500 + 1000 =
# 1500 (2).
RABBITMQ_PAYMENTS = [
    ("pay-rmq-1", "acc-rmq-1", 1250),
    ("pay-rmq-2", "acc-rmq-2", 500),
    ("pay-rmq-3", "acc-rmq-1", 250),
    ("pay-rmq-2", "acc-rmq-2", 500),
    ("pay-rmq-4", "acc-rmq-2", 1000),
    ("pay-rmq-5", "acc-rmq-1", 2000),
]
ACTIVEMQ_PAYMENTS = [
    ("pay-amq-1", "acc-amq-1", 1250),
    ("pay-amq-2", "acc-amq-2", 500),
    ("pay-amq-3", "acc-amq-1", 250),
    ("pay-amq-2", "acc-amq-2", 500),
    ("pay-amq-4", "acc-amq-2", 1000),
    ("pay-amq-5", "acc-amq-1", 2000),
]


def broker_arn(name):
    return f"arn:aws:mq:{REGION}:{ACCOUNT}:broker:{name}:b-{stable_uuid(f'{name}/broker')}"


def java_date(seconds):
    """Epoch seconds as Lambda's RabbitMQ event writes a date (Java's
    medium format, UTC): "Jan 1, 1970, 12:33:41 AM"."""
    t = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return f"{t:%b} {t.day}, {t.year}, {t.hour % 12 or 12}:{t:%M:%S} {'AM' if t.hour < 12 else 'PM'}"


def rabbitmq_event():
    """One queue, `payments` of the virtual host `/`: each payment's key an
    AMQP string header (`{"bytes": [...]}`), the producer's attempt a
    number header (2 on the retry), a messageId of its own."""
    messages = []
    seen = set()
    for n, (payment_id, account_id, amount) in enumerate(RABBITMQ_PAYMENTS):
        body = payment(payment_id.replace("pay-", "p-"), account_id, amount)
        attempt = 2 if payment_id in seen else 1
        seen.add(payment_id)
        messages.append({
            "basicProperties": {
                "contentType": "application/json",
                "contentEncoding": None,
                "headers": {HEADER: {"bytes": list(payment_id.encode("utf-8"))}, "attempt": attempt},
                "deliveryMode": 2,
                "priority": None,
                "correlationId": None,
                "replyTo": None,
                "expiration": None,
                "messageId": stable_uuid(f"rabbitmq/{n}"),
                "timestamp": java_date(BASE_MS // 1000 + n),
                "type": None,
                "userId": "payments",
                "appId": "payments-api",
                "clusterId": None,
                "bodySize": len(body.encode("utf-8")),
            },
            "redelivered": False,
            "data": b64(body),
        })
    return {"eventSource": "aws:rmq", "eventSourceArn": broker_arn("payments-rabbitmq"),
            "rmqMessagesByQueue": {"payments::/": messages}}


def activemq_event():
    """The queue `payments`: each payment's key the message property
    idempotency-key; `expiration` a number (0: never) but in the 2nd
    message a string and in the 3rd a time, as AWS's samples show both."""
    broker = stable_uuid("payments-activemq/broker")
    messages = []
    for n, (payment_id, account_id, amount) in enumerate(ACTIVEMQ_PAYMENTS):
        sent = BASE_MS + 1000 * n
        expiration = {1: str(sent + 86_400_000), 2: sent + 86_400_000}.get(n, 0)
        messages.append({
            "messageID": f"ID:b-{broker}-1.mq.{REGION}.amazonaws.com-37557-{BASE_MS}-4:1:1:1:{n + 1}",
            "messageType": "jms/text-message",
            "deliveryMode": 2,
            "replyTo": None,
            "type": None,
            "expiration": expiration,
            "priority": 4,
            "correlationId": f"order-{n + 1}",
            "redelivered": False,
            "destination": {"physicalName": "payments"},
            "data": b64(payment(payment_id.replace("pay-", "p-"), account_id, amount)),
            "timestamp": sent,
            "brokerInTime": sent + 2,
            "brokerOutTime": sent + 37,
            "properties": {HEADER: payment_id},
        })
    return {"eventSource": "aws:mq", "eventSourceArn": broker_arn("payments-activemq"), "messages": messages}


# The expected balances of each source's sample event, by file.
SOURCE_BALANCES = {
    "two-partitions.json": [(key, account, cents) for _, _, key, _, account, cents in TWO_PARTITIONS],
    "sqs.json": SQS_PAYMENTS,
    "sqs-fifo.json": FIFO_PAYMENTS,
    "kinesis.json": KINESIS_PAYMENTS,
    "dynamodb-streams.json": STREAM_PAYMENTS,
    "rabbitmq.json": RABBITMQ_PAYMENTS,
    "activemq.json": ACTIVEMQ_PAYMENTS,
}


def not_a_batch_source():
    # An SNS notification (the shape of AWS's and Powertools' samples): a
    # source the function does not read. Its record names it with
    # "EventSource" (SNS's own spelling), so no record has an `eventSource`:
    # an invocation error UnknownEventSource.
    return {
        "Records": [
            {
                "EventVersion": "1.0",
                "EventSubscriptionArn": f"arn:aws:sns:{REGION}:{ACCOUNT}:payments:{stable_uuid('sns/subscription')}",
                "EventSource": "aws:sns",
                "Sns": {
                    "SignatureVersion": "1",
                    "Timestamp": "2025-01-01T00:00:00.000Z",
                    "Signature": "EXAMPLEpH+DcEwjAPg8O9mY8dReBSwksfg2S7WKQcikcNKWLQjwu6A4VbeS0QHVCkhRS7fUQvi2egU3N858fiTDN6bkkOxYDVrY0Ad8L10Hs3zH81mtnPk5uvvolIC1CXGu43obcgFxeL3khZl8IKvO61GWB6jI9b5+gLPoBc1Q=",
                    "SigningCertUrl": f"https://sns.{REGION}.amazonaws.com/SimpleNotificationService-0000000000000000000000.pem",
                    "MessageId": stable_uuid("sns/1"),
                    "Message": payment("p-sns-1", "acc-10", 999),
                    "MessageAttributes": {
                        HEADER: {"Type": "String", "Value": "pay-sns-1"},
                    },
                    "Type": "Notification",
                    "UnsubscribeUrl": f"https://sns.{REGION}.amazonaws.com/?Action=Unsubscribe",
                    "TopicArn": f"arn:aws:sns:{REGION}:{ACCOUNT}:payments",
                    "Subject": None,
                },
            }
        ]
    }


def render(value, indent=0):
    """JSON with two-space indents, but lists of numbers (header bytes) on one line."""
    pad = "  " * indent
    inner = "  " * (indent + 1)
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {render(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return "[" + ", ".join(str(v) for v in value) + "]"
        items = [inner + render(v, indent + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(value, ensure_ascii=False)


def files():
    pair = two_partitions()
    return {
        "two-partitions.json": pair,
        "two-partitions-replay.json": pair,
        "in-batch-duplicates.json": in_batch_duplicates(),
        "missing-key.json": missing_key(),
        "bad-payload.json": bad_payload(),
        "utf8-key.json": utf8_key(),
        "same-key-different-payload.json": same_key_different_payload(),
        "large-batch.json": large_batch(),
        "self-managed.json": self_managed(),
        "schema-json.json": schema_json(),
        "schema-source-avro.json": schema_source_avro(),
        "schema-source-protobuf.json": schema_source_protobuf(),
        "schema-framed-avro.json": schema_framed_avro(),
        "sqs.json": sqs_event(),
        "sqs-fifo.json": sqs_fifo_event(),
        "kinesis.json": kinesis_event(),
        "dynamodb-streams.json": dynamodb_streams_event(),
        "rabbitmq.json": rabbitmq_event(),
        "activemq.json": activemq_event(),
        "not-a-batch-source.json": not_a_batch_source(),
        "scheduled.json": scheduled(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    parser.add_argument("--balances", nargs="?", const="large-batch.json", metavar="FILE",
                        help="print the expected balances of large-batch.json (or of FILE: "
                             + ", ".join(SOURCE_BALANCES) + ") and exit")
    args = parser.parse_args()
    if args.balances:
        if args.balances == "large-batch.json":
            totals = large_batch_balances()
        elif args.balances in SOURCE_BALANCES:
            totals = tally(SOURCE_BALANCES[args.balances])
        else:
            sys.exit(f"no balances for {args.balances}")
        for account, (balance, count) in sorted(totals.items()):
            print(f"{account}={balance} ({count} payments)")
        return
    stale = []
    for name, event in files().items():
        text = render(event) + "\n"
        path = HERE / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
            continue
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(HERE.parent)} ({len(text.encode('utf-8'))} bytes)")
    if stale:
        sys.exit(f"out of date (run python3 events/generate.py): {', '.join(stale)}")


if __name__ == "__main__":
    main()
