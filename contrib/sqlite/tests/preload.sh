#!/usr/bin/env bash
# contrib/sqlite/tests/preload.sh - libsdsqlite.so preloaded under an
# unmodified program gives the same output and the same database file.
#
#   preload.sh shell|python LIBSLABDEFRAG.so LIBSDSQLITE.so
#
# Runs one SQL workload (inserts, updates, deletes, an index, a rolled-back
# transaction, cache_size down and up, VACUUM) through the sqlite3 shell or
# python3's sqlite3 module twice: plain, and with
# LD_PRELOAD="libslabdefrag.so libsdsqlite.so", SDSQLITE_STATS=1 and the
# background shrinker waking every millisecond.  Fails when the outputs or
# the database files differ, when the module's exit line is missing or
# shows no pages made, or when anything else appears on stderr.
set -uo pipefail

mode=${1:?usage: preload.sh shell|python LIBSLABDEFRAG.so LIBSDSQLITE.so}
sd=${2:?usage: preload.sh shell|python LIBSLABDEFRAG.so LIBSDSQLITE.so}
sq=${3:?usage: preload.sh shell|python LIBSLABDEFRAG.so LIBSDSQLITE.so}
case $sd in /*) ;; *) sd=$PWD/$sd ;; esac
case $sq in /*) ;; *) sq=$PWD/$sq ;; esac
for f in "$sd" "$sq"; do
  [ -f "$f" ] || { echo "preload.sh: $f: no such file" >&2; exit 1; }
done

dir=$(mktemp -d /tmp/sdsqlite-preload.XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT

# The workload, as SQL (the shell) and as Python (the module).
cat > "$dir/work.sql" <<'EOF'
PRAGMA cache_size=50;
CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v TEXT, n INTEGER);
WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 20000)
  INSERT INTO t SELECT i, printf('k%06d', (i * 7919) % 100003),
                       printf('%.*c', 50 + (i * 37) % 700, char(65 + i % 26)), i * 13 % 1000
  FROM r;
CREATE INDEX t_k ON t(k);
UPDATE t SET n = n + 1, v = v || 'x' WHERE id % 7 = 0;
DELETE FROM t WHERE id % 5 = 0;
SELECT count(*), sum(n), sum(length(v)) FROM t;
BEGIN;
DELETE FROM t WHERE id < 10000;
ROLLBACK;
PRAGMA cache_size=5;
SELECT k, n FROM t WHERE k BETWEEN 'k05' AND 'k0502' ORDER BY k;
PRAGMA cache_size=4000;
SELECT substr(k, 1, 3), count(*), sum(n) FROM t GROUP BY 1 ORDER BY 1;
DELETE FROM t WHERE id % 3 = 0;
VACUUM;
PRAGMA integrity_check;
SELECT id, k, length(v), n FROM t WHERE id % 97 = 1 ORDER BY id;
EOF
cat > "$dir/work.py" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
sql = open(sys.argv[2]).read()
for stmt in [s for s in sql.split(';\n') if s.strip()]:
    for row in db.execute(stmt):
        print('|'.join(str(c) for c in row))
db2 = sqlite3.connect(sys.argv[1])
print(db2.execute('SELECT count(*), sum(n) FROM t').fetchone())
db2.close()
db.close()
EOF

run() {   # run OUT_PREFIX [env...]: the workload on a fresh database
  local out=$1; shift
  rm -f "$dir/x.db"
  case $mode in
    shell)  env "$@" sqlite3 "$dir/x.db" < "$dir/work.sql" > "$out.out" 2> "$out.err" ;;
    python) env "$@" /usr/bin/python3 "$dir/work.py" "$dir/x.db" "$dir/work.sql" \
              > "$out.out" 2> "$out.err" ;;
    *) echo "preload.sh: unknown mode $mode (shell or python)" >&2; exit 2 ;;
  esac
  local rc=$?
  cp "$dir/x.db" "$out.db"
  return $rc
}

bad=0
run "$dir/plain" || { echo "preload.sh: $mode failed without the module" >&2; cat "$dir/plain.err" >&2; bad=1; }
run "$dir/module" LD_PRELOAD="$sd $sq" SDSQLITE_STATS=1 \
    SLABDEFRAG_BACKGROUND=1 SLABDEFRAG_SHRINK_INTERVAL_MS=10 \
  || { echo "preload.sh: $mode failed with the module" >&2; bad=1; }

cmp -s "$dir/plain.out" "$dir/module.out" || {
  echo "preload.sh: $mode: output differs" >&2
  diff "$dir/plain.out" "$dir/module.out" | head -5 >&2; bad=1; }
cmp -s "$dir/plain.db" "$dir/module.db" || {
  echo "preload.sh: $mode: database files differ" >&2; bad=1; }
stats=$(grep '^sdsqlite: caches=' "$dir/module.err")
created=$(sed -n 's/.* pages_created=\([0-9]*\).*/\1/p' <<<"$stats")
if [ -z "$stats" ] || [ "${created:-0}" -eq 0 ]; then
  echo "preload.sh: $mode: the module did not run (no pages made)" >&2; bad=1
fi
others=$(grep -v '^sdsqlite: caches=' "$dir/module.err")
if [ -n "$others" ]; then
  echo "preload.sh: $mode: unexpected stderr:" >&2; echo "$others" | head -5 >&2; bad=1
fi
echo "mode=$mode lines=$(wc -l < "$dir/plain.out") db_bytes=$(stat -c %s "$dir/plain.db")"
echo "$stats"
[ $bad = 0 ] && echo "verify=ok" || echo "verify=FAILED"
exit $bad
