#!/usr/bin/env bash
# Checks the CDK construct library (cdk/) offline: `npm ci`, the TypeScript
# compile, the assertion tests, then `cdk synth` of cdk/example for every
# source x store (32 stacks, without building the Rust code), each template
# written to $1 (default: a temporary directory) as <source>-<store>.json and
# linted with cfn-lint, and compared with the SAM pieces for the same
# configuration (infra/drift.py: resource types, IAM actions per resource,
# the mapping's settings, alarms, the function's variables). Needs node >= 20
# and the tools of infra/tools.sh.
# Fails on any error; prints the time of each step.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
out="${1:-$(mktemp -d)}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$root/cdk"
export CDK_DISABLE_VERSION_CHECK=1 CDK_DISABLE_CLI_TELEMETRY=true

step() { echo "cdk-check: $1 ($(( $(date +%s) - started )) s)"; }
started=$(date +%s)
total=$started

step "npm ci"
npm ci --no-audit --no-fund --loglevel=error
step "tsc --noEmit"
npx tsc --noEmit
step "assertion tests"
node --import tsx --test --test-reporter=dot test/*.test.ts

sources=(kafka-msk kafka-self-managed sqs sqs-fifo kinesis dynamodb-streams rabbitmq activemq)
stores=(dynamodb dynamodb-existing postgres redis)
step "cdk synth, ${#sources[@]} sources x ${#stores[@]} stores, into $out"
synth_started=$(date +%s)
# One synth: the example skips bundling (no cargo build at synth, see
# cdk/README.md); its warnings (a store that needs a VPC: the example's
# function has none) go to a log, shown if the synth fails.
synth() {
  local source=${1%%/*} store=${1##*/}
  EXACTLY_ONCE_SKIP_BUNDLING=1 npx cdk synth --quiet --app 'node --import tsx example/app.ts' \
    -c "source=$source" -c "store=$store" -o "$work/$source-$store" >"$work/$source-$store.log" 2>&1 \
    || { cat "$work/$source-$store.log" >&2; echo "cdk-check: synth $source-$store failed" >&2; return 1; }
  cp "$work/$source-$store/ExactlyOnceExample.template.json" "$out/$source-$store.json"
}
export -f synth
export work out
# Two at a time: each is mostly node starting up.
for source in "${sources[@]}"; do
  for store in "${stores[@]}"; do echo "$source/$store"; done
done | xargs -P 2 -I {} bash -c 'synth {}'
echo "cdk-check: synth took $(( $(date +%s) - synth_started )) s"

step "cfn-lint"
# W3005: the CDK's Function DependsOn its role besides GetAtt-ing it (the
# CDK's own output, not the construct's).
"$EXACTLY_ONCE_TOOLS/venv/bin/cfn-lint" --ignore-checks W3005 -- "$out"/*.json
step "drift: the SAM pieces and the construct, configuration by configuration"
"$EXACTLY_ONCE_TOOLS/venv/bin/python" "$root/infra/drift.py" "$out"
echo "cdk-check: $(ls "$out"/*.json | wc -l) templates OK in $out ($(( $(date +%s) - total )) s in all)"
