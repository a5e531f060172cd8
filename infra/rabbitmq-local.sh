#!/usr/bin/env bash
# Starts or stops a throwaway RabbitMQ node of the machine's rabbitmq-server
# package (installed from Debian's packages when missing): the broker
# infra/poller.py serves the function from as Lambda's event source mapping
# for Amazon MQ for RabbitMQ would.
#
#   eval "$(infra/rabbitmq-local.sh start)"   # exports RABBITMQ_URL, RABBITMQ_LOCAL_DIR
#   infra/rabbitmq-local.sh stop              # stops it and deletes its files
#
# start always starts a new node, so concurrent callers never share one: a
# temporary directory holds its configuration, database (mnesia, the quorum
# queues' Ra logs), logs and Erlang cookie (HOME); its own node name; its
# own epmd on a free loopback port (ERL_EPMD_PORT), so that it neither
# meets nor outlives another node's; AMQP and Erlang distribution on free
# loopback ports (RabbitMQ would take 25672 for the latter, the same for
# every node); no plugins (no management UI). The user guest (password guest) may connect from
# loopback, RabbitMQ's default. It prints only `export NAME=VALUE` lines on
# stdout (progress, and the start-up time, go to stderr). stop stops the node
# named by RABBITMQ_LOCAL_DIR and its epmd, nothing else.
set -euo pipefail

log() { echo "rabbitmq-local: $*" >&2; }

# Debian's scripts: /usr/sbin/rabbitmq-server switches to the user rabbitmq
# and its /var/lib/rabbitmq; the one under /usr/lib runs as the caller.
server=/usr/lib/rabbitmq/bin/rabbitmq-server

server_bin() {
  if [[ ! -x "$server" ]]; then
    log "no rabbitmq-server: installing rabbitmq-server from Debian's packages"
    local sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then sudo=(sudo); fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q rabbitmq-server >&2 ||
      { "${sudo[@]}" apt-get update -q >&2 &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q rabbitmq-server >&2; }
  fi
  [[ -x "$server" ]] || { log "$server is missing after the install"; exit 1; }
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Whether the node answers AMQP 0-9-1: its protocol header gets a
# Connection.Start method frame back.
answers_amqp() {
  python3 - "$1" <<'PY' 2>/dev/null
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2) as s:
    s.sendall(b"AMQP\x00\x00\x09\x01")
    frame = s.recv(11)
    # type 1 (method), channel 0, then class 10 method 10: Connection.Start
    sys.exit(0 if frame[:3] == b"\x01\x00\x00" and frame[7:11] == b"\x00\x0a\x00\x0a" else 1)
PY
}

# Seconds (one decimal) since a `date +%s%N` reading.
seconds_since() {
  local ms=$((($(date +%s%N) - $1) / 1000000))
  printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

start() {
  server_bin
  command -v epmd >/dev/null || { log "no epmd (Debian's erlang-base)"; exit 1; }
  local dir port dist_port epmd_port suffix started
  started="$(date +%s%N)"
  dir="$(mktemp -d /tmp/rabbitmq-local.XXXXXX)"
  suffix="${dir##*.}"
  port="$(free_port)"
  dist_port="$(free_port)"
  epmd_port="$(free_port)"
  echo "$port" >"$dir/port"
  printf '%s\n' "listeners.tcp.default = 127.0.0.1:$port" \
    "log.console = false" "log.file.level = info" >"$dir/rabbitmq.conf"
  echo "[]." >"$dir/enabled_plugins"
  # Read instead of /etc/rabbitmq/rabbitmq-env.conf (the system node's).
  : >"$dir/rabbitmq-env.conf"

  epmd -port "$epmd_port" -address 127.0.0.1 >"$dir/epmd.log" 2>&1 </dev/null &
  echo "$!" >"$dir/epmd.pid"

  HOME="$dir" ERL_EPMD_PORT="$epmd_port" \
    RABBITMQ_NODENAME="rabbit-local-$suffix@localhost" RABBITMQ_DIST_PORT="$dist_port" \
    RABBITMQ_CONF_ENV_FILE="$dir/rabbitmq-env.conf" \
    RABBITMQ_CONFIG_FILE="$dir/rabbitmq.conf" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$dir/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$dir/enabled_plugins" \
    RABBITMQ_PLUGINS_EXPAND_DIR="$dir/plugins-expand" \
    RABBITMQ_MNESIA_BASE="$dir/mnesia" \
    RABBITMQ_LOG_BASE="$dir/log" \
    RABBITMQ_PID_FILE="$dir/rabbitmq.pid" \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    "$server" >"$dir/server.out" 2>&1 </dev/null &
  echo "$!" >"$dir/wrapper.pid"

  local deadline=$((SECONDS + 90))
  until answers_amqp "$port"; do
    if ! kill -0 "$(cat "$dir/wrapper.pid")" 2>/dev/null || ((SECONDS >= deadline)); then
      log "the node did not answer on port $port; its output and log:"
      cat "$dir/server.out" >&2
      tail -n 30 "$dir"/log/*.log >&2 2>/dev/null || true
      RABBITMQ_LOCAL_DIR="$dir" stop
      exit 1
    fi
    sleep 0.1
  done
  log "started in $(seconds_since "$started") s (AMQP 127.0.0.1:$port, node rabbit-local-$suffix@localhost," \
    "distribution port $dist_port, epmd port $epmd_port, pid $(cat "$dir/rabbitmq.pid"), dir $dir)"
  echo "export RABBITMQ_URL=amqp://guest:guest@127.0.0.1:$port/%2F"
  echo "export RABBITMQ_LOCAL_DIR=$dir"
}

# Ends the process of PID_FILE if its command line contains PATTERN:
# SIGTERM, then SIGKILL after 15 s.
end_process() {
  local pid_file="$1" pattern="$2" pid
  pid="$(cat "$pid_file" 2>/dev/null || true)"
  [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] && grep -qaF -- "$pattern" "/proc/$pid/cmdline" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 150); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
}

stop() {
  local dir="${RABBITMQ_LOCAL_DIR:-}"
  if [[ "$dir" != /tmp/rabbitmq-local.* || ! -f "$dir/port" ]]; then
    log "RABBITMQ_LOCAL_DIR does not name a node this script started"
    return 0
  fi
  # The VM stops cleanly on SIGTERM; the wrapper script exits with it.
  end_process "$dir/rabbitmq.pid" "$dir"
  end_process "$dir/wrapper.pid" rabbitmq-server
  end_process "$dir/epmd.pid" epmd
  rm -rf "$dir"
  log "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
