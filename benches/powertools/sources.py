#!/usr/bin/env python3
"""AWS Powertools for Lambda (Python)'s batch utility with its idempotency
utility, per batch source, on the same records as the Rust benchmark's
`sources` scenarios (benches/throughput/sources.rs): 1,000 new payments to
200 accounts as Kafka (MSK), SQS standard, SQS FIFO, Kinesis, DynamoDB
Streams, Amazon MQ for RabbitMQ and Amazon MQ for ActiveMQ events, on the
same DynamoDB Local, with the same simulated round trip added to every
DynamoDB request (bench.py's Requests).

Each source's handler is what Powertools' documentation writes:
`process_partial_response` with `BatchProcessor(event_type=EventType.SQS)`
(`SqsFifoPartialProcessor(skip_group_on_error=True)` for the FIFO queue:
a failed message stops only its group, as the Rust function does),
`EventType.KinesisDataStreams`, `EventType.DynamoDBStreams` or
`EventType.Kafka`; its record handler reads the payment (SQS's JSON body,
Kinesis's base64 data, a DynamoDB Streams INSERT's NewImage, Kafka's
value) and calls a function made idempotent with `@idempotent_function`
(DynamoDBPersistenceLayer, keyed by `payment_id`) that adds the amount to
the account's balance (an UpdateItem ADD on the ledger): bench.py's
function. The processor runs a batch's records one after another.

Amazon MQ (RabbitMQ, ActiveMQ) has no batch processor in Powertools, and no
partial batch response in Lambda: the handler is what Powertools' docs
recommend for a source without a processor, a loop over the messages of the
event (its `RabbitMQEvent` / `ActiveMQEvent` data class, each message's
`json_data`) calling the same `@idempotent_function` per message; a message
that fails raises out of the handler, so the invocation fails and Lambda
retries the batch whole. The `-retry` scenarios measure that retry: each
repetition delivers 1,000 payments whose last is poison (its `amount_cents`
not a number: the function raises, Powertools deletes its INPROGRESS item),
then the identical events again, timed and counted.

A scenario is 1,000 payments delivered as `--records / batch size` events
of one container, one after another (SQS standard: one batch of 1,000,
which a mapping with a batching window delivers, and 100 batches of 10,
the mapping's default; SQS FIFO: 100 batches of 10, Lambda's maximum for a
FIFO queue; Kinesis, DynamoDB Streams and Amazon MQ: one shard's or one
queue's batch of 1,000; Kafka: one batch of 4 partitions of 250). Its time is the sum of its events'.
Warmed up first (a delivery of `--warm-records` payments, not recorded).

    benches/powertools/sources.py --rtt-ms 5 --reps 3 --out bench/powertools-sources.csv
    benches/powertools/sources.py --only fifo      # scenarios whose name contains it

Environment: AWS_ENDPOINT_URL_DYNAMODB (DynamoDB Local), LEDGER_TABLE, and
the dummy credentials of infra/local-env.sh. Prints one line per scenario
and writes CSV rows
`scenario,rtt_ms,reps,p50_ms,p99_ms,requests_per_record,batch_size,batches,records`
(the Rust benchmark compares only rows of 1,000 records at its round trip)
into `--out`: its rows of the same scenario, round trip and records
replaced, the others kept.
"""

import argparse
import base64
import json
import os
import statistics
import sys
import time
import uuid

import boto3
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    SqsFifoPartialProcessor,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.active_mq_event import ActiveMQEvent
from aws_lambda_powertools.utilities.data_classes.rabbit_mq_event import RabbitMQEvent
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecordEventName
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

from bench import Requests, idempotency_table

# Accounts of every generated batch (the Rust benchmark's ACCOUNTS).
ACCOUNTS = 200

