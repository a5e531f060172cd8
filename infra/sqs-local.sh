#!/usr/bin/env bash
# Starts or stops a local SQS (moto's server, installed by infra/tools.sh):
# the dead-letter queue parked records are forwarded to, in the tests, and
# the SQS queues and Kinesis streams infra/poller.py serves the function
# from (the same server answers both APIs: AWS_ENDPOINT_URL_KINESIS may
# name it too).
#
#   eval "$(infra/sqs-local.sh start)"   # exports AWS_ENDPOINT_URL_SQS
#   ...                                   #   and SQS_LOCAL_PID
#   infra/sqs-local.sh stop               # stops $SQS_LOCAL_PID
#
# start always starts a new server on a free loopback port and prints only
# `export NAME=VALUE` lines on stdout; stop stops the server named by
# SQS_LOCAL_PID, and nothing that is not a moto server.
# Log: $EXACTLY_ONCE_TOOLS/sqs-local.log (appended; infra/local-env.sh).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
mkdir -p "$EXACTLY_ONCE_TOOLS"
log_file="$EXACTLY_ONCE_TOOLS/sqs-local.log"
# moto: the tools' (infra/tools.sh), or one of your own on PATH.
server="$EXACTLY_ONCE_TOOLS/venv/bin/moto_server"
[[ -x "$server" ]] || server="$(command -v moto_server || echo "$server")"

log() { echo "sqs-local: $*" >&2; }

is_ours() {
  [[ -n "$1" && -r "/proc/$1/cmdline" ]] && grep -qa moto_server "/proc/$1/cmdline"
}

start() {
  [[ -x "$server" ]] || { log "moto is not installed: run infra/tools.sh"; exit 1; }
  local port pid
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  echo "--- $(date -u +%FT%TZ) port $port" >>"$log_file"
  "$server" -H 127.0.0.1 -p "$port" >>"$log_file" 2>&1 </dev/null &
  pid=$!
  local deadline=$((SECONDS + 60))
  until python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/moto-api/', timeout=2)" 2>/dev/null; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "exited during start-up; see $log_file"
      tail -n 20 "$log_file" >&2
      exit 1
    fi
    if ((SECONDS >= deadline)); then
      log "no answer on port $port after 60 s; stopping it"
      kill "$pid"
      exit 1
    fi
    sleep 0.2
  done
  log "started (pid $pid, port $port)"
  echo "export AWS_ENDPOINT_URL_SQS=http://127.0.0.1:$port"
  echo "export SQS_LOCAL_PID=$pid"
}

stop() {
  local pid="${SQS_LOCAL_PID:-}"
  if is_ours "$pid"; then
    kill "$pid"
    for _ in $(seq 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid"; fi
    log "stopped (pid $pid)"
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
