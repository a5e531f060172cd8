#!/usr/bin/env python3
"""A local stand-in for Lambda's event source mappings of SQS (standard and
FIFO), Kinesis, DynamoDB Streams, Amazon MQ (RabbitMQ, ActiveMQ) and Kafka
(Amazon MSK, self-managed Kafka): it polls a real local queue, stream or
broker (moto's server for SQS and Kinesis, DynamoDB Local's own stream, a
RabbitMQ node, an ActiveMQ broker and a Kafka-protocol broker of
infra/rabbitmq-local.sh, infra/activemq-local.sh and infra/kafka-local.sh),
builds the event exactly as Lambda does, hands it to the function's real
binary through a Lambda Runtime API stand-in (infra/runtime_api.py's
`Function`, kept warm between invocations), and acts on the response as the
mapping does. Python 3 with boto3, kafka-python, pika and stomp.py
(infra/tools.sh installs them into $EXACTLY_ONCE_TOOLS/venv).

    infra/poller.py create  SOURCE NAME [--shards N] [--partitions N] [--key ATTRIBUTE]
                            [--max-redeliveries N]
    infra/poller.py produce SOURCE NAME (--messages JSON|-|FILE | --from-event FILE)
    infra/poller.py read    msk|self-managed-kafka TOPIC [--timeout S]
    infra/poller.py poll    SOURCE NAME (--bootstrap target/debug/msk-handler | --crate DIR)
                            [--batch-size N] [--batching-window S] [--max-batches N]
                            [--redelivery-delay S] [--timeout S] [--checkpoint FILE]
                            [--transcript FILE] [--events FILE] [--function-log FILE]
                            [--consumer-group GROUP] [--env NAME=VALUE ...]
                            [--kill-chance P [--kill-within S] [--kill-seed N]]
                            [--rebalance-timeout S] [--maximum-retry-attempts N]
                            [--bisect-batch-on-function-error] [--maximum-record-age S]
                            [--on-failure kafka://TOPIC]

SOURCE is sqs, sqs-fifo, kinesis, dynamodb-streams, rabbitmq, activemq,
msk or self-managed-kafka; NAME the queue (a FIFO queue's ends in .fifo),
the stream, the table whose stream is read, or the topic. Endpoints come from AWS_ENDPOINT_URL_SQS,
AWS_ENDPOINT_URL_KINESIS and AWS_ENDPOINT_URL_DYNAMODB
(AWS_ENDPOINT_URL_DYNAMODB_STREAMS if set), RABBITMQ_URL
(amqp://USER:PASSWORD@127.0.0.1:PORT/VHOST) and ACTIVEMQ_STOMP_URL
(stomp://127.0.0.1:PORT) and KAFKA_BOOTSTRAP_SERVERS (127.0.0.1:PORT); the
poller refuses to run without one, and the brokers' must be loopback
addresses, so it never reaches real AWS or a real broker.

What `poll` does, per source (as the event source mapping does):

- SQS: ReceiveMessage (all system and message attributes) up to
  --batch-size messages, the Lambda SQS event of them; the messages the
  response does not report are deleted, the reported ones are left in
  flight and come back after --redelivery-delay seconds; an invocation
  error (or a response that names a message not in the batch) counts as
  all reported. FIFO: the group order SQS keeps. moto hands a group's
  messages out again out of order when several of them come back at the
  same moment (see `Sqs.leave`): the poller makes the first of them
  visible only after a receive has seen the others (on SQS itself that
  changes nothing: a group with a message in flight is held either way).
  Stopped with one still held (--max-batches), it leaves it to the next
  run in --checkpoint, or else makes it visible 2 seconds after the
  others. The summary counts "out_of_order" the groups it saw handed out
  out of order all the same.
- Kinesis, DynamoDB Streams: per shard a checkpoint (kept in --checkpoint
  across runs, as a FIFO queue's held messages are); GetRecords from it, up to --batch-size records of that
  shard, the Lambda event of them; the checkpoint moves to the lowest
  reported sequence number (that record and everything after it come
  again, after --redelivery-delay) or past the batch when none is
  reported; an invocation error retries the batch.
- Amazon MQ (RabbitMQ, ActiveMQ): one consumer with manual
  acknowledgement and a prefetch of --batch-size; up to --batch-size
  messages gathered for --batching-window seconds from the first, Lambda's
  event of them (see `RabbitMq.message`, `ActiveMq.message`). There is no
  partial batch response: when the function answers, the whole batch is
  acknowledged (failures a response lists are ignored, as Lambda ignores
  them; the summary counts them "reported", as it counts every message of
  a failed invocation); after an invocation error every message of the
  batch goes back to the broker, which counts the redelivery and, past its
  limit, moves the message to its dead-letter queue itself:
  - RabbitMQ: `create` declares NAME a quorum queue with x-delivery-limit
    (--max-redeliveries, 6 by default, ActiveMQ's and so Lambda's number)
    and dead-letters into NAME.dlq (through the default exchange); `poll`
    waits --redelivery-delay, then basic.nack(requeue) the batch: the queue
    adds x-delivery-count to the headers, and a message returned more than
    the limit times (delivered 7 times) is dead-lettered by the broker
    (x-death reason delivery_limit).
  - ActiveMQ: a STOMP NACK is ActiveMQ 5's poison acknowledgement; the
    broker of infra/activemq-local.sh has the redeliveryPlugin, which
    redelivers it 1 s later (its own delay: --redelivery-delay does not
    apply) up to 6 times (maximumRedeliveries, the limit Lambda's consumer
    uses), then moves it to DLQ.NAME. A non-persistent message is dropped
    there instead (ActiveMQ's default, processNonPersistent false): produce
    sends persistent messages unless told otherwise. The redelivered copy
    goes to the back of the queue (Lambda's JMS consumer redelivers a
    rolled-back batch before anything else). STOMP does not carry the
    message's broker times: brokerInTime is its timestamp, brokerOutTime
    the moment the poller received it.
- Kafka (MSK, self-managed): see `Kafka`: one consumer group per mapping,
  batches of one or more partitions, offsets committed after the
  function answered (at the lowest reported offset of a partition), an
  invocation error retrying the batch, pollers of one group sharing the
  partitions (a rebalance when one joins or leaves); bounded retries,
  bisection, a maximum record age and an on-failure destination (a Kafka
  topic) as the mapping has them in provisioned mode. The
  summary adds "committed" (each partition's committed offset),
  "consumer_group", "rebalances", "commits_refused", "commits_failed" and
  "discarded".

It stops when drained (SQS: no message visible, in flight or delayed;
streams: every shard read to its end, nothing to retry; RabbitMQ: nothing
ready in the queue, nothing held; ActiveMQ: nothing in the queue (a
browser's count), nothing held, every message it sent back seen again or
in the dead-letter queue; Kafka: the group's committed offset of every
partition at the partition's end, nothing waiting to come again), after --max-batches batches, or after --timeout
seconds (exit 1). It prints one line per batch on stderr and, at the end,
a JSON summary on stdout: {"source", "batches", "records", "reported",
"invocation_errors", "error_types" (errorType: count), "invalid_responses",
"drained", "kills", "seconds", ...}; "kills" counts the function's processes
--kill-chance SIGKILLed mid-invocation, or before its answer reaches the
mapping when it answered first (each an invocation error,
"Runtime.Gone", the batch retried as the source retries a failed one); Amazon MQ adds "redelivered" (deliveries
flagged redelivered), "left" (messages still in the queue) and
"dead_lettered" (messages in its dead-letter queue, read back from the
broker). --transcript writes one JSON line per batch: the records
delivered (id and payload; Amazon MQ: the message id, a RabbitMQ message
without one named by its delivery tag, and whether it was redelivered), the
identifiers reported, the error. A function that cannot start (a setting its
build cannot serve) fails its invocation with "Runtime.Gone", whose
errorMessage holds its init error ("init_error") or exit code ("exited")
and "last_words" (its last lines of output), all printed under the batch's
line.
"""

import argparse
import base64
import datetime
import decimal
import ipaddress
import json
import os
import pathlib
import queue
import random
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
from tools_home import VENV_PYTHON  # noqa: E402

try:
    import boto3
    import kafka
    import pika
    import stomp
    from boto3.dynamodb.types import TypeSerializer
except ImportError:
    # Started by another python3: again with the venv's (infra/tools.sh).
    if VENV_PYTHON.exists() and pathlib.Path(sys.executable) != VENV_PYTHON:
        os.execv(VENV_PYTHON, [str(VENV_PYTHON), *sys.argv])
    sys.exit("poller: boto3, kafka-python, pika or stomp.py not found; run infra/tools.sh")

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import runtime_api  # noqa: E402  (infra/runtime_api.py, beside this file)

SOURCES = ("sqs", "sqs-fifo", "kinesis", "dynamodb-streams", "rabbitmq", "activemq", "msk",
           "self-managed-kafka")
KAFKA = ("msk", "self-managed-kafka")
ACCOUNT = "123456789012"
INVOKE_IDENTITY = f"arn:aws:iam::{ACCOUNT}:role/lambda-role"
# How long a received SQS message stays in flight while the function runs
# (the queue's visibility timeout, which Lambda asks to be 6 times the
# function's timeout); reported messages then get --redelivery-delay.
IN_FLIGHT_SECONDS = 60
POLL_INTERVAL = 0.1
# SQS FIFO: seconds between the rest of a group and its held first message
# becoming visible, when the poller stops with one held (see Sqs.finish).
HEAD_GAP = 2


def region():
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def client(service):
    """A boto3 client of a local endpoint; refuses to run without one."""
    names = {
        "sqs": ["AWS_ENDPOINT_URL_SQS"],
        "kinesis": ["AWS_ENDPOINT_URL_KINESIS"],
        "dynamodb": ["AWS_ENDPOINT_URL_DYNAMODB"],
        "dynamodbstreams": ["AWS_ENDPOINT_URL_DYNAMODB_STREAMS", "AWS_ENDPOINT_URL_DYNAMODB"],
    }[service]
    endpoint = next((os.environ[n] for n in names if os.environ.get(n)), None)
    if not endpoint:
        sys.exit(f"poller: {' or '.join(names)} is not set (a local server's endpoint; "
                 "infra/local-stack.sh exports them)")
    return boto3.client(service, endpoint_url=endpoint, region_name=region())


def jsonable(value):
    """boto3's answer as JSON: bytes in base64, datetimes as epoch seconds."""
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    return value


def seconds_number(value):
    """Epoch seconds as Lambda writes them: a whole number when whole."""
    if isinstance(value, datetime.datetime):
        value = value.timestamp()
    return int(value) if float(value).is_integer() else round(float(value), 3)


# ---------------------------------------------------------------- Amazon MQ

