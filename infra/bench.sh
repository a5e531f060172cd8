#!/usr/bin/env bash
# The project's benchmark command: throughput of the real MSK function against
# DynamoDB Local, with a simulated network round trip per DynamoDB request.
# Installs the tools, starts DynamoDB Local with the template's tables, a
# PostgreSQL cluster and a redis-server, then runs AWS Powertools (Python)'s
# idempotency utility on the same batches (benches/powertools/bench.py),
# `cargo bench --bench stores` (PostgreSQL, Redis, and PostgreSQL behind the
# Redis duplicate cache) and `cargo bench --bench throughput` (optimized
# builds). Prints the results tables and writes bench/results.csv,
# bench/batch-time-vs-rtt.svg, bench/hot-account.svg, bench/containers.csv,
# bench/group-size.svg, bench/powertools.csv, bench/sizing-stores.csv,
# bench/stores.csv, and per batch source against Powertools' BatchProcessor
# (benches/powertools/sources.py, then the throughput bench's `sources`
# scenarios) bench/powertools-sources.csv and bench/sources.csv.
#
#   infra/bench.sh                 # the full run (about 30 minutes on 2 cores)
#   BENCH_REPS=0.4 infra/bench.sh  # fewer repetitions (at least one each)
#   BENCH_ONLY=new-1000x4p/key/5ms infra/bench.sh
#                                  # only the matching measurements; no files written
#   BENCH_ONLY=sizing infra/bench.sh   # the default sizing against Powertools
#                                  # (writes powertools.csv, sizing-stores.csv, group-size.svg)
#   BENCH_ONLY=sources infra/bench.sh  # per source (MSK, SQS standard and FIFO, Kinesis,
#                                  # DynamoDB Streams, Amazon MQ) against Powertools' BatchProcessor
#                                  # (writes powertools-sources.csv, sources.csv)
#   BENCH_ONLY=sources/rabbitmq,sources/activemq infra/bench.sh
#                                  # only those scenarios, both sides (their rows of the two
#                                  # CSVs replaced or added, the others kept)
#   BENCH_ONLY=announce infra/bench.sh # every payment announced to SQS (exactly once out)
#                                  # against Powertools + send_message, on moto's SQS
#                                  # (writes powertools-announce.csv; prints the table)
#   BENCH_ONLY=announce-kafka infra/bench.sh # MSK in, MSK out: every payment announced to a
#                                  # Kafka topic on the local broker, against Powertools +
#                                  # confluent_kafka produce + flush per payment
#                                  # (writes powertools-announce-kafka.csv; prints the table)
#   BENCH_ONLY=announce ANNOUNCE_SQS=constant infra/bench.sh
#                                  # the same against benches/sqs_constant.py, an SQS
#                                  # whose service time does not grow with its queues
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
cd "$root"

# shellcheck source=infra/local-stack.sh
source infra/local-stack.sh
local_stack idempotency-bench ledger-bench

# ANNOUNCE_SQS=constant: both sides of the announce rows send to an SQS
# answering every request in constant time (SQS in AWS costs a round trip
# and a few ms whatever its queue holds; moto's server grows with it).
if [[ "${ANNOUNCE_SQS:-moto}" == constant ]]; then
  if [[ "${BENCH_ONLY:-}" != announce ]]; then
    echo "bench: ANNOUNCE_SQS=constant runs with BENCH_ONLY=announce" >&2
    exit 2
  fi
  # It stops when this script does (local_stack's trap stops the rest).
  coproc SQS_CONSTANT { exec python3 benches/sqs_constant.py --port 0 --exit-with-parent; }
  read -r sqs_port <&"${SQS_CONSTANT[0]}"
  export AWS_ENDPOINT_URL_SQS="http://127.0.0.1:$sqs_port"
  step "SQS answering in constant time (benches/sqs_constant.py, port $sqs_port)"
fi

