#!/usr/bin/env bash
# Packs @exactly-once/cdk (the checkout's cdk/) into DIR, default the
# current directory, and prints the tarball's path. Built in a copy of cdk/
# (npm ci, the TypeScript build, npm pack): nothing is written into the
# checkout, which may be read-only. Needs node >= 20 and npm's registry (or
# its cache). docs/deploy-cdk.md installs the tarball.
#
#   tarball="$(infra/cdk-pack.sh ~/payments-app)"
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$(cd "${1:-.}" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The package's sources and lock, not a build or the modules a check left.
tar -C "$root/cdk" --exclude=./node_modules --exclude=./lib --exclude='*.tgz' -cf - . | tar -C "$work" -xf -
chmod -R u+w "$work"
cd "$work"
npm ci --no-audit --no-fund --loglevel=error >&2
npm run --silent build >&2
name="$(npm pack --silent --pack-destination "$dest" | tail -n 1)"
echo "$dest/$name"
