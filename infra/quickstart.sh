#!/usr/bin/env bash
# The README's quick start, as a newcomer uses it: the ```toml and ```rust
# blocks under "## Your own handler", copied into a new crate outside the
# repository (`exactly-once` pointed at this checkout by path), built, and
# run on DynamoDB Local through a Lambda Runtime API stand-in:
#   1. two deliveries of events/two-partitions.json: both answered
#      {"batchItemFailures":[]}, each payment added to its balance once;
#   2. the same DynamoDB-only binary started with the variable of each part
#      its build leaves out: a start-up error naming the feature;
#   3. the README's "Run it locally", "On SQS" and "Test it" (cargo test of
#      the crate's src/tests.rs) blocks, and
#      docs/local.md's PostgreSQL and Redis blocks, run as they are (cargo
#      lambda watch and invoke, the local servers they start) from the
#      crate's directory, EXACTLY_ONCE naming a copy of the checkout: both
#      deliveries answered, each record processed once and a duplicate
#      after, the balances and items as the blocks show them;
#   4. docs/local.md's broker block, once per row of its table (RabbitMQ,
#      ActiveMQ, Kafka): the crate served by infra/poller.py on a broker of
#      its own, each payment produced twice, the poller drained with
#      nothing reported, the balance of the table made from one line read
#      by its key;
#   5. docs/local.md's "Your own messages": a crate of its own (orders/,
#      its toml and rust blocks) emitting to an SNS topic and an
#      EventBridge bus on moto, its block run as it is: each payment
#      announced to each under one id of its own, read back with
#      infra/local_destinations.py;
#   and the copy of the checkout unchanged (a read-only checkout works).
# Needs the tools and DynamoDB Local (run it from infra/test.sh, or after
# `source infra/local-stack.sh; local_stack T L`).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
export PATH="$EXACTLY_ONCE_TOOLS/venv/bin:$PATH"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "quickstart: the README's blocks into a new crate ($work/payments)"
python3 "$root/infra/quickstart_crate.py" "$root/README.md" "$work/payments" "$root"
# The checkout's lock: the versions the project is tested with. The builds
# go to the checkout's target directory (CARGO_TARGET_DIR if set: infra/
# test.sh gives these checks one of their own), for the host's triple
# named, as infra/template-check.sh's builds and sam build's name it: a
# dependency with the same features is built once for all of them.
cp "$root/Cargo.lock" "$work/payments/"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
CARGO_BUILD_TARGET="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_BUILD_TARGET
(cd "$work/payments" && cargo build --quiet)
binary="$CARGO_TARGET_DIR/$CARGO_BUILD_TARGET/debug/payments"

echo "quickstart: what it compiles"
tree="$(cd "$work/payments" && cargo tree -e normal --prefix none | sed 's/ (\*)$//' | sort -u)"
for name in tokio-postgres redis opentelemetry apache-avro prost aws-sdk-s3 aws-sdk-sqs aws-sdk-sns aws-sdk-eventbridge aws-sdk-kinesis \
  aws-sdk-lambda aws-sdk-secretsmanager clap; do
  if grep -E "^${name}([ -]|_)" <<<"$tree" >/dev/null; then
    echo "quickstart: the default build compiles $name" >&2
    exit 1
  fi
done
echo "quickstart: $(wc -l <<<"$tree") packages, no other store's"

echo "quickstart: two deliveries of events/two-partitions.json on DynamoDB Local"
stamp="$(date +%s%N)"
ledger="quickstart-ledger-$stamp"
"$root/infra/local_tables.py" --table "LedgerTable=$ledger" >&2
# The function's own log lines go to a file, shown if it fails.
if ! answers="$(IDEMPOTENCY_TABLE="$IDEMPOTENCY_TABLE" LEDGER_TABLE="$ledger" \
  IDEMPOTENCY_KEY_PREFIX="quickstart-$stamp#" \
  python3 "$root/infra/runtime_api.py" --bootstrap "$binary" --function-name payments \
    --event "$root/events/two-partitions.json" --event "$root/events/two-partitions.json" \
  2>"$work/function.log")"; then
  cat "$work/function.log" >&2
  echo "quickstart: the function did not answer both events: $answers" >&2
  exit 1
fi
echo "$answers"
"$EXACTLY_ONCE_TOOLS/venv/bin/python" - "$answers" "$ledger" "$root/events/two-partitions.json" <<'PY'
import base64, collections, json, sys
import boto3
answers, ledger, event = sys.argv[1], sys.argv[2], sys.argv[3]
for line in answers.splitlines():
    assert json.loads(line).get("response") == {"batchItemFailures": []}, line
