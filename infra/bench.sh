#!/usr/bin/env bash
# The project's benchmark command: throughput of the real MSK function against
# DynamoDB Local, with a simulated network round trip per DynamoDB request.
# Installs the tools, starts DynamoDB Local with the template's tables, a
# PostgreSQL cluster and a redis-server, then runs `cargo bench --bench
# throughput` and `cargo bench --bench stores` (PostgreSQL, Redis, and
# PostgreSQL behind the Redis duplicate cache; optimized builds). Prints the
# results tables and writes bench/results.csv, bench/batch-time-vs-rtt.svg,
# bench/hot-account.svg and bench/stores.csv.
#
#   infra/bench.sh                 # the full run (about 10 minutes on 2 cores)
#   BENCH_REPS=0.4 infra/bench.sh  # fewer repetitions (at least one each)
#   BENCH_ONLY=new-1000x4p/key/5ms infra/bench.sh
#                                  # only the matching measurements; no files written
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# shellcheck source=infra/local-stack.sh
source infra/local-stack.sh
local_stack idempotency-bench ledger-bench

step "cargo bench --bench throughput"
cargo bench --bench throughput

# The same batches on PostgreSQL and Redis (the servers local_stack started).
if [[ -z "${BENCH_ONLY:-}" ]]; then
  step "cargo bench --bench stores"
  cargo bench --bench stores
fi
