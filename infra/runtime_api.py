#!/usr/bin/env python3
"""A Lambda Runtime API stand-in: starts a function's `bootstrap` the way
Lambda does (AWS_LAMBDA_RUNTIME_API and the Lambda environment, on top of
the caller's), hands it each event in turn, and prints one JSON line per
event: {"event": FILE, "response": ...} or {"event": FILE, "error": ...}.

    infra/runtime_api.py --bootstrap .aws-sam/build/Function/bootstrap \\
        --event events/two-partitions.json --event events/not-a-batch-source.json

Exits 1 if the function exits, fails its init, or does not answer an event
within --timeout seconds. Implements the four routes a function calls
(invocation/next, invocation/ID/response, invocation/ID/error, init/error).

With --otlp it also stands in for the ADOT layer's collector: it sets
TRACING_EXPORT=otlp and OTEL_EXPORTER_OTLP_ENDPOINT to a receiver of its
own and, after the events, prints {"otlp": {"requests": N, "spans": [...]}}
with the span names found in the OTLP/HTTP protobuf requests it got.

infra/poller.py imports its `Function` (the binary kept warm between
invocations) to hand it the events it builds from a queue or a stream.
"""

import argparse
import collections
import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PREFIX = "/2018-06-01/runtime"
# How many of the function's last lines a Gone carries (it exited, or
# failed its init).
LAST_WORDS = 10


class Runtime:
    def __init__(self):
        self.events = queue.Queue()
        self.answers = queue.Queue()
        # When the function first asked for an invocation: its init is over.
        self.first_next = None
        self.asked = threading.Event()


def handler_for(runtime, function_arn):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, status, body=b"", headers=()):
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path != f"{PREFIX}/invocation/next":
                return self.reply(404)
            if not runtime.asked.is_set():
                runtime.first_next = time.monotonic()
                runtime.asked.set()
            request_id, body, timeout = runtime.events.get()
            deadline_ms = int(time.time() * 1000) + int(timeout * 1000)
            self.reply(200, body, [
                ("Content-Type", "application/json"),
                ("Lambda-Runtime-Aws-Request-Id", request_id),
                ("Lambda-Runtime-Deadline-Ms", str(deadline_ms)),
                ("Lambda-Runtime-Invoked-Function-Arn", function_arn),
                ("Lambda-Runtime-Trace-Id", f"Root=1-{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:24]};Sampled=0"),
            ])

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            parts = self.path[len(PREFIX):].strip("/").split("/")
            if parts == ["init", "error"]:
                runtime.answers.put(("init-error", None, body))
            elif len(parts) == 3 and parts[0] == "invocation" and parts[2] in ("response", "error"):
                runtime.answers.put((parts[2], parts[1], body))
            else:
                return self.reply(404)
            self.reply(202, b'{"status":"OK"}', [("Content-Type", "application/json")])

    return Handler


