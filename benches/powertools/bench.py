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

Environment: AWS_ENDPOINT_URL_DYNAMODB (DynamoDB Local), LEDGER_TABLE, and
the dummy credentials of infra/local-env.sh. Needs aws-lambda-powertools
(pinned in benches/powertools/requirements.txt) and boto3; infra/bench.sh
installs them into $EXACTLY_ONCE_TOOLS/venv. Prints one line per scenario and writes CSV
rows `scenario,rtt_ms,reps,p50_ms,p99_ms,requests_per_record`.
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
    """Counts DynamoDB requests and adds the round trip before each."""

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


def handler_for(table_name, ledger_table, requests):
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

    def handle(event):
        # One record after another, as a Python handler runs a Kafka batch.
        for records in event["records"].values():
            for record in records:
                apply(payment=json.loads(base64.b64decode(record["value"])))

    return handle


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rtt-ms", type=float, default=5)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--out")
    args = parser.parse_args()
    ledger_table = os.environ["LEDGER_TABLE"]
    table = f"powertools-{uuid.uuid4().hex[:12]}"
    idempotency_table(boto3.client("dynamodb"), table)
    requests = Requests(args.rtt_ms)
    handle = handler_for(table, ledger_table, requests)

    handle(batch(f"warm-{uuid.uuid4().hex[:8]}", args.records, 4, 200))
    rows = []
    for scenario, accounts in [("new-1000x4p", 200), ("hot-1000x4p", 1)]:
        times, counts = [], []
        for _ in range(args.reps):
            event = batch(uuid.uuid4().hex[:10], args.records, 4, accounts)
            requests.count = 0
            started = time.monotonic()
            handle(event)
            times.append((time.monotonic() - started) * 1000)
            counts.append(requests.count)
        times.sort()
        p50 = statistics.median(times)
        p99 = times[-1]
        per_record = statistics.mean(counts) / args.records
        print(f"powertools {scenario} rtt {args.rtt_ms:g} ms: p50 {p50:.0f} ms, p99 {p99:.0f} ms, "
              f"{per_record:.3f} requests/record ({args.reps} reps)")
        rows.append(f"{scenario},{args.rtt_ms:g},{args.reps},{p50:.1f},{p99:.1f},{per_record:.4f}")
    if args.out:
        with open(args.out, "w") as out:
            out.write("scenario,rtt_ms,reps,p50_ms,p99_ms,requests_per_record\n")
            out.write("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
