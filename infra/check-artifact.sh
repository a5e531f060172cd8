#!/usr/bin/env bash
# Builds the deploy artifact the way `sam deploy` ships it and checks it the
# way Lambda uses it:
#   1. `sam build` of template.yaml (x86_64 here: the toolchain's own target,
#      nothing to download; arm64, the template's default, needs
#      `rustup target add aarch64-unknown-linux-gnu` and zig);
#   2. `bootstrap` present, executable, zipped under 10 MB;
#   3. the binary started with the Lambda environment answers invocations
#      through a Lambda Runtime API stand-in (infra/runtime_api.py): a
#      Kafka event gets an empty partial batch response, an SNS event (not
#      a batch source) an invocation error (UnknownEventSource); with
#      TRACING_EXPORT=otlp it exports
#      its spans (invocation, batch, records) to a stand-in collector.
# Needs the tools ($EXACTLY_ONCE_TOOLS/venv) and DynamoDB Local with its tables
# (IDEMPOTENCY_TABLE, LEDGER_TABLE, AWS_ENDPOINT_URL_DYNAMODB): run it from
# infra/test.sh, or after `source infra/local-stack.sh; local_stack T L`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
cd "$root"
export PATH="$EXACTLY_ONCE_TOOLS/venv/bin:$PATH" SAM_CLI_TELEMETRY=0
export AWS_DEFAULT_REGION="${AWS_REGION:-us-east-1}"
# Cargo, not zig: the host's own target needs no cross compiler.
export CARGO_LAMBDA_COMPILER=cargo
max_zip_bytes=$((10 * 1024 * 1024))
build="$root/.aws-sam/build"

echo "artifact: sam build (x86_64)"
# Not cached: a cached build hashes the whole source tree, target/ included.
sam build --no-cached --build-dir "$build" --parameter-overrides Architecture=x86_64 >&2
bootstrap="$build/Function/bootstrap"
[[ -x "$bootstrap" ]] || { echo "artifact: no executable $bootstrap" >&2; exit 1; }
# The pieces of sam/ the template references, built beside it (sam package
# uploads them with it).
for piece in ExactlyOnce Wiring; do
  [[ -f "$build/$piece/template.yaml" ]] || { echo "artifact: sam build left out the nested $piece" >&2; exit 1; }
done
# An ELF executable for x86-64 (e_machine 62).
python3 -c 'import sys; h = open(sys.argv[1], "rb").read(20); sys.exit(h[:4] != b"\x7fELF" or int.from_bytes(h[18:20], "little") != 62)' "$bootstrap" \
  || { echo "artifact: $bootstrap is not an x86-64 ELF binary" >&2; exit 1; }

zip="$build/function.zip"
python3 - "$bootstrap" "$zip" <<'PY'
import sys, zipfile
bootstrap, target = sys.argv[1:]
with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
    info = zipfile.ZipInfo("bootstrap")
    info.external_attr = 0o755 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    with open(bootstrap, "rb") as f:
        z.writestr(info, f.read())
PY
binary_bytes=$(stat -c %s "$bootstrap")
zip_bytes=$(stat -c %s "$zip")
echo "artifact: bootstrap $binary_bytes bytes, zipped $zip_bytes bytes (limit $max_zip_bytes)"
(( zip_bytes < max_zip_bytes )) || { echo "artifact: the zip is over 10 MB" >&2; exit 1; }

echo "artifact: invoking it through the Runtime API stand-in"
answers="$(IDEMPOTENCY_KEY_PREFIX="artifact-$(date +%s%N)#" \
  python3 infra/runtime_api.py --bootstrap "$bootstrap" \
    --event events/two-partitions.json --event events/not-a-batch-source.json \
    --event events/scheduled.json)"
echo "$answers"
python3 - "$answers" <<'PY'
import json, sys
kafka, sns, scheduled = (json.loads(line) for line in sys.argv[1].splitlines())
assert kafka.get("response") == {"batchItemFailures": []}, kafka
assert sns.get("error", {}).get("errorType") == "UnknownEventSource", sns
# The stuck-key check: answered like an empty batch.
assert scheduled.get("response") == {"batchItemFailures": []}, scheduled
PY

echo "artifact: with TRACING_EXPORT=otlp, exporting to a stand-in collector"
answers="$(IDEMPOTENCY_KEY_PREFIX="artifact-$(date +%s%N)#" \
  python3 infra/runtime_api.py --otlp --bootstrap "$bootstrap" --event events/two-partitions.json)"
echo "$answers"
python3 - "$answers" <<'PY'
import json, sys
kafka, otlp = (json.loads(line) for line in sys.argv[1].splitlines())
assert kafka.get("response") == {"batchItemFailures": []}, kafka
spans = otlp["otlp"]["spans"]
assert spans == ["kafka batch", "msk-handler", "payments process"], otlp
PY
echo "artifact: OK"
