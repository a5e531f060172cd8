#!/usr/bin/env bash
# The template for a new function, used the way SAM users start, once per
# event source it offers (kafka, the default, then sqs, kinesis,
# dynamodb-streams, rabbitmq and activemq):
#   1. `sam init --location templates/msk-function --no-input` into a
#      temporary directory, exactly-once (and its sam/ pieces) pointed at
#      this checkout by path (the default source as `--no-input` picks it,
#      the others by `event_source` in --extra-context);
#   2. its src/main.rs is the README's quick start, line for line (plus
#      the line that declares its test module): one handler over the
#      source-neutral `Record` serves every source;
#   3. its template.yaml is at most 120 lines, passes cfn-lint, `sam
#      validate --lint` and `sam validate`; evaluated with the source's
#      values (cdk/example/configurations.json, the ones the drift check
#      uses), it deploys exactly one event source mapping, of its source,
#      reporting partial batch responses (an Amazon MQ mapping, which has
#      none, asks for none); its parameters and their defaults are those
#      templates/README.md lists;
#   4. it builds, is rustfmt-clean, and its test (its source's sample event
#      delivered twice, each payment applied once) passes on DynamoDB Local;
#   5. its binary, started with exactly the environment its template.yaml
#      gives the function (infra/template_run.py: the template evaluated
#      with the source's values, its tables and queues made locally),
#      answers its sample event with no record reported: a variable its
#      Cargo.toml has no feature for would stop it at start;
#   6. (kafka only) `sam build` with cargo-lambda builds it, nested pieces
#      and all (x86_64, debug: arm64 needs a toolchain download, and the
#      release build is infra/check-artifact.sh's).
# Needs the tools, DynamoDB Local and moto's SQS (run it from
# infra/test.sh, or after `source infra/local-stack.sh; local_stack T L`).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
export PATH="$EXACTLY_ONCE_TOOLS/venv/bin:$PATH" SAM_CLI_TELEMETRY=0
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
started=$(date +%s)
# Every build below in the checkout's target directory (CARGO_TARGET_DIR if
# set), for the host's triple named: `sam build` (cargo lambda build)
# always names one, so its build finds the dependencies the builds above
# built.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
CARGO_BUILD_TARGET="$(rustc -vV | sed -n 's/^host: //p')"
export CARGO_BUILD_TARGET

# TEMPLATE_SOURCES: a few of them, while working on one.
read -r -a sources <<< "${TEMPLATE_SOURCES:-kafka sqs kinesis dynamodb-streams rabbitmq activemq}"
for source in "${sources[@]}"; do
  echo "template ($source): sam init --location templates/msk-function"
  context="{\"project_name\": \"msk-payments\", \"exactly_once_path\": \"$root\""
  [[ $source == kafka ]] || context+=", \"event_source\": \"$source\""
  context+="}"
  # sam and cookiecutter keep replay files under HOME: a throwaway one.
  HOME="$work/home" sam init --location "$root/templates/msk-function" --no-input \
    --output-dir "$work/$source" --extra-context "$context"
  project="$work/$source/msk-payments"
  [[ -f "$project/template.yaml" && -f "$project/src/main.rs" ]] \
    || { echo "template: no project in $project" >&2; exit 1; }

  echo "template ($source): src/main.rs is the README's quick start"
  python3 - "$root/README.md" "$project/src/main.rs" "$source" <<'PY'
import pathlib, re, sys
readme, main = pathlib.Path(sys.argv[1]).read_text(), pathlib.Path(sys.argv[2]).read_text()
source = sys.argv[3]
section = readme.split("\n## Your own handler\n", 1)[1].split("\n## ", 1)[0]
rust = re.search(r"^```rust\n(.*?)^```$", section, re.S | re.M).group(1)
expected = rust
if main != expected:
    sys.exit(f"template: src/main.rs ({source}) differs from the README's quick start")