# (scenario, source, records per event). The Rust benchmark's
# sources::SCENARIOS: keep the two lists the same.
SCENARIOS = [
    ("kafka-b1000", "kafka", 1000),
    ("sqs-standard-b1000", "sqs", 1000),
    ("sqs-standard-b10", "sqs", 10),
    ("sqs-fifo-b10", "sqs-fifo", 10),
    ("kinesis-b1000", "kinesis", 1000),
    ("dynamodb-streams-b1000", "dynamodb-streams", 1000),
    ("rabbitmq-b1000", "rabbitmq", 1000),
    ("activemq-b1000", "activemq", 1000),
    # The batch of 1,000 whose last message is poison, retried whole.
    ("rabbitmq-b1000-retry", "rabbitmq", 1000),
    ("activemq-b1000-retry", "activemq", 1000),
]

# The broker ARN Amazon MQ events name.
BROKER_ARN = "arn:aws:mq:us-east-1:123456789012:broker:payments:b-9bcfa592-423a-4942-879d-eb284b418fc8"


def payment(tag, n):
    """Payment `n` of a run's `tag`, as the Rust benchmark's batches.rs
    builds it (its account n % 200)."""
    return {
        "payment_id": f"pay-{tag}-{n:05}",
        "account_id": f"acc-{tag}-{n % ACCOUNTS:03}",
        "amount_cents": 100 + n % 900,
        "currency": "EUR",
    }


def body(p):
    """The payment's JSON, as the Rust benchmark's serde_json writes it (no
    spaces, keys sorted): the same bytes on both sides."""
    return json.dumps(p, separators=(",", ":"), sort_keys=True)


def sqs_event(queue, payments):
    """An SQS event of `queue` (FIFO when it ends in `.fifo`: the account is
    the message group, the payment id the deduplication id), as
    tests/support/sources.rs builds it."""
    records = []
    for p in payments:
        attributes = {
            "ApproximateReceiveCount": "1",
            "SentTimestamp": "1764076800000",
            "SenderId": "AIDAIENQZJOLO23YVJ4VO",
            "ApproximateFirstReceiveTimestamp": "1764076800001",
        }
        if queue.endswith(".fifo"):
            attributes["MessageGroupId"] = p["account_id"]
            attributes["MessageDeduplicationId"] = p["payment_id"]
            attributes["SequenceNumber"] = "18849496460467696128"
        records.append({
            "messageId": f"m-{p['payment_id']}",
            "receiptHandle": f"AQEB-{p['payment_id']}",
            "body": body(p),
            "attributes": attributes,
            "messageAttributes": {
                "idempotency-key": {
                    "stringValue": p["payment_id"],
                    "stringListValues": [],
                    "binaryListValues": [],
                    "dataType": "String",
                },
            },
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{queue}",
            "awsRegion": "us-east-1",
        })
    return {"Records": records}


def sequence(n):
    """A sequence number as Kinesis spells them (56 digits)."""
    return f"4959033827149025660855969253836157{n:022}"


def kinesis_event(shard, first, payments):
    """A Kinesis event of one shard, sequence numbers from `first`; the
    account is the partition key."""
    return {"Records": [{
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": p["account_id"],
            "sequenceNumber": sequence(first + i),
            "data": base64.b64encode(body(p).encode()).decode(),
            "approximateArrivalTimestamp": 1764076800.123,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": f"{shard}:{sequence(first + i)}",
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": "arn:aws:iam::123456789012:role/lambda-role",
        "awsRegion": "us-east-1",
        "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/payments",
    } for i, p in enumerate(payments)]}


def inserts_event(first, payments):
    """A DynamoDB Streams event of INSERTs of the `payments` table, sequence
    numbers from `first`; the image is the payment (typed JSON)."""
    return {"Records": [{
        "eventID": f"e-{first + i}",
        "eventName": "INSERT",
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1764076800,
            "Keys": {"payment_id": {"S": p["payment_id"]}},
            "NewImage": {
                "payment_id": {"S": p["payment_id"]},
                "account_id": {"S": p["account_id"]},
                "amount_cents": {"N": str(p["amount_cents"])},
                "currency": {"S": "EUR"},
            },
            "SequenceNumber": str(first + i),
            "SizeBytes": 90,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/payments/stream/2026-11-25T00:00:00.000",
    } for i, p in enumerate(payments)]}


