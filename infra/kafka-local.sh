#!/usr/bin/env bash
# Starts or stops a throwaway Kafka-protocol broker: tansu (crates.io, an
# Apache Kafka API compatible broker in Rust; `infra/tools.sh kafka` builds
# it once into $EXACTLY_ONCE_TOOLS, and start asks for it), in memory, on a
# free loopback port: the broker infra/poller.py serves the function from
# as Lambda's Kafka event source mapping would (Amazon MSK, self-managed
# Kafka). docs/testing.md says why this broker and where it differs from
# Apache Kafka.
#
#   eval "$(infra/kafka-local.sh start)"   # exports KAFKA_BOOTSTRAP_SERVERS, KAFKA_LOCAL_DIR
#   infra/kafka-local.sh stop              # stops it and deletes its files
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

start() {
  local tansu="$EXACTLY_ONCE_TOOLS/tansu/bin/tansu"
  "$root/infra/tools.sh" kafka >&2
  [[ -x "$tansu" ]] || { log "no $tansu after infra/tools.sh kafka"; exit 1; }
  local dir port started
  started="$(date +%s%N)"
  dir="$(mktemp -d /tmp/kafka-local.XXXXXX)"
  port="$(free_port)"
  echo "$port" >"$dir/port"
  "$tansu" broker --cluster-id "kafka-local-${dir##*.}" \
    --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
    --storage-engine memory://tansu/ >"$dir/broker.log" 2>&1 </dev/null &
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
  log "started in $(seconds_since "$started") s (127.0.0.1:$port, pid $(cat "$dir/broker.pid"), dir $dir)"
  echo "export KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$port"
  echo "export KAFKA_LOCAL_DIR=$dir"
}

stop() {
  local dir="${KAFKA_LOCAL_DIR:?KAFKA_LOCAL_DIR names the broker to stop}" pid
  [[ -d "$dir" ]] || return 0
  pid="$(cat "$dir/broker.pid" 2>/dev/null || true)"
  # Only our broker: its command line names its own port.
  if [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] && grep -qaF "127.0.0.1:$(cat "$dir/port")" "/proc/$pid/cmdline"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: infra/kafka-local.sh start|stop" >&2; exit 2 ;;
esac
