#!/usr/bin/env bash
# Starts or stops a throwaway ActiveMQ 5 broker of the machine's activemq
# package (installed from Debian's packages when missing): the broker
# infra/poller.py serves the function from as Lambda's event source mapping
# for Amazon MQ for ActiveMQ would.
#
#   eval "$(infra/activemq-local.sh start)"   # exports ACTIVEMQ_STOMP_URL
#                                             #   (stomp://127.0.0.1:PORT), ACTIVEMQ_LOCAL_DIR
#   infra/activemq-local.sh stop              # stops it and deletes its files
#
# start always starts a new broker, so concurrent callers never share one:
# a temporary directory holds its activemq.xml, KahaDB store, job scheduler
# store and log; one transport connector, STOMP, on a free loopback port
# (no OpenWire, no web console: Jetty is never loaded); JMX off; a heap of
# 256 MB. It prints only `export NAME=VALUE` lines on stdout (progress, and
# the start-up time, go to stderr). stop stops the broker named by
# ACTIVEMQ_LOCAL_DIR, nothing else.
#
# Redelivery and dead letters are the broker's own, as Lambda's consumer
# sees them on Amazon MQ (ActiveMQ's defaults: 6 redeliveries, then the
# dead-letter queue):
# - every queue's dead-letter queue is its own, DLQ.<queue>
#   (individualDeadLetterStrategy), not the shared ActiveMQ.DLQ;
# - a STOMP NACK is a poison acknowledgement (ActiveMQ 5 sends the message
#   straight to the dead-letter queue); the redeliveryPlugin turns it into a
#   redelivery 1 s later (through the job scheduler, hence schedulerSupport)
#   until the message was redelivered 6 times (maximumRedeliveries): the
#   7th NACK dead-letters it. The copy it redelivers keeps the message id and
#   comes with `redelivered:true` and the properties redeliveryDelay and
#   scheduledJobId.
set -euo pipefail

log() { echo "activemq-local: $*" >&2; }

home=/usr/share/activemq
MAX_REDELIVERIES=6
REDELIVERY_DELAY_MS=1000 # the redeliveryPlugin refuses less than 1 s

server_bin() {
  if [[ ! -f "$home/bin/activemq.jar" ]]; then
    log "no activemq: installing activemq from Debian's packages"
    local sudo=()
    if [[ "$(id -u)" -ne 0 ]]; then sudo=(sudo); fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q activemq >&2 ||
      { "${sudo[@]}" apt-get update -q >&2 &&
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q activemq >&2; }
  fi
  [[ -f "$home/bin/activemq.jar" ]] || { log "$home/bin/activemq.jar is missing after the install"; exit 1; }
  command -v java >/dev/null || { log "no java (Debian's default-jre-headless)"; exit 1; }
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Whether the broker answers STOMP: a CONNECT frame gets CONNECTED back.
answers_stomp() {
  python3 - "$1" <<'PY' 2>/dev/null
import socket, sys
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2) as s:
    s.sendall(b"CONNECT\naccept-version:1.1\nhost:localhost\n\n\x00")
    answer = s.recv(9)
    s.sendall(b"DISCONNECT\n\n\x00")
    sys.exit(0 if answer == b"CONNECTED" else 1)
PY
}

# Seconds (one decimal) since a `date +%s%N` reading.
seconds_since() {
  local ms=$((($(date +%s%N) - $1) / 1000000))
  printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100))
}