def kafka_event(payments, partitions=4):
    """An MSK event, as batches.rs's Batch::event builds it: an account
    always in partition account % partitions, offsets from 1000."""
    lists = [[] for _ in range(partitions)]
    for p in payments:
        account = int(p["account_id"].rsplit("-", 1)[1])
        lists[account % partitions].append(p)
    records = {}
    for partition, part in enumerate(lists):
        if part:
            records[f"payments-{partition}"] = [{
                "topic": "payments", "partition": partition, "offset": 1000 + i,
                "timestamp": 1735689600000 + 1000 + i, "timestampType": "CREATE_TIME",
                "key": base64.b64encode(p["account_id"].encode()).decode(),
                "value": base64.b64encode(body(p).encode()).decode(),
                "headers": [{"idempotency-key": list(p["payment_id"].encode())}],
            } for i, p in enumerate(part)]
    return {
        "eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/bench/abc-1",
        "bootstrapServers": "b-1.bench.kafka.us-east-1.amazonaws.com:9092",
        "records": records,
    }


def message_id(key):
    """A message id shaped as a UUID, derived from the key as
    source_events.rs derives it (FNV-1a, two seeds)."""
    def fnv(seed):
        h = seed
        for byte in key.encode():
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
        return h
    high, low = fnv(0xCBF29CE484222325), fnv(0x6C62272E07BB0142)
    return (f"{high >> 32:08x}-{(high >> 16) & 0xFFFF:04x}-{high & 0xFFFF:04x}-"
            f"{low >> 48:04x}-{low & 0xFFFFFFFFFFFF:012x}")


def rabbitmq_event(payments):
    """An Amazon MQ for RabbitMQ event of the queue `payments` of the
    virtual host `/`, as source_events.rs builds it: the key as the AMQP
    string header `idempotency-key` ({"bytes": [...]})."""
    messages = []
    for p in payments:
        data = body(p).encode()
        messages.append({
            "basicProperties": {
                "contentType": "application/json",
                "contentEncoding": None,
                "headers": {
                    "idempotency-key": {"bytes": list(p["payment_id"].encode())},
                    "JMSXGroupID": {"bytes": list(p.get("account_id", "-").encode())},
                    "attempt": 1,
                },
                "deliveryMode": 2,
                "priority": 34,
                "correlationId": None,
                "replyTo": None,
                "expiration": "60000",
                "messageId": message_id(p["payment_id"]),
                "timestamp": "Nov 25, 2026, 12:00:00 AM",
                "type": None,
                "userId": "AIDACKCEVSQ6C2EXAMPLE",
                "appId": None,
                "clusterId": None,
                "bodySize": len(data),
            },
            "redelivered": False,
            "data": base64.b64encode(data).decode(),
        })
    return {"eventSource": "aws:rmq", "eventSourceArn": BROKER_ARN,
            "rmqMessagesByQueue": {"payments::/": messages}}


def activemq_event(payments):
    """An Amazon MQ for ActiveMQ event of the queue `payments`, as
    source_events.rs builds it: the key as the property `idempotency-key`."""
    return {"eventSource": "aws:mq", "eventSourceArn": BROKER_ARN, "messages": [{
        "messageID": f"ID:b-payments-1.mq.us-east-1.amazonaws.com-{message_id(p['payment_id'])}",
        "messageType": "jms/text-message",
        "deliveryMode": 1,
        "replyTo": None,
        "type": None,
        "expiration": "60000",
        "priority": 1,
        "correlationId": "myJMSCoID",
        "redelivered": False,
        "destination": {"physicalName": "payments"},
        "data": base64.b64encode(body(p).encode()).decode(),
        "timestamp": 1764028800000,
        "brokerInTime": 1764028800000,
        "brokerOutTime": 1764028800001,
        "properties": {"idempotency-key": p["payment_id"], "JMSXGroupID": p.get("account_id", "-")},
    } for p in payments]}


