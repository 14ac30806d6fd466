#!/bin/sh
# tests/inspect/slabinfo.sh SLABINFO INSPECT_CHILD - the CLI from a shell:
# usage errors, a live child's table (meshing off and on), and a pid
# without slabdefrag.
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

# With meshing on, the table ends with the Mesh: figures, and -r shows a
# malloc cache's mesh counters; the validator accepts the arena's slabs.
SLABDEFRAG_MESH=1 SLABDEFRAG_CONTROL=1 "$child" serve < "$dir/in" > "$dir/out2" &
pid=$!
exec 3> "$dir/in"
for _ in $(seq 50); do grep -q ready "$dir/out2" && break; sleep 0.1; done
"$slabinfo" -p "$pid" -T | grep -Eq '^Mesh: [0-9]+ meshes, [0-9]+ unmeshed, [0-9]+ aliases now, [0-9]+ bytes released, [0-9]+ us spent, longest pause [0-9]+ us' ||
    fail "no Mesh: line with meshing on"
"$slabinfo" -p "$pid" -r malloc-64 | grep -q 'meshes' || fail "-r: no mesh counters"
"$slabinfo" -p "$pid" -v | grep -q ', 0 errors$' || fail "validate with meshing"
echo exit >&3; exec 3>&-
wait "$pid"

# sleep(1) does not run under slabdefrag.
sleep 5 & other=$!
err=$("$slabinfo" -p "$other" 2>&1 >/dev/null); rc=$?
kill "$other"
[ $rc -eq 1 ] || fail "non-slabdefrag pid: exit $rc"
[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "one line: $err"
echo ok
