#!/usr/bin/env python3
"""AWS Powertools for Lambda (Python)'s idempotency utility on the same
batches as the Rust benchmark: 1,000 new payments over 4 partitions, to 200
accounts or to ONE account, on the same DynamoDB Local, with the same
simulated round trip added to every DynamoDB request; each payment adds its
amount to its account's balance (an UpdateItem ADD) inside a function made
idempotent with `@idempotent_function` (DynamoDBPersistenceLayer), the
records one after another, as a Python Lambda handler processes a Kafka
batch. Warmed up first (a batch not recorded).

    benches/powertools/bench.py --rtt-ms 5 --reps 3 --out bench/powertools.csv
    benches/powertools/bench.py --rtt-ms 5 --reps 3 --scenarios announce-1000x4p \
        --out bench/powertools-announce.csv
    benches/powertools/bench.py --rtt-ms 5 --reps 3 --scenarios announce-kafka-1000x4p \
        --out bench/powertools-announce-kafka.csv

`announce-1000x4p` (1,000 new payments over 4 partitions to 200 accounts,
each announced): the idempotent function also sends one SQS message per
payment after its balance update (`sqs.send_message`, what a team writes
today), to a new queue on the local SQS (moto's server,
AWS_ENDPOINT_URL_SQS), the same round trip added before every SQS request;
SQS requests are counted apart.

`announce-kafka-1000x4p` (MSK in, MSK out): the same, each payment produced
to a Kafka topic of 4 partitions on the local broker (KAFKA_BOOTSTRAP_SERVERS,
infra/kafka-local.sh) with confluent_kafka (librdkafka), keyed by account,
the payment id in the header idempotency-key, `acks=all` and the
idempotent producer, then `flush()`: what a team writes today so that a
record counts as done only once its announcement is acknowledged. One
produce request per record (the flush sends it alone); the broker is
reached without a simulated round trip, as the Rust side reaches it.

Environment: AWS_ENDPOINT_URL_DYNAMODB (DynamoDB Local), LEDGER_TABLE, and
the dummy credentials of infra/local-env.sh. Needs aws-lambda-powertools
(pinned in benches/powertools/requirements.txt) and boto3; infra/bench.sh
installs them into $EXACTLY_ONCE_TOOLS/venv. Prints one line per scenario and writes CSV
rows `scenario,rtt_ms,reps,p50_ms,p99_ms,requests_per_record,sqs_requests_per_record`
(requests_per_record: DynamoDB's; sqs_requests_per_record: the destination's, SQS requests or
Kafka produce requests).
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
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)


def batch(tag, records, partitions, accounts):
    """An MSK event of `records` new payments over `partitions`, to
    `accounts` accounts, as the Rust benchmark's Batch::new_payments /
    hot_payments build them (payment n of partition p, account n % accounts)."""
    event = {"eventSource": "aws:kafka", "records": {}}
    for p in range(partitions):
        part = []
        for i in range(records // partitions):
            n = p * (records // partitions) + i
            payment = {
                "payment_id": f"pt-{tag}-{n}",
                "account_id": f"acc-pt-{tag}-{n % accounts}",
                "amount_cents": 1,
                "currency": "EUR",
            }
            part.append({
                "topic": "payments", "partition": p, "offset": i,
                "value": base64.b64encode(json.dumps(payment).encode()).decode(),
                "headers": [{"idempotency-key": list(payment["payment_id"].encode())}],
            })
        event["records"][f"payments-{p}"] = part
    return event


class Requests:
    """Counts a client's requests (DynamoDB's, or SQS's) and adds the
    round trip before each."""

    def __init__(self, rtt_ms):
        self.rtt = rtt_ms / 1000.0
        self.count = 0

    def attach(self, client):
        client.meta.events.register("before-send", self.before_send)
        return client

    def before_send(self, **_):
        self.count += 1
        if self.rtt:
            time.sleep(self.rtt)


def idempotency_table(dynamodb, name):
    """Powertools' table: key `id`, TTL on `expiration`."""
    dynamodb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.get_waiter("table_exists").wait(TableName=name)


def handler_for(table_name, ledger_table, requests, announce=None):
    """`announce(payment)`: sends one message for the payment from inside the
    idempotent function, after its balance update; None: no message."""
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
        if announce is not None:
            announce(payment)
        return {"paid": payment["payment_id"]}

    def handle(event):
        # One record after another, as a Python handler runs a Kafka batch.
        for records in event["records"].values():
            for record in records:
                apply(payment=json.loads(base64.b64decode(record["value"])))

    return handle


def announcement(payment):
    return json.dumps({
        "payment_id": payment["payment_id"],
        "account_id": payment["account_id"],
        "amount_cents": payment["amount_cents"],
    })


def sqs_announcer(sqs, queue):
    """One `send_message` per payment to queue["url"]."""
    def announce(payment):
        sent = time.monotonic()
        sqs.send_message(
            QueueUrl=queue["url"],
            MessageBody=announcement(payment),
            MessageAttributes={
                "idempotency-key": {"DataType": "String", "StringValue": payment["payment_id"]},
            },
        )
        queue["sending_ms"] = queue.get("sending_ms", 0.0) + (time.monotonic() - sent) * 1000
    return announce


