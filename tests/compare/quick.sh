#!/usr/bin/env bash
# tests/compare/quick.sh - test of scripts/compare's quick mode.
#
#   tests/compare/quick.sh BUILD_DIR/libslabdefrag.so
#
# Runs `scripts/compare --quick --no-setup --lib LIB` into a temporary
# results directory (the bench programs are taken from LIB's directory,
# i.e. the meson build dir) and checks that:
#   - compare exits 0 (every run of throughput and frag succeeded under
#     every allocator: a crash under slabdefrag fails this test too);
#   - runs.csv has an `ok` row per workload for each of slabdefrag,
#     jemalloc, glibc, mimalloc, tcmalloc;
#   - the printed tables have a row for each of them, with no FAILED;
#   - samples.csv, summary.csv and tables.txt exist and are not empty;
#   - with gnuplot installed, throughput.png and frag.png exist; without
#     it, compare printed its `apt-get install gnuplot-nox` line;
#   - the group percpu (larson, churn-1, churn-n, xthread, stchurn,
#     manythreads-2/64/256/1024) at its --quick sizes runs once under
#     slabdefrag alone and every run succeeds (a correctness smoke test:
#     the workloads check every block before freeing it), manythreads
#     reports RSS/live, and the speed summary line is printed;
#   - another build as a row (slabdefrag@copy=LIB, here the same library)
#     runs beside slabdefrag with its own table row, and a missing library
#     there is a one-line error and exit status 2.
# The allocators other than slabdefrag come from Debian packages that
# scripts/setup installs; a missing one fails the test with its name.
set -euo pipefail
lib=${1:?usage: quick.sh path/to/libslabdefrag.so}
case $lib in /*) ;; *) lib=$PWD/$lib ;; esac
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
unset MALLOC_PERTURB_ LD_PRELOAD

tmp=$(mktemp -d "${TMPDIR:-/tmp}/compare-quick.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

fail() { echo "quick.sh: FAIL: $*" >&2; exit 1; }

rc=0
"$root/scripts/compare" --quick --no-setup --lib "$lib" --out "$tmp/res" \
  >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
cat "$tmp/stdout"
if [ "$rc" != 0 ]; then
  sed 's/^/  stderr: /' "$tmp/stderr" | tail -20 >&2
  fail "scripts/compare --quick exited with $rc"
fi

for f in runs.csv samples.csv summary.csv tables.txt; do
  [ -s "$tmp/res/$f" ] || fail "results/$f missing or empty"
done
grep -q "^results in $tmp/res\$" "$tmp/stdout" || fail "no 'results in DIR' line"

for w in throughput frag; do
  grep -q "^== $w:" "$tmp/stdout" || fail "no table for $w"
  for a in slabdefrag jemalloc glibc mimalloc tcmalloc; do
    grep -q "^$w,$a,1,ok," "$tmp/res/runs.csv" || fail "runs.csv: no ok row for $w/$a"
    grep -q "^$w,$a," "$tmp/res/summary.csv" || fail "summary.csv: no row for $w/$a"
    # the table row: after the '== w:' header, before the next blank line
    awk -v w="$w" -v a="$a" '
      $0 ~ "^== " w ":" { on = 1; next }
      on && /^$/ { on = 0 }
      on && $1 == a && $2 != "FAILED" { found = 1 }
      END { exit !found }' "$tmp/stdout" || fail "table $w: no row for $a"
    awk -F, -v w="$w" -v a="$a" '$1 == w && $2 == a { n++ } END { exit !(n > 0) }' \
      "$tmp/res/samples.csv" || fail "samples.csv: no samples for $w/$a"
  done
done
if grep -q FAILED "$tmp/stdout"; then fail "a table says FAILED"; fi
# Plots: one PNG per workload with gnuplot, else the one-line hint.
if command -v gnuplot >/dev/null 2>&1; then
  for w in throughput frag; do
    [ -s "$tmp/res/$w.png" ] || fail "gnuplot is installed but $w.png is missing"
  done
else
  grep -q 'apt-get install gnuplot-nox' "$tmp/stdout" || fail "no gnuplot hint line"
fi

# The percpu group, tiny sizes, slabdefrag only.
rc=0
"$root/scripts/compare" --quick --no-setup --lib "$lib" --out "$tmp/pc" \
  --workloads percpu --allocators slabdefrag >"$tmp/pc.stdout" 2>"$tmp/pc.stderr" || rc=$?
if [ "$rc" != 0 ]; then
  cat "$tmp/pc.stdout"
  sed 's/^/  stderr: /' "$tmp/pc.stderr" | tail -20 >&2
  fail "scripts/compare --quick --workloads percpu exited with $rc"
fi
for w in larson churn-1 churn-n xthread stchurn manythreads-2 manythreads-64 \
         manythreads-256 manythreads-1024; do
  grep -q "^$w,slabdefrag,1,ok," "$tmp/pc/runs.csv" || fail "percpu: no ok row for $w"
done
grep -q '^manythreads-1024,slabdefrag,1,ok,.*rss_per_live=' "$tmp/pc/runs.csv" ||
  fail "percpu: manythreads-1024 reported no rss_per_live"
grep -q '^== speed summary' "$tmp/pc.stdout" || fail "percpu: no speed summary line"
# Another build side by side: BASE@TAG=PATH.
rc=0
"$root/scripts/compare" --quick --no-setup --lib "$lib" --out "$tmp/ab" --workloads throughput \
  --allocators "slabdefrag,slabdefrag@copy=$lib" >"$tmp/ab.stdout" 2>"$tmp/ab.stderr" || rc=$?
[ "$rc" = 0 ] || { tail -5 "$tmp/ab.stderr" >&2; fail "compare with slabdefrag@copy exited with $rc"; }
for a in slabdefrag slabdefrag@copy; do
  grep -q "^throughput,$a,1,ok," "$tmp/ab/runs.csv" || fail "slabdefrag@copy: no ok row for $a"
done
grep -q "^ *slabdefrag@copy " "$tmp/ab.stdout" || fail "slabdefrag@copy: no table row"
rc=0
"$root/scripts/compare" --quick --no-setup --lib "$lib" --out "$tmp/ab2" --workloads throughput \
  --allocators "slabdefrag@old=$tmp/nonexistent.so" >"$tmp/ab2.stdout" 2>"$tmp/ab2.stderr" || rc=$?
[ "$rc" = 2 ] || fail "a missing library for slabdefrag@old: exit status $rc, not 2"
grep -q "no library at $tmp/nonexistent.so" "$tmp/ab2.stderr" ||
  fail "a missing library for slabdefrag@old: no 'no library at' line"
echo "quick.sh: ok"
