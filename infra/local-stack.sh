# shellcheck shell=bash
# Sourced by infra/test.sh and infra/bench.sh (bash): the project's tools, the
# dummy AWS environment, a DynamoDB Local of the caller's own with the tables
# of template.yaml, a PostgreSQL cluster, a redis-server, a RabbitMQ node, an
# ActiveMQ broker and a Kafka broker of its own, all stopped when the caller
# exits.
#
#   source infra/local-stack.sh
#   local_stack IDEMPOTENCY_TABLE_NAME LEDGER_TABLE_NAME
#
# Exports AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL_SQS, IDEMPOTENCY_TABLE,
# LEDGER_TABLE, DATABASE_URL (the SQL tables take the same names; the
# PostgreSQL tests migrate them), REDIS_URL and REDIS_CLUSTER_URL, and
# puts $EXACTLY_ONCE_TOOLS/venv/bin (cargo-lambda; python3 with boto3, PyYAML,
# pika, stomp.py and kafka-python) on PATH.
# The batch sources of tests/processes/sources.rs (infra/poller.py): Kinesis on the
# same moto server as SQS (AWS_ENDPOINT_URL_KINESIS), DynamoDB Streams on
# DynamoDB Local's own streams (AWS_ENDPOINT_URL_DYNAMODB_STREAMS), Amazon
# MQ on the RabbitMQ node (RABBITMQ_URL, infra/rabbitmq-local.sh) and the
# ActiveMQ broker (ACTIVEMQ_STOMP_URL, infra/activemq-local.sh); Kafka on a
# tansu broker (KAFKA_BOOTSTRAP_SERVERS, infra/kafka-local.sh). FAKETIME_LIB:
# libfaketime, for a process whose clock runs ahead (infra/faketime-lib.sh).

# A step's heading, with how long the step before it took, the time since
# the first step, and the CPU the step used: its own processes' (user and
# system of this shell's children that ended, /proc/$$/stat) and the whole
# machine's (/proc/stat: with the deploy checks beside the tests, what both
# lanes used). A run is bound by CPU: docs/testing.md keeps these per step.
STEPS_STARTED="${STEPS_STARTED:-$(date +%s)}"
STEP_STARTED="$STEPS_STARTED"
STEP_NAME=""
STEP_TICKS="$(getconf CLK_TCK 2>/dev/null || echo 100)"
step_cpu() { # "OWN MACHINE" in seconds
  local own machine
  own="$(sed 's/^.*) //' "/proc/$$/stat" 2>/dev/null | awk -v hz="$STEP_TICKS" '{ printf "%d", ($14 + $15) / hz }')"
  machine="$(awk -v hz="$STEP_TICKS" '/^cpu / { printf "%d", ($2 + $3 + $4 + $7 + $8 + $9) / hz }' /proc/stat 2>/dev/null)"
  echo "${own:-0} ${machine:-0}"
}
read -r STEP_CPU_OWN STEP_CPU_MACHINE < <(step_cpu)
step() {
  local now own machine
  now=$(date +%s)
  read -r own machine < <(step_cpu)
  [[ -z $STEP_NAME ]] || printf '\n<== %s: %d s (%d s in all), CPU %d s (the machine %d s)\n' "$STEP_NAME" \
    "$((now - STEP_STARTED))" "$((now - STEPS_STARTED))" "$((own - STEP_CPU_OWN))" "$((machine - STEP_CPU_MACHINE))"
  STEP_NAME="$*" STEP_STARTED=$now STEP_CPU_OWN=$own STEP_CPU_MACHINE=$machine
  printf '\n==> %s\n' "$*"
}