expected = collections.Counter()
for records in json.load(open(event))["records"].values():
    for record in records:
        payment = json.loads(base64.b64decode(record["value"]))
        expected[payment["account_id"]] += payment["amount_cents"]
table = boto3.resource("dynamodb").Table(ledger)
for account, cents in expected.items():
    item = table.get_item(Key={"account_id": account}, ConsistentRead=True).get("Item", {})
    found = int(item.get("balance_cents", 0))
    assert found == cents, f"{account}: balance {found}, expected {cents} (once)"
print(f"quickstart: {len(expected)} balances moved once over two deliveries")
PY

echo "quickstart: each part the default build leaves out is a start-up error naming its feature"
check_off() { # variable value feature
  local output status=0
  output="$(env IDEMPOTENCY_TABLE=idempotency LEDGER_TABLE=ledger "$1=$2" \
    AWS_LAMBDA_RUNTIME_API=127.0.0.1:9 "$binary" 2>&1)" || status=$?
  if [[ $status == 0 || "$output" != *"$1=$2 needs the \`$3\` feature of exactly-once"* ]]; then
    echo "quickstart: $1=$2 did not stop it naming the $3 feature (exit $status): $output" >&2
    exit 1
  fi
  echo "quickstart: $1=$2: exit $status, names \`$3\`"
}
check_off IDEMPOTENCY_STORE postgres postgres
check_off IDEMPOTENCY_STORE redis redis
check_off DUPLICATE_CACHE redis redis
check_off DEAD_LETTER_QUEUE_URL https://sqs.us-east-1.amazonaws.com/1/parked sqs
check_off TRACING_EXPORT otlp opentelemetry

# The documented shell blocks, as a reader runs them: from the crate's
# directory, EXACTLY_ONCE naming a copy of the checkout's files (those git
# tracks or would), which they must leave as it was: a read-only checkout
# works.
checkout="$work/msk-exactly-once"
python3 "$root/infra/copy_checkout.py" "$root" "$checkout"
touch "$work/copied"
watches() { # the crates' cargo lambda watch processes (payments/, orders/)
  local pid cwd
  for pid in $(pgrep -f "cargo-lambda lambda watch"); do
    cwd="$(readlink "/proc/$pid/cwd" 2>/dev/null)" || continue
    [[ "$cwd" == "$work/payments" || "$cwd" == "$work/orders" ]] && echo "$pid"
  done
  return 0
}
stop_watches() {
  local pids
  pids="$(watches)"
  # shellcheck disable=SC2086 # one pid a word
  [[ -z $pids ]] || kill $pids 2>/dev/null || true
}
sh_block() { # file marker: the first ```sh block after marker
  python3 - "$1" "$2" <<'PY'
import pathlib, re, sys
after = pathlib.Path(sys.argv[1]).read_text().split(sys.argv[2], 1)[1]
print(re.search(r"^```sh\n(.*?)^```$", after, re.S | re.M).group(1))
PY
}
in_crate() { # crate name block: runs block as a reader does, from $work/crate:
  # its output in OUTPUT, its exit status in STATUS, its stderr in $work/name.err
  STATUS=0
  # A watch that never listens must not hold CI: 15 minutes (the first
  # invoke builds the crate), then the block fails with its log.
  OUTPUT="$(cd "$work/$1" && timeout 900 bash -euo pipefail -c "$3" 2>"$work/$2.err")" || STATUS=$?
  # A block that failed midway leaves its watch running: stop it (the
  # crate's, not a test's beside this script), and let it leave port 9000
  # to the next block's.
  stop_watches
  for _ in $(seq 50); do [[ -z "$(watches)" ]] && break; sleep 0.2; done
}
run_block() { # name file heading processed duplicate: runs the first ```sh block after heading
  local name="$1" block output status
  block="$(sh_block "$2" "$3")"
  echo "quickstart: $name, as $2 shows it" >&2
  in_crate payments "$name" "$block"
  output="$OUTPUT" status="$STATUS"
  echo "$output"
  if [[ $status != 0 ]] || [[ "$(grep -c '^{"batchItemFailures":\[\]}$' <<<"$output")" != 2 ]] ||
    ! grep -qE "^ *$4 outcome=\"processed\"\$" <<<"$output" ||
    ! grep -qE "^ *$5 outcome=\"duplicate\"\$" <<<"$output"; then
    tail -n 30 "$work/$name.err" "$work/watch.log" >&2 || true
    echo "quickstart: $name did not answer and dedupe as documented (exit $status)" >&2
    exit 1
  fi
  BLOCK_OUTPUT="$output"
}
run_block dynamodb "$root/README.md" "**Run it locally**" 6 6
grep -qE '^ *acc-1 .*3500' <<<"$BLOCK_OUTPUT" ||
  { echo "quickstart: show_tables.py does not show acc-1's 3500 on DynamoDB Local" >&2; exit 1; }
