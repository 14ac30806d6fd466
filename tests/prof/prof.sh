#!/bin/sh
# tests/prof/prof.sh - the heap profiler end to end, under
# LD_PRELOAD, through slabinfo and google-pprof:
#   - two sites, one packed, one scattered: --pinned names the scattered
#     one first, by function name, and its live-bytes estimate is within
#     20% of the truth at the default interval (128 MB live: about 244
#     samples, a standard error of 6.4%, so 20% is over 3 standard errors);
#   - google-pprof --text reads the heap profile (run time and at exit) and
#     lists the same top function; the folded stacks draw as an SVG;
#   - meshing (no address changes): the samples stay, and frees through
#     alias addresses drop them;
#   - a kick() that moves every object: the samples follow (same count,
#     same estimate) and the pinned bytes fall to under 5%;
#   - switching at run time, and bad requests answered in one line.
#
#   prof.sh LIB SLABINFO TWOSITES KICKMOVE
set -eu
lib=$1 slabinfo=$2 twosites=$3 kickmove=$4
tmp=$(mktemp -d)
pids=
cleanup() {
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    exec 7>&- 8>&- 9>&- 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v google-pprof >/dev/null ||
    fail "google-pprof not found (Debian package google-perftools; scripts/setup installs it)"

# wait_for FILE PATTERN: up to 120 s for a line of the program's output
wait_for() {
    i=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -le 1200 ] || fail "no '$2' from the program: $(cat "$1")"
        sleep 0.1
    done
}
# live samples on a status line
samples() { sed -n 's/.*; \([0-9]*\) live samples.*/\1/p' "$1"; }
# row N (1 = first) of a --sites/--pinned table: "live objs pinned cache site..."
row() { awk -v n="$2" '/^ *[0-9]+ +[0-9]+ +[0-9]+  /{ if (++k == n) { print; exit } }' "$1"; }

# ---- two sites -------------------------------------------------------
mkfifo "$tmp/in1"
SLABDEFRAG_PROF=1 SLABDEFRAG_CONTROL=1 SLABDEFRAG_PROF_PREFIX="$tmp/final" \
    LD_PRELOAD=$lib "$twosites" < "$tmp/in1" > "$tmp/out1" 2> "$tmp/err1" &
pid=$!
pids="$pids $pid"
exec 7> "$tmp/in1"
wait_for "$tmp/out1" '^ready'
truth=$(sed -n 's/^live packed=[0-9]* scattered=\([0-9]*\)$/\1/p' "$tmp/out1")

"$slabinfo" -p "$pid" --pinned -n 5 > "$tmp/pinned" || fail "slabinfo --pinned"
cat "$tmp/pinned"
grep -q '^sparse slabs (at most 1/4 full): [0-9]* of [0-9]* slabs, .*; [0-9]* without a sampled object$' \
    "$tmp/pinned" || fail "no sparse-slab summary"
first=$(row "$tmp/pinned" 1)
case $first in
    *" scattered_site <"*) ;;
    *) fail "the top pinner is not scattered_site: $first" ;;
esac
pinned=$(echo "$first" | awk '{ print $3 }')
[ "$pinned" -gt 100000000 ] || fail "scattered_site pins only $pinned bytes"
est=$(echo "$first" | awk '{ print $1 }')
awk -v e="$est" -v t="$truth" 'BEGIN { d = (e - t) / t; if (d < 0) d = -d; exit !(d <= 0.20) }' ||
    fail "live bytes of scattered_site estimated $est, truly $truth (more than 20% off)"
echo "scattered_site: estimated $est live bytes, truly $truth"
second=$(row "$tmp/pinned" 2)
"$slabinfo" -p "$pid" --sites > "$tmp/sites" || fail "slabinfo --sites"
case $(row "$tmp/sites" 1) in
    *" scattered_site <"*) ;;
    *) fail "--sites: the top site by live bytes is not scattered_site" ;;
esac
grep -q ' packed_site <' "$tmp/sites" || fail "--sites does not list packed_site"

"$slabinfo" -p "$pid" --heap-profile > "$tmp/run.heap" || fail "slabinfo --heap-profile"
google-pprof --text "$twosites" "$tmp/run.heap" > "$tmp/pprof" 2> "$tmp/pprof.err" ||
    fail "google-pprof --text: $(cat "$tmp/pprof.err")"
top=$(awk '$2 ~ /%$/ { print $6; exit }' "$tmp/pprof")
[ "$top" = scattered_site ] || fail "google-pprof's top function is '$top': $(head -8 "$tmp/pprof")"

"$slabinfo" -p "$pid" --flamegraph > "$tmp/run.svg" || fail "slabinfo --flamegraph"
grep -q '<svg' "$tmp/run.svg" && grep -q '>scattered_site' "$tmp/run.svg" ||
    fail "the flame graph does not show scattered_site"