class Collector:
    """Receives OTLP/HTTP trace exports (POST /v1/traces, protobuf)."""

    def __init__(self):
        self.bodies = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/v1/traces":
                    collector.bodies.append(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def endpoint(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def span_names(self, names):
        """Which of `names` appear in the exports (protobuf keeps strings as UTF-8)."""
        return sorted(n for n in names if any(n.encode() in body for body in self.bodies))


class Gone(Exception):
    """The function cannot answer: it exited, failed its init, answered
    another request or did not answer in time. `detail` is the JSON line
    main() prints for it."""

    def __init__(self, detail):
        super().__init__(json.dumps(detail))
        self.detail = detail


class QuietServer(ThreadingHTTPServer):
    """A function killed while it posts (`close()`) resets its connection:
    not worth a traceback."""

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class Function:
    """A function's `bootstrap` started as Lambda starts it (the Lambda
    environment on top of `env`, AWS_LAMBDA_RUNTIME_API naming a Runtime API
    of its own), kept warm between invocations:

        function = Function("target/debug/msk-handler", env=dict(os.environ))
        kind, answer = function.invoke(b'{"Records": []}')  # "response" or "error"
        function.close()

    Its stdout and stderr go to `output` (a file object; this process's
    stderr when None); the last lines it wrote are its "last_words" when it
    exits or fails its init (a function that cannot start says why there).
    Used by main() below and by infra/poller.py."""

    def __init__(self, bootstrap, function_name="msk-handler", env=None, output=None, extra_env=None):
        self.runtime = Runtime()
        region = (env or os.environ).get("AWS_REGION", "us-east-1")
        arn = f"arn:aws:lambda:{region}:123456789012:function:{function_name}"
        self.server = QuietServer(("127.0.0.1", 0), handler_for(self.runtime, arn))
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        full_env = dict(os.environ if env is None else env)
        full_env.update({
            "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{self.server.server_address[1]}",
            "AWS_LAMBDA_FUNCTION_NAME": function_name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{function_name}",
            "AWS_LAMBDA_LOG_STREAM_NAME": "2026/11/23/[$LATEST]local",
            "AWS_LAMBDA_LOG_FORMAT": "JSON",
            "_HANDLER": "bootstrap",
            "LAMBDA_TASK_ROOT": os.path.dirname(os.path.abspath(bootstrap)),
        })
        full_env.update(extra_env or {})
        self.started = time.monotonic()
        self.process = subprocess.Popen([bootstrap], env=full_env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.last_lines = collections.deque(maxlen=LAST_WORDS)
        self.copier = threading.Thread(target=self.copy_output, daemon=True,
                                       args=(output if output is not None else sys.stderr,))
        self.copier.start()

    def copy_output(self, output):
        """The function's output, line by line, to `output`; the last lines
        kept."""
        sink = getattr(output, "buffer", output)
        for line in self.process.stdout:
            self.last_lines.append(line.decode("utf-8", errors="replace").rstrip())
            sink.write(line)
            sink.flush()

    def exited(self):
        """Gone: the function exited, with its exit code and last words."""
        self.copier.join(timeout=2)
        return Gone({"exited": self.process.returncode, "last_words": list(self.last_lines)})

    def init_seconds(self, timeout=30):
        """From `exec` to the function's first `invocation/next`."""
        if not self.runtime.asked.wait(timeout):
            raise Gone({"no invocation/next within": timeout})
        return self.runtime.first_next - self.started

    def invoke(self, body, timeout=60):
        """Hands `body` (bytes) to the function, whose timeout is `timeout`
        seconds (its deadline, Lambda-Runtime-Deadline-Ms); its answer as
        ("response" | "error", JSON). Raises Gone when there is none."""
        request_id = str(uuid.uuid4())
        self.runtime.events.put((request_id, body, timeout))
        started = time.monotonic()
        while True:
            try:
                kind, answered_id, answer = self.runtime.answers.get(timeout=0.2)
                break
            except queue.Empty:
                if self.process.poll() is not None:
                    raise self.exited()
                if time.monotonic() - started > timeout:
                    raise Gone({"timeout": timeout})
        answer = json.loads(answer or b"null")
        if kind == "init-error":
            # It exits next (a start-up error goes to stderr too): its last
            # words with it.
            try:
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            self.copier.join(timeout=0 if self.process.poll() is None else 2)
            raise Gone({"init_error": answer, "last_words": list(self.last_lines)})
        if answered_id != request_id:
            raise Gone({"wrong_request_id": answered_id})
        return ("response" if kind == "response" else "error"), answer

    def close(self):
        self.process.kill()
        self.process.wait()
        self.copier.join(timeout=2)
        self.server.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--event", action="append", required=True)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--function-name", default="msk-handler")
    parser.add_argument("--otlp", action="store_true", help="export spans to a receiver of this script")
    args = parser.parse_args()
    collector = Collector() if args.otlp else None
    extra = {"TRACING_EXPORT": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint()} if collector else {}
    function = Function(args.bootstrap, args.function_name, extra_env=extra)
    try:
        for path in args.event:
            with open(path, "rb") as f:
                body = f.read()
            try:
                kind, answer = function.invoke(body, args.timeout)
            except Gone as gone:
                print(json.dumps({"event": path, **gone.detail}))
                return 1
            print(json.dumps({"event": path, kind: answer}), flush=True)
        if collector:
            # The function flushes its spans after each invocation.
            # lambda_runtime names the invocation's span after the function.
            names = [args.function_name, "kafka batch", "payments process"]
            started = time.monotonic()
            while collector.span_names(names) != sorted(names) and time.monotonic() - started < 10:
                time.sleep(0.1)
            print(json.dumps({"otlp": {"requests": len(collector.bodies), "spans": collector.span_names(names)}}))
    finally:
        function.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