def delivery(source, tag, records, batch_size, poisoned=False):
    """The events that deliver payments 0..records of `tag`, `batch_size` a
    batch, in order; `poisoned`: the last payment is poison (its
    payment_id kept, its amount_cents not a number), as source_events.rs's
    poisoned_delivery."""
    events = []
    for first in range(0, records, batch_size):
        payments = [payment(tag, n) for n in range(first, min(first + batch_size, records))]
        if poisoned and first + batch_size >= records:
            payments[-1] = {"payment_id": payments[-1]["payment_id"], "amount_cents": "not a number"}
        if source == "sqs":
            events.append(sqs_event("payments", payments))
        elif source == "sqs-fifo":
            events.append(sqs_event("payments.fifo", payments))
        elif source == "kinesis":
            events.append(kinesis_event("shardId-000000000000", first, payments))
        elif source == "dynamodb-streams":
            events.append(inserts_event(first, payments))
        elif source == "kafka":
            events.append(kafka_event(payments))
        elif source == "rabbitmq":
            events.append(rabbitmq_event(payments))
        elif source == "activemq":
            events.append(activemq_event(payments))
        else:
            raise ValueError(source)
    return events


def handlers(table_name, ledger_table, requests):
    """Per source, a Lambda handler: Powertools' batch processor over the
    idempotent payment function."""
    client = requests.attach(boto3.client("dynamodb"))
    persistence = DynamoDBPersistenceLayer(table_name=table_name, boto3_client=client)
    config = IdempotencyConfig(event_key_jmespath="payment_id")

    @idempotent_function(data_keyword_argument="payment", persistence_store=persistence, config=config)
    def apply(payment):
        # As the demo ledger: an amount that is not a number fails.
        int(payment["amount_cents"])
        client.update_item(
            TableName=ledger_table,
            Key={"account_id": {"S": payment["account_id"]}},
            UpdateExpression="ADD balance_cents :amount, payment_count :one",
            ExpressionAttributeValues={
                ":amount": {"N": str(payment["amount_cents"])},
                ":one": {"N": "1"},
            },
        )
        return {"paid": payment["payment_id"]}

    def sqs_record(record):
        return apply(payment=json.loads(record.body))

    def kinesis_record(record):
        return apply(payment=record.kinesis.data_as_json())

    def stream_record(record):
        # As the demo ledger: only an INSERT is a payment.
        if record.event_name != DynamoDBRecordEventName.INSERT:
            return None
        image = record.dynamodb.new_image
        # Numbers come as Decimal: the payment as its producer wrote it.
        return apply(payment={
            "payment_id": image["payment_id"],
            "account_id": image["account_id"],
            "amount_cents": int(image["amount_cents"]),
            "currency": image["currency"],
        })

    def kafka_record(record):
        return apply(payment=record.json_value)

    def handler(processor, record_handler):
        def handle(event):
            return process_partial_response(event=event, record_handler=record_handler, processor=processor)
        return handle

    def mq_handler(messages_of):
        # No batch processor for Amazon MQ: a loop over the messages, each
        # through the idempotent function; a failure raises out of the
        # handler (the invocation fails, Lambda retries the batch whole).
        def handle(event):
            for message in messages_of(event):
                apply(payment=message.json_data)
            return {"batchItemFailures": []}
        return handle

    def rabbitmq_messages(event):
        for messages in RabbitMQEvent(event).rmq_messages_by_queue.values():
            yield from messages

    return {
        "rabbitmq": mq_handler(rabbitmq_messages),
        "activemq": mq_handler(lambda event: ActiveMQEvent(event).messages),
        "sqs": handler(BatchProcessor(event_type=EventType.SQS), sqs_record),
        "sqs-fifo": handler(SqsFifoPartialProcessor(skip_group_on_error=True), sqs_record),
        "kinesis": handler(BatchProcessor(event_type=EventType.KinesisDataStreams), kinesis_record),
        "dynamodb-streams": handler(BatchProcessor(event_type=EventType.DynamoDBStreams), stream_record),
        "kafka": handler(BatchProcessor(event_type=EventType.Kafka), kafka_record),
    }


