#!/usr/bin/env python3
"""AWS Powertools for Lambda (Python)'s batch utility with its idempotency
utility, per batch source, on the same records as the Rust benchmark's
`sources` scenarios (benches/throughput/sources.rs): 1,000 new payments to
200 accounts as Kafka (MSK), SQS standard, SQS FIFO, Kinesis and DynamoDB
Streams events, on the same DynamoDB Local, with the same simulated round
trip added to every DynamoDB request (bench.py's Requests).

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

A scenario is 1,000 payments delivered as `--records / batch size` events
of one container, one after another (SQS standard: one batch of 1,000,
which a mapping with a batching window delivers, and 100 batches of 10,
the mapping's default; SQS FIFO: 100 batches of 10, Lambda's maximum for a
FIFO queue; Kinesis and DynamoDB Streams: one shard's batch of 1,000; Kafka:
one batch of 4 partitions of 250). Its time is the sum of its events'.
Warmed up first (a delivery of `--warm-records` payments, not recorded).

    benches/powertools/sources.py --rtt-ms 5 --reps 3 --out bench/powertools-sources.csv
    benches/powertools/sources.py --only fifo      # scenarios whose name contains it

Environment: AWS_ENDPOINT_URL_DYNAMODB (DynamoDB Local), LEDGER_TABLE, and
the dummy credentials of infra/local-env.sh. Prints one line per scenario
and writes CSV rows
`scenario,rtt_ms,reps,p50_ms,p99_ms,requests_per_record,batch_size,batches,records`
(the Rust benchmark compares only rows of 1,000 records at its round trip).
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
]


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


def delivery(source, tag, records, batch_size):
    """The events that deliver payments 0..records of `tag`, `batch_size` a
    batch, in order."""
    events = []
    for first in range(0, records, batch_size):
        payments = [payment(tag, n) for n in range(first, min(first + batch_size, records))]
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

    return {
        "sqs": handler(BatchProcessor(event_type=EventType.SQS), sqs_record),
        "sqs-fifo": handler(SqsFifoPartialProcessor(skip_group_on_error=True), sqs_record),
        "kinesis": handler(BatchProcessor(event_type=EventType.KinesisDataStreams), kinesis_record),
        "dynamodb-streams": handler(BatchProcessor(event_type=EventType.DynamoDBStreams), stream_record),
        "kafka": handler(BatchProcessor(event_type=EventType.Kafka), kafka_record),
    }


def deliver(handle, events):
    """Invokes the handler with each event in turn; the records reported."""
    failures = 0
    for event in events:
        failures += len(handle(event)["batchItemFailures"])
    return failures


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
            # Warm-up: imports, connections, the processor's first batches.
            warm = delivery(source, f"warm-{uuid.uuid4().hex[:8]}", args.warm_records, batch_size)
            assert deliver(handle, warm) == 0, f"{scenario}: warm-up records reported"
            times, counts = [], []
            for _ in range(args.reps):
                events = delivery(source, uuid.uuid4().hex[:10], args.records, batch_size)
                requests.count = 0
                started = time.monotonic()
                reported = deliver(handle, events)
                times.append((time.monotonic() - started) * 1000)
                counts.append(requests.count)
                assert reported == 0, f"{scenario}: {reported} records reported"
            times.sort()
            p50 = statistics.median(times)
            p99 = times[-1]
            per_record = statistics.mean(counts) / args.records
            batches = -(-args.records // batch_size)
            print(f"powertools {scenario} ({batches} x {min(batch_size, args.records)}) rtt {args.rtt_ms:g} ms: p50 {p50:.0f} ms, "
                  f"p99 {p99:.0f} ms, {per_record:.3f} requests/record ({args.reps} reps)", flush=True)
            rows.append(f"{scenario},{args.rtt_ms:g},{args.reps},{p50:.1f},{p99:.1f},{per_record:.4f},"
                        f"{batch_size},{batches},{args.records}")
    finally:
        dynamodb.delete_table(TableName=table)
    if args.out:
        with open(args.out, "w") as out:
            out.write("scenario,rtt_ms,reps,p50_ms,p99_ms,requests_per_record,batch_size,batches,records\n")
            out.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
