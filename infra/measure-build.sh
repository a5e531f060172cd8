#!/usr/bin/env bash
# The README's table of what a function compiles, measured (on demand, not
# in CI: two clean release builds, about 8 minutes on 2 cores):
#   - the README's quick start (its ```toml and ```rust blocks, as
#     infra/quickstart.sh builds them) and msk-handler (every store);
#   - each built clean with `cargo lambda build --release` in a target
#     directory of its own: packages compiled, wall time, `bootstrap`, its
#     zip (deflate, as `sam build` zips it);
#   - cold init: from `exec` to the first `invocation/next` under a Lambda
#     Runtime API stand-in (infra/runtime_api.py), p50 of 10 starts; idle
#     RSS one second later.
# Prints one line per function, in the README's column order.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
cd "$root"
infra/tools.sh
export PATH="$EXACTLY_ONCE_TOOLS/venv/bin:$PATH"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python3 infra/quickstart_crate.py README.md "$work/payments" "$root"
cp Cargo.lock "$work/payments/"

# measure NAME DIR CARGO_ARGS...: a clean release build in DIR, then the
# binary's starts.
measure() {
  local name=$1 dir=$2
  shift 2
  local target="$work/target-$name" log="$work/build-$name.log" started ended
  started=$(date +%s)
  (cd "$dir" && CARGO_TARGET_DIR="$target" cargo lambda build --release "$@" >"$log" 2>&1) \
    || { cat "$log" >&2; exit 1; }
  ended=$(date +%s)
  local bootstrap
  bootstrap=$(find "$target/lambda" -name bootstrap -type f | head -1)
  python3 - "$name" "$bootstrap" "$log" "$((ended - started))" <<'PY'
import io, os, statistics, sys, time, zipfile
sys.path.insert(0, "infra")
from runtime_api import Function

name, bootstrap, log, seconds = sys.argv[1:]
packages = sum(1 for line in open(log) if line.lstrip().startswith("Compiling "))
archive = io.BytesIO()
with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
    z.write(bootstrap, "bootstrap")
env = dict(os.environ, AWS_REGION="us-east-1", AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x",
           IDEMPOTENCY_TABLE="idempotency", LEDGER_TABLE="ledger")
inits, rss = [], []
for _ in range(10):
    function = Function(bootstrap, env=env, output=open(os.devnull, "w"))
    inits.append(function.init_seconds() * 1000)
    time.sleep(1)
    with open(f"/proc/{function.process.pid}/status") as status:
        kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    rss.append(kb / 1024)
    function.close()
mb = lambda n: f"{n / 1e6:.1f} MB"
print(f"{name}: {packages} packages, {seconds} s, bootstrap {mb(os.path.getsize(bootstrap))}, "
      f"zipped {mb(len(archive.getvalue()))}, cold init {statistics.median(inits):.1f} ms, "
      f"idle RSS {statistics.median(rss):.1f} MB")
PY
}

measure quickstart "$work/payments"
measure msk-handler "$root" -p msk-handler
