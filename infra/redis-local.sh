#!/usr/bin/env bash
# Starts, restarts or stops a throwaway redis-server of the machine's Redis
# packages (installed from Debian's packages when missing).
#
#   eval "$(infra/redis-local.sh start)"          # exports REDIS_URL, REDIS_LOCAL_DIR
#   eval "$(infra/redis-local.sh start --aof)"    # the same, with AOF and appendfsync always
#   eval "$(infra/redis-local.sh start --tls)"    # TLS only (rediss://) and a password;
#                                                 #   also exports REDIS_LOCAL_CA
#   eval "$(infra/redis-local.sh start --cluster)" # a Redis Cluster of 3 primaries; exports
#                                                 #   REDIS_CLUSTER_URL and REDIS_CLUSTER_DIR
#                                                 #   (stop: REDIS_LOCAL_DIR=$REDIS_CLUSTER_DIR ... stop)
#   infra/redis-local.sh restart                  # SIGKILL (a crash), then a start
#   infra/redis-local.sh stop                     # stops it and deletes its files
#
# start always starts a new server (a temporary directory, a free loopback
# port), so concurrent callers never share one, and prints only
# `export NAME=VALUE` lines on stdout (progress goes to stderr). Without
# --aof, the server keeps nothing on disk (`save ""`, `appendonly no`): a
# restart loses everything, which is what Redis does by default between
# snapshots. With --aof, every write is fsynced before it is acknowledged
# (`appendfsync always`): a restart loses nothing acknowledged. With --tls,
# the server listens only for TLS, with a certificate for 127.0.0.1 signed by
# a CA made by openssl for this server (REDIS_LOCAL_CA), and asks for the
# password in REDIS_URL (AUTH).
set -euo pipefail

log() { echo "redis-local: $*" >&2; }

server_bin() {
  if ! command -v redis-server >/dev/null; then
    log "no redis-server: installing redis-server from Debian's packages"
    local sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then sudo=(sudo); fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >&2 ||
      { "${sudo[@]}" apt-get update -q >&2 &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q redis-server >&2; }
  fi
  command -v redis-server
}

server_start() {
  local dir="$1"
  "$(server_bin)" "$dir/redis.conf" >&2
  for _ in $(seq 1 100); do
    if [[ -s "$dir/redis.pid" ]] && grep -q "Ready to accept connections" "$dir/server.log" 2>/dev/null; then
      return 0
    fi
    sleep 0.05
  done
  log "redis-server did not answer; its log:"
  cat "$dir/server.log" >&2
  exit 1
}

# The loopback server's certificate (valid 2 days), signed by a CA of its own.
certificate() {
  local dir="$1"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=redis-local-ca \
    -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=localhost \
    -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n' >"$dir/server.ext"
  openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -days 2 -extfile "$dir/server.ext" -out "$dir/server.crt" 2>/dev/null
}

# A free loopback port whose cluster bus port (port + 10000) is free too.
free_port() {
  python3 - <<'PY'
import socket
while True:
    a = socket.socket(); a.bind(("127.0.0.1", 0)); port = a.getsockname()[1]
    if port + 10000 > 65535:
        a.close(); continue
    b = socket.socket()
    try:
        b.bind(("127.0.0.1", port + 10000))
    except OSError:
        a.close(); continue
    print(port); break
PY
}

