#!/usr/bin/env bash
# The project's one test command (CI runs it through .ci/run).
# Installs the tools, starts DynamoDB Local with the template's tables, a
# PostgreSQL cluster, a redis-server, a RabbitMQ node and an ActiveMQ broker
# (infra/local-stack.sh), starts the deploy checks beside everything else
# at a lower priority (infra/deploy-checks.sh: the deploy artifact, the
# README's quick start built outside the repository, the templates, the
# links, the template validation, the CDK construct), then runs rustfmt,
# the docs, the feature checks, clippy's lints on the build of every
# target, and the tests of every crate: the unit tests and the model
# checker, then the integration tests area by area (infra/test-area.sh),
# again on the locking path, in key ordering and the kill storms on every
# store. docs/testing.md says what each test shows and how long each step
# takes.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# A clean clone gains nothing from incremental compilation, and its caches
# were 6 of the 15 GB a run left in target/ (a CI run once stopped on a full
# disk). The space left is printed first and last.
export CARGO_INCREMENTAL=0
disk_left() { df -h --output=avail "$root" | tail -1; }
printf 'disk: %s free at the start\n' "$(disk_left | tr -d ' ')"

# shellcheck source=infra/local-stack.sh
source infra/local-stack.sh
local_stack idempotency-test ledger-test

# What a team deploys and starts from (the deploy artifact, the quick
# start, the templates, the CDK construct: infra/deploy-checks.sh) is
# checked beside everything below, at a lower priority: its builds, Python
# and Node fill the cores the steps below leave (a test waiting on a slow
# store, a link on one core) and give way when they are busy. Its builds
# have a target directory of their own (target/deploy): cargo locks the
# directory it builds in, and the tests' cargo commands must not wait for
# a release build. Its output, with its own step timings, comes at the end.
# At nice 10, in a session of its own (stopped with it): where the kernel
# shares the CPU between sessions first (sched_autogroup, as on this
# machine kind), a nice value counts only inside a session, so the
# session's own share is lowered the same (/proc/self/autogroup).
step "the deploy checks (infra/deploy-checks.sh), started in the background at nice 10"
deploy_log="$(mktemp)"
STEPS_STARTED="$STEPS_STARTED" CARGO_TARGET_DIR="$root/target/deploy" setsid bash -c \
  'echo 10 >/proc/self/autogroup 2>/dev/null || true; exec nice -n 10 infra/deploy-checks.sh' \
  >"$deploy_log" 2>&1 &
deploy=$!
export LOCAL_STACK_BEFORE_STOP="kill -- -$deploy 2>/dev/null || true"

step "cargo fmt --check"
cargo fmt --check

step "cargo doc --workspace --no-deps (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features

# Each library crate again with its default features, as a user's `cargo
# doc` builds it: a link to a module of a feature left out warns only there.
# One command for the six: none of them turns on a feature of another (the
# facade's default `dynamodb` asks for no feature of the edge or the core),
# so each is documented with exactly its own defaults, and the
# dependencies are checked once. (The doctests, the manual's snippets among
# them, run in `cargo test --doc` below.)
step "cargo doc of the library crates, default features (warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet -p exactly-once -p exactly-once-core \
  -p exactly-once-dynamodb -p exactly-once-postgres -p exactly-once-redis -p exactly-once-lambda \
  -p exactly-once-aws-sign

step "cargo features (infra/check-features.sh)"
infra/check-features.sh

# The library crates as crates.io would get them (the shipped function,
# the operator tool and the model checker are not published).
step "cargo package --workspace"
cargo package --workspace --no-verify --offline --allow-dirty --quiet \
  --exclude msk-handler --exclude exactly-once-ops --exclude exactly-once-model

