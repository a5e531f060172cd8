#!/usr/bin/env bash
# Checks the CDK construct library (cdk/) offline: `npm ci`, the TypeScript
# compile, the assertion tests, then a synth of cdk/example for every
# source x store and a team's configuration (33 stacks in one process,
# example/synth-all.ts; the CDK
# CLI's synth of one of them is the same template; without building the
# Rust code), each template
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

step "cdk synth of every source x store into $out (example/synth-all.ts)"
# One process for the 33 stacks (each through the CLI was mostly node
# starting up: 145 s two at a time), with the context the CLI gives an app
# and no bundling (no cargo build at synth, see cdk/README.md).
node --import tsx example/synth-all.ts "$out"
step "cdk synth through the CLI (kafka-msk, dynamodb): the same template"
# The CLI's path once, as a user runs it, compared whole with synth-all's.
EXACTLY_ONCE_SKIP_BUNDLING=1 npx cdk synth --quiet --app 'node --import tsx example/app.ts' \
  -c source=kafka-msk -c store=dynamodb -o "$work/cli" >"$work/cli.log" 2>&1 \
  || { cat "$work/cli.log" >&2; echo "cdk-check: cdk synth failed" >&2; exit 1; }
python3 - "$work/cli/ExactlyOnceExample.template.json" "$out/kafka-msk-dynamodb.json" <<'PY'
import json, sys
cli, all_ = (json.load(open(path)) for path in sys.argv[1:])
if cli != all_:
    sys.exit("cdk-check: synth-all.ts and the CDK CLI synthesize different templates for kafka-msk-dynamodb")
PY

step "cfn-lint"
# W3005: the CDK's Function DependsOn its role besides GetAtt-ing it (the
# CDK's own output, not the construct's).
"$EXACTLY_ONCE_TOOLS/venv/bin/cfn-lint" --ignore-checks W3005 -- "$out"/*.json
step "drift: the SAM pieces and the construct, configuration by configuration"
"$EXACTLY_ONCE_TOOLS/venv/bin/python" "$root/infra/drift.py" "$out"
echo "cdk-check: $(ls "$out"/*.json | wc -l) templates OK in $out ($(( $(date +%s) - total )) s in all)"
