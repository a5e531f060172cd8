#!/usr/bin/env bash
# Prints the path of libfaketime's multi-threaded library, installing
# libfaketime from Debian's packages when it is missing: with it preloaded
# (LD_PRELOAD, FAKETIME="+90s"), a process's wall clock runs that far off
# the machine's, as a container on a host whose clock drifted
# (tests/processes/clock.rs).
set -euo pipefail

find_lib() { find /usr/lib -path '*/faketime/libfaketimeMT.so.1' 2>/dev/null | head -n 1; }

lib="$(find_lib)"
if [[ -z "$lib" ]]; then
  echo "faketime-lib: installing libfaketime from Debian's packages" >&2
  sudo=()
  [[ "$(id -u)" -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libfaketime >&2 ||
    { "${sudo[@]}" apt-get update -q >&2 &&
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libfaketime >&2; }
  lib="$(find_lib)"
fi
[[ -n "$lib" ]] || { echo "faketime-lib: no libfaketimeMT.so.1 after installing libfaketime" >&2; exit 1; }
echo "$lib"
