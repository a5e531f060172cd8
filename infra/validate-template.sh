#!/usr/bin/env bash
# Validates template.yaml offline: cfn-lint, `sam validate --lint` and plain
# `sam validate` (only the last one rejects a misspelt SAM event property);
# then cfn-lint on each piece of sam/ it references (`sam validate` does not
# descend into nested templates).
# Needs the tools of infra/tools.sh. Fails on any error.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=infra/local-env.sh
source "$root/infra/local-env.sh"
bin="$EXACTLY_ONCE_TOOLS/venv/bin"
template="$root/template.yaml"
cd "$root"

echo "validate: cfn-lint"
"$bin/cfn-lint" "$template"
echo "validate: sam validate --lint"
"$bin/sam" validate --lint --template-file "$template"
echo "validate: sam validate"
"$bin/sam" validate --template-file "$template"
for piece in "$root"/sam/*.yaml; do
  echo "validate: cfn-lint ${piece#"$root"/}"
  "$bin/cfn-lint" "$piece"
done
echo "validate: template.yaml and sam/ OK"