local_stack() {
  local root
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  step "tools (infra/tools.sh)"
  "$root/infra/tools.sh"
  # shellcheck source=infra/local-env.sh
  source "$root/infra/local-env.sh"
  export PATH="$EXACTLY_ONCE_TOOLS/venv/bin:$PATH"

  step "DynamoDB Local (and its streams); moto's server: SQS (the dead-letter queue, a source), Kinesis, SNS and EventBridge"
  eval "$("$root/infra/dynamodb-local.sh" start)"
  eval "$("$root/infra/sqs-local.sh" start)"
  # The same moto server is every other AWS service the tests send to: the
  # Kinesis source, and the SNS, EventBridge and Kinesis destinations.
  export AWS_ENDPOINT_URL_KINESIS="$AWS_ENDPOINT_URL_SQS"
  export AWS_ENDPOINT_URL_SNS="$AWS_ENDPOINT_URL_SQS" AWS_ENDPOINT_URL_EVENTBRIDGE="$AWS_ENDPOINT_URL_SQS"
  # S3: the durable Kafka broker's storage (infra/kafka-local.sh start --durable).
  export AWS_ENDPOINT_URL_S3="$AWS_ENDPOINT_URL_SQS"
  export AWS_ENDPOINT_URL_DYNAMODB_STREAMS="$AWS_ENDPOINT_URL_DYNAMODB"
  # A container whose clock runs ahead (tests/processes/clock.rs): libfaketime.
  FAKETIME_LIB="$("$root/infra/faketime-lib.sh")"
  export FAKETIME_LIB
  # A slower machine on demand (docs/testing.md, "On a slower machine"):
  # SLOW_DYNAMODB_MS=200-600 puts DynamoDB Local behind a proxy that answers
  # every request that much later; CPU_HOG=1 keeps one core busy beside the
  # tests.
  local slowed=""
  if [[ -n "${SLOW_DYNAMODB_MS:-}" ]]; then
    local low="${SLOW_DYNAMODB_MS%-*}" high="${SLOW_DYNAMODB_MS#*-}" port
    exec {SLOW_PROXY_FD}< <(python3 "$root/infra/delay_proxy.py" \
      "${AWS_ENDPOINT_URL_DYNAMODB#http://}" "$low" "$high")
    read -r port <&"$SLOW_PROXY_FD"
    export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$port"
    slowed+="pkill -f 'infra/delay_proxy.py' || true; "
    step "DynamoDB Local behind a proxy answering every request ${low} to ${high} ms late (port $port)"
  fi
  if [[ "${CPU_HOG:-}" == "1" ]]; then
    taskset -c 0 bash -c 'while :; do :; done' &
    slowed+="kill $! || true; "
    step "a busy loop on core 0 beside the tests (pid $!)"
  fi

  step "PostgreSQL (infra/postgres-local.sh)"
  eval "$("$root/infra/postgres-local.sh" start)"
  step "Redis, and a Redis Cluster of 3 primaries (infra/redis-local.sh)"
  eval "$("$root/infra/redis-local.sh" start)"
  eval "$("$root/infra/redis-local.sh" start --cluster)"
  step "Amazon MQ's brokers: RabbitMQ (infra/rabbitmq-local.sh) and ActiveMQ (infra/activemq-local.sh)"
  eval "$("$root/infra/rabbitmq-local.sh" start)"
  eval "$("$root/infra/activemq-local.sh" start)"
  # Amazon MSK's and self-managed Kafka's: tansu, built once into the tools
  # (a debug build: infra/tools.sh kafka) on its first start.
  step "a Kafka broker (infra/kafka-local.sh)"
  eval "$("$root/infra/kafka-local.sh" start)"
  # Stops exactly the servers started above (DYNAMODB_LOCAL_PID, SQS_LOCAL_PID,
  # POSTGRES_LOCAL_DATA, REDIS_LOCAL_DIR, REDIS_CLUSTER_DIR, RABBITMQ_LOCAL_DIR,
  # ACTIVEMQ_LOCAL_DIR, KAFKA_LOCAL_DIR).
  # What the caller runs beside the servers (LOCAL_STACK_BEFORE_STOP: a
  # command) is stopped first.
  # shellcheck disable=SC2064 # expand $root now
  trap "eval \"\${LOCAL_STACK_BEFORE_STOP:-}\"; $slowed'$root/infra/dynamodb-local.sh' stop; '$root/infra/sqs-local.sh' stop; '$root/infra/postgres-local.sh' stop; '$root/infra/redis-local.sh' stop; REDIS_LOCAL_DIR='$REDIS_CLUSTER_DIR' '$root/infra/redis-local.sh' stop; '$root/infra/rabbitmq-local.sh' stop; '$root/infra/activemq-local.sh' stop; '$root/infra/kafka-local.sh' stop" EXIT
  echo "AWS_ENDPOINT_URL_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB"
  echo "AWS_ENDPOINT_URL_SQS=$AWS_ENDPOINT_URL_SQS"
  echo "AWS_ENDPOINT_URL_KINESIS=$AWS_ENDPOINT_URL_KINESIS"
  echo "AWS_ENDPOINT_URL_DYNAMODB_STREAMS=$AWS_ENDPOINT_URL_DYNAMODB_STREAMS"
  echo "DATABASE_URL=$DATABASE_URL"
  echo "REDIS_URL=$REDIS_URL"
  echo "REDIS_CLUSTER_URL=$REDIS_CLUSTER_URL"
  echo "RABBITMQ_URL=$RABBITMQ_URL"
  echo "ACTIVEMQ_STOMP_URL=$ACTIVEMQ_STOMP_URL"
  echo "KAFKA_BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP_SERVERS"

  step "tables from template.yaml"
  "$root/infra/local_tables.py" --table "IdempotencyTable=$1" --table "LedgerTable=$2"
  export IDEMPOTENCY_TABLE="$1" LEDGER_TABLE="$2"
}