# Clippy's lints (`cargo clippy --workspace --all-targets -- -D warnings`)
# on the build the tests run: `cargo clippy` is `cargo check` with
# clippy-driver as the rustc of the workspace's own crates
# (RUSTC_WORKSPACE_WRAPPER, its arguments in CLIPPY_ARGS); the same wrapper
# on `cargo test --no-run` lints every target of the workspace as it is
# built, warnings as errors, and spares a check build of every dependency
# beside the test build. Every cargo command until the tail below keeps
# these variables (a build without them is another build); the tail's
# release build, the crates built outside the workspace and
# check-features.sh's checks are built without them.
step "cargo build of every target, clippy's lints on (cargo clippy --workspace --all-targets -- -D warnings)"
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
RUSTC_WORKSPACE_WRAPPER="$(rustc --print sysroot)/bin/clippy-driver"
CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
cargo test --workspace --all-targets --no-run

# Every crate's unit tests, the examples', the model checker's (crates/model)
# and the doctests, then the integration tests: one binary per area of tests/
# (tests/<area>/main.rs), each module run alone as its own binary was
# (infra/test-area.sh). Every cargo command here selects the whole workspace,
# so that each crate is built once, with one set of features.
step "cargo test: unit tests, examples, the model checker"
cargo test --workspace --lib --bins --examples --test model --test mutations
step "cargo test --doc"
cargo test --workspace --doc
# processes::slow_store runs last, alone, once the deploy checks have ended
# (below): it holds a function to the template's 120 s timeout behind a slow
# proxy, which needs the CPU a function has on Lambda; beside the deploy
# checks' builds it once finished 855 of 1,000 payments in time.
for area in repository stores batch processes; do
  step "tests/$area (infra/test-area.sh $area)"
  TEST_AREA_EXCEPT=slow_store infra/test-area.sh "$area"
done

# The batch tests again on the locking path (the default run is on the
# lock-free path, the demo ledger's default); the kill storms and
# lock_free run both paths themselves.
step "batch tests on the locking path"
TEST_LEDGER_MODE=transactional infra/test-area.sh batch handler transactional lifecycle throughput contract secrets tracing amazon_mq

# The ledger's SIGKILL storms run again below, in another ordering and on
# the other stores, with 100 kills a storm (KILL_TEST_KILLS) instead of the
# 200 of their run on DynamoDB Local above: they are bound by the CPU their
# workers' starts take, and each run draws new seeds (each storm's line
# names its seed and counts its kills).
storms='kill::.*(lock_free|transactional|direct)_mode'
rerun_kills=100

# The batch tests again with records of different Kafka keys free to run
# concurrently (ORDERING_MODE=key); throughput covers none. The kill
# module whole: its storms, then its other tests (kill::a_...).
step "batch tests in key ordering mode"
TEST_ORDERING_MODE=key infra/test-area.sh batch handler transactional lifecycle
TEST_ORDERING_MODE=key KILL_TEST_KILLS=$rerun_kills infra/test-area.sh processes "$storms"
TEST_ORDERING_MODE=key infra/test-area.sh processes 'kill::a_'

# The SIGKILL storms again with the workers on PostgreSQL, on Redis, and on
# a Redis Cluster of 3 primaries.
step "kill storms on PostgreSQL"
TEST_STORE=postgres KILL_TEST_KILLS=$rerun_kills infra/test-area.sh processes "$storms"
step "kill storms on Redis"
TEST_STORE=redis KILL_TEST_KILLS=$rerun_kills infra/test-area.sh processes "$storms"
step "kill storms on a Redis Cluster"
TEST_STORE=redis-cluster KILL_TEST_KILLS=$rerun_kills infra/test-area.sh processes 'kill::.*(lock_free|transactional)_mode'

step "the deploy checks (infra/deploy-checks.sh): their output"
status=0
wait "$deploy" || status=$?
LOCAL_STACK_BEFORE_STOP=""
cat "$deploy_log"
rm -f "$deploy_log"
[[ $status == 0 ]] || { echo "the deploy checks (infra/deploy-checks.sh) failed ($status)" >&2; exit 1; }

step "tests/processes/slow_store, alone (infra/test-area.sh processes slow_store)"
infra/test-area.sh processes slow_store

printf 'disk: %s free at the end, target/ took %s\n' "$(disk_left | tr -d ' ')" \
  "$(du -sh "${CARGO_TARGET_DIR:-$root/target}" | cut -f1)"
step "all checks passed"
