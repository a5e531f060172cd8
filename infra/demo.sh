#!/usr/bin/env bash
# The demo: runs the Lambda function locally (cargo lambda watch) against
# DynamoDB Local (or PostgreSQL, or Redis) and sends it the sample events of events/,
# one after another, printing each response and the ledger and idempotency
# tables after each step.
#
#   infra/demo.sh                   # IDEMPOTENCY_STORE=dynamodb
#   infra/demo.sh --store postgres  # IDEMPOTENCY_STORE=postgres
#   infra/demo.sh --store redis     # IDEMPOTENCY_STORE=redis
#   infra/demo.sh --source sqs      # the function on a queue, not MSK events:
#                                   #   sqs, sqs-fifo, kinesis, dynamodb-streams,
#                                   #   rabbitmq or activemq (with --store as well)
#   infra/demo.sh --source msk      # MSK in, MSK out: a topic of a Kafka broker in,
#                                   #   each payment announced to another topic
#
# With --source, the function's binary (cargo build, debug) is served by
# infra/poller.py, a local stand-in for Lambda's event source mapping, on a
# real local server: moto's (infra/sqs-local.sh) for SQS and Kinesis, the
# stream of a table of DynamoDB Local for DynamoDB Streams, a RabbitMQ node
# (infra/rabbitmq-local.sh) or an ActiveMQ broker (infra/activemq-local.sh)
# for Amazon MQ, a Kafka-protocol broker (infra/kafka-local.sh) for MSK. It
# produces the payments of events/<source>.json, a poison
# record, and the payments again (a producer retrying them all), polls until
# drained, and checks the balances against events/README.md's and what the
# poller saw (every batch answered, nothing left reported, each record
# delivered once). Amazon MQ has no partial batch response, so it checks
# more: the poison was parked (POISON_POLICY=park: stored FAILED, its batch
# answered), nothing went to the broker's dead-letter queue, and the
# function's metrics count the payments sent again as duplicates. MSK
# (events/two-partitions.json) also announces each applied payment to the
# topic ledger-events-demo (LEDGER_EVENTS_DESTINATION=kafka://...) and
# checks what reached it: one record per payment, keyed by its account,
# its id in the header idempotency-key.
#
# Installs the tools first (infra/tools.sh), starts a DynamoDB Local of its
# own (or a throwaway PostgreSQL cluster, infra/postgres-local.sh, or a
# throwaway redis-server, infra/redis-local.sh), recreates
# the tables idempotency-demo and ledger-demo (on PostgreSQL: migrated by
# `exactly-once-ops migrate` into idempotency_demo and ledger_demo), and stops
# everything it started when it ends, however it ends. Checks every response
# and the final balances against what the events imply; exits 1 when one
# differs. The function's log: $EXACTLY_ONCE_TOOLS/demo/watch.log (with
# --source: function.log beside it).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
cd "$root"

READY_TIMEOUT=${DEMO_READY_TIMEOUT:-600} # seconds for the first build and start
store=dynamodb
source=""
usage() {
  echo "usage: $0 [--store dynamodb|postgres|redis]" \
    "[--source sqs|sqs-fifo|kinesis|dynamodb-streams|rabbitmq|activemq|msk]" >&2
  exit 2
}
while (($# > 0)); do
  case "$1" in
    --store)
      store="${2:-}"
      [[ "$store" == dynamodb || "$store" == postgres || "$store" == redis ]] || usage
      shift 2
      ;;
    --source)
      source="${2:-}"
      [[ "$source" == sqs || "$source" == sqs-fifo || "$source" == kinesis ||
        "$source" == dynamodb-streams || "$source" == rabbitmq || "$source" == activemq ||
        "$source" == msk ]] || usage
      shift 2
      ;;
    *) usage ;;
  esac
done
if [[ "$store" == postgres ]]; then
  IDEMPOTENCY_TABLE=idempotency_demo
  LEDGER_TABLE=ledger_demo
else
  IDEMPOTENCY_TABLE=idempotency-demo
  LEDGER_TABLE=ledger-demo
fi
work="$EXACTLY_ONCE_TOOLS/demo"
watch_log="$work/watch.log"

