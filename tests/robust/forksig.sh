#!/usr/bin/env bash
# tests/robust/forksig.sh - fork() from a signal handler that lands inside
# fork() finishes, as it does with glibc.
#
#   tests/robust/forksig.sh LIBSLABDEFRAG.so FORKSIG_PROG CONFIG
#
# Runs FORKSIG_PROG (tests/robust/forksig_prog.c: 200 forks, SIGALRM every
# 50 us, the handler forking while the main thread is inside fork())
# plainly, then with LD_PRELOAD=LIB under CONFIG:
#   default    no option
#   mesh       SLABDEFRAG_MESH=1
#   perthread  SLABDEFRAG_PERCPU=0
#   prof       SLABDEFRAG_PROF=1 (the heap profiler, whose locks fork's
#              prepare takes first)
#   prof-mesh  both
#   pinned     no option, on one CPU (taskset -c 0)
# Each run is bounded by `timeout` (FORKSIG_TIMEOUT s, default 120): the
# pass condition is that it ends, with status 0 and its "forks 200" line;
# a deadlock shows as the timeout.  The program is single-threaded, and
# no option here starts the allocator's thread: glibc's fork of a
# threaded process takes its own atfork lock around the handlers, and a
# fork from a handler deadlocks there, with or without slabdefrag.
# Registered in tests/robust/meson.build (suite 'robust').
set -uo pipefail

lib=${1:?usage: forksig.sh LIB PROG CONFIG}
prog=${2:?usage: forksig.sh LIB PROG CONFIG}
config=${3:?usage: forksig.sh LIB PROG CONFIG}
TIMEOUT=${FORKSIG_TIMEOUT:-120}

unset LD_PRELOAD 2>/dev/null || true
for v in $(env | sed -n 's/^\(SLABDEFRAG_[A-Z_]*\)=.*/\1/p'); do
    unset "$v"
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/forksig.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

pin=()
case $config in
    default)   cenv=() ;;
    mesh)      cenv=(SLABDEFRAG_MESH=1) ;;
    perthread) cenv=(SLABDEFRAG_PERCPU=0) ;;
    prof)      cenv=(SLABDEFRAG_PROF=1 SLABDEFRAG_PROF_PREFIX="$tmp/prof") ;;
    prof-mesh) cenv=(SLABDEFRAG_PROF=1 SLABDEFRAG_PROF_PREFIX="$tmp/prof" SLABDEFRAG_MESH=1) ;;
    pinned)    cenv=(); pin=(taskset -c 0) ;;
    *) echo "forksig.sh: unknown config $config" >&2; exit 2 ;;
esac

check() {   # $1 = label, $2 = status, $3 = stdout
    if [ "$2" = 124 ]; then
        echo "FAIL $config: $1 did not end in ${TIMEOUT} s (a deadlock)"
        exit 1
    fi
    if [ "$2" != 0 ] || ! grep -q '^forks 200,' <<<"$3"; then
        echo "FAIL $config: $1 ended with status $2: $3"
        exit 1
    fi
}

out=$(timeout "$TIMEOUT" "${pin[@]}" "$prog" 200); rc=$?
check glibc "$rc" "$out"
out=$(timeout "$TIMEOUT" "${pin[@]}" env "${cenv[@]}" LD_PRELOAD="$lib" "$prog" 200 2>"$tmp/stderr"); rc=$?
check slabdefrag "$rc" "$out"
if grep -v 'heap profile in' "$tmp/stderr" | grep -q 'slabdefrag:'; then
    echo "FAIL $config: slabdefrag wrote to stderr:"
    cat "$tmp/stderr"
    exit 1
fi
echo "ok $config: $out"