PY

  echo "template ($source): its template.yaml validated"
  lines=$(wc -l < "$project/template.yaml")
  (( lines <= 120 )) || { echo "template: $lines lines (at most 120)" >&2; exit 1; }
  cfn-lint "$project/template.yaml"
  sam validate --lint --template-file "$project/template.yaml"
  sam validate --template-file "$project/template.yaml"
  # The source's values, as the drift check gives them (kafka: MSK's).
  mapfile -t values < <("$EXACTLY_ONCE_TOOLS/venv/bin/python" - \
    "$root/cdk/example/configurations.json" "$source" <<'PY'
import json, sys
configurations, source = json.load(open(sys.argv[1])), sys.argv[2]
name = ("kafka-msk" if source == "kafka" else source) + "-dynamodb"
for key, value in configurations[name]["sam"].items():
    print(f"{key}={value}")
PY
  )
  echo "template ($source): deployed, one mapping of its source (${values[*]})"
  "$EXACTLY_ONCE_TOOLS/venv/bin/python" - "$root/infra" "$project/template.yaml" "$source" "${values[@]}" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import cfn_eval
path, source, values = sys.argv[2], sys.argv[3], sys.argv[4:]
deployed = cfn_eval.evaluate(path, dict(v.split("=", 1) for v in values))
mappings = [r["Properties"] for r in deployed["Resources"].values()
            if r["Type"] == "AWS::Lambda::EventSourceMapping"]
assert len(mappings) == 1, f"{len(mappings)} event source mappings"
env = deployed["Resources"]["Function"]["Properties"]["Environment"]["Variables"]
assert env["EVENT_SOURCES"] == source, env["EVENT_SOURCES"]
types = mappings[0].get("FunctionResponseTypes")
if source in ("rabbitmq", "activemq"):
    # Lambda has no partial batch response for Amazon MQ: the batch fails whole.
    assert types is None, f"the {source} mapping asks for {types}"
else:
    assert types == ["ReportBatchItemFailures"], f"the {source} mapping reports {types}"
PY
  echo "template ($source): its parameters are those templates/README.md lists"
  "$EXACTLY_ONCE_TOOLS/venv/bin/python" "$root/infra/template_params.py" \
    "$root/templates/README.md" "$project/template.yaml" "$source"

  echo "template ($source): cargo test on DynamoDB Local"
  cp "$root/Cargo.lock" "$project/"
  (cd "$project" && cargo fmt --check && cargo test --quiet)

  echo "template ($source): started with its template.yaml's environment"
  (cd "$project" && cargo build --quiet)
  params=()
  for value in "${values[@]}"; do params+=(--parameter "$value"); done
  "$EXACTLY_ONCE_TOOLS/venv/bin/python" "$root/infra/template_run.py" \
    --template "$project/template.yaml" --bootstrap "$CARGO_TARGET_DIR/$CARGO_BUILD_TARGET/debug/msk-payments" \
    --event "$project/events/payments.json" --log "$work/$source.log" "${params[@]}" \
    || { tail -n 30 "$work/$source.log" >&2; exit 1; }

  if [[ $source == kafka ]]; then
    # SAM_BUILD_MODE=debug: `cargo lambda build` without --release (what is
    # checked is that sam build builds the function and its nested pieces;
    # the release build of a function is infra/check-artifact.sh's), on the
    # dependencies the steps above built (the same triple: x86_64 here).
    echo "template ($source): sam build (x86_64, debug), the pieces of sam/ with it"
    (cd "$project" && SAM_BUILD_MODE=debug CARGO_LAMBDA_COMPILER=cargo \
      sam build --parameter-overrides Architecture=x86_64 >&2)
    [[ -x "$project/.aws-sam/build/Function/bootstrap" ]] \
      || { echo "template: sam build made no bootstrap" >&2; exit 1; }
    ls "$project/.aws-sam/build/ExactlyOnce/template.yaml" "$project/.aws-sam/build/Wiring/template.yaml" >/dev/null \
      || { echo "template: sam build did not build the nested pieces" >&2; exit 1; }
  fi
done
echo "template: OK, from sam init to a green test for ${#sources[@]} sources in $(($(date +%s) - started)) s"
