#!/bin/sh
# tests/inspect/slabinfo.sh SLABINFO INSPECT_CHILD - the CLI from a shell:
# usage errors, a live child's table, and a pid without slabdefrag.
set -u
slabinfo=$1 child=$2
fail() { echo "FAIL: $*"; exit 1; }

"$slabinfo" -h | grep -q '^usage: slabinfo -p PID' || fail "-h"
"$slabinfo" 2>/dev/null; [ $? -eq 2 ] || fail "no -p: exit 2"
"$slabinfo" -p abc 2>/dev/null; [ $? -eq 2 ] || fail "bad pid: exit 2"

# A live child (its stdin is a fifo we hold open).
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
mkfifo "$dir/in"
SLABDEFRAG_CONTROL=1 "$child" serve < "$dir/in" > "$dir/out" &
pid=$!
exec 3> "$dir/in"
for _ in $(seq 50); do grep -q ready "$dir/out" && break; sleep 0.1; done
"$slabinfo" -p "$pid" | grep -q '^inspect_obj  *1000 ' || fail "table"
"$slabinfo" -p "$pid" -v | grep -q ', 0 errors$' || fail "validate"
echo exit >&3; exec 3>&-
wait "$pid"

# sleep(1) does not run under slabdefrag.
sleep 5 & other=$!
err=$("$slabinfo" -p "$other" 2>&1 >/dev/null); rc=$?
kill "$other"
[ $rc -eq 1 ] || fail "non-slabdefrag pid: exit $rc"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "one line: $err"
echo ok
