#!/usr/bin/env bash
# Runs one area of the integration tests (tests/<area>/main.rs: one binary,
# linked once) module by module: each module alone, one after another, two
# of its tests at a time, as when each was a binary of its own. A module may
# restart a server (processes::postgres_faults), measure a table
# (stores::stuck_cost) or time its processes against a deadline
# (processes::slow_store): no test of another module runs beside it.
#
#   infra/test-area.sh AREA [MODULE ...] [-- TEST-ARGS ...]
#
# MODULE: only these modules (default: every module the binary lists but
# those TEST_AREA_EXCEPT names, space-separated), each run alone;
# `MODULE::REGEX` only the tests of MODULE whose names, after `MODULE::`,
# start with a match of the extended REGEX (e.g.
# `'kill::.*(lock_free|transactional)_mode'`).
# TEST-ARGS go to the test binary (e.g. `-- --nocapture`). Every module runs
# even after one failed; the script fails at the end, naming them, and
# prints how long each module took.
set -euo pipefail

area="${1:?usage: infra/test-area.sh AREA [MODULE ...] [-- TEST-ARGS ...]}"
shift
wanted=()
while [[ $# -gt 0 && $1 != -- ]]; do
  wanted+=("$1")
  shift
done
[[ ${1:-} == -- ]] && shift

# `--workspace`: the features of the build of infra/test.sh's other steps,
# so nothing is built again. Every test of the binary, `module::path::name` (ignored ones too: a name
# given with --exact but not --ignored is listed as ignored, not run).
mapfile -t tests < <(cargo test --quiet --workspace --test "$area" -- --list --format terse \
  | sed -n 's/: test$//p')
[[ ${#tests[@]} -gt 0 ]] || { echo "test-area: $area lists no test" >&2; exit 1; }
if [[ ${#wanted[@]} -eq 0 ]]; then
  mapfile -t wanted < <(printf '%s\n' "${tests[@]%%::*}" | sort -u | grep -vxF -f <(tr ' ' '\n' <<<"${TEST_AREA_EXCEPT:-}" | grep .) || true)
fi

failed=()
timings=()
for module in "${wanted[@]}"; do
  [[ $module == *::* ]] && pattern="^$module" || pattern="^$module::"
  mapfile -t names < <(printf '%s\n' "${tests[@]}" | grep -E "$pattern" || true)
  [[ ${#names[@]} -gt 0 ]] || { echo "test-area: $area has no module $module" >&2; exit 1; }
  printf '\n--> tests/%s/%s (%d tests)\n' "$area" "$module" "${#names[@]}"
  started=$(date +%s)
  cargo test --workspace --test "$area" -- --exact "${names[@]}" "$@" || failed+=("$module")
  timings+=("$module $(($(date +%s) - started)) s")
done

printf '\ntests/%s, seconds per module:' "$area"
printf ' %s,' "${timings[@]}"
printf '\n'
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "test-area: tests/$area failed in: ${failed[*]}" >&2
  exit 1
fi
