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
# bench/group-size.svg, bench/powertools.csv, bench/sizing-stores.csv and
# bench/stores.csv.
#
#   infra/bench.sh                 # the full run (about 10 minutes on 2 cores)
#   BENCH_REPS=0.4 infra/bench.sh  # fewer repetitions (at least one each)
#   BENCH_ONLY=new-1000x4p/key/5ms infra/bench.sh
#                                  # only the matching measurements; no files written
#   BENCH_ONLY=sizing infra/bench.sh   # the default sizing against Powertools
#                                  # (writes powertools.csv, sizing-stores.csv, group-size.svg)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# shellcheck source=infra/local-stack.sh
source infra/local-stack.sh
local_stack idempotency-bench ledger-bench

# The side-by-side: Powertools on the same DynamoDB Local, at 5 ms.
if [[ -z "${BENCH_ONLY:-}" || "$BENCH_ONLY" == *sizing* ]]; then
  step "AWS Powertools (Python) on the same batches (benches/powertools/bench.py)"
  .cache/venv/bin/pip install --quiet --disable-pip-version-check -r benches/powertools/requirements.txt
  mkdir -p bench
  .cache/venv/bin/python benches/powertools/bench.py --rtt-ms 5 --reps 3 --out bench/powertools.csv
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
