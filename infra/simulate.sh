#!/usr/bin/env bash
# Runs the event-source simulation (tests/batch/simulation/mod.rs) against a DynamoDB
# Local of its own: SCHEDULES randomized schedules from SEED (default: random),
# SIM_PARALLEL (default 24) at once. Extra arguments go to cargo test.
#
#   infra/simulate.sh 1 12345                 # replay one schedule (a failure prints this line)
#   infra/simulate.sh 20000 42 --release      # the long run
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

export SIM_SCHEDULES="${1:-1000}"
if [[ -n "${2:-}" ]]; then export SIM_SEED="$2"; fi
shift $(( $# < 2 ? $# : 2 ))

# shellcheck source=infra/local-stack.sh
source infra/local-stack.sh
local_stack idempotency-sim ledger-sim

step "cargo test --test batch simulation:: ($SIM_SCHEDULES schedules)"
# The function prints one metrics document per invocation: left out here.
cargo test "$@" --test batch -- simulation:: --nocapture | grep -v '"_aws"'