run_block sqs "$root/README.md" "**On SQS**" 5 7
# The README's test (src/tests.rs, from "**Test it**"): its block runs
# `cargo test` on DynamoDB Local; the one test passes.
echo "quickstart: the README's test, as its block runs it" >&2
block="$(sh_block "$root/README.md" "**Test it**:")"
in_crate payments test "$block"
if [[ $STATUS != 0 ]] || ! grep -q '^test result: ok. 1 passed' <<<"$OUTPUT"; then
  echo "$OUTPUT"; tail -n 30 "$work/test.err" >&2
  echo "quickstart: the README's test did not pass as its block runs it" >&2
  exit 1
fi
grep '^test ' <<<"$OUTPUT"
run_block postgres "$root/docs/local.md" "## PostgreSQL" 6 6
grep -qE '^ *acc-1 *\| *3500$' <<<"$BLOCK_OUTPUT" ||
  { echo "quickstart: acc-1's balance is not 3500 on PostgreSQL" >&2; exit 1; }
grep -qE '^ *pay-2p-001 *\| *COMPLETED' <<<"$BLOCK_OUTPUT" ||
  { echo "quickstart: the item pay-2p-001 is not COMPLETED on PostgreSQL" >&2; exit 1; }
run_block redis "$root/docs/local.md" "## Redis" 6 6
grep -qx '3500' <<<"$BLOCK_OUTPUT" ||
  { echo "quickstart: acc-1's balance is not 3500 on Redis" >&2; exit 1; }
grep -qx 'COMPLETED' <<<"$BLOCK_OUTPUT" ||
  { echo "quickstart: the item pay-2p-001 is not COMPLETED on Redis" >&2; exit 1; }
# docs/local.md's broker block, for each row of its table: the first line
# (BROKER SOURCE EVENT) and the account read are the row's.
run_broker_block() { # name "BROKER=… SOURCE=… EVENT=…" account cents processed duplicate
  local name="$1" block output status=0
  block="$(python3 - "$root/docs/local.md" "$2" "$3" <<'PY'
import pathlib, re, sys
text, first, account = pathlib.Path(sys.argv[1]).read_text(), sys.argv[2], sys.argv[3]
after = text.split("## On a real broker", 1)[1]
block = re.search(r"^```sh\n(.*?)^```$", after, re.S | re.M).group(1)
lines = block.splitlines()
assert lines[0].startswith("BROKER=rabbitmq "), lines[0]
lines[0] = first
print("\n".join(lines).replace("account_id=acc-rmq-1", f"account_id={account}"))
PY
)"
  echo "quickstart: $name, as docs/local.md shows it" >&2
  output="$(cd "$work/payments" && timeout 900 bash -euo pipefail -c "$block" 2>"$work/$name.err")" || status=$?
  echo "$output"
  if [[ $status != 0 ]] || ! python3 - "$output" "$4" "$5" "$6" <<'PY'
import json, re, sys
output, cents, processed, duplicate = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
summaries = [json.loads(line) for line in output.splitlines() if line.startswith("{") and '"drained"' in line]
items = [json.loads(line) for line in output.splitlines() if line.startswith("{") and '"account_id"' in line]
# The grep | uniq -c of the block: `      5 "outcome":"processed"`.
outcomes = {m.group(2): int(m.group(1)) for m in re.finditer(r'^\s*(\d+) "outcome":"([a-z-]+)"$', output, re.M)}
ok = (len(summaries) == 1 and summaries[0]["drained"] is True and summaries[0].get("reported", 0) == 0
      and summaries[0].get("invocation_errors", 0) == 0 and len(items) == 1 and items[0].get("balance_cents") == cents)
documented = {"processed": processed, "duplicate": duplicate}
if outcomes != documented:
    print(f"quickstart: outcomes {outcomes}, docs/local.md says {documented}", file=sys.stderr)
    ok = False
