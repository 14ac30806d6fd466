#!/usr/bin/env bash
# tests/mesh/redis-bgsave.sh LIB - Debian's redis-server with meshing on:
# fill, delete most keys, let the shrinker mesh, write to survivors, then
# BGSAVE (a fork of a meshed heap).  The dump, loaded by a redis-server
# without slabdefrag, must hold exactly what the meshed server held (DEBUG
# DIGEST), and the meshed server must really have meshed.  Skipped (exit
# 77) when redis-server is not installed.
set -uo pipefail
lib=$1
command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
    echo "redis-server not installed: skipped"; exit 77; }
dir=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; [ -f "$dir/meshed.err" ] && tail -5 "$dir/meshed.err"; exit 1; }

port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start NAME PORT [env...]: a server on PORT with the dump in $dir.
start() {
    local name=$1 p=$2
    shift 2
    env "$@" redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
        --dir "$dir" --dbfilename dump.rdb --enable-debug-command yes \
        --logfile "$dir/$name.log" 2>"$dir/$name.err" &
    pids+=($!)
    for _ in $(seq 100); do
        [ "$(redis-cli -p "$p" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.1
    done
    fail "$name did not start: $(tail -3 "$dir/$name.log")"
}

p1=$(port)
start meshed "$p1" LD_PRELOAD="$lib" SLABDEFRAG_MESH=1 SLABDEFRAG_STATS=1
cli=(redis-cli -p "$p1")
grep -q libslabdefrag "/proc/${pids[0]}/maps" || fail "redis-server does not run with $lib"

# 150k keys of 8 B..2 KiB, then delete ~85% (a fixed pseudo-random set).
awk 'BEGIN { srand(7); x = "";
             for (i = 0; i < 2048; i++) x = x sprintf("%c", 97 + i % 26);
             for (k = 0; k < 150000; k++) {
                 v = substr(x, 1, int(2 ^ (3 + 8 * rand())));
                 printf "*3\r\n$3\r\nSET\r\n$%d\r\nkey:%d\r\n$%d\r\n%s\r\n",
                        length("key:" k), k, length(v), v } }' |
    "${cli[@]}" --pipe >/dev/null || fail "fill"
awk 'BEGIN { for (k = 0; k < 150000; k++) if ((k * 2654435761) % 100 >= 15)
                 printf "*2\r\n$3\r\nDEL\r\n$%d\r\nkey:%d\r\n", length("key:" k), k }' |
    "${cli[@]}" --pipe >/dev/null || fail "delete"
sleep 4                                     # the shrinker meshes once a second
for k in $(seq 0 100 20000); do             # writes through meshed addresses
    "${cli[@]}" APPEND "key:$k" "-appended" >/dev/null
done

before=$("${cli[@]}" DEBUG DIGEST)
keys=$("${cli[@]}" DBSIZE)
"${cli[@]}" BGSAVE >/dev/null || fail "BGSAVE"
for _ in $(seq 300); do
    "${cli[@]}" INFO persistence | grep -q '^rdb_bgsave_in_progress:0' && break
    sleep 0.1
done
"${cli[@]}" INFO persistence | grep -q '^rdb_last_bgsave_status:ok' || fail "BGSAVE failed"
after=$("${cli[@]}" DEBUG DIGEST)
[ "$before" = "$after" ] || fail "the parent's data changed across the fork"
"${cli[@]}" SHUTDOWN NOSAVE >/dev/null 2>&1
wait "${pids[0]}"
meshes=$(sed -n 's/^Mesh: \([0-9]*\) meshes.*/\1/p' "$dir/meshed.err")
[ "${meshes:-0}" -gt 100 ] || fail "only ${meshes:-no} meshes: the test did not exercise meshing"

p2=$(port)
start plain "$p2"
loaded=$(redis-cli -p "$p2" DEBUG DIGEST)
loaded_keys=$(redis-cli -p "$p2" DBSIZE)
redis-cli -p "$p2" SHUTDOWN NOSAVE >/dev/null 2>&1
[ "$loaded" = "$before" ] && [ "$loaded_keys" = "$keys" ] ||
    fail "the dump holds $loaded_keys keys (digest $loaded), the server held $keys ($before)"
echo "ok: $keys keys, $meshes meshes before the fork, digest $before"
