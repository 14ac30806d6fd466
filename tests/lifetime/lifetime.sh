#!/usr/bin/env bash
# tests/lifetime/lifetime.sh - the allocator's thread never keeps a process
# alive, never delays its end, never takes its signals.
#
#   tests/lifetime/lifetime.sh LIBSLABDEFRAG.so LIFETIME_PROG CASE CONFIG...
#
# Runs `LIFETIME_PROG CASE` (see tests/lifetime/lifetime_prog.c) plainly
# once (glibc's malloc: the reference), then, for each CONFIG, with
# LD_PRELOAD=LIB and the environment the CONFIG names:
#   none        SLABDEFRAG_BACKGROUND=0: no shrinker thread
#   auto        no option (SLABDEFRAG_BACKGROUND=auto): a thread once the
#               program starts its second, decay passes on the interval
#   background  SLABDEFRAG_BACKGROUND=1
#   busy        SLABDEFRAG_BACKGROUND=1, a 10 ms interval and meshing:
#               passes run while the program ends
#   control     SLABDEFRAG_CONTROL=1
#   mesh        SLABDEFRAG_MESH=1
#   rss         SLABDEFRAG_RSS_LIMIT_MB=4096
#   cache       a typed cache with get/kick (LIFETIME_CACHE=1)
# background and busy start the shrinker thread at once: they also set
# LIFETIME_MIN_THREADS=1, and the signal case waits for that thread.
# Each run is bounded by `timeout` (LIFETIME_TIMEOUT s, default 30): a
# process that does not end is a failure, not a hung test.  Both runs must
# end with the status the case expects, print the same stdout (which holds
# the atexit handler's line: "atexit: parent", and "atexit: child" for a
# fork), and the preloaded run must not print "slabdefrag:" on stderr.
# Prints `ok CASE CONFIG` or `FAIL CASE CONFIG: why` for each CONFIG (every
# one runs, whatever the others did); exits 1 if any failed.
#
# Registered in tests/lifetime/meson.build (suite 'lifetime').
set -uo pipefail

usage="usage: lifetime.sh LIB PROG CASE CONFIG..."
lib=${1:?$usage}
prog=${2:?$usage}
case_=${3:?$usage}
[ "$#" -ge 4 ] || { echo "$usage" >&2; exit 2; }
shift 3
configs=("$@")
TIMEOUT=${LIFETIME_TIMEOUT:-30}

unset LD_PRELOAD LIFETIME_CACHE LIFETIME_MIN_THREADS 2>/dev/null || true
for v in $(env | sed -n 's/^\(SLABDEFRAG_[A-Z_]*\)=.*/\1/p'); do
    unset "$v"
done

env_of() {
    case $1 in
        none)       echo SLABDEFRAG_BACKGROUND=0 ;;
        auto)       ;;
        background) echo SLABDEFRAG_BACKGROUND=1 LIFETIME_MIN_THREADS=1 ;;
        busy)       echo SLABDEFRAG_BACKGROUND=1 SLABDEFRAG_SHRINK_INTERVAL_MS=10 SLABDEFRAG_MESH=1 LIFETIME_MIN_THREADS=1 ;;
        control)    echo SLABDEFRAG_CONTROL=1 ;;
        mesh)       echo SLABDEFRAG_MESH=1 ;;
        rss)        echo SLABDEFRAG_RSS_LIMIT_MB=4096 ;;
        cache)      echo LIFETIME_CACHE=1 ;;
        *)          echo "lifetime.sh: unknown config $1" >&2; exit 2 ;;
    esac
}
for config in "${configs[@]}"; do
    env_of "$config" >/dev/null || exit 2
done

# The status each case ends with, and the lines its stdout must hold.
expect_status=0
expect_lines=("atexit: parent")
case $case_ in
    exit-code) expect_status=3 ;;
    return)    expect_status=7 ;;
    fork)      expect_lines=("atexit: child" "child: exit 0" "atexit: parent") ;;
    signal)    expect_lines=("SIGUSR1 handled by main" "atexit: parent") ;;
    threads)   expect_lines=("threads: 1" "atexit: parent") ;;
esac

work=$(mktemp -d /tmp/sd-lifetime.XXXXXX)
trap 'rm -rf "$work"' EXIT

failed=0
# fail WHY...: report the current config's failure with the runs' output.
fail() {
    echo "FAIL $case_ $config: $*"
    for f in plain preload; do
        for s in out err; do
            [ -s "$work/$f.$s" ] && { echo "--- $f $s:"; head -n 20 "$work/$f.$s"; }
        done
    done
    failed=1
    return 1
}

# run NAME [ENV...]: the case, bounded; status in $work/NAME.status.
run() {
    local name=$1
    shift
    local t0=$SECONDS rc=0
    timeout -k 5 "$TIMEOUT" env "$@" "$prog" "$case_" >"$work/$name.out" 2>"$work/$name.err" || rc=$?
    echo "$rc" >"$work/$name.status"
    echo "$((SECONDS - t0))" >"$work/$name.secs"
}

# check_preload: the checks of one preloaded run against the reference.
check_preload() {
    local ls l
    ls=$(cat "$work/preload.status")
    { [ "$ls" = 124 ] || [ "$ls" = 137 ]; } &&
        { fail "did not end within ${TIMEOUT}s (the process was kept alive)"; return; }
    [ "$ls" = "$expect_status" ] || { fail "status $ls, expected $expect_status"; return; }
    for l in "${expect_lines[@]}"; do
        grep -qxF "$l" "$work/preload.out" || { fail "stdout lacks the line '$l'"; return; }
    done
    cmp -s "$work/plain.out" "$work/preload.out" ||
        { fail "stdout differs from the plain run: $(diff "$work/plain.out" "$work/preload.out" | tr '\n' ' ')"; return; }
    grep -q '^slabdefrag:' "$work/preload.err" && { fail "the allocator printed a message"; return; }
    echo "ok $case_ $config ($(cat "$work/preload.secs")s)"
}

# The reference, once: glibc's run does not depend on the config.
config=plain
run plain LIFETIME_CACHE=0
ps=$(cat "$work/plain.status")
if [ "$ps" = 124 ] || [ "$ps" = 137 ]; then
    fail "the plain run did not end within ${TIMEOUT}s"
    exit 1
fi
[ "$ps" = "$expect_status" ] || { fail "plain run: status $ps, expected $expect_status"; exit 1; }

for config in "${configs[@]}"; do
    rm -f "$work"/preload.*
    # shellcheck disable=SC2046 # env_of prints a list of words
    run preload LD_PRELOAD="$lib" $(env_of "$config")
    check_preload || true
done
exit "$failed"