def kafka_announcer(topic, queue):
    """One `produce` + `flush` per payment to `topic` (confluent_kafka)."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP_SERVERS"], "acks": "all",
                         "enable.idempotence": True, "linger.ms": 0})

    def announce(payment):
        sent = time.monotonic()
        producer.produce(topic, key=payment["account_id"], value=announcement(payment),
                         headers=[("idempotency-key", payment["payment_id"])])
        if producer.flush(30) != 0:
            raise RuntimeError("a produce was not acknowledged within 30 s")
        queue["sending_ms"] = queue.get("sending_ms", 0.0) + (time.monotonic() - sent) * 1000
        queue["produced"] = queue.get("produced", 0) + 1
    return announce


def kafka_topic(name, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": os.environ["KAFKA_BOOTSTRAP_SERVERS"]})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)


# scenario: (accounts, where each payment is announced: None, "sqs", "kafka")
SCENARIOS = {
    "new-1000x4p": (200, None),
    "hot-1000x4p": (1, None),
    "announce-1000x4p": (200, "sqs"),
    "announce-kafka-1000x4p": (200, "kafka"),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt-ms", type=float, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--scenarios", default="new-1000x4p,hot-1000x4p",
                        help="comma-separated, of " + ", ".join(SCENARIOS))
    parser.add_argument("--out")
    args = parser.parse_args()
    scenarios = args.scenarios.split(",")
    for scenario in scenarios:
        if scenario not in SCENARIOS:
            parser.error(f"unknown scenario {scenario!r}")
    ledger_table = os.environ["LEDGER_TABLE"]
    table = f"powertools-{uuid.uuid4().hex[:12]}"
    idempotency_table(boto3.client("dynamodb"), table)
    requests = Requests(args.rtt_ms)
    handle = handler_for(table, ledger_table, requests)
    sqs_requests = Requests(args.rtt_ms)
    handlers, queue = {None: handle}, {}
    sqs_admin = boto3.client("sqs") if "announce-1000x4p" in scenarios else None

    def fresh_queue():
        # A new queue a batch: moto's server takes longer per message the
        # more its queue holds (about 12 ms a SendMessage on an empty queue,
        # 160 ms on one of 4,000), which SQS does not.
        if queue:
            sqs_admin.delete_queue(QueueUrl=queue["url"])
        name = f"powertools-announce-{uuid.uuid4().hex[:12]}"
        queue["url"] = sqs_admin.create_queue(QueueName=name)["QueueUrl"]

    if sqs_admin is not None:
        sqs = sqs_requests.attach(boto3.client("sqs"))
        handlers["sqs"] = handler_for(table, ledger_table, requests, sqs_announcer(sqs, queue))
    if "announce-kafka-1000x4p" in scenarios:
        topic = f"powertools-announce-{uuid.uuid4().hex[:12]}"
        kafka_topic(topic, 4)
        handlers["kafka"] = handler_for(table, ledger_table, requests, kafka_announcer(topic, queue))

    rows = []
    warmed = set()
    for scenario in scenarios:
        accounts, announces = SCENARIOS[scenario]
        run = handlers[announces]
        if announces not in warmed:
            if announces == "sqs":
                fresh_queue()
            run(batch(f"warm-{uuid.uuid4().hex[:8]}", args.records, 4, 200))
            warmed.add(announces)
        times, counts, sqs_counts = [], [], []
        for _ in range(args.reps):
            event = batch(uuid.uuid4().hex[:10], args.records, 4, accounts)
            if announces == "sqs":
                fresh_queue()
            requests.count = 0
            sqs_requests.count = 0
            queue["sending_ms"], queue["produced"] = 0.0, 0
            started = time.monotonic()
            run(event)
            times.append((time.monotonic() - started) * 1000)
            counts.append(requests.count)
            # Kafka: one produce request per record (each flushed alone).
            sqs_counts.append(sqs_requests.count if announces == "sqs" else queue["produced"])
            if announces == "sqs":
                print(f"  batch {times[-1]:.0f} ms, of which {queue['sending_ms']:.0f} ms in send_message "
                      f"(its {args.rtt_ms:g} ms simulated round trips included)")
            elif announces == "kafka":
                print(f"  batch {times[-1]:.0f} ms, of which {queue['sending_ms']:.0f} ms in produce + flush")
        if announces == "sqs":
            held = sqs_admin.get_queue_attributes(
                QueueUrl=queue["url"], AttributeNames=["ApproximateNumberOfMessages"])
            print(f"  the last batch's queue holds {held['Attributes']['ApproximateNumberOfMessages']} "
                  f"messages ({args.records} sent)")
        times.sort()
        p50 = statistics.median(times)
        p99 = times[-1]
        per_record = statistics.mean(counts) / args.records
        sqs_per_record = statistics.mean(sqs_counts) / args.records
        out_to = "Kafka produce" if announces == "kafka" else "SQS"
        print(f"powertools {scenario} rtt {args.rtt_ms:g} ms: p50 {p50:.0f} ms, p99 {p99:.0f} ms, "
              f"{per_record:.3f} DynamoDB + {sqs_per_record:.3f} {out_to} requests/record ({args.reps} reps)")
        rows.append(f"{scenario},{args.rtt_ms:g},{args.reps},{p50:.1f},{p99:.1f},{per_record:.4f},"
                    f"{sqs_per_record:.4f}")
    if queue.get("url"):
        sqs_admin.delete_queue(QueueUrl=queue["url"])
    if args.out:
        with open(args.out, "w") as out:
            out.write("scenario,rtt_ms,reps,p50_ms,p99_ms,requests_per_record,sqs_requests_per_record\n")
            out.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
