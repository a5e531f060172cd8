# shellcheck shell=bash
# Sourced by the infra scripts: dummy AWS settings for local tools
# (DynamoDB Local, SAM CLI offline). Never real credentials.
# DynamoDB Local accepts any key, but the access key id must be letters/digits.
export AWS_ACCESS_KEY_ID=local
export AWS_SECRET_ACCESS_KEY=local
export AWS_REGION=us-east-1
export AWS_DEFAULT_REGION=us-east-1
# Without this the SDKs may ask the instance metadata service (refused here).
export AWS_EC2_METADATA_DISABLED=true
# Keep SAM CLI offline and quiet.
export SAM_CLI_TELEMETRY=0
unset AWS_PROFILE AWS_SESSION_TOKEN
# Where infra/tools.sh installs the tools (a Python venv with cargo-lambda,
# SAM CLI, cfn-lint and moto; DynamoDB Local) and where the local servers
# keep their logs: outside the checkout, which may be read-only. Set
# EXACTLY_ONCE_TOOLS to choose; `infra/tools.sh --print` shows how to
# install them yourself instead.
export EXACTLY_ONCE_TOOLS="${EXACTLY_ONCE_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/exactly-once}"
# The scripts write nothing into the checkout (no __pycache__ either).
export PYTHONDONTWRITEBYTECODE=1
