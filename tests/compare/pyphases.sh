#!/bin/sh
# tests/compare/pyphases.sh LIB BUILD: scripts/pyphases once, small, with
# meshing off and on: every run line and every median line is there with
# its figures, and a bad argument is refused with one line naming it.
set -eu
lib=$1 build=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$("$root/scripts/pyphases" --runs 1 --records 3000 --build "$build" \
      off="$lib:SLABDEFRAG_MESH=0" on="$lib:SLABDEFRAG_MESH=1")
echo "$out"
for tag in off on; do
    echo "$out" | grep -Eq "^$tag +run 1: wall [0-9.]+  main [0-9.]+  process [0-9.]+  boot [0-9.]+ fill [0-9.]+ delete [0-9.]+ churn [0-9.]+ sleep [0-9.]+ walk [0-9.]+ teardown [0-9.]+  walk faults [0-9]+  rss [0-9.]+ pss [0-9.]+ MiB" ||
        { echo "pyphases: no run line for $tag"; exit 1; }
    echo "$out" | grep -Eq "^$tag +wall [0-9.]+ \([0-9.]+-[0-9.]+\) x[0-9.]+  main [0-9.]+" ||
        { echo "pyphases: no median line for $tag"; exit 1; }
done
if err=$("$root/scripts/pyphases" --build "$build" bad 2>&1); then
    echo "pyphases accepted a spec without a library"; exit 1
fi
echo "$err" | grep -q "'bad': expected TAG=LIB" || { echo "unclear error: $err"; exit 1; }
echo "pyphases: ok"