sys.exit(0 if ok else 1)
PY
  then
    tail -n 30 "$work/$name.err" "$work/function.log" >&2 || true
    echo "quickstart: $name did not drain, answer and apply once as documented (exit $status)" >&2
    exit 1
  fi
}
# The outcomes docs/local.md states: 5 processed and 7 duplicates on the MQ
# brokers (their sample event holds one payment twice), 6 and 6 on Kafka.
run_broker_block rabbitmq "BROKER=rabbitmq SOURCE=rabbitmq EVENT=rabbitmq.json" acc-rmq-1 3500 5 7
run_broker_block activemq "BROKER=activemq SOURCE=activemq EVENT=activemq.json" acc-amq-1 3500 5 7
run_broker_block kafka "BROKER=kafka SOURCE=msk EVENT=two-partitions.json" acc-1 3500 6 6

# docs/local.md's "Your own messages": its crate (orders/, beside the
# quick start's, features sns and eventbridge) and its block, from that
# crate's directory: both deliveries answered, and the topic and the bus
# each got every payment of events/sqs.json under one id of its own. A
# send the SDK tried again after a slow answer (an attempt times out after
# 3 s; moto, niced with the deploy checks beside the tests, can take
# longer) arrives twice under that one id, as docs/outbox.md's "at least
# once, under a stable id" allows; a record whose sends timed out three
# times is reported by the first delivery and sent by the second, which
# then answers nothing reported.
heading="Your own messages: SNS and EventBridge on moto"
python3 "$root/infra/quickstart_crate.py" --section "$heading" "$root/docs/local.md" "$work/orders" "$root" orders
cp "$root/Cargo.lock" "$work/orders/"
echo "quickstart: orders, as docs/local.md shows it" >&2
block="$(sh_block "$root/docs/local.md" "## $heading")"
in_crate orders orders "$block"
echo "$OUTPUT"
why="$("$EXACTLY_ONCE_TOOLS/venv/bin/python" - "$OUTPUT" "$root/events/sqs.json" <<'PY'
import collections, json, sys
output, event = sys.argv[1], json.load(open(sys.argv[2]))
lines = output.splitlines()
answers = [json.loads(line) for line in lines if line.startswith('{"batchItemFailures"')]
read = [json.loads(line) for line in lines if line.startswith('{"id"')]
payments = sorted({json.loads(r["body"])["payment_id"] for r in event["Records"]})
def ids_by_payment(messages, payment_of):
    ids = collections.defaultdict(set)
    for message in messages:
        ids[payment_of(message)].add(message["id"])
    return ids
topic = ids_by_payment([m for m in read if isinstance(m["body"], str)],
                       lambda m: json.loads(m["body"])["payment_id"])
bus_messages = [m for m in read if isinstance(m["body"], dict)]
bus = ids_by_payment(bus_messages, lambda m: m["body"]["detail"]["payment_id"])
problems = []
message_ids = {r["messageId"] for r in event["Records"]}
reported = [f["itemIdentifier"] for answer in answers[:1] for f in answer["batchItemFailures"]]
if len(answers) != 2 or answers[1] != {"batchItemFailures": []} or not set(reported) <= message_ids:
    problems.append(f"the deliveries answered {answers}, not twice {{\"batchItemFailures\":[]}}")
elif reported:
    print(f"quickstart: the first delivery reported {len(reported)} record(s) whose sends timed out "
          "three times; the second sent them", file=sys.stderr)
for name, ids in (("topic", topic), ("bus", bus)):
    if sorted(ids) != payments:
        problems.append(f"the {name} got payments {sorted(ids)}, not {payments}")
    if any(len(one) != 1 or None in one for one in ids.values()):
        problems.append(f"the {name}'s payments are not each under one id: {dict(ids)}")
    if len({i for one in ids.values() for i in one}) != len(ids):
        problems.append(f"two of the {name}'s payments share an id: {dict(ids)}")
if any(m["body"]["detail-type"] != "OrderReceived" for m in bus_messages):
    problems.append("an event on the bus is not an OrderReceived")
again = len(read) - sum(len(one) for ids in (topic, bus) for one in ids.values())
if again:
    print(f"quickstart: {again} message(s) came again under their id "
          "(a send tried again after a slow answer)", file=sys.stderr)
print("; ".join(problems))
PY
)" || why="the check did not run ($?)"
if [[ $STATUS != 0 || -n "$why" ]]; then
  tail -n 30 "$work/orders.err" "$work/watch.log" >&2 || true
  echo "quickstart: orders did not announce each payment to the topic and the bus under one id" \
    "(exit $STATUS): ${why:-the block failed}" >&2
  exit 1
fi
changed="$(find "$checkout" -newer "$work/copied")"
[[ -z "$changed" ]] ||
  { echo "quickstart: the blocks wrote into the checkout: $changed" >&2; exit 1; }
echo "quickstart: OK (the checkout unchanged)"
