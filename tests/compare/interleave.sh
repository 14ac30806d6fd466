#!/bin/sh
# tests/compare/interleave.sh LIB BUILD: scripts/interleave, on any machine.
#
# The ratio logic is checked on a command whose time_s is fixed by the
# variant it runs under (a shell line: 2e-05 s with LD_PRELOAD set, 3e-05 s
# without, printed as bench programs print it, printf %g), so the figures
# are exact whatever the machine's speed: sd at ratio 1.000, glibc at
# 1.500.  A zero time_s (a timed phase too short for the clock, as a small
# bench run gives on a fast machine) is refused with one line and exit 1,
# as are a bad argument and a run without time_s.  Last, one round of a
# real bench/churn with work enough to take milliseconds on a fast machine
# (about 0.1 s here) and well under the timeout on a slow one: a line per
# TAG, the first at ratio 1.000.
set -eu
lib=$1 build=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
fixed='if [ -n "${LD_PRELOAD:-}" ]; then echo time_s=2e-05; else echo time_s=3e-05; fi >&2'

out=$("$root/scripts/interleave" --rounds 3 sh -c "$fixed" -- sd="$lib" glibc=none)
echo "$out"
echo "$out" | grep -Eq "^sd +median 0\.0000 s  min 0\.0000 s  ratio 1\.000$" ||
    { echo "interleave: no line for sd at ratio 1.000"; exit 1; }
echo "$out" | grep -Eq "^glibc +median 0\.0000 s  min 0\.0000 s  ratio 1\.500$" ||
    { echo "interleave: no line for glibc at ratio 1.500"; exit 1; }

check_err() {   # check_err EXPECTED ARGS...: fails, and says EXPECTED in one line
    want=$1; shift
    if err=$("$root/scripts/interleave" "$@" 2>&1); then
        echo "interleave accepted: $*"; exit 1
    fi
    echo "$err" | grep -q "$want" || { echo "unclear error for $*: $err"; exit 1; }
    [ "$(echo "$err" | wc -l)" -eq 1 ] || { echo "more than one line for $*: $err"; exit 1; }
}
check_err "'bad': expected TAG=LIB" /bin/true -- bad
check_err "x: no library /nonexistent.so" /bin/true -- x=/nonexistent.so
check_err "no time_s= on stderr" --rounds 1 /bin/true -- sd="$lib"
check_err "time_s=0.000 is zero" --rounds 1 sh -c 'echo time_s=0.000 >&2' -- sd="$lib"
check_err "time_s=0 is zero" --rounds 1 sh -c 'echo time_s=0 >&2' -- sd="$lib"
check_err "rounds: expected a positive number" --rounds 0 /bin/true -- sd="$lib"
check_err "a TAG is named twice" /bin/true -- a=none a=none

out=$("$root/scripts/interleave" --rounds 1 "$build/bench/churn" -t 1 -n 1000000 -- \
      sd="$lib" glibc=none)
echo "$out"
echo "$out" | grep -Eq "^sd +median [0-9.]+ s  min [0-9.]+ s  ratio 1\.000$" ||
    { echo "interleave: no line for sd at ratio 1.000 (bench/churn)"; exit 1; }
echo "$out" | grep -Eq "^glibc +median [0-9.]+ s  min [0-9.]+ s  ratio [0-9.]+$" ||
    { echo "interleave: no line for glibc (bench/churn)"; exit 1; }
echo "interleave: ok"
