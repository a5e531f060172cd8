#!/usr/bin/env python3
"""Destinations for your handler's messages on moto's server (infra/sqs-local.sh:
SQS, SNS and EventBridge on one port), and what reached them, read back.

    infra/local_destinations.py create sqs NAME          # prints the queue's URL
    infra/local_destinations.py create sns NAME          # prints the topic's ARN
    infra/local_destinations.py create eventbridge NAME  # prints the bus's ARN
    infra/local_destinations.py read KIND NAME           # one JSON line per message

`create` prints what the function's variable takes (a queue's URL, a topic's
or a bus's ARN: what `Completion::emit` sends to). A topic or a bus is read
through a queue of its own, NAME-KIND-tap, made beside it: subscribed to the
topic with raw message delivery, or the target of a rule taking every event
of the bus. `read` drains that queue (or the queue NAME itself) and prints each
message as `{"id": ..., "body": ...}`: `id` is the message's stable id (the
`idempotency-key` message attribute on SQS and SNS, the detail's
`idempotency-key` on EventBridge), `body` the message as sent (on
EventBridge, the event). Endpoints: AWS_ENDPOINT_URL_SQS, and
AWS_ENDPOINT_URL_SNS and AWS_ENDPOINT_URL_EVENTBRIDGE (default: the SQS one).
"""
import argparse
import json
import os
import sys

import boto3

ID = "idempotency-key"


def client(service):
    sqs = os.environ.get("AWS_ENDPOINT_URL_SQS")
    if not sqs:
        sys.exit("local_destinations: AWS_ENDPOINT_URL_SQS is not set (eval \"$(infra/sqs-local.sh start)\")")
    variable = {"sqs": "AWS_ENDPOINT_URL_SQS", "sns": "AWS_ENDPOINT_URL_SNS", "events": "AWS_ENDPOINT_URL_EVENTBRIDGE"}
    return boto3.client(service, endpoint_url=os.environ.get(variable[service], sqs))


def queue(name):
    """The queue `name` (made if new): its URL and ARN."""
    sqs = client("sqs")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def create(kind, name):
    if kind == "sqs":
        return queue(name)[0]
    _, tap = queue(f"{name}-{kind}-tap")
    if kind == "sns":
        sns = client("sns")
        topic = sns.create_topic(Name=name)["TopicArn"]
        sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=tap,
                      Attributes={"RawMessageDelivery": "true"})
        return topic
    events = client("events")
    bus = events.create_event_bus(Name=name)["EventBusArn"]
    account = bus.split(":")[4]
    events.put_rule(Name=f"{name}-tap", EventBusName=name, EventPattern=json.dumps({"account": [account]}))
    events.put_targets(Rule=f"{name}-tap", EventBusName=name, Targets=[{"Id": "tap", "Arn": tap}])
    return bus


def read(kind, name):
    sqs = client("sqs")
    url = sqs.get_queue_url(QueueName=name if kind == "sqs" else f"{name}-{kind}-tap")["QueueUrl"]
    while True:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                       MessageAttributeNames=["All"]).get("Messages", [])
        if not messages:
            return
        for message in messages:
            body = message["Body"]
            if kind == "eventbridge":
                body = json.loads(body)
                message_id = body.get("detail", {}).get(ID)
            else:
                message_id = message.get("MessageAttributes", {}).get(ID, {}).get("StringValue")
            print(json.dumps({"id": message_id, "body": body}))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for command in ("create", "read"):
        sub = commands.add_parser(command)
        sub.add_argument("kind", choices=["sqs", "sns", "eventbridge"])
        sub.add_argument("name")
    args = parser.parse_args()
    if args.command == "create":
        print(create(args.kind, args.name))
    else:
        read(args.kind, args.name)


if __name__ == "__main__":
    main()