write_config() {
  local dir="$1" port="$2"
  cat >"$dir/conf/activemq.xml" <<EOF
<beans xmlns="http://www.springframework.org/schema/beans"
  xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
  xsi:schemaLocation="http://www.springframework.org/schema/beans http://www.springframework.org/schema/beans/spring-beans.xsd
  http://activemq.apache.org/schema/core http://activemq.apache.org/schema/core/activemq-core.xsd">
  <broker xmlns="http://activemq.apache.org/schema/core" brokerName="activemq-local"
          useJmx="false" advisorySupport="false" schedulerSupport="true" dataDirectory="$dir/data">
    <destinationPolicy>
      <policyMap>
        <policyEntries>
          <policyEntry queue=">">
            <deadLetterStrategy>
              <individualDeadLetterStrategy queuePrefix="DLQ." useQueueForQueueMessages="true"/>
            </deadLetterStrategy>
          </policyEntry>
        </policyEntries>
      </policyMap>
    </destinationPolicy>
    <plugins>
      <redeliveryPlugin fallbackToDeadLetter="true" sendToDlqIfMaxRetriesExceeded="true">
        <redeliveryPolicyMap>
          <redeliveryPolicyMap>
            <defaultEntry>
              <redeliveryPolicy maximumRedeliveries="$MAX_REDELIVERIES"
                                initialRedeliveryDelay="$REDELIVERY_DELAY_MS" redeliveryDelay="$REDELIVERY_DELAY_MS"/>
            </defaultEntry>
          </redeliveryPolicyMap>
        </redeliveryPolicyMap>
      </redeliveryPlugin>
    </plugins>
    <persistenceAdapter>
      <kahaDB directory="$dir/data/kahadb"/>
    </persistenceAdapter>
    <systemUsage>
      <systemUsage>
        <memoryUsage><memoryUsage limit="64 mb"/></memoryUsage>
        <storeUsage><storeUsage limit="1 gb"/></storeUsage>
        <tempUsage><tempUsage limit="1 gb"/></tempUsage>
        <jobSchedulerUsage><jobSchedulerUsage limit="1 gb"/></jobSchedulerUsage>
      </systemUsage>
    </systemUsage>
    <transportConnectors>
      <transportConnector name="stomp" uri="stomp://127.0.0.1:$port"/>
    </transportConnectors>
  </broker>
</beans>
EOF
  # Debian's broker logs through log4j 1.2 (found on the classpath: conf/).
  printf '%s\n' "log4j.rootLogger=INFO, file" \
    "log4j.appender.file=org.apache.log4j.FileAppender" \
    "log4j.appender.file.File=$dir/data/activemq.log" \
    "log4j.appender.file.layout=org.apache.log4j.PatternLayout" \
    "log4j.appender.file.layout.ConversionPattern=%d | %-5p | %m | %c | %t%n" \
    >"$dir/conf/log4j.properties"
}

start() {
  server_bin
  local dir port pid started
  started="$(date +%s%N)"
  dir="$(mktemp -d /tmp/activemq-local.XXXXXX)"
  mkdir -p "$dir/conf" "$dir/data"
  port="$(free_port)"
  echo "$port" >"$dir/port"
  write_config "$dir" "$port"
  # What Debian's /usr/bin/activemq runs, without its /var/lib/activemq.
  java -Xms64m -Xmx256m -XX:+UseSerialGC \
    --add-opens java.base/java.lang=ALL-UNNAMED \
    -Dactivemq.classpath="$dir/conf" -Dactivemq.home="$home" -Dactivemq.base="$dir" \
    -Dactivemq.conf="$dir/conf" -Dactivemq.data="$dir/data" \
    -jar "$home/bin/activemq.jar" start "xbean:file:$dir/conf/activemq.xml" \
    >"$dir/server.out" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$dir/activemq.pid"

  local deadline=$((SECONDS + 90))
  until answers_stomp "$port"; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
      log "the broker did not answer on port $port; its output and log:"
      cat "$dir/server.out" >&2
      tail -n 30 "$dir/data/activemq.log" >&2 2>/dev/null || true
      ACTIVEMQ_LOCAL_DIR="$dir" stop
      exit 1
    fi
    sleep 0.1
  done
  log "started in $(seconds_since "$started") s (STOMP 127.0.0.1:$port, pid $pid, dir $dir)"
  echo "export ACTIVEMQ_STOMP_URL=stomp://127.0.0.1:$port"
  echo "export ACTIVEMQ_LOCAL_DIR=$dir"
}

stop() {
  local dir="${ACTIVEMQ_LOCAL_DIR:-}" pid
  if [[ "$dir" != /tmp/activemq-local.* || ! -f "$dir/port" ]]; then
    log "ACTIVEMQ_LOCAL_DIR does not name a broker this script started"
    return 0
  fi
  pid="$(cat "$dir/activemq.pid" 2>/dev/null || true)"
  # Only the java process started with this directory: SIGTERM (the broker
  # stops cleanly), SIGKILL after 15 s.
  if [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] && grep -qaF -- "$dir/conf" "/proc/$pid/cmdline"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 150); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
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