bold() { if [[ -t 1 ]]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }
step() { printf '\n'; bold "==> $*"; }
now_ms() { date +%s%3N; }

watch_pid=""
started_ddb=false
started_pg=false
started_redis=false
started_moto=false
started_rabbitmq=false
started_activemq=false
started_kafka=false
cleanup() {
  local status=$?
  if [[ -n "$watch_pid" ]] && kill -0 "$watch_pid" 2>/dev/null; then
    # cargo lambda watch runs in its own process group (setsid), with the
    # cargo run and the function it started: stop the whole group.
    kill -TERM -- "-$watch_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$watch_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$watch_pid" 2>/dev/null || true
    echo "demo: stopped cargo lambda watch (pid $watch_pid)"
  fi
  if $started_ddb; then
    infra/dynamodb-local.sh stop || true
  fi
  if $started_pg; then
    infra/postgres-local.sh stop || true
  fi
  if $started_redis; then
    infra/redis-local.sh stop || true
  fi
  if $started_moto; then
    infra/sqs-local.sh stop || true
  fi
  if $started_rabbitmq; then
    infra/rabbitmq-local.sh stop || true
  fi
  if $started_activemq; then
    infra/activemq-local.sh stop || true
  fi
  if $started_kafka; then
    infra/kafka-local.sh stop || true
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "tools (infra/tools.sh)"
infra/tools.sh
export PATH="$EXACTLY_ONCE_TOOLS/venv/bin:$PATH"
mkdir -p "$work"

step "sample events are up to date (events/generate.py --check)"
python3 events/generate.py --check
echo "events/: up to date"

store_env=()
if [[ "$store" == postgres ]]; then
  step "PostgreSQL (infra/postgres-local.sh)"
  started_pg=true
  eval "$(infra/postgres-local.sh start)"
  echo "DATABASE_URL=$DATABASE_URL"
  psql_demo() { "$POSTGRES_LOCAL_BIN/psql" "${DATABASE_URL%%\?*}" -X -q -v ON_ERROR_STOP=1 "$@"; }

  step "tables $IDEMPOTENCY_TABLE and $LEDGER_TABLE (exactly-once-ops migrate)"
  IDEMPOTENCY_STORE=postgres IDEMPOTENCY_TABLE="$IDEMPOTENCY_TABLE" \
    cargo run -q --bin exactly-once-ops -- migrate --ledger-table "$LEDGER_TABLE"
  store_env=(--env-var "IDEMPOTENCY_STORE=postgres" --env-var "DATABASE_URL=$DATABASE_URL")
elif [[ "$store" == redis ]]; then
  step "Redis (infra/redis-local.sh)"
  started_redis=true
  eval "$(infra/redis-local.sh start)"
  echo "REDIS_URL=$REDIS_URL"
  redis_demo() { redis-cli -u "$REDIS_URL" "$@"; }
  store_env=(--env-var "IDEMPOTENCY_STORE=redis" --env-var "REDIS_URL=$REDIS_URL")
else
  step "DynamoDB Local"
  # Always a server of the demo's own (infra/dynamodb-local.sh start never
  # reuses one), stopped by cleanup.
  started_ddb=true
  eval "$(infra/dynamodb-local.sh start)"
  export AWS_ENDPOINT_URL_DYNAMODB
  echo "AWS_ENDPOINT_URL_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB"

  step "tables $IDEMPOTENCY_TABLE and $LEDGER_TABLE (fresh)"
  infra/show_tables.py --idempotency "$IDEMPOTENCY_TABLE" --ledger "$LEDGER_TABLE" --drop
  infra/local_tables.py --table "IdempotencyTable=$IDEMPOTENCY_TABLE" --table "LedgerTable=$LEDGER_TABLE"
  store_env=(--env-var "AWS_ENDPOINT_URL_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB")
fi

show() {
  if [[ "$store" == redis ]]; then
    local key
    echo "ledger ($LEDGER_TABLE:<account_id>):"
    for key in $(redis_demo --scan --pattern "$LEDGER_TABLE:*" | sort); do
      echo "  $key $(redis_demo hmget "$key" balance_cents payment_count | paste -sd' ')"
    done
    echo "keys ($IDEMPOTENCY_TABLE:<pk>) by status:"
    for key in $(redis_demo --scan --pattern "$IDEMPOTENCY_TABLE:*"); do
      redis_demo hget "$key" status
    done | sort | uniq -c | sed 's/^/ /'
  elif [[ "$store" == postgres ]]; then
    psql_demo -c "SELECT account_id, balance_cents, payment_count FROM $LEDGER_TABLE ORDER BY account_id" \
      -c "SELECT status, count(*) AS keys FROM $IDEMPOTENCY_TABLE GROUP BY status ORDER BY status" \
      -c "SELECT pk, status, version, attempts, origin, error FROM $IDEMPOTENCY_TABLE \
          WHERE status <> 'COMPLETED' OR (SELECT count(*) FROM $IDEMPOTENCY_TABLE) <= 40 ORDER BY pk"
  else
    infra/show_tables.py --ledger "$LEDGER_TABLE" --idempotency "$IDEMPOTENCY_TABLE" --max-rows 40
  fi
}

# check_balances ACCOUNT=CENTS[|CENTS...]...: each account's balance is one of
# the listed values (0 for an absent account); 1 when one is not.
check_balances() {
  if [[ "$store" == dynamodb ]]; then
    local args=()
    for e in "$@"; do args+=(--expect "$e"); done
    infra/show_tables.py --ledger "$LEDGER_TABLE" "${args[@]}"
    return
  fi
  local e account allowed balance wrong=0
  for e in "$@"; do
    account="${e%%=*}" allowed="${e#*=}"
    if [[ "$store" == redis ]]; then
      balance="$(redis_demo hget "$LEDGER_TABLE:$account" balance_cents)"
      balance="${balance:-0}"
    else
      # Variables are interpolated in psql's input, not in -c.
      balance="$(psql_demo -At -v account="$account" <<<"SELECT coalesce((SELECT balance_cents \
        FROM $LEDGER_TABLE WHERE account_id = :'account'), 0)")"
    fi
    if [[ "|$allowed|" == *"|$balance|"* ]]; then
      echo "$account: $balance as expected"
    else
      echo "$account: $balance, expected $allowed"
      wrong=1
    fi
  done
  return "$wrong"
}

# The demo on another batch source (--source): the function's binary served
# by infra/poller.py on a local queue or stream.
source_demo() {
  local name=payments-demo file="events/$source.json" keys records
  [[ "$source" == sqs-fifo ]] && name=payments-demo.fifo
  [[ "$source" == msk ]] && file=events/two-partitions.json
  if [[ "$source" == dynamodb-streams ]]; then
    if ! $started_ddb; then
      step "DynamoDB Local (its own stream is the source)"
      started_ddb=true
      eval "$(infra/dynamodb-local.sh start)"
      export AWS_ENDPOINT_URL_DYNAMODB
      echo "AWS_ENDPOINT_URL_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB"
    fi
  elif [[ "$source" == rabbitmq ]]; then
    step "RabbitMQ (infra/rabbitmq-local.sh)"
    started_rabbitmq=true
    eval "$(infra/rabbitmq-local.sh start)"
    echo "RABBITMQ_URL=$RABBITMQ_URL"
  elif [[ "$source" == activemq ]]; then
    step "ActiveMQ (infra/activemq-local.sh)"
    started_activemq=true
    eval "$(infra/activemq-local.sh start)"
    echo "ACTIVEMQ_STOMP_URL=$ACTIVEMQ_STOMP_URL"
  elif [[ "$source" == msk ]]; then
    step "a Kafka broker (infra/kafka-local.sh)"
    started_kafka=true
    eval "$(infra/kafka-local.sh start)"
    echo "KAFKA_BOOTSTRAP_SERVERS=$KAFKA_BOOTSTRAP_SERVERS"
  else
    step "moto's server (infra/sqs-local.sh): the SQS and Kinesis APIs"
    started_moto=true
    eval "$(infra/sqs-local.sh start)"
    export AWS_ENDPOINT_URL_SQS AWS_ENDPOINT_URL_KINESIS="$AWS_ENDPOINT_URL_SQS"
    echo "AWS_ENDPOINT_URL_SQS=$AWS_ENDPOINT_URL_SQS AWS_ENDPOINT_URL_KINESIS=$AWS_ENDPOINT_URL_KINESIS"
  fi
  # Where each record's key comes from: SQS's message attribute, RabbitMQ's
  # header and ActiveMQ's property idempotency-key (the default); Kinesis's
  # partition key (the payment's key), so that a record that is not JSON
  # still has one; the payment id in a DynamoDB item's new image. And how
  # many records the poller must deliver: 6 payments, the poison, the 6
  # again (SQS drops a FIFO queue's copies, deduplicated by id; DynamoDB
  # writes no stream record for a put that changes nothing, so the table
  # gets them once).
  case "$source" in
    sqs) keys=header records=13 ;;
    sqs-fifo) keys=header records=7 ;;
    kinesis) keys=record-key records=13 ;;
    dynamodb-streams) keys=json:/payment_id records=7 ;;
    rabbitmq | activemq | msk) keys=header records=13 ;;
  esac

  step "the function's binary (cargo build --bin msk-handler)"
  local bootstrap
  bootstrap="$(cargo build --quiet --bin msk-handler --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("target", {}).get("name") == "msk-handler" and message.get("executable"):
        print(message["executable"])')"
  echo "demo: $bootstrap"

  step "$source: $name (infra/poller.py create)"
  python3 infra/poller.py create "$source" "$name"
  local announce=()
  if [[ "$source" == msk ]]; then
    python3 infra/poller.py create msk ledger-events-demo --partitions 4
    announce=(--env "LEDGER_EVENTS_DESTINATION=kafka://$KAFKA_BOOTSTRAP_SERVERS/ledger-events-demo")
  fi

  step "produce: the 6 payments of $file, a poison record, the 6 again (a producer's retry)"
  local poison="$work/poison.json"
  case "$source" in
    sqs) echo '[{"body": "{\"payment_id\": \"p-sqs-poison\",", "attributes": {"idempotency-key": "pay-sqs-poison"}}]' ;;
    sqs-fifo) echo '[{"body": "{\"payment_id\": \"p-fifo-poison\",", "attributes": {"idempotency-key": "pay-fifo-poison"}, "group": "acc-fifo-2", "deduplication_id": "pay-fifo-poison"}]' ;;
    kinesis) echo '[{"data": "{\"payment_id\": \"p-kin-poison\",", "partition_key": "pay-kin-poison"}]' ;;
    dynamodb-streams) echo '[{"put": {"payment_id": "pay-ddb-poison", "account_id": "acc-ddb-2", "amount_cents": "12.50", "currency": "EUR"}}]' ;;
    rabbitmq) echo '[{"body": "{\"payment_id\": \"p-rmq-poison\",", "headers": {"idempotency-key": "pay-rmq-poison"}, "message_id": "poison-1", "content_type": "application/json"}]' ;;
    activemq) echo '[{"body": "{\"payment_id\": \"p-amq-poison\",", "headers": {"idempotency-key": "pay-amq-poison"}}]' ;;
    msk) echo '[{"key": "p-msk-poison", "value": "{\"payment_id\":", "headers": {"idempotency-key": "pay-msk-poison"}, "partition": 0}]' ;;
  esac >"$poison"
  python3 infra/poller.py produce "$source" "$name" --from-event "$file" >/dev/null
  python3 infra/poller.py produce "$source" "$name" --messages "$poison" >/dev/null
  python3 infra/poller.py produce "$source" "$name" --from-event "$file" >/dev/null
  echo "demo: produced 13 messages ($records records to deliver)"

  step "poll until drained (infra/poller.py poll: batches of 10, keys from $keys)"
  local function_env=(--env "IDEMPOTENCY_TABLE=$IDEMPOTENCY_TABLE" --env "LEDGER_TABLE=$LEDGER_TABLE"
    --env "IDEMPOTENCY_KEY_SOURCE=$keys")
  local i
  for ((i = 0; i < ${#store_env[@]}; i += 2)); do function_env+=(--env "${store_env[i + 1]}"); done
  local summary t0 log_start
  t0=$(now_ms)
  rm -f "$work/checkpoint.json"
  log_start="$(stat -c %s "$work/function.log" 2>/dev/null || echo 0)"
  summary="$(python3 infra/poller.py poll "$source" "$name" --bootstrap "$bootstrap" \
    --batch-size 10 --redelivery-delay 1 --timeout 120 --checkpoint "$work/checkpoint.json" \
    --function-log "$work/function.log" "${function_env[@]}" "${announce[@]}")" || true
  echo "demo: poller summary ($(($(now_ms) - t0)) ms): $summary"
  show

  step "balances and deliveries against what the events imply"
  local expect=() line count unique=0
  while read -r line; do
    expect+=("${line%% *}")
    count="${line##*(}" # "acc-1=3500 (3 payments)": 3
    unique=$((unique + ${count%% *}))
  done < <(python3 events/generate.py --balances "$(basename "$file")")
  check_balances "${expect[@]}" || surprises=$((surprises + 1))
  if python3 - "$summary" "$records" <<'PY'
import json, sys
summary, records = json.loads(sys.argv[1] or "{}"), int(sys.argv[2])
wrong = []
if summary.get("drained") is not True:
    wrong.append("not drained")
for name in ("reported", "invocation_errors", "invalid_responses", "out_of_order"):
    if summary.get(name, 0) != 0:
        wrong.append(f"{name} {summary[name]}")
if summary.get("records") != records:
    wrong.append(f"{summary.get('records')} records delivered, expected {records}")
print("deliveries:", "; ".join(wrong) if wrong else
      f"as expected: {records} records in {summary['batches']} batches, none reported, drained")
sys.exit(1 if wrong else 0)
PY
  then :; else surprises=$((surprises + 1)); fi
  if [[ "$source" == rabbitmq || "$source" == activemq ]]; then
    # No partial batch response: what each message became is read from the
    # function's metrics (its EMF documents in the log of this run).
    step "Amazon MQ: the poison parked, nothing dead-lettered, the payments sent again duplicates"
    if python3 - "$summary" "$records" "$unique" "$work/function.log" "$log_start" <<'PY'
import json, sys
summary, records, unique = json.loads(sys.argv[1] or "{}"), int(sys.argv[2]), int(sys.argv[3])
counts = {}
with open(sys.argv[4], "rb") as log:
    log.seek(int(sys.argv[5]))
    for line in log:
        try:
            document = json.loads(line)
        except ValueError:
            continue
        if isinstance(document, dict) and "_aws" in document and "Processed" in document:
            for name, value in document.items():
                if isinstance(value, (int, float)):
                    counts[name] = counts.get(name, 0) + value
# Each payment once, the poison FAILED and parked, every other delivery a duplicate.
expected = {"Processed": unique, "Failed": 1, "Parked": 1, "Duplicate": records - unique - 1, "Reported": 0}
wrong = [f"{name} {counts.get(name, 0):g}, expected {value}" for name, value in expected.items()
         if counts.get(name, 0) != value]
if summary.get("dead_lettered") != 0:
    wrong.append(f"{summary.get('dead_lettered')} messages dead-lettered, expected 0")
print("outcomes:", "; ".join(wrong) if wrong else
      ", ".join(f"{name} {value}" for name, value in expected.items()) + "; dead-lettered 0")
sys.exit(1 if wrong else 0)
PY
    then :; else surprises=$((surprises + 1)); fi
  fi
  if [[ "$source" == msk ]]; then
    # MSK out: what reached the next hop, read back outside any group.
    step "MSK out: ledger-events-demo holds each payment once, keyed by its account, its id in a header"
    python3 infra/poller.py read msk ledger-events-demo >"$work/announced.json"
    if python3 - "$work/announced.json" "$unique" <<'PY'
import json, sys
with open(sys.argv[1], encoding="utf-8") as f:
    records = json.loads(f.read().splitlines()[-1])["records"]
wrong, payments, ids = [], set(), set()
for r in records:
    value = json.loads(r["value"])
    payments.add(value["payment_id"])
    ids.add(dict(r["headers"]).get("idempotency-key"))
    if r["key"] != value["account_id"]:
        wrong.append(f"{value['payment_id']} keyed {r['key']!r}")
unique = int(sys.argv[2])
if len(payments) != unique or len(ids) != unique or None in ids:
    wrong.append(f"{len(records)} records of {len(payments)} payments under {len(ids)} ids, expected {unique}")
print("announcements:", "; ".join(wrong) if wrong else
      f"{len(records)} records for {unique} payments, one id each, keyed by account")
sys.exit(1 if wrong else 0)
PY
    then :; else surprises=$((surprises + 1)); fi
  fi
  if ((surprises > 0)); then
    step "demo finished with $surprises unexpected result(s); function log: $work/function.log"
    exit 1
  fi
  step "demo finished ($source, $store): every balance and delivery as expected"
}

if [[ -n "$source" ]]; then
  surprises=0
  source_demo
  exit 0
fi

step "cargo lambda watch"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
# The function gets its settings explicitly (cargo lambda watch sets no
# AWS_REGION). --ignore-changes: no rebuild when a source file changes mid-demo.
setsid cargo lambda watch --ignore-changes \
  --invoke-address 127.0.0.1 --invoke-port "$port" --bin msk-handler \
  --env-var "IDEMPOTENCY_TABLE=$IDEMPOTENCY_TABLE" \
  --env-var "LEDGER_TABLE=$LEDGER_TABLE" \
  "${store_env[@]}" \
  --env-var "AWS_REGION=$AWS_REGION" \
  --env-var "AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID" \
  --env-var "AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY" \
  --env-var "AWS_EC2_METADATA_DISABLED=true" \
  >"$watch_log" 2>&1 </dev/null &
watch_pid=$!
echo "demo: cargo lambda watch on 127.0.0.1:$port (pid $watch_pid, log $watch_log)"

invoke() { # invoke FILE: the response on stdout, the error on stderr
  cargo lambda invoke msk-handler --invoke-address 127.0.0.1 --invoke-port "$port" \
    --output-format json --data-file "$1"
}

# Ready once an empty Kafka event gets its answer. The first invocation builds
# the function (cargo run), which can take minutes on a cold target/.
probe="$work/probe.json"
echo '{"eventSource": "aws:kafka", "records": {}}' >"$probe"
started=$SECONDS
next_note=$((SECONDS + 15))
echo "demo: waiting for the function (first build can take a few minutes; up to ${READY_TIMEOUT} s)"
until answer="$(timeout "$READY_TIMEOUT" cargo lambda invoke msk-handler --invoke-address 127.0.0.1 \
  --invoke-port "$port" --output-format json --data-file "$probe" 2>/dev/null)" &&
  [[ "$(tr -d ' \n' <<<"$answer")" == '{"batchItemFailures":[]}' ]]; do
  if ! kill -0 "$watch_pid" 2>/dev/null; then
    echo "demo: cargo lambda watch exited; its log follows" >&2
    cat "$watch_log" >&2
    exit 1
  fi
  if ((SECONDS - started >= READY_TIMEOUT)); then
    echo "demo: no answer from the function after ${READY_TIMEOUT} s; log tail follows" >&2
    tail -n 40 "$watch_log" >&2
    exit 1
  fi
  if ((SECONDS >= next_note)); then
    echo "demo: still waiting ($((SECONDS - started)) s); $(grep -E 'Compiling|Finished|Running|error' "$watch_log" | tail -n 1 | sed 's/^ *//')"
    next_note=$((SECONDS + 15))
  fi
  sleep 1
done
echo "demo: function ready after $((SECONDS - started)) s"

# The failures a response lists, as "partition@offset ..." (sorted).
failures() {
  python3 -c '
import json, sys
response = json.load(sys.stdin)
items = response.get("batchItemFailures") or []
ids = [i["itemIdentifier"] for i in items]
print(" ".join(sorted("%s@%s" % (i["partition"], i["offset"]) for i in ids)))'
}

surprises=0
# run FILE "WHAT IT SHOWS" "EXPECTED FAILURES[|ALTERNATIVE]" (failures as partition@offset, space-separated)
run() {
  local file="events/$1" what="$2" expected="$3"
  step "$1: $what"
  local out err t0 t1 rc=0
  err="$work/invoke.err"
  t0=$(now_ms)
  out="$(invoke "$file" 2>"$err")" || rc=$?
  t1=$(now_ms)
  if ((rc != 0)); then
    echo "invocation error (exit $rc, $((t1 - t0)) ms):"
    sed 's/^/  /' "$err"
    echo "UNEXPECTED: this event should have been answered"
    surprises=$((surprises + 1))
  else
    echo "response ($((t1 - t0)) ms):"
    sed 's/^/  /' <<<"$out"
    local got ok=false alternative
    got="$(failures <<<"$out")"
    IFS='|' read -r -a alternatives <<<"$expected"
    [[ ${#alternatives[@]} -eq 0 ]] && alternatives=("")
    for alternative in "${alternatives[@]}"; do
      [[ "$got" == "$alternative" ]] && ok=true
    done
    if $ok; then
      echo "as expected: reported [${got}]"
    else
      local count
      count=$(wc -w <<<"$got")
      ((count > 12)) && got="$(cut -d' ' -f1-12 <<<"$got") ... ($count records)"
      echo "UNEXPECTED: reported [${got}], expected [${expected}]"
      surprises=$((surprises + 1))
    fi
  fi
  show
}

run two-partitions.json \
  "6 payments over payments-0 and payments-1, each with its own key: all processed (acc-1 3500, acc-2 1575)" ""
run two-partitions-replay.json \
  "the same batch again (Lambda redelivers it): all duplicates, balances unchanged" ""
run in-batch-duplicates.json \
  "pay-dup-1 three times in one batch (two partitions): applied once (acc-3 500)" ""
run missing-key.json \
  "payments-0@501 has no idempotency-key header: reported, and payments-0@502 after it (acc-4 900)" \
  "payments-0@501 payments-0@502"
run bad-payload.json \
  "not JSON at payments-0@701, amount_cents 12.5 at payments-1@801: FAILED and parked (POISON_POLICY=park), the rest of each partition goes on (acc-5 3300)" \
  ""
run bad-payload.json \
  "the same batch again: the FAILED keys are refused from the table (parked again), the rest are duplicates, nothing changes" \
  ""
run utf8-key.json \
  "an idempotency key in UTF-8 (\"платёж-ключ-1\", negative header bytes) (acc-6 4200)" ""
run same-key-different-payload.json \
  "pay-conflict-1 with two different amounts: one wins, the other copy is rejected and reported (acc-7 1800)" \
  "payments-1@1101|payments-0@1000"
run self-managed.json \
  "eventSource SelfManagedKafka, no eventSourceArn: handled like MSK (acc-9 750)" ""
run large-batch.json \
  "1,200 payments over 4 partitions, unique keys, 5 accounts" ""

step "not-a-batch-source.json: an SNS notification. EXPECTED TO FAIL: the function returns an invocation error"
t0=$(now_ms)
if out="$(invoke events/not-a-batch-source.json 2>"$work/invoke.err")"; then
  echo "UNEXPECTED: the function answered instead of failing:"
  sed 's/^/  /' <<<"$out"
  surprises=$((surprises + 1))
else
  echo "invocation error, as expected ($(($(now_ms) - t0)) ms):"
  sed 's/^/  /' "$work/invoke.err"
  if ! tr -s ' \n│' ' ' <"$work/invoke.err" | grep -q 'not an event of a batch source'; then
    echo "UNEXPECTED: the error does not say \"not an event of a batch source\""
    surprises=$((surprises + 1))
  fi
fi

step "final balances against what the events imply"
expect=(acc-1=3500 acc-2=1575 acc-3=500 acc-4=900 acc-5=3300 acc-6=4200
  # 10200 when payments-1's copy of pay-conflict-1 (9900) wins the race.
  "acc-7=1800|10200" acc-9=750 acc-10=0)
while read -r line; do expect+=("${line%% *}"); done < <(python3 events/generate.py --balances)
check_balances "${expect[@]}" || surprises=$((surprises + 1))

if ((surprises > 0)); then
  if grep -q "deadline is within the safety margin" "$watch_log"; then
    echo "note: the function reported records as not started because of the invocation's deadline."
    echo "      cargo lambda watch sends the constant lambda-runtime-deadline-ms: 600000 (not epoch ms);"
    echo "      the function must treat such a deadline as unknown."
  fi
  step "demo finished with $surprises unexpected result(s); function log: $watch_log"
  exit 1
fi
step "demo finished ($store): every response and balance as expected"
