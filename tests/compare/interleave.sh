#!/bin/sh
# tests/compare/interleave.sh LIB BUILD: scripts/interleave for two rounds
# of a small bench/churn under slabdefrag and glibc: a line per TAG with
# its figures, the first at ratio 1.000; a bad argument or a run without
# time_s is refused with one line naming it.
set -eu
lib=$1 build=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$("$root/scripts/interleave" --rounds 2 "$build/bench/churn" -t 1 -n 20000 -- \
      sd="$lib" glibc=none)
echo "$out"
echo "$out" | grep -Eq "^sd +median [0-9.]+ s  min [0-9.]+ s  ratio 1\.000$" ||
    { echo "interleave: no line for sd at ratio 1.000"; exit 1; }
echo "$out" | grep -Eq "^glibc +median [0-9.]+ s  min [0-9.]+ s  ratio [0-9.]+$" ||
    { echo "interleave: no line for glibc"; exit 1; }
check_err() {   # check_err EXPECTED ARGS...: fails, and says EXPECTED
    want=$1; shift
    if err=$("$root/scripts/interleave" "$@" 2>&1); then
        echo "interleave accepted: $*"; exit 1
    fi
    echo "$err" | grep -q "$want" || { echo "unclear error for $*: $err"; exit 1; }
    [ "$(echo "$err" | wc -l)" -eq 1 ] || { echo "more than one line for $*: $err"; exit 1; }
}
check_err "'bad': expected TAG=LIB" "$build/bench/churn" -- bad
check_err "x: no library /nonexistent.so" "$build/bench/churn" -- x=/nonexistent.so
check_err "no time_s= on stderr" --rounds 1 /bin/true -- sd="$lib"
check_err "rounds: expected a positive number" --rounds 0 /bin/true -- sd="$lib"
check_err "a TAG is named twice" /bin/true -- a=none a=none
echo "interleave: ok"
