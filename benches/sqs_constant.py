#!/usr/bin/env python3
"""An SQS whose service time does not grow with its queues: the benchmark's
stand-in for SQS in AWS, where a request costs its round trip and a few ms
whatever the queue holds (moto's server takes longer per message the more
its queue holds). It speaks SQS's JSON protocol for what the `announce`
benchmark sends on both sides, nothing more: CreateQueue, DeleteQueue,
SendMessage, SendMessageBatch and GetQueueAttributes
(ApproximateNumberOfMessages). Messages are counted, not kept.

    benches/sqs_constant.py --port 0   # prints the port it listens on
    benches/sqs_constant.py --port 0 --exit-with-parent   # and stops with its parent
"""

import argparse
import hashlib
import json
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

QUEUES: dict[str, int] = {}
LOCK = threading.Lock()


def md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


def queue_of(request: dict) -> str:
    return request["QueueUrl"].rstrip("/").rsplit("/", 1)[-1]


def create_queue(request, host):
    with LOCK:
        QUEUES.setdefault(request["QueueName"], 0)
    return {"QueueUrl": f"http://{host}/000000000000/{request['QueueName']}"}


def delete_queue(request, host):
    with LOCK:
        QUEUES.pop(queue_of(request), None)
    return {}


def sent(body: str) -> dict:
    return {"MessageId": str(uuid.uuid4()), "MD5OfMessageBody": md5(body)}


def send_message(request, host):
    with LOCK:
        QUEUES[queue_of(request)] += 1
    return sent(request["MessageBody"])


def send_message_batch(request, host):
    entries = request["Entries"]
    with LOCK:
        QUEUES[queue_of(request)] += len(entries)
    return {"Successful": [{"Id": e["Id"], **sent(e["MessageBody"])} for e in entries], "Failed": []}


def get_queue_attributes(request, host):
    with LOCK:
        held = QUEUES[queue_of(request)]
    return {"Attributes": {"ApproximateNumberOfMessages": str(held)}}


ACTIONS = {
    "CreateQueue": create_queue,
    "DeleteQueue": delete_queue,
    "SendMessage": send_message,
    "SendMessageBatch": send_message_batch,
    "GetQueueAttributes": get_queue_attributes,
}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave as they are written (no 40 ms delayed-ACK wait).
    disable_nagle_algorithm = True

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length) or b"{}")
        action = self.headers.get("X-Amz-Target", "").rsplit(".", 1)[-1]
        try:
            answer, status = ACTIONS[action](request, self.headers.get("Host", "localhost")), 200
        except KeyError as missing:
            answer = {"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": f"{action}: {missing}"}
            status = 400
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--exit-with-parent", action="store_true")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(server.server_address[1], flush=True)
    if args.exit_with_parent:
        threading.Thread(target=exit_with, args=(os.getppid(),), daemon=True).start()
    server.serve_forever()


def exit_with(parent: int):
    """Stops the process once `parent` is gone (it is then re-parented)."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(0)


if __name__ == "__main__":
    main()