# Three primaries (no replicas) joined into one cluster; every node's
# directory under one parent, so that stop ends them all.
start_cluster() {
  local dir node port ports=()
  server_bin >/dev/null
  dir="$(mktemp -d /tmp/redis-local.XXXXXX)"
  for node in 1 2 3; do
    port="$(free_port)"
    ports+=("127.0.0.1:$port")
    mkdir -p "$dir/node$node"
    printf '%s\n' "port $port" "bind 127.0.0.1" "dir $dir/node$node" 'save ""' "appendonly no" \
      "cluster-enabled yes" "cluster-config-file nodes.conf" "cluster-node-timeout 2000" \
      "daemonize yes" "pidfile $dir/node$node/redis.pid" "logfile $dir/node$node/server.log" \
      >"$dir/node$node/redis.conf"
    echo "$port" >"$dir/node$node/port"
    server_start "$dir/node$node"
  done
  echo "${ports[0]#127.0.0.1:}" >"$dir/port"
  redis-cli --cluster create "${ports[@]}" --cluster-replicas 0 --cluster-yes >&2
  local ready
  for _ in $(seq 1 200); do
    ready=0
    for node in "${ports[@]}"; do
      if redis-cli -p "${node#127.0.0.1:}" cluster info 2>/dev/null | grep -q cluster_state:ok; then
        ready=$((ready + 1))
      fi
    done
    if ((ready == 3)); then
      log "started a cluster of 3 primaries (${ports[*]}, dir $dir)"
      echo "export REDIS_CLUSTER_URL=redis://${ports[0]}"
      echo "export REDIS_CLUSTER_DIR=$dir"
      return 0
    fi
    sleep 0.05
  done
  log "the cluster did not become ready"
  exit 1
}

start() {
  local dir port persistence aof=false tls=false
  for option in "$@"; do
    case "$option" in
      --cluster) start_cluster; return ;;
      --aof) aof=true ;;
      --tls) tls=true ;;
      *) log "unknown option $option"; exit 2 ;;
    esac
  done
  server_bin >/dev/null
  dir="$(mktemp -d /tmp/redis-local.XXXXXX)"
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  echo "$port" >"$dir/port"
  persistence="no persistence"
  {
    if $tls; then
      certificate "$dir"
      echo "port 0"
      echo "tls-port $port"
      echo "tls-cert-file $dir/server.crt"
      echo "tls-key-file $dir/server.key"
      echo "tls-ca-cert-file $dir/ca.crt"
      echo "tls-auth-clients no"
      echo "requirepass local-secret"
    else
      echo "port $port"
    fi
    echo "bind 127.0.0.1"
    echo "dir $dir"
    echo 'save ""'
    if $aof; then
      persistence="AOF, appendfsync always"
      printf 'appendonly yes\nappendfsync always\n'
    else
      echo "appendonly no"
    fi
    echo "daemonize yes"
    echo "pidfile $dir/redis.pid"
    echo "logfile $dir/server.log"
  } >"$dir/redis.conf"
  server_start "$dir"
  log "started (port $port, $persistence, dir $dir)"
  if $tls; then
    echo "export REDIS_URL=rediss://default:local-secret@127.0.0.1:$port"
    echo "export REDIS_LOCAL_CA=$dir/ca.crt"
  else
    echo "export REDIS_URL=redis://127.0.0.1:$port"
  fi
  echo "export REDIS_LOCAL_DIR=$dir"
}

# The server named by REDIS_LOCAL_DIR (only a directory this script made).
server_dir() {
  local dir="${REDIS_LOCAL_DIR:-}"
  if [[ "$dir" != /tmp/redis-local.* || ! -f "$dir/port" ]]; then
    log "REDIS_LOCAL_DIR does not name a server this script started"
    exit 1
  fi
  echo "$dir"
}

kill_server() {
  local dir="$1" signal="$2" pid
  pid="$(cat "$dir/redis.pid" 2>/dev/null || true)"
  if [[ -n "$pid" ]]; then
    kill "-$signal" "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
  fi
}

restart() {
  local dir
  dir="$(server_dir)"
  kill_server "$dir" KILL
  # A fresh log and pid file, so that the start waits for the new server.
  rm -f "$dir/redis.pid"
  mv "$dir/server.log" "$dir/server.log.before-restart"
  server_start "$dir"
  log "restarted after SIGKILL"
}

stop() {
  local dir node
  dir="$(server_dir)" || return 0
  kill_server "$dir" TERM
  for node in "$dir"/node*/; do
    if [[ -d "$node" ]]; then kill_server "$node" TERM; fi
  done
  rm -rf "$dir"
  log "stopped"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  restart) restart ;;
  stop) stop ;;
  *)
    echo "usage: $0 start [--aof] [--tls]|restart|stop" >&2
    exit 2
    ;;
esac
