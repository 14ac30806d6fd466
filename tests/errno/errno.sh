#!/usr/bin/env bash
# tests/errno/errno.sh - the malloc family's errno is glibc's.
#
#   tests/errno/errno.sh LIBSLABDEFRAG.so ERRNO_PROG [VAR=value...]
#
# Runs ERRNO_PROG (tests/errno/errno_prog.c: every failing call of the
# family, errno across calls that succeed, and calls out of address space
# under RLIMIT_AS) plainly (glibc: the reference), then with
# LD_PRELOAD=LIB and the given environment, and compares the two outputs
# line by line.  Prints `ok` or the difference; exits 1 on a difference.
#
# Registered in tests/errno/meson.build (suite 'api').
set -uo pipefail

lib=${1:?usage: errno.sh LIB PROG [VAR=value...]}
prog=${2:?usage: errno.sh LIB PROG [VAR=value...]}
shift 2

unset LD_PRELOAD 2>/dev/null || true
for v in $(env | sed -n 's/^\(SLABDEFRAG_[A-Z_]*\)=.*/\1/p'); do
    unset "$v"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$prog" >"$tmp/glibc" 2>"$tmp/glibc.err" || { echo "FAIL: plain run exited $?"; cat "$tmp/glibc.err"; exit 1; }
env "$@" LD_PRELOAD="$lib" "$prog" >"$tmp/sd" 2>"$tmp/sd.err" ||
    { echo "FAIL: preloaded run exited $?"; cat "$tmp/sd.err"; exit 1; }
if ! diff -u "$tmp/glibc" "$tmp/sd"; then
    echo "FAIL: errno differs from glibc's (- glibc, + slabdefrag $*)"
    exit 1
fi
if grep -q 'slabdefrag:' "$tmp/sd.err"; then
    echo "FAIL: the preloaded run reported:"; cat "$tmp/sd.err"; exit 1
fi
echo "ok ($(wc -l <"$tmp/sd") lines)"
