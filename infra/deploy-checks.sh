#!/usr/bin/env bash
# What a team deploys and starts from, checked as it uses it (infra/test.sh
# runs this beside the tests, at a lower priority; alone it needs the tools
# and the local stack: `source infra/local-stack.sh; local_stack T L` first):
#   - the deploy artifact: sam build of template.yaml in release, its zip,
#     the binary through a Lambda Runtime API stand-in
#     (infra/check-artifact.sh), in the background from the start: a cold
#     release build, on the core the steps below leave;
#   - the README's quick start outside the repository (infra/quickstart.sh);
#   - a new function from templates/msk-function, per source
#     (infra/template-check.sh);
#   - the links of the README and docs/ (infra/check-links.py);
#   - the template's validation (infra/validate-template.sh) and the
#     CloudFormation evaluator's own cases (infra/test_cfn_eval.py);
#   - the CDK construct (infra/cdk-check.sh), and docs/deploy-cdk.md
#     followed outside the repository (infra/cdk-team-check.sh).
# Each step's time is printed as infra/test.sh prints its own.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=infra/local-stack.sh
source infra/local-stack.sh
# The crates built outside the workspace (the quick start's, the
# templates') in debug without debuginfo: what is checked is that they
# build, test and answer; their debuginfo was 2 of target/'s 7 GB, and the
# linking of it a share of the CPU the tests need.
export CARGO_PROFILE_DEV_DEBUG=0

step "deploy artifact (infra/check-artifact.sh), started in the background"
artifact_log="$(mktemp)"
infra/check-artifact.sh >"$artifact_log" 2>&1 &
artifact=$!

step "the README's quick start, outside the repository (infra/quickstart.sh)"
infra/quickstart.sh

step "a new function from templates/msk-function (infra/template-check.sh)"
infra/template-check.sh

step "links of the README and docs/ (infra/check-links.py)"
python3 infra/check-links.py

step "template validation (infra/validate-template.sh)"
infra/validate-template.sh

# The evaluator the template checks read templates with, on its own cases.
step "the CloudFormation evaluator's checks (infra/test_cfn_eval.py)"
"$EXACTLY_ONCE_TOOLS/venv/bin/python" -m unittest discover -s infra -p 'test_cfn_eval.py'

# The CDK construct library: its tests, a synth of the example for every
# source x store, cfn-lint, and the drift check against the SAM pieces.
step "the CDK construct (infra/cdk-check.sh)"
infra/cdk-check.sh

# docs/deploy-cdk.md as a team follows it, outside the repository: the
# construct packed from a copy, the crate built with the features the page
# names, the app synthesized, the function started with its template's
# environment (after cdk-check.sh: its npm ci fills npm's cache).
step "docs/deploy-cdk.md outside the repository (infra/cdk-team-check.sh)"
infra/cdk-team-check.sh

step "deploy artifact (infra/check-artifact.sh): its output"
status=0
wait "$artifact" || status=$?
cat "$artifact_log"
rm -f "$artifact_log"
[[ $status == 0 ]] || { echo "deploy artifact: infra/check-artifact.sh failed ($status)" >&2; exit 1; }
step "deploy checks passed"