# bad requests: one line each, the process serves on
for req in "prof sideways" "prof on 12" "sites many" "pinned 0" "prof folded sideways"; do
    python3 - "$pid" "$req" > "$tmp/bad" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("\0slabdefrag." + sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
data = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    data += b
sys.stdout.write(data.decode())
PY
    [ "$(wc -l < "$tmp/bad")" -eq 1 ] && grep -q '^error: ' "$tmp/bad" ||
        fail "request '$req' answered: $(cat "$tmp/bad")"
done
"$slabinfo" -p "$pid" --prof 12 2> "$tmp/err" && fail "--prof 12 accepted"
grep -q 'from 64 to' "$tmp/err" || fail "--prof 12: $(cat "$tmp/err")"

echo >&7
exec 7>&-
wait "$pid" || fail "twosites exited with $?"
for f in heap pinned.folded sites; do
    [ -s "$tmp/final.$pid.$f" ] || fail "no $tmp/final.$pid.$f at exit"
done
grep -q 'heap profile in' "$tmp/err1" || fail "no line about the profile at exit"
top=$(google-pprof --text "$twosites" "$tmp/final.$pid.heap" 2>/dev/null | awk '$2 ~ /%$/ { print $6; exit }')
[ "$top" = scattered_site ] || fail "google-pprof's top function at exit is '$top'"
"$slabinfo" --flamegraph-from "$tmp/final.$pid.pinned.folded" > "$tmp/final.svg" ||
    fail "--flamegraph-from"
grep -q '>scattered_site' "$tmp/final.svg" || fail "the exit flame graph lacks scattered_site"

# ---- meshing: addresses stay, samples stay, frees through aliases --------
# twosites keeps one in four objects in allocation order, a pattern that
# only slabs rotated from the start mesh (by default a class's slabs turn
# rotated once a mesh pass sees it, and this program allocates once).
mkfifo "$tmp/in3"
SLABDEFRAG_PROF=1 SLABDEFRAG_MESH=1 SLABDEFRAG_MESH_SHUFFLE=3 SLABDEFRAG_CONTROL=1 \
    SLABDEFRAG_PROF_PREFIX="$tmp/mesh" \
    LD_PRELOAD=$lib "$twosites" 1000000 200000 free < "$tmp/in3" > "$tmp/out3" 2>&1 &
pid=$!
pids="$pids $pid"
exec 9> "$tmp/in3"
wait_for "$tmp/out3" '^ready'
"$slabinfo" -p "$pid" --pinned > "$tmp/mbefore" || fail "slabinfo --pinned (mesh)"
"$slabinfo" -p "$pid" -s > /dev/null || fail "slabinfo -s (mesh)"
"$slabinfo" -p "$pid" -T > "$tmp/mtotals" || fail "slabinfo -T (mesh)"
meshes=$(sed -n 's/^Mesh: \([0-9]*\) meshes.*/\1/p' "$tmp/mtotals")
[ "${meshes:-0}" -gt 0 ] || fail "nothing meshed: $(cat "$tmp/mtotals")"
"$slabinfo" -p "$pid" --pinned > "$tmp/mafter" || fail "slabinfo --pinned (after meshing)"
cat "$tmp/mbefore" "$tmp/mafter"
[ "$(samples "$tmp/mbefore")" = "$(samples "$tmp/mafter")" ] ||
    fail "samples changed with meshing ($meshes meshes)"
mb=$(grep ' scattered_site <' "$tmp/mbefore" | awk '{ print $1 }')
ma=$(grep ' scattered_site <' "$tmp/mafter" | awk '{ print $1 }')
[ "$mb" = "$ma" ] || fail "scattered_site's live estimate $mb before meshing, $ma after"
echo >&9
exec 9>&-
wait "$pid" || fail "twosites (meshing) exited with $?: $(cat "$tmp/out3")"
grep -q ' scattered_site <' "$tmp/mesh.$pid.sites" &&
    fail "freed objects (meshed) still sampled at exit: $(cat "$tmp/mesh.$pid.sites")"
grep -q ' packed_site <' "$tmp/mesh.$pid.sites" || fail "packed_site lost at exit (mesh)"

# ---- kick() moves every object ------------------------------------------
mkfifo "$tmp/in2"
SLABDEFRAG_PROF=1 SLABDEFRAG_CONTROL=1 SLABDEFRAG_PROF_PREFIX="$tmp/k" \
    "$kickmove" 1000000 < "$tmp/in2" > "$tmp/out2" 2>&1 &
pid=$!
pids="$pids $pid"
exec 8> "$tmp/in2"
wait_for "$tmp/out2" '^ready'
"$slabinfo" -p "$pid" --pinned > "$tmp/before" || fail "slabinfo --pinned (kick)"
echo >&8
wait_for "$tmp/out2" '^shrunk'
"$slabinfo" -p "$pid" --pinned > "$tmp/after" || fail "slabinfo --pinned (after kick)"
cat "$tmp/before" "$tmp/after"
b=$(samples "$tmp/before") a=$(samples "$tmp/after")
[ "$b" -gt 20 ] || fail "only $b samples before the kick"
[ "$a" = "$b" ] || fail "$b samples before the kick, $a after: samples did not follow their objects"
kept() { grep ' kept_node_site <' "$1" | awk -v f="$2" '{ print $f }'; }
pb=$(kept "$tmp/before" 3) pa=$(kept "$tmp/after" 3)
lb=$(kept "$tmp/before" 1) la=$(kept "$tmp/after" 1)
[ -n "$pa" ] || fail "the moved objects lost their site"
pt=$(sed -n 's/.*; pinned by them \(.*\)$/\1/p' "$tmp/after")
[ "$pt" = "0 B" ] || echo "(pinned by all sites after the kick: $pt)"
[ "$pb" -gt 50000000 ] || fail "only $pb pinned bytes before the kick"
[ $((pa * 20)) -le "$pb" ] || fail "pinned bytes $pb before the kick, $pa after (want < 5%)"
[ "$la" = "$lb" ] || fail "live estimate $lb before the kick, $la after"
"$slabinfo" -p "$pid" --prof off > "$tmp/off" && grep -q '^profiling off' "$tmp/off" ||
    fail "--prof off: $(cat "$tmp/off")"
"$slabinfo" -p "$pid" --prof 65536 > "$tmp/on" &&
    grep -q '^profiling on, mean interval 65536 bytes' "$tmp/on" || fail "--prof 65536: $(cat "$tmp/on")"
exec 8>&-
wait "$pid" || fail "kickmove exited with $?: $(cat "$tmp/out2")"
echo "prof.sh: all checks passed"
