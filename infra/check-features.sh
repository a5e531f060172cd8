#!/usr/bin/env bash
# The facade's cargo features keep what a team compiles to what it uses:
#   1. a DynamoDB-only user (`exactly-once = { default-features = false,
#      features = ["dynamodb"] }`) compiles none of the other stores' and
#      optional parts' crates (`cargo tree -e normal`);
#   2. the shipped function never compiles the model checker's mutations;
#   3. the facade builds with each feature alone, and with none.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

echo "features: the DynamoDB-only tree"
tree="$(cargo tree -p exactly-once --no-default-features --features dynamodb -e normal --prefix none)"
forbidden=(tokio-postgres redis opentelemetry apache-avro prost aws-sdk-s3 aws-sdk-sqs aws-sdk-sns aws-sdk-eventbridge aws-sdk-kinesis
  aws-sdk-lambda aws-sdk-secretsmanager clap rskafka rsasl)
status=0
for name in "${forbidden[@]}"; do
  # A crate line starts with its name and a space (`redis v1.8.0`); names
  # that only start the same (`opentelemetry-semantic-conventions`) count.
  if grep -E "^${name}([ -]|_)" <<<"$tree" >/dev/null; then
    echo "features: the DynamoDB-only build compiles $(grep -E "^${name}([ -]|_)" <<<"$tree" | sort -u | tr '\n' ' ')" >&2
    status=1
  fi
done
packages="$(sed 's/ (\*)$//' <<<"$tree" | sort -u | wc -l)"
echo "features: the DynamoDB-only build compiles $packages packages, none of: ${forbidden[*]}"
[[ $status == 0 ]] || exit 1

# The model checker's guard mutations (crates/core feature `mutations`, a
# dev-dependency of crates/model) never reach the shipped function.
if cargo tree -p msk-handler -e features -i exactly-once-core | grep -q '"mutations"'; then
  echo "features: msk-handler compiles exactly-once-core's feature mutations" >&2
  exit 1
fi
echo "features: msk-handler compiles no guard mutations"

for features in "" dynamodb postgres redis sqs sns eventbridge kinesis kafka opentelemetry avro protobuf conformance; do
  started=$SECONDS
  cargo check -q -p exactly-once --lib --no-default-features --features "$features"
  echo "features: cargo check -p exactly-once --no-default-features --features '$features' ($((SECONDS - started)) s)"
done
echo "features: OK"