# The side-by-side: Powertools on the same DynamoDB Local, at 5 ms.
if [[ -z "${BENCH_ONLY:-}" || "$BENCH_ONLY" == *sizing* ]]; then
  step "AWS Powertools (Python) on the same batches (benches/powertools/bench.py)"
  "$EXACTLY_ONCE_TOOLS"/venv/bin/pip install --quiet --disable-pip-version-check -r benches/powertools/requirements.txt
  mkdir -p bench
  "$EXACTLY_ONCE_TOOLS"/venv/bin/python benches/powertools/bench.py --rtt-ms 5 --reps 3 --out bench/powertools.csv
fi

# Per batch source: Powertools' BatchProcessor + idempotency on the same
# records (the `sources` scenarios of the throughput bench read its CSV).
# BENCH_ONLY=sources/<scenario>[/...] parts run only those scenarios (e.g.
# `sources/rabbitmq,sources/activemq`); the CSV keeps the other rows.
if [[ -z "${BENCH_ONLY:-}" || "$BENCH_ONLY" == *sources* ]]; then
  step "AWS Powertools (Python) BatchProcessor per source (benches/powertools/sources.py)"
  "$EXACTLY_ONCE_TOOLS"/venv/bin/pip install --quiet --disable-pip-version-check -r benches/powertools/requirements.txt
  mkdir -p bench
  only=()
  IFS=, read -ra parts <<<"${BENCH_ONLY:-}"
  for part in "${parts[@]}"; do
    case "$part" in
      sources/?*) scenario="${part#sources/}"; only+=("${scenario%%/*}") ;;
      *sources*) only=(); break ;;
    esac
  done
  "$EXACTLY_ONCE_TOOLS"/venv/bin/python benches/powertools/sources.py --rtt-ms 5 --reps 3 \
    --only "$(IFS=,; echo "${only[*]}")" --out bench/powertools-sources.csv
fi

# Announcing every payment (exactly once out): Powertools with a
# `send_message` in the idempotent function, on the same DynamoDB Local and
# the local SQS (moto's server, started by local_stack above); the
# throughput bench's `announce` rows read its CSV.
if [[ -z "${BENCH_ONLY:-}" || ( "$BENCH_ONLY" == *announce* && "$BENCH_ONLY" != *announce-kafka* ) ]]; then
  step "AWS Powertools (Python) + sqs.send_message on the same batches (benches/powertools/bench.py)"
  "$EXACTLY_ONCE_TOOLS"/venv/bin/pip install --quiet --disable-pip-version-check -r benches/powertools/requirements.txt
  mkdir -p bench
  "$EXACTLY_ONCE_TOOLS"/venv/bin/python benches/powertools/bench.py --rtt-ms 5 --reps 3 \
    --scenarios announce-1000x4p --out bench/powertools-announce.csv
fi
# MSK in, MSK out: Powertools with a confluent_kafka produce + flush per
# payment, on the same DynamoDB Local and the broker local_stack started.
if [[ -z "${BENCH_ONLY:-}" || "$BENCH_ONLY" == *announce-kafka* ]]; then
  step "AWS Powertools (Python) + confluent_kafka produce + flush on the same batches (benches/powertools/bench.py)"
  "$EXACTLY_ONCE_TOOLS"/venv/bin/pip install --quiet --disable-pip-version-check -r benches/powertools/requirements.txt
  mkdir -p bench
  "$EXACTLY_ONCE_TOOLS"/venv/bin/python benches/powertools/bench.py --rtt-ms 5 --reps 3 \
    --scenarios announce-kafka-1000x4p --out bench/powertools-announce-kafka.csv
fi

# The other stores first: PostgreSQL and Redis (the servers local_stack
# started) on the same batches; their default-sizing rows
# (bench/sizing-stores.csv) join DynamoDB's in the table against Powertools.
if [[ -z "${BENCH_ONLY:-}" || "$BENCH_ONLY" == *sizing* ]]; then
  step "cargo bench --bench stores"
  cargo bench --bench stores
fi

step "cargo bench --bench throughput"
cargo bench --bench throughput