def deliver(handle, events):
    """Invokes the handler with each event in turn; the records reported
    (an invocation that raised: one)."""
    failures = 0
    for event in events:
        try:
            failures += len(handle(event)["batchItemFailures"])
        except Exception:  # an Amazon MQ handler's failed invocation
            failures += 1
    return failures


def merged(path, header, rows):
    """`rows` merged into the CSV at `path`: its rows of the same scenario,
    round trip and records replaced in place, the others kept."""
    def key(row):
        fields = row.split(",")
        return (fields[0], fields[1], fields[8] if len(fields) > 8 else "")
    new = {key(row): row for row in rows}
    out = []
    try:
        with open(path) as existing:
            for line in existing.read().splitlines()[1:]:
                if line:
                    out.append(new.pop(key(line), line))
    except FileNotFoundError:
        pass
    out.extend(row for row in rows if key(row) in new)
    return header + "\n" + "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt-ms", type=float, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--warm-records", type=int, default=100)
    parser.add_argument("--only", default="", help="comma-separated substrings of scenario names")
    parser.add_argument("--out")
    args = parser.parse_args()
    only = [part for part in args.only.split(",") if part]
    ledger_table = os.environ["LEDGER_TABLE"]
    dynamodb = boto3.client("dynamodb")
    table = f"powertools-{uuid.uuid4().hex[:12]}"
    idempotency_table(dynamodb, table)
    requests = Requests(args.rtt_ms)
    by_source = handlers(table, ledger_table, requests)

    rows = []
    try:
        for scenario, source, batch_size in SCENARIOS:
            if only and not any(part in scenario for part in only):
                continue
            handle = by_source[source]
            retry = scenario.endswith("-retry")
            # Warm-up: imports, connections, the processor's first batches.
            warm = delivery(source, f"warm-{uuid.uuid4().hex[:8]}", args.warm_records, batch_size)
            assert deliver(handle, warm) == 0, f"{scenario}: warm-up records reported"
            times, counts = [], []
            failed_times = []
            for _ in range(args.reps):
                tag = uuid.uuid4().hex[:10]
                events = delivery(source, tag, args.records, batch_size, poisoned=retry)
                if retry:
                    # The failed delivery (999 payments done, the poison
                    # raising), not counted; then the identical batch again.
                    started = time.monotonic()
                    reported = deliver(handle, events)
                    failed_times.append((time.monotonic() - started) * 1000)
                    assert reported == 1, f"{scenario}: {reported} invocations failed"
                    events = delivery(source, tag, args.records, batch_size, poisoned=True)
                requests.count = 0
                started = time.monotonic()
                reported = deliver(handle, events)
                times.append((time.monotonic() - started) * 1000)
                counts.append(requests.count)
                assert reported == int(retry), f"{scenario}: {reported} records reported"
            times.sort()
            p50 = statistics.median(times)
            p99 = times[-1]
            per_record = statistics.mean(counts) / args.records
            batches = -(-args.records // batch_size)
            print(f"powertools {scenario} ({batches} x {min(batch_size, args.records)}) rtt {args.rtt_ms:g} ms: p50 {p50:.0f} ms, "
                  f"p99 {p99:.0f} ms, {per_record:.3f} requests/record ({args.reps} reps)"
                  + (f"; the failed deliveries before the retries: p50 {statistics.median(failed_times):.0f} ms"
                     if failed_times else ""), flush=True)
            rows.append(f"{scenario},{args.rtt_ms:g},{args.reps},{p50:.1f},{p99:.1f},{per_record:.4f},"
                        f"{batch_size},{batches},{args.records}")
    finally:
        dynamodb.delete_table(TableName=table)
    if args.out:
        header = "scenario,rtt_ms,reps,p50_ms,p99_ms,requests_per_record,batch_size,batches,records"
        text = merged(args.out, header, rows)
        with open(args.out, "w") as out:
            out.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