# ActiveMQ's redelivery limit: the broker's (infra/activemq-local.sh), the
# default of ActiveMQ's consumers and so Lambda's. RabbitMQ's queues get the
# same by default (x-delivery-limit).
MAX_REDELIVERIES = 6


def is_loopback(host):
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def broker_endpoint(variable):
    """A local broker's URL from `variable`; refuses to run without one, or
    with one whose host is not a loopback address."""
    url = os.environ.get(variable)
    if not url:
        sys.exit(f"poller: {variable} is not set (a local broker's URL; infra/local-stack.sh exports it)")
    host = urllib.parse.urlsplit(url).hostname or ""
    if not is_loopback(host):
        sys.exit(f"poller: {variable} names {host or 'no host'}, not a loopback address")
    return url


def broker_arn(kind, url):
    """An Amazon MQ broker's ARN for the local broker at `url`."""
    broker_id = uuid.uuid5(uuid.NAMESPACE_URL, url)
    return f"arn:aws:mq:{region()}:{ACCOUNT}:broker:local-{kind}:b-{broker_id}"


def java_date(seconds):
    """Epoch seconds as Lambda's RabbitMQ event writes a date (Java's
    medium format, UTC): "Jan 1, 1970, 12:33:41 AM"."""
    t = datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc)
    return f"{t:%b} {t.day}, {t.year}, {t.hour % 12 or 12}:{t:%M:%S} {'AM' if t.hour < 12 else 'PM'}"


def java_date_seconds(text):
    """The epoch seconds of a `java_date`."""
    t = datetime.datetime.strptime(text, "%b %d, %Y, %I:%M:%S %p")
    return int(t.replace(tzinfo=datetime.timezone.utc).timestamp())


def event_header(value):
    """An AMQP header value as Lambda's RabbitMQ event shows it: a string
    as {"bytes": [its UTF-8 bytes, 0 to 255]} (pika gives bytes for a
    string that is not UTF-8 and for a byte array: {"bytes"} too), numbers
    and booleans as they are, a date as `java_date`, tables and arrays
    value by value."""
    if isinstance(value, str):
        return {"bytes": list(value.encode("utf-8"))}
    if isinstance(value, bytes):
        return {"bytes": list(value)}
    if isinstance(value, datetime.datetime):
        return java_date(value.timestamp())
    if isinstance(value, dict):
        return {name: event_header(v) for name, v in value.items()}
    if isinstance(value, list):
        return [event_header(v) for v in value]
    return jsonable(value)


def amqp_header(value):
    """A header of --messages (or of an event) as pika sends it:
    {"bytes": [...]} an AMQP string (bytes when not UTF-8; negative bytes
    read as Java's), a float a decimal (pika sends no floats)."""
    if isinstance(value, dict) and set(value) == {"bytes"}:
        data = bytes(b % 256 for b in value["bytes"])
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return data
    if isinstance(value, dict):
        return {name: amqp_header(v) for name, v in value.items()}
    if isinstance(value, list):
        return [amqp_header(v) for v in value]
    if isinstance(value, float):
        return decimal.Decimal(str(value))
    return value


# A RabbitMQ message's properties: the event's name, --messages' (pika's).
# Not sent again from an event: userId (the broker refuses a user id other
# than the connection's), clusterId (reserved in AMQP 0-9-1), bodySize (the
# body's), timestamp (a date: converted apart).
RABBITMQ_PROPERTIES = [
    ("contentType", "content_type"), ("contentEncoding", "content_encoding"),
    ("deliveryMode", "delivery_mode"), ("priority", "priority"), ("correlationId", "correlation_id"),
    ("replyTo", "reply_to"), ("expiration", "expiration"), ("messageId", "message_id"),
    ("type", "type"), ("appId", "app_id"),
]

# Headers of an ActiveMQ STOMP MESSAGE frame that are not the message's
# properties: STOMP's own and JMS's, and those the redeliveryPlugin adds to
# the copy it redelivers (Lambda's consumer redelivers on its side: its
# events have none of them).
STOMP_HEADERS = {
    "destination", "message-id", "subscription", "ack", "content-length", "content-type",
    "expires", "priority", "timestamp", "redelivered", "persistent", "correlation-id",
    "reply-to", "type", "JMSXUserID", "original-destination", "originalExpiration",
    "redeliveryDelay", "scheduledJobId",
}


def body_of(message):
    """The body of a message of --messages: "body" (text) or "data_base64"."""
    if "data_base64" in message:
        return base64.b64decode(message["data_base64"])
    return message["body"].encode("utf-8")


def rabbitmq_connection():
    return pika.BlockingConnection(pika.URLParameters(broker_endpoint("RABBITMQ_URL")))


class Stomp(stomp.ConnectionListener):
    """A STOMP connection to the local ActiveMQ broker: the frames of each
    subscription in a queue of their own, with the time they came."""

    def __init__(self):
        url = broker_endpoint("ACTIVEMQ_STOMP_URL")
        self.arn = broker_arn("activemq", url)
        address = urllib.parse.urlsplit(url)
        self.connection = stomp.Connection([(address.hostname, address.port)], auto_content_length=False,
                                           auto_decode=False, heartbeats=(0, 0))
        self.frames = {}
        self.connection.set_listener("poller", self)
        self.connection.connect(wait=True)

    def on_message(self, frame):
        self.frames[frame.headers["subscription"]].put((frame, int(time.time() * 1000)))

    def on_error(self, frame):
        print(f"poller: ActiveMQ: {frame.headers.get('message')}: {frame.body!r}", file=sys.stderr, flush=True)

    def subscribe(self, name, subscription, ack="auto", **headers):
        self.frames[subscription] = queue.Queue()
        self.connection.subscribe(f"/queue/{name}", id=subscription, ack=ack, headers=headers)

    def browse(self, name):
        """The ids of the messages in queue `name` (a queue browser: nothing
        is consumed)."""
        self.subscribe(name, "browser", browser="true")
        ids = []
        while True:
            frame, _ = self.frames["browser"].get(timeout=30)
            if frame.headers.get("browser") == "end":
                break
            ids.append(frame.headers["message-id"])
        self.connection.unsubscribe("browser")
        return ids

    def close(self):
        # DISCONNECT waits for its receipt: the broker has acted on every
        # frame sent before it.
        self.connection.disconnect()


# ---------------------------------------------------------------- Kafka

# What one event of Lambda's Kafka mappings holds at most (6 MB).
KAFKA_MAX_EVENT_BYTES = 6 * 1024 * 1024


def kafka_servers():
    """KAFKA_BOOTSTRAP_SERVERS (host:port[,host:port]); refuses to run
    without it, or with a host that is not a loopback address."""
    servers = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not servers:
        sys.exit("poller: KAFKA_BOOTSTRAP_SERVERS is not set (a local broker's host:port; "
                 "infra/kafka-local.sh exports it)")
    for server in servers.split(","):
        host = server.rsplit(":", 1)[0].strip("[]")
        if not is_loopback(host):
            sys.exit(f"poller: KAFKA_BOOTSTRAP_SERVERS names {host or 'no host'}, not a loopback address")
    return servers


def kafka_cluster_arn(servers):
    """An Amazon MSK cluster's ARN for the local broker at `servers`."""
    return f"arn:aws:kafka:{region()}:{ACCOUNT}:cluster/local/{uuid.uuid5(uuid.NAMESPACE_URL, servers)}"


def signed_bytes(data):
    """Bytes as Java's signed bytes: how Lambda's Kafka event writes a header value."""
    return [b - 256 if b >= 128 else b for b in data]


def kafka_bytes(message, name):
    """`name` of a message of --messages as bytes: NAME (text) or NAME_base64; None when neither."""
    if message.get(f"{name}_base64") is not None:
        return base64.b64decode(message[f"{name}_base64"])
    value = message.get(name)
    return None if value is None else value.encode("utf-8")


def kafka_header(value):
    """A header of --messages: text, or {"bytes": [...]} (signed or not)."""
    if isinstance(value, dict):
        return bytes(b % 256 for b in value["bytes"])
    return value.encode("utf-8")


# ---------------------------------------------------------------- read


def text_or_bytes(data):
    """Bytes as text when they are UTF-8, else {"bytes": [...]}; None stays None."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"bytes": list(data)}


# How long a read waits for more once every partition is at its end: tansu
# 0.6.0's ListOffsets can leave out records produced after a batch of several
# (a Kafka destination's), so an end it gives is a lower bound only.
READ_QUIET_SECONDS = 1.0


def read(args):
    """Every record of a Kafka topic from its start to its end, read outside
    any consumer group (nothing committed): what reached the next hop. The
    end is the broker's (ListOffsets) and then nothing more for
    READ_QUIET_SECONDS."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=kafka_servers(), group_id=None,
                                   enable_auto_commit=False, client_id="poller-read")
    partitions = [kafka.TopicPartition(args.name, p)
                  for p in sorted(consumer.partitions_for_topic(args.name) or [])]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    ends = consumer.end_offsets(partitions)
    records = []
    deadline = time.monotonic() + args.timeout
    last_record = time.monotonic()
    while time.monotonic() < deadline and (
            any(consumer.position(tp) < ends[tp] for tp in partitions)
            or time.monotonic() - last_record < READ_QUIET_SECONDS):
        for batch in consumer.poll(timeout_ms=200).values():
            last_record = time.monotonic()
            records.extend({
                "partition": r.partition, "offset": r.offset, "key": text_or_bytes(r.key),
                "value": text_or_bytes(r.value),
                "headers": [[name, text_or_bytes(value)] for name, value in r.headers],
            } for r in batch)
    complete = all(consumer.position(tp) >= ends[tp] for tp in partitions)
    consumer.close()
    print(json.dumps({"records": records, "ends": {str(tp.partition): ends[tp] for tp in partitions},
                      "complete": complete}))
    return 0 if complete else 1


# ---------------------------------------------------------------- create


