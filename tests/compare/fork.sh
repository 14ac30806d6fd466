#!/bin/sh
# tests/compare/fork.sh LIB: the fork workloads of scripts/compare (group
# fork, bench/fork.c) at their --quick sizes, once under slabdefrag,
# slabdefrag+mesh, jemalloc and glibc.  Every run must succeed (the bench
# checks every live block after the forks, and every child's exit), each
# must report the parent's fork time, the child's exit time and its
# Private_Dirty after its writes, and meshing must have meshed something
# in the largest heap (the settle wait reads the library's statistics).
set -eu
lib=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
unset MALLOC_PERTURB_ LD_PRELOAD
tmp=$(mktemp -d "${TMPDIR:-/tmp}/compare-fork.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "fork.sh: FAIL: $*" >&2; exit 1; }

rc=0
"$root/scripts/compare" --quick --no-setup --lib "$lib" --out "$tmp/res" --workloads fork \
  --allocators slabdefrag,slabdefrag+mesh,jemalloc,glibc >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
cat "$tmp/stdout"
if [ "$rc" != 0 ]; then
  sed 's/^/  stderr: /' "$tmp/stderr" | tail -20 >&2
  fail "scripts/compare --quick --workloads fork exited with $rc"
fi
for w in fork-256m fork-1g fork-4g; do
  grep -q "^== $w:" "$tmp/stdout" || fail "no table for $w"
  for a in slabdefrag slabdefrag+mesh jemalloc glibc; do
    row=$(grep "^$w,$a,1,ok," "$tmp/res/runs.csv") || fail "runs.csv: no ok row for $w/$a"
    for k in fork_ms exit_ms child_dirty_kb; do
      echo "$row" | grep -Eq "[,;]$k=[0-9.]+" || fail "$w/$a: no $k"
    done
  done
done
grep '^fork-4g,slabdefrag+mesh,1,ok,' "$tmp/res/runs.csv" | grep -Eq '[,;]meshes=[1-9]' ||
  fail "fork-4g under slabdefrag+mesh: nothing meshed"
echo "fork.sh: ok"
