#!/usr/bin/env bash
# Starts, restarts or stops a throwaway Kafka-protocol broker: tansu
# (crates.io, an Apache Kafka API compatible broker in Rust; `infra/tools.sh
# kafka` builds it once into $EXACTLY_ONCE_TOOLS, and start asks for it), in
# memory or (--durable) on S3, on a free loopback port: the broker
# infra/poller.py serves the function from as Lambda's Kafka event source
# mapping would (Amazon MSK, self-managed Kafka). docs/testing.md says why this broker and where it differs from
# Apache Kafka.
#
#   eval "$(infra/kafka-local.sh start)"   # exports KAFKA_BOOTSTRAP_SERVERS, KAFKA_LOCAL_DIR
#   eval "$(infra/kafka-local.sh start --durable)"   # the same, its log on S3
#   infra/kafka-local.sh restart           # kills it (SIGKILL) and starts it again
#   infra/kafka-local.sh stop              # stops it and deletes its files
#
# --durable keeps the broker's topics, records and consumer groups in a
# bucket of its own on the S3 at AWS_ENDPOINT_URL_S3 (moto's server, as
# infra/local-stack.sh exports it), so they outlive the broker's process:
# restart kills the broker as a crash would and starts it again on the same
# port, cluster and storage (a broker in memory restarts empty). Slower
# than memory (every write an S3 request): for the tests that restart it.
#
# start always starts a new broker, so concurrent callers never share one: a
# temporary directory holds its log and pid; its own cluster id. It prints
# only `export NAME=VALUE` lines on stdout (progress, and the start-up time,
# go to stderr). stop stops the broker named by KAFKA_LOCAL_DIR, nothing
# else.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"

log() { echo "kafka-local: $*" >&2; }

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Whether the broker answers the Kafka protocol: an ApiVersions request (key
# 18, version 0) gets its correlation id back with no error.
answers_kafka() {
  python3 - "$1" <<'PY' 2>/dev/null
import socket, struct, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2) as s:
    client = b"kafka-local"
    header = struct.pack(">hhih", 18, 0, 7, len(client)) + client
    s.sendall(struct.pack(">i", len(header)) + header)
    size, correlation, error = struct.unpack(">iih", s.recv(10))
    sys.exit(0 if correlation == 7 and error == 0 else 1)
PY
}

# Seconds (one decimal) since a `date +%s%N` reading.
seconds_since() {
  local ms=$((($(date +%s%N) - $1) / 1000000))
  printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

# Starts the broker of $dir (its port, its storage) and waits until it
# answers.
run_broker() {
  local dir="$1" port storage
  port="$(cat "$dir/port")" storage="$(cat "$dir/storage")"
  (
    if [[ "$storage" == s3://* ]]; then
      # object_store's S3 settings (tansu reads them from the environment).
      export AWS_ENDPOINT="$AWS_ENDPOINT_URL_S3" AWS_ALLOW_HTTP=true
      export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-test}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-test}"
      export AWS_REGION="${AWS_REGION:-${AWS_DEFAULT_REGION:-us-east-1}}"
    fi
    exec "$EXACTLY_ONCE_TOOLS/tansu/bin/tansu" broker --cluster-id "kafka-local-${dir##*.}" \
      --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
      --storage-engine "$storage"
  ) >>"$dir/broker.log" 2>&1 </dev/null &
  echo "$!" >"$dir/broker.pid"

  local deadline=$((SECONDS + 60))
  until answers_kafka "$port"; do
    if ! kill -0 "$(cat "$dir/broker.pid")" 2>/dev/null || ((SECONDS >= deadline)); then
      log "the broker did not answer on port $port; its log:"
      tail -n 30 "$dir/broker.log" >&2 || true
      KAFKA_LOCAL_DIR="$dir" stop
      exit 1
    fi
    sleep 0.1
  done
}

start() {
  local tansu="$EXACTLY_ONCE_TOOLS/tansu/bin/tansu" durable=false
  [[ "${1:-}" == --durable ]] && durable=true
  "$root/infra/tools.sh" kafka >&2
  [[ -x "$tansu" ]] || { log "no $tansu after infra/tools.sh kafka"; exit 1; }
  local dir port started
  started="$(date +%s%N)"
  dir="$(mktemp -d /tmp/kafka-local.XXXXXX)"
  port="$(free_port)"
  echo "$port" >"$dir/port"
  if $durable; then
    [[ -n "${AWS_ENDPOINT_URL_S3:-}" ]] || { log "--durable needs AWS_ENDPOINT_URL_S3 (an S3: infra/local-stack.sh exports moto's)"; rm -rf "$dir"; exit 1; }
    local bucket="kafka-local-${dir##*.}"
    bucket="${bucket,,}"
    "$EXACTLY_ONCE_TOOLS/venv/bin/python" -c 'import boto3, sys; boto3.client("s3", endpoint_url=sys.argv[1], region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test").create_bucket(Bucket=sys.argv[2])' \
      "$AWS_ENDPOINT_URL_S3" "$bucket" >&2
    echo "s3://$bucket/" >"$dir/storage"
  else
    echo "memory://tansu/" >"$dir/storage"
  fi
  run_broker "$dir"
  log "started in $(seconds_since "$started") s (127.0.0.1:$port, pid $(cat "$dir/broker.pid"), dir $dir)"
  echo "export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$port"
  echo "export KAFKA_LOCAL_DIR=$dir"
}

# The broker of KAFKA_LOCAL_DIR killed (SIGKILL, as a crash) and started
# again on its port and storage.
restart() {
  local dir="${KAFKA_LOCAL_DIR:?KAFKA_LOCAL_DIR names the broker to restart}" started
  started="$(date +%s%N)"
  kill_broker "$dir" KILL
  run_broker "$dir"
  log "restarted in $(seconds_since "$started") s (127.0.0.1:$(cat "$dir/port"), pid $(cat "$dir/broker.pid"), storage $(cat "$dir/storage"))"
}

# Stops the broker of $dir (SIGTERM, then SIGKILL after 5 s; $2=KILL at
# once): only ours, its command line naming its own port.
kill_broker() {
  local dir="$1" pid
  pid="$(cat "$dir/broker.pid" 2>/dev/null || true)"
  if [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] && grep -qaF "127.0.0.1:$(cat "$dir/port")" "/proc/$pid/cmdline"; then
    if [[ "${2:-}" != KILL ]]; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  fi
}

stop() {
  local dir="${KAFKA_LOCAL_DIR:?KAFKA_LOCAL_DIR names the broker to stop}"
  [[ -d "$dir" ]] || return 0
  kill_broker "$dir"
  rm -rf "$dir"
}

case "${1:-}" in
  start) start "${2:-}" ;;
  restart) restart ;;
  stop) stop ;;
  *) echo "usage: infra/kafka-local.sh start [--durable]|restart|stop" >&2; exit 2 ;;
esac