def create(args):
    if args.source in ("sqs", "sqs-fifo"):
        sqs = client("sqs")
        attributes = {"VisibilityTimeout": str(IN_FLIGHT_SECONDS)}
        if args.source == "sqs-fifo":
            if not args.name.endswith(".fifo"):
                sys.exit("poller: a FIFO queue's name ends in .fifo")
            attributes["FifoQueue"] = "true"
        url = sqs.create_queue(QueueName=args.name, Attributes=attributes)["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        out = {"queue_url": url, "arn": arn}
    elif args.source == "kinesis":
        kinesis = client("kinesis")
        kinesis.create_stream(StreamName=args.name, ShardCount=args.shards)
        kinesis.get_waiter("stream_exists").wait(StreamName=args.name, WaiterConfig={"Delay": 0.2})
        description = kinesis.describe_stream(StreamName=args.name)["StreamDescription"]
        out = {"arn": description["StreamARN"], "shards": [s["ShardId"] for s in description["Shards"]]}
    elif args.source in KAFKA:
        servers = kafka_servers()
        admin = kafka.KafkaAdminClient(bootstrap_servers=servers, client_id="poller")
        admin.create_topics([kafka.admin.NewTopic(args.name, num_partitions=args.partitions, replication_factor=1)])
        admin.close()
        out = {"arn": kafka_cluster_arn(servers), "partitions": args.partitions}
    elif args.source == "rabbitmq":
        # The broker counts deliveries and dead-letters (quorum queues):
        # a message returned more than `limit` times goes to NAME.dlq.
        limit = MAX_REDELIVERIES if args.max_redeliveries is None else args.max_redeliveries
        dead_letters = f"{args.name}.dlq"
        with rabbitmq_connection() as connection:
            channel = connection.channel()
            channel.queue_declare(dead_letters, durable=True, arguments={"x-queue-type": "quorum"})
            channel.queue_declare(args.name, durable=True, arguments={
                "x-queue-type": "quorum", "x-delivery-limit": limit,
                "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead_letters})
        out = {"arn": broker_arn("rabbitmq", os.environ["RABBITMQ_URL"]),
               "dead_letter_queue": dead_letters, "max_redeliveries": limit}
    elif args.source == "activemq":
        if args.max_redeliveries not in (None, MAX_REDELIVERIES):
            sys.exit(f"poller: ActiveMQ's redelivery limit is the broker's ({MAX_REDELIVERIES}, "
                     "infra/activemq-local.sh's redeliveryPlugin)")
        # ActiveMQ makes a queue when it is first used: here a browser,
        # which consumes nothing.
        broker = Stomp()
        messages = len(broker.browse(args.name))
        broker.close()
        out = {"arn": broker.arn, "dead_letter_queue": f"DLQ.{args.name}", "max_redeliveries": MAX_REDELIVERIES,
               "messages": messages}
    else:
        dynamodb = client("dynamodb")
        table = dynamodb.create_table(
            TableName=args.name,
            KeySchema=[{"AttributeName": args.key, "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": args.key, "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )["TableDescription"]
        out = {"arn": table["LatestStreamArn"]}
    print(json.dumps({"source": args.source, "name": args.name, **out}))


# ---------------------------------------------------------------- produce


def messages_of_event(source, event):
    """The messages a Lambda event of `source` holds, in the format of
    --messages, to produce them again into a real queue or stream."""
    if source == "rabbitmq":
        return [rabbitmq_message_of_event(m) for messages in event["rmqMessagesByQueue"].values()
                for m in messages]
    if source == "activemq":
        return [activemq_message_of_event(m) for m in event["messages"]]
    if source in KAFKA:
        return [{"key_base64": r.get("key"), "value_base64": r.get("value"), "partition": r["partition"],
                 "headers": [{name: {"bytes": value} for name, value in h.items()} for h in r.get("headers", [])]}
                for records in event["records"].values() for r in records]
    messages = []
    for record in event["Records"]:
        if source in ("sqs", "sqs-fifo"):
            message = {"body": record["body"], "attributes": {
                name: a["stringValue"] for name, a in record.get("messageAttributes", {}).items()
                if "stringValue" in a}}
            if source == "sqs-fifo":
                message["group"] = record["attributes"]["MessageGroupId"]
                message["deduplication_id"] = record["attributes"]["MessageDeduplicationId"]
        elif source == "kinesis":
            message = {"data_base64": record["kinesis"]["data"],
                       "partition_key": record["kinesis"]["partitionKey"]}
        else:
            change = record["dynamodb"]
            if record["eventName"] == "REMOVE":
                message = {"delete_key": change["Keys"]}
            else:  # INSERT, MODIFY: a put of the new image
                message = {"put_item": change["NewImage"]}
        messages.append(message)
    return messages


def rabbitmq_message_of_event(m):
    properties = m["basicProperties"]
    message = {"data_base64": m["data"]}
    for field, name in RABBITMQ_PROPERTIES:
        if properties.get(field) is not None:
            message[name] = properties[field]
    if properties.get("timestamp"):
        message["timestamp"] = java_date_seconds(properties["timestamp"])
    if properties.get("headers"):
        message["headers"] = properties["headers"]
    return message


def activemq_message_of_event(m):
    """Not sent again: the broker's own fields (messageID, timestamp, its
    times, redelivered) and expiration (a time, long past in a sample)."""
    persistent = m["persistent"] if "persistent" in m else m.get("deliveryMode") != 1
    message = {"data_base64": m["data"], "headers": m.get("properties") or {}, "persistent": persistent,
               "bytes_message": m.get("messageType") == "jms/bytes-message"}
    correlation_id = m.get("correlationId", m.get("correlationID"))
    if correlation_id is not None:
        message["correlation_id"] = correlation_id
    for field in ("type", "priority"):
        if m.get(field) is not None:
            message[field] = m[field]
    return message


def produce_rabbitmq(name, messages):
    """Publishes to NAME through the default exchange, with publisher
    confirms: each message is in the queue when this returns (an absent
    queue is an error, not a message lost)."""
    results = []
    with rabbitmq_connection() as connection:
        channel = connection.channel()
        channel.confirm_delivery()
        for m in messages:
            properties = {"delivery_mode": 2, **{key: m[key] for _, key in RABBITMQ_PROPERTIES if key in m}}
            if "timestamp" in m:
                properties["timestamp"] = m["timestamp"]
            if "headers" in m:
                properties["headers"] = amqp_header(m["headers"])
            channel.basic_publish("", name, body_of(m), pika.BasicProperties(**properties), mandatory=True)
            results.append({"message_id": properties.get("message_id")})
    return results


def produce_activemq(name, messages):
    """Sends to the queue NAME: a text message (no content-length: ActiveMQ
    makes a JMS TextMessage of it), or a bytes message with
    "bytes_message"; persistent unless "persistent" is false. The broker
    gives each its message id."""
    broker = Stomp()
    for m in messages:
        headers = {name: str(value) for name, value in m.get("headers", {}).items()}
        headers["persistent"] = "true" if m.get("persistent", True) else "false"
        for field, header in (("correlation_id", "correlation-id"), ("type", "type"), ("priority", "priority")):
            if m.get(field) is not None:
                headers[header] = str(m[field])
        body = body_of(m)
        if m.get("bytes_message"):
            headers["content-length"] = str(len(body))
        broker.connection.send(f"/queue/{name}", body, headers=headers)
    broker.close()
    return [{"destination": f"/queue/{name}"} for _ in messages]


def produce_kafka(name, messages):
    """Sends each record alone and waits for its acknowledgement (acks=all):
    one record per produce request, so a fetch from any offset finds it
    (tansu returns nothing to a fetch that starts inside a batch of
    several: docs/testing.md). The partition is the key's (the producer's
    default partitioner) unless the message names one."""
    producer = kafka.KafkaProducer(bootstrap_servers=kafka_servers(), acks="all", linger_ms=0,
                                   max_in_flight_requests_per_connection=1, client_id="poller")
    results = []
    for m in messages:
        headers = m.get("headers", [])
        if isinstance(headers, dict):
            headers = [{name: value} for name, value in headers.items()]
        sent = producer.send(name, key=kafka_bytes(m, "key"), value=kafka_bytes(m, "value"),
                             headers=[(n, kafka_header(v)) for h in headers for n, v in h.items()],
                             partition=m.get("partition"), timestamp_ms=m.get("timestamp_ms")).get(timeout=30)
        results.append({"partition": sent.partition, "offset": sent.offset})
    producer.close()
    return results


def json_list(given):
    """--messages: a JSON list given inline (`'[{"body": "..."}]'`), `-`
    (standard input) or a file's name."""
    try:
        if given.lstrip().startswith("["):
            messages = json.loads(given)
        elif given == "-":
            messages = json.load(sys.stdin)
        else:
            with open(given, encoding="utf-8") as f:
                messages = json.load(f)
    except (OSError, json.JSONDecodeError) as err:
        sys.exit(f"poller: --messages is a JSON list, inline, - (standard input) or a file: {err}")
    if not isinstance(messages, list):
        sys.exit("poller: --messages is a JSON list")
    return messages


def produce(args):
    if args.from_event:
        with open(args.from_event, encoding="utf-8") as f:
            messages = messages_of_event(args.source, json.load(f))
    else:
        messages = json_list(args.messages)
    results = []
    if args.source in KAFKA:
        results = produce_kafka(args.name, messages)
    elif args.source == "rabbitmq":
        results = produce_rabbitmq(args.name, messages)
    elif args.source == "activemq":
        results = produce_activemq(args.name, messages)
    elif args.source in ("sqs", "sqs-fifo"):
        sqs = client("sqs")
        url = sqs.get_queue_url(QueueName=args.name)["QueueUrl"]
        for m in messages:
            request = {"QueueUrl": url, "MessageBody": m["body"]}
            attributes = {name: {"DataType": "String", "StringValue": value}
                          for name, value in m.get("attributes", {}).items()}
            if attributes:
                request["MessageAttributes"] = attributes
            if args.source == "sqs-fifo":
                request["MessageGroupId"] = m["group"]
                request["MessageDeduplicationId"] = m["deduplication_id"]
            sent = sqs.send_message(**request)
            results.append({"message_id": sent["MessageId"],
                            "sequence_number": sent.get("SequenceNumber")})
    elif args.source == "kinesis":
        kinesis = client("kinesis")
        for m in messages:
            data = base64.b64decode(m["data_base64"]) if "data_base64" in m else m["data"].encode("utf-8")
            # One PutRecord each: the order of the list is the order in a shard.
            put = kinesis.put_record(StreamName=args.name, Data=data, PartitionKey=m["partition_key"])
            results.append({"shard_id": put["ShardId"], "sequence_number": put["SequenceNumber"]})
    else:
        dynamodb = client("dynamodb")
        serialize = TypeSerializer().serialize

        def typed(item):
            return {k: serialize(plain_to_dynamodb(v)) for k, v in item.items()}

        for m in messages:
            if "put_item" in m or "put" in m:
                item = m["put_item"] if "put_item" in m else typed(m["put"])
                dynamodb.put_item(TableName=args.name, Item=item)
                results.append({"put": True})
            else:
                key = m["delete_key"] if "delete_key" in m else typed(m["delete"])
                dynamodb.delete_item(TableName=args.name, Key=key)
                results.append({"delete": True})
    print(json.dumps(results))


def plain_to_dynamodb(value):
    """Plain JSON for boto3's serializer: numbers as Decimal."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return decimal.Decimal(str(value))
    if isinstance(value, list):
        return [plain_to_dynamodb(v) for v in value]
    if isinstance(value, dict):
        return {k: plain_to_dynamodb(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------- poll


class Stats:
    def __init__(self, source, name):
        self.started = time.monotonic()
        self.summary = {"source": source, "name": name, "batches": 0, "records": 0, "reported": 0,
                        "invocation_errors": 0, "error_types": {}, "invalid_responses": 0, "drained": False}


class Invoker:
    """The function's binary, kept warm; a new one after it exits (Lambda
    starts a new execution environment)."""

    def __init__(self, args):
        self.args = args
        self.env = dict(os.environ)
        for assignment in args.env or []:
            name, _, value = assignment.partition("=")
            self.env[name] = value
        self.log = open(args.function_log, "ab") if args.function_log else None
        self.function = None
        # --kill-chance: a seeded storm, the same kills on every run.
        self.storm = random.Random(args.kill_seed)
        self.kills = 0

    def invoke(self, event):
        """("response" | "error", JSON) for `event`."""
        if self.function is None:
            self.function = runtime_api.Function(self.args.bootstrap, self.args.function_name,
                                                 env=self.env, output=self.log)
        if self.storm.random() >= self.args.kill_chance:
            return self.answer(event)
        # SIGKILL mid-invocation, as a crashed or timed-out execution
        # environment ends: the batch fails and comes again. A function that
        # answers before its kill comes dies before the answer reaches Lambda
        # (a timeout at the very end): every kill the seed chose happens,
        # however fast the machine.
        function = self.function
        kill = threading.Timer(self.storm.uniform(0, self.args.kill_within), function.process.kill)
        kill.start()
        try:
            self.answer(event)
        finally:
            kill.cancel()
        function.process.kill()
        self.kills += 1
        self.close()
        return "error", {"errorType": "Runtime.Gone", "errorMessage": json.dumps({"killed": True})}

    def answer(self, event):
        try:
            return self.function.invoke(json.dumps(event).encode("utf-8"), self.args.invoke_timeout)
        except runtime_api.Gone as gone:
            self.close()
            return "error", {"errorType": "Runtime.Gone", "errorMessage": json.dumps(gone.detail)}

    def close(self):
        if self.function is not None:
            self.function.close()
            self.function = None


def kafka_identifier(identifier):
    """A Kafka item's identifier in a partial batch response,
    {"partition": "<topic>-<partition>", "offset": N}, as the poller names
    the record ("<topic>-<partition>:N"); None for any other shape."""
    if isinstance(identifier, dict) and isinstance(identifier.get("partition"), str) \
            and isinstance(identifier.get("offset"), int) and not isinstance(identifier.get("offset"), bool):
        return f"{identifier['partition']}:{identifier['offset']}"
    return None


def reported_ids(kind, answer, ids, identify=None):
    """The identifiers to treat as failed, and whether the response was
    invalid: an invocation error fails the batch; so does, as Lambda has
    it, a response naming an item that is not in the batch. `identify`
    reads an item's identifier (Kafka's is an object)."""
    if kind == "error":
        return list(ids), False
    if answer is None or answer == {}:
        return [], False
    failures = answer.get("batchItemFailures") if isinstance(answer, dict) else None
    if failures is None:
        return [], False
    if not isinstance(failures, list):
        return list(ids), True
    reported = []
    for failure in failures:
        identifier = failure.get("itemIdentifier") if isinstance(failure, dict) else None
        if identify is not None:
            identifier = identify(identifier)
        if not isinstance(identifier, str) or identifier not in ids:
            return list(ids), True
        reported.append(identifier)
    return reported, False


def last_words(error):
    """What a function that could not answer said (infra/runtime_api.py):
    its init error, then the last lines it wrote; none for another error."""
    if not isinstance(error, dict) or error.get("errorType") != "Runtime.Gone":
        return []
    try:
        detail = json.loads(error.get("errorMessage") or "{}")
    except json.JSONDecodeError:
        return []
    if not isinstance(detail, dict):
        return []
    init = detail.get("init_error")
    said = [f"init error {init.get('errorType')}: {init.get('errorMessage')}"] if isinstance(init, dict) else []
    return said + detail.get("last_words", [])


class Batches:
    """What every source shares: invoking, counting, the transcript."""

    def __init__(self, args, stats, invoker):
        self.args = args
        self.stats = stats
        self.invoker = invoker
        self.transcript = open(args.transcript, "a", encoding="utf-8") if args.transcript else None
        self.events = open(args.events, "a", encoding="utf-8") if args.events else None

    def deliver(self, unit, event, ids, payloads, extra=None, identify=None):
        """Invokes the function with `event` (Lambda's event of one batch,
        whose records `ids` name); the reported identifiers (every one after
        an invocation error or an invalid response) and the error, if any."""
        summary = self.stats.summary
        if self.events:
            self.events.write(json.dumps(event) + "\n")
            self.events.flush()
        started = time.monotonic()
        kind, answer = self.invoker.invoke(event)
        took_ms = round((time.monotonic() - started) * 1000)
        reported, invalid = reported_ids(kind, answer, ids, identify)
        summary["batches"] += 1
        summary["records"] += len(ids)
        summary["reported"] += len(reported)
        summary["invocation_errors"] += kind == "error"
        summary["invalid_responses"] += invalid
        error = answer if kind == "error" else None
        if error is not None:
            error_type = error.get("errorType") if isinstance(error, dict) else str(error)
            summary["error_types"][error_type] = summary["error_types"].get(error_type, 0) + 1
        line = {"batch": summary["batches"], "unit": unit,
                "records": [{"id": i, "payload": p, **(e or {})}
                            for i, p, e in zip(ids, payloads, extra or [None] * len(ids))],
                "reported": reported, "error": error, "invalid_response": invalid, "ms": took_ms}
        if self.transcript:
            self.transcript.write(json.dumps(line) + "\n")
            self.transcript.flush()
        what = f"invocation error {error.get('errorType') if isinstance(error, dict) else error}" if error \
            else f"response {json.dumps(answer)}"
        print(f"poller: batch {summary['batches']} ({unit}): {len(ids)} records, {what}, "
              f"{len(reported)} reported ({took_ms} ms)", file=sys.stderr, flush=True)
        for words in last_words(error):
            print(f"poller:   the function's last words: {words}", file=sys.stderr, flush=True)
        return reported, error


class Sqs:
    def __init__(self, args, batches):
        self.args = args
        self.batches = batches
        self.sqs = client("sqs")
        self.url = self.sqs.get_queue_url(QueueName=args.name)["QueueUrl"]
        self.arn = self.sqs.get_queue_attributes(
            QueueUrl=self.url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        self.fifo = args.name.endswith(".fifo")
        # FIFO: per group, the ids of messages left in flight (reported),
        # which must come back before any later one of the group; and the
        # order in which messages were first handed out.
        self.left = {}
        self.first_seen = {}
        # FIFO: the first reported message of a group, held in flight until
        # a full receive has seen the rest of the group visible again:
        # (receipt handle, when the rest is visible).
        self.heads = []
        self.last_full_scan = 0.0
        self.out_of_order = 0
        batches.stats.summary["out_of_order"] = 0
        # What an earlier run left (--checkpoint): its held heads go on.
        if self.fifo and args.checkpoint and os.path.exists(args.checkpoint):
            with open(args.checkpoint, encoding="utf-8") as f:
                state = json.load(f).get("sqs-fifo", {})
            self.heads = [tuple(head) for head in state.get("heads", [])]
            self.left = {group: set(ids) for group, ids in state.get("left", {}).items()}
            self.first_seen = state.get("first_seen", {})

    def receive(self, count):
        started = time.time()
        messages = self.sqs.receive_message(
            QueueUrl=self.url, MaxNumberOfMessages=count, WaitTimeSeconds=0,
            VisibilityTimeout=IN_FLIGHT_SECONDS, AttributeNames=["All"],
            MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"],
        ).get("Messages", [])
        if len(messages) < count:
            # moto looked at every visible message (it stops early only
            # when the batch is full).
            self.last_full_scan = started
        return messages

    def gather(self):
        messages = []
        while len(messages) < self.args.batch_size:
            got = self.receive(min(10, self.args.batch_size - len(messages)))
            messages.extend(got)
            if not got:
                break
        return messages

    def release_heads(self):
        """A held head goes visible once a full receive started after the
        rest of its group became visible (moto then no longer counts them
        as in flight, so the head comes first and the rest after it)."""
        waiting = []
        for handle, rest_visible_at in self.heads:
            if self.last_full_scan >= rest_visible_at:
                self.sqs.change_message_visibility(QueueUrl=self.url, ReceiptHandle=handle,
                                                   VisibilityTimeout=0)
            else:
                waiting.append((handle, rest_visible_at))
        self.heads = waiting

    def drained(self):
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed"])["Attributes"]
        return all(int(v) == 0 for v in attributes.values())

    def record(self, m):
        attributes = dict(m.get("Attributes", {}))
        message_attributes = {}
        for name, a in m.get("MessageAttributes", {}).items():
            attribute = {}
            if "StringValue" in a:
                attribute["stringValue"] = a["StringValue"]
            if "BinaryValue" in a:
                attribute["binaryValue"] = base64.b64encode(a["BinaryValue"]).decode("ascii")
            attribute.update({"stringListValues": [], "binaryListValues": [], "dataType": a["DataType"]})
            message_attributes[name] = attribute
        return {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": attributes,
            "messageAttributes": message_attributes,
            "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": self.arn,
            "awsRegion": region(),
        }

    def check_order(self, messages):
        """Counts FIFO groups handed out of order: while this poller has
        messages of a group left in flight (reported), the next messages of
        that group handed out must be those, in the order first seen (moto's
        SequenceNumber is random, so the order is the poller's own)."""
        if not self.fifo:
            return
        received = {}
        for m in messages:
            self.first_seen.setdefault(m["MessageId"], len(self.first_seen))
            received.setdefault(m["Attributes"]["MessageGroupId"], []).append(m["MessageId"])
        for group, ids in received.items():
            left = sorted(self.left.get(group, ()), key=self.first_seen.get)
            n = min(len(ids), len(left))
            if ids[:n] != left[:n]:
                self.out_of_order += 1
                self.batches.stats.summary["out_of_order"] = self.out_of_order
                print(f"poller: OUT OF ORDER: group {group} handed out {ids} while {left} were "
                      "left in flight before them", file=sys.stderr, flush=True)
            self.left[group] = set(left) - set(ids)

    def leave(self, reported):
        """Leaves the reported messages in flight until --redelivery-delay
        has passed. FIFO: when a group has several, moto would hand them
        out again out of order if they all became visible at once (its
        receive frees them from its in-flight set one at a time, skipping
        the group while another of them is still in it, so a later one
        comes first): one of them is held in flight until a receive has
        seen the others visible; then the group comes back whole, in order."""
        delay = int(round(self.args.redelivery_delay))
        by_group = {}
        for m in reported:
            group = m["Attributes"].get("MessageGroupId") if self.fifo else None
            by_group.setdefault(group, []).append(m)
        for group, messages in by_group.items():
            if group is not None:
                self.left.setdefault(group, set()).update(m["MessageId"] for m in messages)
            held = messages[0] if group is not None and len(messages) > 1 else None
            for m in messages:
                if m is not held:
                    self.sqs.change_message_visibility(QueueUrl=self.url, ReceiptHandle=m["ReceiptHandle"],
                                                       VisibilityTimeout=delay)
            if held is not None:
                self.heads.append((held["ReceiptHandle"], time.time() + delay + 0.05))

    def step(self):
        """One batch, or None when there was nothing to deliver."""
        self.release_heads()
        messages = self.gather()
        if not messages:
            return None
        self.check_order(messages)
        records = [self.record(m) for m in messages]
        ids = [m["MessageId"] for m in messages]
        extra = [{"receive_count": int(m["Attributes"].get("ApproximateReceiveCount", "0")),
                  **({"group": m["Attributes"]["MessageGroupId"]} if self.fifo else {})} for m in messages]
        reported, _ = self.batches.deliver(self.args.name, {"Records": records}, ids,
                                           [m["Body"] for m in messages], extra)
        done = [m for m in messages if m["MessageId"] not in reported]
        for i in range(0, len(done), 10):
            self.sqs.delete_message_batch(QueueUrl=self.url, Entries=[
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]} for n, m in enumerate(done[i:i + 10])])
        self.leave([m for m in messages if m["MessageId"] in reported])
        return True

    def finish(self, summary):
        if self.fifo and self.args.checkpoint:
            # The next run (the same --checkpoint) goes on with the heads
            # held and the order seen.
            with open(self.args.checkpoint, "w", encoding="utf-8") as f:
                json.dump({"sqs-fifo": {
                    "heads": self.heads,
                    "left": {group: sorted(ids) for group, ids in self.left.items() if ids},
                    "first_seen": self.first_seen,
                }}, f)
        else:
            # Heads still held when the poller stops (--max-batches), for
            # another consumer: visible HEAD_GAP seconds after the rest of
            # their group, so that one polling in between frees the rest
            # first (a timing, not a guarantee).
            for handle, rest_visible_at in self.heads:
                wait = max(0.0, rest_visible_at - time.time())
                self.sqs.change_message_visibility(QueueUrl=self.url, ReceiptHandle=handle,
                                                   VisibilityTimeout=int(wait + 0.999) + HEAD_GAP)
            self.heads = []
        summary["held"] = len(self.heads)
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        summary["visible"] = int(attributes["ApproximateNumberOfMessages"])
        summary["in_flight"] = int(attributes["ApproximateNumberOfMessagesNotVisible"])


class Shards:
    """Kinesis and DynamoDB Streams: a checkpoint per shard, one shard's
    records per event."""

    def __init__(self, args, batches):
        self.args = args
        self.batches = batches
        self.checkpoints = {}
        if args.checkpoint and os.path.exists(args.checkpoint):
            with open(args.checkpoint, encoding="utf-8") as f:
                self.checkpoints = json.load(f)
        self.retry_at = {}
        self.idle = set()
        self.next_shard = 0

    def save(self):
        if self.args.checkpoint:
            with open(self.args.checkpoint, "w", encoding="utf-8") as f:
                json.dump(self.checkpoints, f, indent=2, sort_keys=True)

    def iterator_request(self, shard):
        position = self.checkpoints.get(shard)
        if position is None:
            return {"ShardIteratorType": "TRIM_HORIZON"}
        return {"ShardIteratorType": position["type"], self.sequence_field: position["sequence_number"]}

    def drained(self):
        return not self.retry_at and set(self.shards()) <= self.idle

    def step(self):
        shards = self.shards()
        now = time.monotonic()
        for offset in range(len(shards)):
            shard = shards[(self.next_shard + offset) % len(shards)]
            if self.retry_at.get(shard, 0) > now:
                continue
            records = self.read(shard)
            if not records:
                self.idle.add(shard)
                self.retry_at.pop(shard, None)
                continue
            self.idle.discard(shard)
            self.next_shard = (shards.index(shard) + 1) % len(shards)
            numbers = [self.sequence_number(r) for r in records]
            reported, _ = self.batches.deliver(shard, {"Records": [self.record(shard, r) for r in records]},
                                               numbers, [self.payload(r) for r in records])
            if reported:
                lowest = min(reported, key=int)
                self.checkpoints[shard] = {"type": "AT_SEQUENCE_NUMBER", "sequence_number": lowest}
                self.retry_at[shard] = time.monotonic() + self.args.redelivery_delay
            else:
                self.checkpoints[shard] = {"type": "AFTER_SEQUENCE_NUMBER", "sequence_number": numbers[-1]}
                self.retry_at.pop(shard, None)
            self.save()
            return True
        return None

    def finish(self, summary):
        summary["checkpoints"] = self.checkpoints


class Kinesis(Shards):
    sequence_field = "StartingSequenceNumber"

    def __init__(self, args, batches):
        super().__init__(args, batches)
        self.kinesis = client("kinesis")
        description = self.kinesis.describe_stream(StreamName=args.name)["StreamDescription"]
        self.arn = description["StreamARN"]
        self._shards = [s["ShardId"] for s in description["Shards"]]

    def shards(self):
        return self._shards

    def read(self, shard):
        iterator = self.kinesis.get_shard_iterator(StreamName=self.args.name, ShardId=shard,
                                                   **self.iterator_request(shard))["ShardIterator"]
        return self.kinesis.get_records(ShardIterator=iterator, Limit=self.args.batch_size)["Records"]

    @staticmethod
    def sequence_number(r):
        return r["SequenceNumber"]

    @staticmethod
    def payload(r):
        return r["Data"].decode("utf-8", errors="replace")

    def record(self, shard, r):
        return {
            "kinesis": {
                "kinesisSchemaVersion": "1.0",
                "partitionKey": r["PartitionKey"],
                "sequenceNumber": r["SequenceNumber"],
                "data": base64.b64encode(r["Data"]).decode("ascii"),
                "approximateArrivalTimestamp": round(r["ApproximateArrivalTimestamp"].timestamp(), 3),
            },
            "eventSource": "aws:kinesis",
            "eventVersion": "1.0",
            "eventID": f"{shard}:{r['SequenceNumber']}",
            "eventName": "aws:kinesis:record",
            "invokeIdentityArn": INVOKE_IDENTITY,
            "awsRegion": region(),
            "eventSourceARN": self.arn,
        }


class DynamoDbStreams(Shards):
    sequence_field = "SequenceNumber"

    def __init__(self, args, batches):
        super().__init__(args, batches)
        self.streams = client("dynamodbstreams")
        table = client("dynamodb").describe_table(TableName=args.name)["Table"]
        if "LatestStreamArn" not in table:
            sys.exit(f"poller: table {args.name} has no stream (StreamSpecification)")
        self.arn = table["LatestStreamArn"]

    def shards(self):
        shards, start = [], None
        while True:
            request = {"StreamArn": self.arn}
            if start:
                request["ExclusiveStartShardId"] = start
            description = self.streams.describe_stream(**request)["StreamDescription"]
            shards.extend(s["ShardId"] for s in description["Shards"])
            start = description.get("LastEvaluatedShardId")
            if not start:
                return shards

    def read(self, shard):
        iterator = self.streams.get_shard_iterator(StreamArn=self.arn, ShardId=shard,
                                                   **self.iterator_request(shard))["ShardIterator"]
        return self.streams.get_records(ShardIterator=iterator, Limit=self.args.batch_size)["Records"]

    @staticmethod
    def sequence_number(r):
        return r["dynamodb"]["SequenceNumber"]

    @staticmethod
    def payload(r):
        return json.dumps(jsonable(r["dynamodb"].get("Keys", {})))

    def record(self, shard, r):
        change = r["dynamodb"]
        dynamodb = {"ApproximateCreationDateTime": seconds_number(change["ApproximateCreationDateTime"])}
        for name in ("Keys", "NewImage", "OldImage"):
            if name in change:
                dynamodb[name] = jsonable(change[name])
        dynamodb.update({"SequenceNumber": change["SequenceNumber"], "SizeBytes": change["SizeBytes"],
                         "StreamViewType": change["StreamViewType"]})
        record = {
            "eventID": r["eventID"],
            "eventName": r["eventName"],
            "eventVersion": r["eventVersion"],
            "eventSource": "aws:dynamodb",
            "awsRegion": r.get("awsRegion", region()),
            "dynamodb": dynamodb,
            "eventSourceARN": self.arn,
        }
        if "userIdentity" in r:
            record["userIdentity"] = r["userIdentity"]
        return record


class Broker:
    """What RabbitMQ and ActiveMQ share: gathering a batch of the messages
    the broker pushes (up to --batch-size within --batching-window), one
    invocation for all of them, the batch settled whole."""

    def __init__(self, args, batches):
        self.args = args
        self.batches = batches
        batches.stats.summary["redelivered"] = 0

    def gather(self):
        """A batch: the window opens with its first message."""
        messages = []
        deadline = time.monotonic() + self.args.batching_window
        while len(messages) < self.args.batch_size:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            first = not messages
            if not self.receive(messages, left):
                break
            if first:
                deadline = time.monotonic() + self.args.batching_window
        return messages

    def step(self):
        messages = self.gather()
        if not messages:
            return None
        records = [self.message(m) for m in messages]
        redelivered = [record["redelivered"] for record in records]
        self.batches.stats.summary["redelivered"] += sum(redelivered)
        _, error = self.batches.deliver(self.args.name, self.event(records), [self.id(m) for m in messages],
                                        [base64.b64decode(r["data"]).decode("utf-8", errors="replace")
                                         for r in records],
                                        [{"redelivered": r} for r in redelivered])
        self.settle(messages, error is None)
        return True


class RabbitMq(Broker):
    """RabbitMQ (AMQP 0-9-1, pika): one consumer of the queue NAME."""

    def __init__(self, args, batches):
        super().__init__(args, batches)
        url = broker_endpoint("RABBITMQ_URL")
        parameters = pika.URLParameters(url)
        self.arn = broker_arn("rabbitmq", url)
        self.queue_key = f"{args.name}::{parameters.virtual_host}"
        self.connection = pika.BlockingConnection(parameters)
        self.channel = self.connection.channel()
        self.count(args.name)
        # Deliveries the broker pushed, not yet in a batch.
        self.held = []
        self.channel.basic_qos(prefetch_count=args.batch_size)
        self.channel.basic_consume(args.name, lambda _, *delivery: self.held.append(delivery))

    def count(self, name):
        """The messages ready in queue `name` (not those delivered and not
        yet acknowledged)."""
        try:
            return self.channel.queue_declare(name, passive=True).method.message_count
        except pika.exceptions.ChannelClosedByBroker as closed:
            sys.exit(f"poller: {closed.reply_text} (infra/poller.py create rabbitmq {self.args.name})")

    def receive(self, messages, seconds):
        if not self.held:
            self.connection.process_data_events(time_limit=seconds)
        taken = self.held[:self.args.batch_size - len(messages)]
        del self.held[:len(taken)]
        messages.extend(taken)
        return bool(taken)

    def drained(self):
        return not self.held and self.count(self.args.name) == 0

    @staticmethod
    def id(delivery):
        method, properties, _ = delivery
        return properties.message_id or f"delivery-tag-{method.delivery_tag}"

    @staticmethod
    def message(delivery):
        """One message of Lambda's RabbitMQ event (AWS's sample's fields,
        in its order)."""
        method, p, body = delivery
        return {
            "basicProperties": {
                "contentType": p.content_type,
                "contentEncoding": p.content_encoding,
                "headers": event_header(p.headers) if p.headers is not None else None,
                "deliveryMode": p.delivery_mode,
                "priority": p.priority,
                "correlationId": p.correlation_id,
                "replyTo": p.reply_to,
                "expiration": p.expiration,
                "messageId": p.message_id,
                "timestamp": java_date(p.timestamp) if p.timestamp is not None else None,
                "type": p.type,
                "userId": p.user_id,
                "appId": p.app_id,
                "clusterId": p.cluster_id,
                "bodySize": len(body),
            },
            "redelivered": method.redelivered,
            "data": base64.b64encode(body).decode("ascii"),
        }

    def event(self, records):
        return {"eventSource": "aws:rmq", "eventSourceArn": self.arn,
                "rmqMessagesByQueue": {self.queue_key: records}}

    def settle(self, deliveries, done):
        """Acknowledges the batch; or, after --redelivery-delay, returns it
        to the queue (the quorum queue counts the return, and
        dead-letters a message past its x-delivery-limit)."""
        last = deliveries[-1][0].delivery_tag
        if done:
            self.channel.basic_ack(last, multiple=True)
        else:
            self.connection.sleep(self.args.redelivery_delay)
            self.channel.basic_nack(last, multiple=True, requeue=True)

    def finish(self, summary):
        summary["left"] = self.count(self.args.name)
        summary["dead_lettered"] = self.count(f"{self.args.name}.dlq")
        # Closing returns the deliveries still held to the queue.
        self.connection.close()


class ActiveMq(Broker):
    """ActiveMQ (STOMP, stomp.py): one subscription to the queue NAME,
    client-individual acknowledgement, activemq.prefetchSize --batch-size."""

    def __init__(self, args, batches):
        super().__init__(args, batches)
        self.broker = Stomp()
        self.arn = self.broker.arn
        self.broker.subscribe(args.name, "poller", ack="client-individual",
                              **{"activemq.prefetchSize": str(args.batch_size)})
        # Ids of messages sent back (NACK) and not seen since: redelivered
        # later by the broker, or in the dead-letter queue.
        self.sent_back = set()

    def receive(self, messages, seconds):
        try:
            messages.append(self.broker.frames["poller"].get(timeout=seconds))
        except queue.Empty:
            return False
        self.sent_back.discard(self.id(messages[-1]))
        return True

    def drained(self):
        if not self.broker.frames["poller"].empty():
            return False
        if self.sent_back:
            self.sent_back -= set(self.broker.browse(f"DLQ.{self.args.name}"))
        return not self.sent_back and not self.broker.browse(self.args.name)

    @staticmethod
    def id(message):
        frame, _ = message
        return frame.headers["message-id"]

    def message(self, message):
        """One message of Lambda's ActiveMQ event, from the STOMP frame's
        headers (the user's are the properties)."""
        frame, received_ms = message
        h = frame.headers
        return {
            "messageID": h["message-id"],
            # ActiveMQ gives a bytes message's frame a content-length, a text message's none.
            "messageType": "jms/bytes-message" if "content-length" in h else "jms/text-message",
            "deliveryMode": 2 if h.get("persistent") == "true" else 1,
            "replyTo": h.get("reply-to"),
            "type": h.get("type"),
            "expiration": int(h.get("expires", "0")),
            "priority": int(h.get("priority", "4")),
            "correlationId": h.get("correlation-id"),
            "redelivered": h.get("redelivered") == "true",
            "destination": {"physicalName": h["destination"].removeprefix("/queue/")},
            "data": base64.b64encode(frame.body).decode("ascii"),
            "timestamp": int(h["timestamp"]),
            "brokerInTime": int(h["timestamp"]),
            "brokerOutTime": received_ms,
            "properties": {name: value for name, value in h.items() if name not in STOMP_HEADERS},
        }

    def event(self, records):
        return {"eventSource": "aws:mq", "eventSourceArn": self.arn, "messages": records}

    def settle(self, messages, done):
        """Acknowledges every message; or sends every one back (NACK: the
        broker's redeliveryPlugin redelivers it, or dead-letters it past
        its limit)."""
        for message in messages:
            if done:
                self.broker.connection.ack(self.id(message), "poller")
            else:
                self.broker.connection.nack(self.id(message), "poller")
                self.sent_back.add(self.id(message))

    def finish(self, summary):
        summary["left"] = len(self.broker.browse(self.args.name))
        summary["dead_lettered"] = len(self.broker.browse(f"DLQ.{self.args.name}"))
        # Disconnecting returns the messages still held to the queue.
        self.broker.close()


class KafkaUnit:
    """Records of one or more partitions (offset order each) to hand the
    function in one event: a batch gathered from the broker, or what of one
    comes again (a retry, a half of a bisected batch). `attempts` counts
    its invocations so far (bisection starts the halves afresh); `due` is
    when it may go."""

    def __init__(self, records, attempts=0, due=0.0):
        self.records = records
        self.attempts = attempts
        self.due = due

    def count(self):
        return sum(len(rs) for rs in self.records.values())

    def halves(self):
        """The records in event order, cut in two (None for one record)."""
        flat = [(tp, r) for tp, rs in self.records.items() for r in rs]
        if len(flat) < 2:
            return None
        cut = len(flat) // 2
        units = []
        for part in (flat[:cut], flat[cut:]):
            records = {}
            for tp, r in part:
                records.setdefault(tp, []).append(r)
            units.append(KafkaUnit(records))
        return units


class Kafka:
    """Amazon MSK and self-managed Kafka: the mapping's consumer group
    (--consumer-group, by default the mapping's own), subscribed to the
    topic; up to --batch-size records (at most 6 MB) of one or more
    partitions gathered for --batching-window seconds from the first, in
    offset order per partition, Lambda's event of them. Offsets are
    committed only after the function answered: past the batch for a
    partition with nothing reported; at the lowest reported offset for one
    with failures (that record and every later one of the batch come
    again, after --redelivery-delay); an invocation error retries the
    batch, or with --bisect-batch-on-function-error splits it in two halves
    retried apart (a split is not a retry). A partition with records to
    come again is fetched no further meanwhile (records fetched early wait
    here; nothing is sought: tansu skips records fetched from inside a
    batch of several, docs/testing.md).

    Retries are bounded by --maximum-retry-attempts (AWS's
    MaximumRetryAttempts, -1 infinite: 10 with an on-failure destination,
    as Lambda caps it); records older than --maximum-record-age seconds
    (their timestamp) are not sent to the function. Either way the records
    are discarded: each one goes to --on-failure (kafka://TOPIC on the same
    broker: KafkaOnFailure), and the partition's offset is committed past
    it (counted "discarded").

    Another poller of the same group joining or leaving rebalances the
    partitions: a batch still running when its partitions moved commits
    nothing (the broker refuses a commit of a member that left its
    generation, counted "commits_refused"), and its records come again to
    their new owner. A commit the broker could not take (gone: a restart)
    is counted "commits_failed" and its batch comes again."""

    def __init__(self, args, batches):
        self.args = args
        self.batches = batches
        self.servers = kafka_servers()
        self.self_managed = args.source == "self-managed-kafka"
        self.arn = kafka_cluster_arn(self.servers)
        self.group = args.consumer_group or f"lambda-{uuid.uuid5(uuid.NAMESPACE_URL, self.arn + args.name)}"
        self.consumer = kafka.KafkaConsumer(
            bootstrap_servers=self.servers, group_id=self.group, client_id=f"poller-{os.getpid()}",
            enable_auto_commit=False, auto_offset_reset="earliest", max_poll_records=args.batch_size,
            fetch_max_bytes=KAFKA_MAX_EVENT_BYTES, max_partition_fetch_bytes=KAFKA_MAX_EVENT_BYTES,
            session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
            max_poll_interval_ms=int((args.rebalance_timeout or args.invoke_timeout + 30) * 1000))
        self.consumer.subscribe([args.name], listener=KafkaRebalance(self))
        # The topic's partitions known before the first join: kafka-python
        # joins with what it knew at subscribe, and a leader that learns
        # the partitions after its assignment joins again (a second
        # rebalance, which tansu has been seen not to finish).
        self.consumer.topics()
        self.admin = None
        self.on_failure = KafkaOnFailure(args, self) if args.on_failure else None
        self.retry_limit = args.maximum_retry_attempts
        if self.retry_limit < 0 and self.on_failure:
            self.retry_limit = 10
        # [KafkaUnit]: what comes again, in order.
        self.units = []
        # {TopicPartition: [records]}: fetched while the partition had
        # records to come again; handed over after them.
        self.early = {}
        # {TopicPartition: one past the highest offset this poller fetched}.
        self.seen_end = {}
        self.looked_at, self.at_ends = 0.0, False
        self.counts = {"commits_refused": 0, "commits_failed": 0, "rebalances": 0, "discarded": 0}
        self.closing = False

    @staticmethod
    def partition_name(tp):
        return f"{tp.topic}-{tp.partition}"

    def record(self, r):
        record = {"topic": r.topic, "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                  "timestampType": "LOG_APPEND_TIME" if r.timestamp_type == 1 else "CREATE_TIME"}
        if r.key is not None:
            record["key"] = base64.b64encode(r.key).decode("ascii")
        record["value"] = base64.b64encode(r.value or b"").decode("ascii")
        record["headers"] = [{name: signed_bytes(value or b"")} for name, value in r.headers or []]
        return record

    def event(self, records):
        """Lambda's event of `records` ({TopicPartition: [records]})."""
        event = {"eventSource": "SelfManagedKafka" if self.self_managed else "aws:kafka"}
        if not self.self_managed:
            event["eventSourceArn"] = self.arn
        event["bootstrapServers"] = self.servers
        event["records"] = {self.partition_name(tp): [self.record(r) for r in rs] for tp, rs in records.items()}
        return event

    def waiting(self):
        """The partitions with records to come again."""
        return {tp for unit in self.units for tp in unit.records}

    def gather(self):
        """A new KafkaUnit: up to --batch-size records, at most 6 MB in the
        event, gathered for --batching-window from the first, of the
        partitions with nothing to come again; None when there is none."""
        batch, count, size, first = {}, 0, 0, None
        waiting = self.waiting()
        while count < self.args.batch_size:
            wait = POLL_INTERVAL if first is None else self.args.batching_window - (time.monotonic() - first)
            if wait <= 0:
                break
            fetched = {tp: self.early.pop(tp) for tp in list(self.early) if tp not in waiting}
            if not fetched:
                fetched = self.consumer.poll(timeout_ms=int(wait * 1000), max_records=self.args.batch_size - count)
                for tp, records in fetched.items():
                    self.seen_end[tp] = max(self.seen_end.get(tp, 0), records[-1].offset + 1)
                for tp in [tp for tp in fetched if tp in waiting]:
                    self.early.setdefault(tp, []).extend(fetched.pop(tp))
            if not fetched:
                if first is None:
                    break
                continue
            first = first or time.monotonic()
            for tp, records in fetched.items():
                for i, r in enumerate(records):
                    # base64 makes 4 bytes of 3; the rest of the record's fields are small.
                    grows = 4 * (len(r.key or b"") + len(r.value or b"")) // 3 + 200
                    if count and (size + grows > KAFKA_MAX_EVENT_BYTES or count >= self.args.batch_size):
                        # The rest of this partition comes in a later batch.
                        self.early[tp] = records[i:] + self.early.get(tp, [])
                        break
                    batch.setdefault(tp, []).append(r)
                    count += 1
                    size += grows
            if size >= KAFKA_MAX_EVENT_BYTES:
                break
        return KafkaUnit(batch) if batch else None

    def step(self):
        due = self.due()
        if due is not None:
            self.units.remove(due)
            unit = due
        else:
            unit = self.gather()
            if unit is None:
                return None
        unit = self.drop_expired(unit)
        if unit is not None:
            self.deliver(unit)
        self.at_ends = False
        return True

    def due(self):
        """The first unit due whose partitions no unit before it holds (one
        partition's records go in offset order); None when there is none."""
        now, before = time.monotonic(), set()
        for unit in self.units:
            if unit.due <= now and not before & set(unit.records):
                return unit
            before |= set(unit.records)
        return None

    def drop_expired(self, unit):
        """`unit` without the records at the head of each partition older
        than --maximum-record-age (their timestamp): those are discarded,
        never sent to the function, and committed past. None when nothing
        is left."""
        if self.args.maximum_record_age < 0:
            return unit
        oldest = (time.time() - self.args.maximum_record_age) * 1000
        expired, left = {}, {}
        for tp, rs in unit.records.items():
            young = next((i for i, r in enumerate(rs) if r.timestamp >= oldest), len(rs))
            if young:
                expired[tp] = rs[:young]
            if young < len(rs):
                left[tp] = rs[young:]
        if not expired:
            return unit
        expired = KafkaUnit(expired, unit.attempts)
        self.discard(expired, "RecordAgeExceeded", invoked=unit.attempts > 0)
        self.commit_settled(expired)
        return KafkaUnit(left, unit.attempts) if left else None

    def deliver(self, unit):
        """Invokes the function with `unit`; what failed comes again (or is
        discarded), and each partition's offset is committed as far as
        nothing of it is to come again."""
        ids = [f"{self.partition_name(tp)}:{r.offset}" for tp, rs in unit.records.items() for r in rs]
        payloads = [(r.value or b"").decode("utf-8", errors="replace") for rs in unit.records.values() for r in rs]
        unit_name = ",".join(self.partition_name(tp) for tp in unit.records)
        reported, error = self.batches.deliver(unit_name, self.event(unit.records), ids, payloads,
                                               identify=kafka_identifier)
        unit.attempts += 1
        again_at = time.monotonic() + self.args.redelivery_delay
        halves = unit.halves() if error is not None and self.args.bisect_batch_on_function_error else None
        if halves:
            # Both halves go next, in order, with their retries afresh.
            self.units[:0] = halves
        else:
            failed = {}
            for tp, rs in unit.records.items():
                names = {f"{self.partition_name(tp)}:{r.offset}" for r in rs} & set(reported)
                if error is not None or names:
                    lowest = min(r.offset for r in rs if error is not None
                                 or f"{self.partition_name(tp)}:{r.offset}" in names)
                    failed[tp] = [r for r in rs if r.offset >= lowest]
            if failed:
                again = KafkaUnit(failed, unit.attempts, again_at)
                if 0 <= self.retry_limit < unit.attempts:
                    self.discard(again, "RetryAttemptsExhausted", invoked=True, error=error)
                else:
                    self.units.insert(0, again)
        self.commit_settled(unit)

    def discard(self, unit, condition, invoked, error=None):
        """Records that will not come again: to the on-failure destination
        (if any); the caller commits past them."""
        self.counts["discarded"] += unit.count()
        if self.on_failure:
            self.on_failure.send(unit, condition, invoked, error)
        print(f"poller: {unit.count()} records discarded ({condition})", file=sys.stderr, flush=True)

    def commit_settled(self, unit):
        """Commits each partition of `unit` up to its first record still to
        come again (past the unit's last record when none is). Not
        committed (a rebalance, the broker gone): the unit comes again."""
        pending = {}
        for waiting in self.units:
            for tp, rs in waiting.records.items():
                pending[tp] = min(pending.get(tp, rs[0].offset), rs[0].offset)
        offsets = {tp: pending.get(tp, rs[-1].offset + 1) for tp, rs in unit.records.items()}
        if not self.commit(offsets):
            settled = {tp: rs for tp, rs in unit.records.items() if tp not in pending}
            if settled and set(settled) <= self.consumer.assignment():
                self.units.insert(0, KafkaUnit(settled, 0, time.monotonic() + self.args.redelivery_delay))

    def commit(self, offsets):
        """Commits `offsets` for the group: whether it was. A member that
        lost its partitions in a rebalance, or commits while the group
        rebalances, is refused by the broker (counted "commits_refused");
        a broker that is gone (restarting) fails it ("commits_failed")."""
        if not offsets:
            return True
        try:
            self.consumer.commit({tp: kafka.structs.OffsetAndMetadata(offset, "", -1) for tp, offset in offsets.items()})
            return True
        except (kafka.errors.CommitFailedError, kafka.errors.RebalanceInProgressError) as refused:
            self.counts["commits_refused"] += 1
            print(f"poller: commit refused ({type(refused).__name__}): the group rebalances",
                  file=sys.stderr, flush=True)
        except kafka.errors.KafkaError as failed:
            self.counts["commits_failed"] += 1
            print(f"poller: commit failed ({type(failed).__name__}): the broker is gone",
                  file=sys.stderr, flush=True)
        return False

    def forget(self, partitions):
        """Partitions handed to another member: nothing of them comes again
        here (their new owner reads them from the group's offset)."""
        for unit in self.units:
            for tp in partitions:
                unit.records.pop(tp, None)
        self.units = [unit for unit in self.units if unit.records]
        for tp in partitions:
            self.early.pop(tp, None)
            self.seen_end.pop(tp, None)

    def partitions(self):
        return [kafka.TopicPartition(self.args.name, p)
                for p in sorted(self.consumer.partitions_for_topic(self.args.name) or [])]

    def committed(self, partitions):
        """{TopicPartition: the group's committed offset, or None}: the
        member's own answer while it holds partitions; an admin client's,
        outside the member, while it holds none (at the end: see
        `drained`)."""
        if self.consumer.assignment():
            return {tp: self.consumer.committed(tp) for tp in partitions}
        if self.admin is None:
            self.admin = kafka.KafkaAdminClient(bootstrap_servers=self.servers,
                                                client_id=f"poller-{os.getpid()}-admin")
        offsets = self.admin.list_group_offsets({self.group: partitions})[self.group]
        return {tp: offsets[tp].offset if tp in offsets and offsets[tp].offset >= 0 else None
                for tp in partitions}

    def drained(self):
        """The group's committed offset of every partition of the topic is
        the partition's end (whichever poller of the group committed it),
        and nothing waits here to come again. Asked when a poll found
        nothing, at most twice a second. A partition's end is the broker's
        (ListOffsets) or past the last record this poller fetched of it,
        whichever is further: tansu 0.6.0's ListOffsets leaves out records
        produced after a batch of several (a Kafka destination's). A
        member without partitions (joining its group) asks nothing: on tansu
        0.6.0 a member that sends other requests while it joins (ListOffsets,
        an admin client's OffsetFetch beside it) now and then never gets its
        assignment, the group rebalancing in a loop."""
        if self.units or self.early or not self.consumer.assignment():
            return False
        if time.monotonic() - self.looked_at >= 0.5:
            self.looked_at = time.monotonic()
            try:
                partitions = self.partitions()
                ends = self.consumer.end_offsets(partitions)
                committed = self.committed(partitions)
            except kafka.errors.KafkaError as gone:
                print(f"poller: the broker did not answer ({type(gone).__name__})", file=sys.stderr, flush=True)
                return False
            self.at_ends = bool(partitions) and all(
                (committed[tp] or 0) >= max(ends[tp], self.seen_end.get(tp, 0)) for tp in partitions)
        return self.at_ends

    def finish(self, summary):
        committed = self.committed(self.partitions())
        summary.update(self.counts)
        summary["consumer_group"] = self.group
        summary["committed"] = {self.partition_name(tp): offset for tp, offset in committed.items()}
        self.closing = True
        self.consumer.close(autocommit=False)
        if self.admin is not None:
            self.admin.close()
        if self.on_failure:
            self.on_failure.close()


class KafkaOnFailure:
    """Lambda's Kafka topic as a Kafka mapping's on-failure destination
    (kafka://TOPIC, on the mapping's broker; AWS: "Using a Kafka topic as
    an on-failure destination"): one record per discarded record, keyed as
    it, its value the failure metadata ("requestContext",
    "responseContext", "KafkaBatchInfo" with batchSize 1 and the record's
    offset and timestamp) and the record's own event as "payload". (SQS,
    SNS and S3 destinations get the same metadata; the stand-in has only
    the topic.)"""

    def __init__(self, args, source):
        self.source = source
        self.function_arn = f"arn:aws:lambda:{region()}:{ACCOUNT}:function:{args.function_name}"
        if not args.on_failure.startswith("kafka://"):
            sys.exit("poller: --on-failure takes kafka://TOPIC")
        self.topic = args.on_failure.removeprefix("kafka://")
        if self.topic == args.name:
            sys.exit("poller: the on-failure topic is the mapping's own (Lambda refuses it)")
        self.producer = kafka.KafkaProducer(bootstrap_servers=source.servers, acks="all", linger_ms=0,
                                            client_id="poller-on-failure")

    def send(self, unit, condition, invoked, error):
        for tp, records in unit.records.items():
            for r in records:
                event = json.dumps(self.source.event({tp: [r]}))
                metadata = {
                    "requestContext": {"requestId": str(uuid.uuid4()), "functionArn": f"{self.function_arn}:$LATEST",
                                       "condition": condition, "approximateInvokeCount": unit.attempts},
                    # None: never sent to the function (too old at once).
                    "responseContext": {"statusCode": 200, "executedVersion": "$LATEST",
                                        **({"functionError": "Unhandled"} if error is not None else {})}
                    if invoked else None,
                    "version": "1.0",
                    "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
                    "KafkaBatchInfo": {
                        "batchSize": 1, "bootstrapServers": self.source.servers, "payloadSize": len(event),
                        "recordInfo": {"offset": str(r.offset), "timestamp": datetime.datetime.fromtimestamp(
                            r.timestamp / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")},
                        **({} if self.source.self_managed else {"eventSourceArn": self.source.arn}),
                    },
                }
                metadata["payload"] = json.loads(event)
                self.producer.send(self.topic, key=r.key, value=json.dumps(metadata).encode("utf-8")).get(timeout=30)

    def close(self):
        self.producer.close()


class KafkaRebalance(kafka.ConsumerRebalanceListener):
    """Partitions handed to another member are forgotten here (their
    holds too); their records come again to whichever member has them.
    Counts the rebalances that took partitions away while polling
    ("rebalances": 0 for a member alone in its group)."""

    def __init__(self, source):
        self.source = source

    def on_partitions_revoked(self, revoked):
        if revoked and not self.source.closing:
            self.source.counts["rebalances"] += 1
        self.source.forget(revoked)
        if revoked:
            print(f"poller: rebalance: gave up {sorted(self.source.partition_name(tp) for tp in revoked)}",
                  file=sys.stderr, flush=True)

    def on_partitions_assigned(self, assigned):
        print(f"poller: rebalance: assigned {sorted(self.source.partition_name(tp) for tp in assigned)}",
              file=sys.stderr, flush=True)


def built_binary(crate):
    """`cargo build` of the crate in `crate`: the path of its binary."""
    built = subprocess.run(["cargo", "build", "--quiet", "--message-format=json"], cwd=crate,
                           stdout=subprocess.PIPE, check=False)
    if built.returncode != 0:
        sys.exit(f"poller: cargo build failed in {crate}")
    binaries = [message["executable"] for message in map(json.loads, built.stdout.splitlines())
                if message.get("executable") and "bin" in message.get("target", {}).get("kind", [])]
    if len(binaries) != 1:
        sys.exit(f"poller: {crate} builds {len(binaries)} binaries; name one with --bootstrap")
    return binaries[0]


def poll(args):
    if args.crate:
        args.bootstrap = built_binary(args.crate)
    stats = Stats(args.source, args.name)
    invoker = Invoker(args)
    batches = Batches(args, stats, invoker)
    kind = {"sqs": Sqs, "sqs-fifo": Sqs, "kinesis": Kinesis, "dynamodb-streams": DynamoDbStreams,
            "rabbitmq": RabbitMq, "activemq": ActiveMq, "msk": Kafka, "self-managed-kafka": Kafka}[args.source]
    if args.source == "sqs-fifo" and not args.name.endswith(".fifo"):
        sys.exit("poller: a FIFO queue's name ends in .fifo")
    source = kind(args, batches)
    deadline = time.monotonic() + args.timeout
    status = 0
    # Drained when two looks in a row, a poll apart, find nothing: moto
    # counts a queue's visible and invisible messages at two instants, so
    # a message turning visible in between is counted in neither.
    empty_looks = 0
    try:
        while True:
            if args.max_batches is not None and stats.summary["batches"] >= args.max_batches:
                break
            if time.monotonic() > deadline:
                print(f"poller: not drained after {args.timeout} s", file=sys.stderr)
                status = 1
                break
            if source.step() is not None:
                empty_looks = 0
                continue
            empty_looks = empty_looks + 1 if source.drained() else 0
            if empty_looks >= 2:
                stats.summary["drained"] = True
                break
            if not isinstance(source, Kafka) or source.consumer.assignment():
                # A Kafka member without partitions waited in its poll: on
                # tansu 0.6.0 one that sleeps between polls while it joins its
                # group (kafka-python 3.0.12) joins again and again and never
                # gets partitions.
                time.sleep(POLL_INTERVAL)
    finally:
        invoker.close()
    summary = stats.summary
    summary["kills"] = invoker.kills
    source.finish(summary)
    summary["seconds"] = round(time.monotonic() - stats.started, 3)
    print(json.dumps(summary), flush=True)
    return status


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    c = commands.add_parser("create", help="create the queue, the stream, or the table with a stream")
    c.add_argument("source", choices=SOURCES)
    c.add_argument("name")
    c.add_argument("--shards", type=int, default=2, help="Kinesis: the stream's shards")
    c.add_argument("--partitions", type=int, default=2, help="Kafka: the topic's partitions")
    c.add_argument("--key", default="payment_id", help="DynamoDB: the table's hash key (a string)")
    c.add_argument("--max-redeliveries", type=int, help=f"RabbitMQ: the queue's x-delivery-limit "
                   f"(default {MAX_REDELIVERIES}); ActiveMQ's is the broker's ({MAX_REDELIVERIES})")

    p = commands.add_parser("produce", help="send messages, put records, write items")
    p.add_argument("source", choices=SOURCES)
    p.add_argument("name")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--messages", help='a JSON list (inline, - for standard input, or a file): SQS {"body", "attributes": {name: text}, '
                      '"group", "deduplication_id"}; Kinesis {"data" | "data_base64", "partition_key"}; '
                      'Kafka {"key" | "key_base64", "value" | "value_base64", "headers": {name: text or '
                      '{"bytes": [...]}} or a list of one-entry maps, "partition", "timestamp_ms"}; '
                      'DynamoDB {"put": item} | {"delete": key} (plain JSON) or {"put_item"} | '
                      '{"delete_key"} (typed); RabbitMQ {"body" | "data_base64", "headers": {name: text, '
                      'number or {"bytes": [...]}}, "message_id", "content_type", "timestamp" (epoch s), '
                      'any other pika property}; ActiveMQ {"body" | "data_base64", "headers": {name: text} '
                      '(the properties), "correlation_id", "type", "priority", "persistent" (default true), '
                      '"bytes_message"}')
    what.add_argument("--from-event", help="the records of a Lambda event of that source (events/*.json)")

    r = commands.add_parser("read", help="Kafka: every record of a topic, outside any consumer group")
    r.add_argument("source", choices=KAFKA)
    r.add_argument("name")
    r.add_argument("--timeout", type=float, default=30, help="give up (exit 1) after this many seconds")

    q = commands.add_parser("poll", help="deliver to the function as the event source mapping does")
    q.add_argument("source", choices=SOURCES)
    q.add_argument("name")
    binary = q.add_mutually_exclusive_group(required=True)
    binary.add_argument("--bootstrap", help="the function's binary")
    binary.add_argument("--crate", help="the function's crate: `cargo build` there, its binary "
                        "(wherever CARGO_TARGET_DIR and CARGO_BUILD_TARGET put it)")
    q.add_argument("--function-name", default="msk-handler")
    q.add_argument("--batch-size", type=int, default=10)
    q.add_argument("--batching-window", type=float, default=0.5,
                   help="Amazon MQ, Kafka: seconds to gather a batch in (Lambda's default: 0.5)")
    q.add_argument("--consumer-group", help="Kafka: the mapping's consumer group (ConsumerGroupId; "
                   "default: one of the topic's own, the same for every poller of it)")
    q.add_argument("--max-batches", type=int, help="stop after this many batches (default: until drained)")
    q.add_argument("--redelivery-delay", type=float, default=1.0,
                   help="seconds before reported records come again (SQS: whole seconds; "
                   "ActiveMQ: the broker's 1 s instead)")
    q.add_argument("--timeout", type=float, default=120, help="give up (exit 1) after this many seconds")
    q.add_argument("--invoke-timeout", type=float, default=60,
                   help="the function's timeout: each invocation's deadline, and how long its answer is waited for")
    q.add_argument("--rebalance-timeout", type=float,
                   help="Kafka: seconds one invocation may take before the group hands its partitions "
                   "to the other pollers (the member's max.poll.interval; default: --invoke-timeout + 30)")
    q.add_argument("--maximum-retry-attempts", type=int, default=-1,
                   help="Kafka: retries of a failed batch before its records are discarded (-1: infinite; "
                   "10 with --on-failure, as Lambda caps it)")
    q.add_argument("--maximum-record-age", type=float, default=-1,
                   help="Kafka: seconds; older records (by timestamp) are discarded unsent (-1: no limit)")
    q.add_argument("--bisect-batch-on-function-error", action="store_true",
                   help="Kafka: an invocation error splits the batch in two halves retried apart")
    q.add_argument("--on-failure", metavar="DESTINATION",
                   help="Kafka: where discarded records go: kafka://TOPIC on the same broker")
    q.add_argument("--kill-chance", type=float, default=0.0,
                   help="the chance of each invocation that its function is SIGKILLed mid-invocation")
    q.add_argument("--kill-within", type=float, default=0.3,
                   help="seconds into the invocation the kill comes at most (uniformly)")
    q.add_argument("--kill-seed", type=int, default=1, help="the storm's random seed")
    q.add_argument("--checkpoint", help="kept across runs: Kinesis's and DynamoDB Streams' shard "
                   "checkpoints, an SQS FIFO queue's held messages")
    q.add_argument("--transcript", help="append one JSON line per batch")
    q.add_argument("--events", help="append each event handed to the function (one JSON line each)")
    q.add_argument("--function-log", help="append the function's output here (default: stderr)")
    q.add_argument("--env", action="append", metavar="NAME=VALUE", help="the function's environment, "
                   "on top of this process's")

    args = parser.parse_args()
    if args.command == "create":
        return create(args)
    if args.command == "produce":
        return produce(args)
    if args.command == "read":
        return read(args)
    return poll(args)


if __name__ == "__main__":
    sys.exit(main())
