#!/usr/bin/env bash
# The template for a new function, used the way SAM users start, once per
# event source it offers (kafka, the default, then sqs, kinesis,
# dynamodb-streams, rabbitmq and activemq):
#   1. `sam init --location templates/msk-function --no-input` into a
#      temporary directory, exactly-once pointed at this checkout by path
#      (the default source as `--no-input` picks it, the others by
#      `event_source` in --extra-context);
#   2. its src/main.rs is the README's quick start, line for line (plus
#      the line that declares its test module): one handler over the
#      source-neutral `Record` serves every source;
#   3. its template.yaml passes cfn-lint, `sam validate --lint` and
#      `sam validate`, and its mapping reports partial batch responses (an
#      Amazon MQ mapping, which has none, asks for none); its parameters and
#      their defaults are those templates/README.md lists for its source;
#   4. it builds, is rustfmt-clean, and its test (its source's sample event
#      delivered twice, each payment applied once) passes on DynamoDB Local;
#   5. its binary, started with exactly the environment its template.yaml
#      gives the function (infra/template_run.py: the parameters' defaults,
#      then each other value they allow; its tables and queues made
#      locally), answers its sample event with no record reported: a
#      variable its Cargo.toml has no feature for would stop it at start.
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

sources=(kafka sqs kinesis dynamodb-streams rabbitmq activemq)
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
expected = rust + "\n#[cfg(test)]\nmod tests;\n"
if main != expected:
    sys.exit(f"template: src/main.rs ({source}) differs from the README's quick start")
PY

  echo "template ($source): its template.yaml validated"
  cfn-lint "$project/template.yaml"
  sam validate --lint --template-file "$project/template.yaml"
  sam validate --template-file "$project/template.yaml"
  grep -q "EVENT_SOURCES: $source\$" "$project/template.yaml" \
    || { echo "template: EVENT_SOURCES is not $source" >&2; exit 1; }
  case $source in
    rabbitmq | activemq)
      # Lambda has no partial batch response for Amazon MQ: the mapping must
      # not ask for one (the batch fails whole).
      ! grep -qE "^ +FunctionResponseTypes:" "$project/template.yaml" \
        || { echo "template: the $source mapping asks for FunctionResponseTypes" >&2; exit 1; } ;;
    *)
      grep -q -- "- ReportBatchItemFailures\$" "$project/template.yaml" \
        || { echo "template: the $source mapping has no ReportBatchItemFailures" >&2; exit 1; } ;;
  esac

  echo "template ($source): its parameters are those templates/README.md lists"
  "$EXACTLY_ONCE_TOOLS/venv/bin/python" "$root/infra/template_params.py" \
    "$root/templates/README.md" "$project/template.yaml" "$source"

  echo "template ($source): cargo test on DynamoDB Local"
  cp "$root/Cargo.lock" "$project/"
  (cd "$project" && cargo fmt --check && CARGO_TARGET_DIR="$root/target" cargo test --quiet)

  echo "template ($source): started with its template.yaml's environment"
  (cd "$project" && CARGO_TARGET_DIR="$root/target" cargo build --quiet)
  "$EXACTLY_ONCE_TOOLS/venv/bin/python" "$root/infra/template_run.py" \
    --template "$project/template.yaml" --bootstrap "$root/target/debug/msk-payments" \
    --event "$project/events/payments.json" --log "$work/$source.log" \
    || { tail -n 30 "$work/$source.log" >&2; exit 1; }
done
echo "template: OK, from sam init to a green test for ${#sources[@]} sources in $(($(date +%s) - started)) s"
