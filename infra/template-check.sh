#!/usr/bin/env bash
# The template for a new function, used the way SAM users start:
#   1. `sam init --location templates/msk-function --no-input` into a
#      temporary directory, exactly-once pointed at this checkout by path;
#   2. its src/main.rs is the README's quick start, line for line (plus the
#      line that declares its test module);
#   3. its template.yaml passes cfn-lint, `sam validate --lint` and
#      `sam validate`;
#   4. it builds, and its test passes on DynamoDB Local.
# Needs the tools and DynamoDB Local (run it from infra/test.sh, or after
# `source infra/local-stack.sh; local_stack T L`).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
export PATH="$root/.cache/venv/bin:$PATH" SAM_CLI_TELEMETRY=0
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
started=$(date +%s)

echo "template: sam init --location templates/msk-function"
# sam and cookiecutter keep replay files under HOME: a throwaway one.
HOME="$work/home" sam init --location "$root/templates/msk-function" --no-input \
  --output-dir "$work" \
  --extra-context "{\"project_name\": \"msk-payments\", \"exactly_once_path\": \"$root\"}"
project="$work/msk-payments"
[[ -f "$project/template.yaml" && -f "$project/src/main.rs" ]] \
  || { echo "template: no project in $project" >&2; exit 1; }

echo "template: src/main.rs is the README's quick start"
python3 - "$root/README.md" "$project/src/main.rs" <<'PY'
import pathlib, re, sys
readme, main = pathlib.Path(sys.argv[1]).read_text(), pathlib.Path(sys.argv[2]).read_text()
section = readme.split("\n## Your own handler\n", 1)[1].split("\n## ", 1)[0]
rust = re.search(r"^```rust\n(.*?)^```$", section, re.S | re.M).group(1)
expected = rust + "\n#[cfg(test)]\nmod tests;\n"
if main != expected:
    sys.exit("template: src/main.rs differs from the README's quick start")
PY

echo "template: its template.yaml validated"
cfn-lint "$project/template.yaml"
sam validate --lint --template-file "$project/template.yaml"
sam validate --template-file "$project/template.yaml"

echo "template: cargo test on DynamoDB Local"
cp "$root/Cargo.lock" "$project/"
(cd "$project" && cargo fmt --check && CARGO_TARGET_DIR="$root/target" cargo test --quiet)
echo "template: OK, from sam init to a green test in $(($(date +%s) - started)) s"
