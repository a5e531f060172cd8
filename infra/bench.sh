#!/usr/bin/env bash
# The project's benchmark command: throughput of the real MSK function against
# DynamoDB Local, with a simulated network round trip per DynamoDB request.
# Installs the tools, starts DynamoDB Local with the template's tables, then
# runs `cargo bench --bench throughput` (optimized build). Prints the results
# table and writes bench/results.csv and bench/batch-time-vs-rtt.svg.
#
#   infra/bench.sh                 # the full run (about 10 minutes on 2 cores)
#   BENCH_REPS=0.4 infra/bench.sh  # fewer repetitions (at least one each)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

step() { printf '\n==> %s\n' "$*"; }

step "tools (infra/tools.sh)"
infra/tools.sh

# shellcheck source=infra/local-env.sh
source infra/local-env.sh
# The venv's python3 with boto3 + PyYAML (infra/local_tables.py).
export PATH="$root/.cache/venv/bin:$PATH"

step "DynamoDB Local"
eval "$(infra/dynamodb-local.sh start)"
# Stops exactly the server started above (DYNAMODB_LOCAL_PID).
trap 'infra/dynamodb-local.sh stop' EXIT
echo "AWS_ENDPOINT_URL_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB"

step "tables from template.yaml"
infra/local_tables.py --table IdempotencyTable=idempotency-bench --table LedgerTable=ledger-bench
export IDEMPOTENCY_TABLE=idempotency-bench LEDGER_TABLE=ledger-bench

step "cargo bench --bench throughput"
cargo bench --bench throughput
