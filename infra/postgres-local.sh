#!/usr/bin/env bash
# Starts, restarts or stops a throwaway PostgreSQL cluster of the machine's
# PostgreSQL packages (installed from Debian's packages when missing).
#
#   eval "$(infra/postgres-local.sh start)"   # exports DATABASE_URL, POSTGRES_LOCAL_CA,
#   ...                                        #   POSTGRES_LOCAL_DATA, POSTGRES_LOCAL_BIN
#   infra/postgres-local.sh restart            # an immediate stop (a crash), then a start
#   infra/postgres-local.sh stop               # stops it and deletes its data
#
# start always creates a new cluster (initdb into a temporary directory, trust
# authentication, listening on a free loopback port only), so concurrent
# callers never share one, and prints only `export NAME=VALUE` lines on stdout
# (progress goes to stderr) for the caller to eval. fsync is off (nothing
# here must survive the machine), synchronous_commit stays on: a crash of the
# server loses no acknowledged commit, which the restart tests rely on. TLS is
# on, with a certificate for 127.0.0.1 and localhost signed by a CA made by
# openssl for this cluster (POSTGRES_LOCAL_CA: the CA, to verify it); DATABASE_URL
# itself says sslmode=disable, and the TLS tests ask for TLS.
set -euo pipefail

log() { echo "postgres-local: $*" >&2; }

# The newest installed PostgreSQL's programs.
bin_dir() {
  local dir
  dir="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -V | tail -n 1)"
  if [[ -z "$dir" || ! -x "$dir/initdb" ]]; then
    log "no PostgreSQL server packages: installing postgresql from Debian's packages"
    if [[ "$(id -u)" -eq 0 ]]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2 ||
        { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2; }
    else
      sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >&2
    fi
    dir="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin | sort -V | tail -n 1)"
  fi
  echo "$dir"
}

# PostgreSQL refuses to run as root: as root, run its programs as the
# packages' `postgres` user.
as_owner() {
  if [[ "$(id -u)" -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

server_start() {
  local data="$1" bin="$2" port="$3"
  as_owner "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
    -o "-p $port -c listen_addresses=127.0.0.1 -k $data -c fsync=off -c max_connections=300 \
        -c ssl=on -c ssl_cert_file=$data/server.crt -c ssl_key_file=$data/server.key" \
    start >&2
}

# The loopback server's certificate (valid 2 days).
certificate() {
  local data="$1"
  if ! command -v openssl >/dev/null; then
    log "no openssl: installing it from Debian's packages"
    if [[ "$(id -u)" -eq 0 ]]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssl >&2
    else
      sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssl >&2
    fi
  fi
  # A CA of the test's own, and the server's certificate signed by it (a
  # verifier refuses a CA certificate used as the server's).
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=postgres-local-ca \
    -keyout "$data/ca.key" -out "$data/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=localhost \
    -keyout "$data/server.key" -out "$data/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n' >"$data/server.ext"
  openssl x509 -req -in "$data/server.csr" -CA "$data/ca.crt" -CAkey "$data/ca.key" \
    -CAcreateserial -days 2 -extfile "$data/server.ext" -out "$data/server.crt" 2>/dev/null
  chmod 600 "$data/server.key"
  if [[ "$(id -u)" -eq 0 ]]; then chown postgres: "$data/server.key" "$data/server.crt"; fi
}

start() {
  local bin data port
  bin="$(bin_dir)"
  data="$(mktemp -d /tmp/postgres-local.XXXXXX)"
  if [[ "$(id -u)" -eq 0 ]]; then chown postgres: "$data"; fi
  as_owner "$bin/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  certificate "$data"
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  echo "$port" >"$data/port"
  server_start "$data" "$bin" "$port"
  log "started ($bin, port $port, data $data)"
  echo "export DATABASE_URL=postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
  echo "export POSTGRES_LOCAL_CA=$data/ca.crt"
  echo "export POSTGRES_LOCAL_DATA=$data"
  echo "export POSTGRES_LOCAL_BIN=$bin"
}

# The cluster named by POSTGRES_LOCAL_DATA (only a directory this script made).
data_dir() {
  local data="${POSTGRES_LOCAL_DATA:-}"
  if [[ "$data" != /tmp/postgres-local.* || ! -f "$data/port" ]]; then
    log "POSTGRES_LOCAL_DATA does not name a cluster this script started"
    exit 1
  fi
  echo "$data"
}

restart() {
  local data bin
  data="$(data_dir)"
  bin="${POSTGRES_LOCAL_BIN:-$(bin_dir)}"
  as_owner "$bin/pg_ctl" -D "$data" -m immediate -w stop >&2
  server_start "$data" "$bin" "$(cat "$data/port")"
  log "restarted"
}

stop() {
  local data bin
  data="$(data_dir)" || return 0
  bin="${POSTGRES_LOCAL_BIN:-$(bin_dir)}"
  as_owner "$bin/pg_ctl" -D "$data" -m fast -w stop >&2 || true
  rm -rf "$data"
  log "stopped"
}

case "${1:-}" in
  start) start ;;
  restart) restart ;;
  stop) stop ;;
  *)
    echo "usage: $0 start|restart|stop" >&2
    exit 2
    ;;
esac
