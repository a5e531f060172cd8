#!/usr/bin/env bash
# The project's one test command (CI runs it through .ci/run).
# Installs the tools, starts DynamoDB Local with the template's tables, then
# runs rustfmt, clippy, the tests and the template validation.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

step() { printf '\n==> %s\n' "$*"; }

step "tools (infra/tools.sh)"
infra/tools.sh

# shellcheck source=infra/local-env.sh
source infra/local-env.sh
# cargo-lambda (used by tests) and the venv's python3 with boto3 + PyYAML.
export PATH="$root/.cache/venv/bin:$PATH"

step "DynamoDB Local"
eval "$(infra/dynamodb-local.sh start)"
# Stops exactly the server started above (DYNAMODB_LOCAL_PID).
trap 'infra/dynamodb-local.sh stop' EXIT
echo "AWS_ENDPOINT_URL_DYNAMODB=$AWS_ENDPOINT_URL_DYNAMODB"

step "tables from template.yaml"
infra/local_tables.py --table IdempotencyTable=idempotency-test --table LedgerTable=ledger-test
export IDEMPOTENCY_TABLE=idempotency-test LEDGER_TABLE=ledger-test

step "cargo fmt --check"
cargo fmt --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

step "cargo test"
cargo test

# The batch tests again with records of different Kafka keys free to run
# concurrently (ORDERING_MODE=key); tests/throughput.rs covers none.
step "batch tests in key ordering mode"
TEST_ORDERING_MODE=key cargo test --test handler --test transactional --test lifecycle --test kill

step "template validation (infra/validate-template.sh)"
infra/validate-template.sh

step "all checks passed"
