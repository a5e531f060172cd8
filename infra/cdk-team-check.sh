#!/usr/bin/env bash
# docs/deploy-cdk.md as a team follows it, outside the repository:
#   1. its install block, run as it is from a new app's directory beside a
#      copy of the checkout (EXACTLY_ONCE): @exactly-once/cdk packed by
#      infra/cdk-pack.sh and installed with its peers, the copy unchanged
#      (a read-only checkout works);
#   2. the crate: "The crate"'s ```toml block and the README's quick start
#      in the app's payments/, built (debug, the host's triple);
#   3. "The app"'s ```ts block as app.ts, synthesized with the construct as
#      `cdk synth` runs an app (CDK_OUTDIR, CDK_CONTEXT_JSON), bundling
#      skipped: the function's build is step 2's (a bundled one is `cargo
#      lambda build --release` for arm64);
#   4. the built function started with exactly the environment the
#      synthesized template gives it (infra/template_run.py: its tables and
#      queues made locally) answers events/sqs.json with nothing reported: a
#      variable its features cannot serve would stop it at start.
# Needs the tools, DynamoDB Local and moto's SQS (run it from
# infra/deploy-checks.sh, or after `source infra/local-stack.sh; local_stack
# T L`), and npm's registry or its cache.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
export PATH="$EXACTLY_ONCE_TOOLS/venv/bin:$PATH" CDK_DISABLE_VERSION_CHECK=1 CDK_DISABLE_CLI_TELEMETRY=true
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
started=$(date +%s)
app="$work/app"
mkdir -p "$app"
python3 "$root/infra/copy_checkout.py" "$root" "$work/msk-exactly-once"
touch "$work/copied"
block() { # page heading lang: the first ```lang block under the heading
  python3 - "$@" <<'PY'
import pathlib, re, sys
page, heading, lang = pathlib.Path(sys.argv[1]).read_text(), sys.argv[2], sys.argv[3]
section = page.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
print(re.search(r"^```" + lang + r"\n(.*?)^```$", section, re.S | re.M).group(1), end="")
PY
}

echo "cdk-team: docs/deploy-cdk.md's install block, from the app's directory"
(cd "$app" && bash -euo pipefail -c "$(block "$root/docs/deploy-cdk.md" "## Install" sh)") \
  >"$work/install.log" 2>&1 || { tail -n 30 "$work/install.log" >&2; exit 1; }
changed="$(find "$work/msk-exactly-once" -newer "$work/copied")"
[[ -z "$changed" ]] || { echo "cdk-team: packing wrote into the checkout: $changed" >&2; exit 1; }

echo "cdk-team: the crate (docs/deploy-cdk.md's toml, the README's handler), built"
python3 "$root/infra/quickstart_crate.py" "$root/README.md" "$app/payments" "$root" "$root/docs/deploy-cdk.md"
cp "$root/Cargo.lock" "$app/payments/"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
CARGO_BUILD_TARGET="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_BUILD_TARGET
(cd "$app/payments" && cargo build --quiet)

echo "cdk-team: docs/deploy-cdk.md's app, synthesized"
block "$root/docs/deploy-cdk.md" "## The app" ts >"$app/app.ts"
(cd "$app" && CDK_OUTDIR="$app/cdk.out" CDK_CONTEXT_JSON='{"aws:cdk:bundling-stacks": []}' npx tsx app.ts)
template="$app/cdk.out/Payments.template.json"
function="$(python3 - "$template" <<'PY'
import json, sys
resources = json.load(open(sys.argv[1]))["Resources"]
print(next(name for name, r in resources.items() if r["Type"] == "AWS::Lambda::Function"
           and "EVENT_SOURCES" in r["Properties"].get("Environment", {}).get("Variables", {})))
PY
)"

echo "cdk-team: the function started with the synthesized template's environment ($function)"
python3 "$root/infra/template_run.py" --template "$template" --function "$function" \
  --bootstrap "$CARGO_TARGET_DIR/$CARGO_BUILD_TARGET/debug/payments" --event "$root/events/sqs.json" \
  --log "$work/function.log" || { tail -n 30 "$work/function.log" >&2; exit 1; }
echo "cdk-team: OK, from the docs' lines to an answering function in $(($(date +%s) - started)) s"
