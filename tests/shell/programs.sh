#!/usr/bin/env bash
# tests/shell/programs.sh - real programs with and without libslabdefrag.
#
#   tests/shell/programs.sh /path/to/libslabdefrag.so [NAME...]
#
# Each program runs twice, in a fresh directory each time: once plainly and
# once with LD_PRELOAD=<lib> (every process of the run is preloaded).  The
# stdout and the exit status of the two runs must be identical, and the
# preloaded run must not print an allocator report ("slabdefrag: ...") on
# stderr.  Prints `ok NAME` / `FAIL NAME` / `skip NAME: why` per program and
# a final `N passed, N failed`; exits 1 if anything failed.
#
# Registered in tests/meson.build (suite 'programs').  Optional NAMEs run
# only those programs (python git sqlite perl gcc coreutils redis).
# PROGRAMS_KEEP=1 keeps the outputs (NAME.{plain,preload}.{out,err,status})
# in the /tmp/sd-programs.* directory; PROGRAMS_TIMEOUT (s, default 180)
# bounds each run.
set -uo pipefail

lib=${1:?usage: programs.sh LIBSLABDEFRAG.so [NAME...]}
shift
case $lib in /*) ;; *) lib=$PWD/$lib ;; esac
if [ ! -f "$lib" ]; then
    echo "programs.sh: $lib: no such library" >&2
    echo "0 passed, 1 failed"
    exit 1
fi

# Programs that scripts/setup installs: missing means a broken setup (FAIL),
# not something to skip.
SETUP_INSTALLS=" /usr/bin/python3 python3 perl git sqlite3 redis-server redis-cli
 redis-benchmark gcc "
TIMEOUT=${PROGRAMS_TIMEOUT:-180}

work=$(mktemp -d /tmp/sd-programs.XXXXXX)
redis_pid=
kill_redis() {
    local p
    [ -f "$work/redis.pids" ] || return 0
    while read -r p; do
        kill -9 "$p" 2>/dev/null
    done <"$work/redis.pids"
    rm -f "$work/redis.pids"
}
cleanup() {
    kill_redis
    if [ -n "${PROGRAMS_KEEP:-}" ]; then
        echo "programs.sh: outputs kept in $work" >&2
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

pass=0
fail=0
failed_names=()

# Deterministic environment for every program.
export LC_ALL=C TZ=UTC PYTHONHASHSEED=0 PYTHONDONTWRITEBYTECODE=1
export GIT_AUTHOR_NAME="Slab Defrag" GIT_AUTHOR_EMAIL="sd@example.invalid"
export GIT_COMMITTER_NAME="Slab Defrag" GIT_COMMITTER_EMAIL="sd@example.invalid"
export GIT_AUTHOR_DATE="2024-01-02T03:04:05Z" GIT_COMMITTER_DATE="2024-01-02T03:04:05Z"
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
unset LD_PRELOAD MALLOC_CHECK_ MALLOC_PERTURB_ 2>/dev/null || true

# ---- the programs: each prints deterministic output on stdout -------------
# $1: a fresh empty directory (the current directory when called).

prog_python() {
    cat >churn.py <<'EOF'
import hashlib, random
rnd = random.Random(12345)
h = hashlib.sha256()
d = {}
lists = []
for i in range(200000):
    k = "key-%d-%s" % (rnd.randrange(50000), "x" * rnd.randrange(0, 40))
    if rnd.random() < 0.7:
        d[k] = [rnd.random() for _ in range(rnd.randrange(0, 8))]
    else:
        d.pop(k, None)
    if i % 1000 == 0:
        lists.append("".join(chr(65 + rnd.randrange(26)) for _ in range(rnd.randrange(1, 5000))))
        if len(lists) > 50:
            del lists[rnd.randrange(len(lists))]
big = [str(i) * (i % 7) for i in range(100000)]
big.sort(key=lambda s: (len(s), s))
s = " ".join(big)
for k in sorted(d):
    h.update(k.encode())
    h.update(repr(d[k]).encode())
for x in lists:
    h.update(x.encode())
h.update(s.encode())
b = bytearray()
for i in range(20000):
    b += bytes([i % 251]) * (i % 13)
h.update(bytes(b))
print(len(d), len(lists), len(s), len(b))
print(h.hexdigest())
EOF
    /usr/bin/python3 churn.py
}

prog_git() {
    git init -q -b main repo || return
    cd repo || return
    git config user.name "Slab Defrag"
    git config user.email sd@example.invalid
    git config gc.auto 0
    for c in 1 2 3 4 5; do
        for f in $(seq 1 80); do
            mkdir -p "dir$((f % 7))"
            # content changes with the commit for some files
            seq $((f * c)) $((f * c + f * 10 + (f % 3 == 0 ? c : 0))) >"dir$((f % 7))/file$f.txt"
        done
        yes "blob line of commit $c" | head -n 20000 >blob.txt
        git add -A || return
        GIT_AUTHOR_DATE="2024-01-0${c}T03:04:05Z" GIT_COMMITTER_DATE="2024-01-0${c}T03:04:05Z" \
            git commit -q -m "commit $c" || return
    done
    git rm -q -r dir3 && git commit -q -m "remove dir3" || return
    git gc -q --aggressive 2>&1
    echo "gc=$?"
    git fsck --full --strict 2>&1
    echo "fsck=$?"
    git log --format=%H
    git rev-parse 'HEAD^{tree}'
    git diff --stat HEAD~3 HEAD | tail -1
    git cat-file -p HEAD:dir1/file1.txt | md5sum
}

prog_sqlite() {
    sqlite3 test.db <<'EOF'
PRAGMA journal_mode=DELETE;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, val REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)
INSERT INTO t(id, grp, name, val)
  SELECT x, x % 97, 'name-' || (x * 7919 % 20000) || '-' || substr('abcdefghij', 1 + x % 10),
         (x * 31 % 1000) / 7.0 FROM c;
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(grp), round(sum(val), 3), min(name), max(name) FROM t;
SELECT grp, count(*), round(avg(val), 4), group_concat(id % 10, '') FROM t
  WHERE grp < 5 GROUP BY grp ORDER BY grp;
SELECT name FROM t ORDER BY name DESC LIMIT 3;
DELETE FROM t WHERE id % 3 = 0;
VACUUM;
SELECT count(*), total(val) FROM t;
PRAGMA integrity_check;
EOF
}

prog_perl() {
    perl -e '
        use strict; use warnings;
        use Digest::MD5 qw(md5_hex);
        srand(42);
        my (%h, @keep);
        for my $i (1 .. 300000) {
            my $k = "k" . int(rand(60000));
            if (rand() < 0.65) { $h{$k} = ("v" x int(rand(30))) . $i; }
            else { delete $h{$k}; }
            if ($i % 500 == 0) {
                push @keep, join(",", map { $_ * $i } 1 .. int(rand(300)));
                splice(@keep, int(rand(@keep)), 1) if @keep > 40;
            }
        }
        my $s = join(";", map { "$_=$h{$_}" } sort keys %h);
        my $t = join("|", @keep);
        $t =~ s/(\d)(\d)/$2$1/g;
        print scalar(keys %h), " ", length($s), " ", length($t), "\n";
        print md5_hex($s . $t), "\n";'
}

prog_gcc() {
    cat >prog.c <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct node { struct node *next; char *s; };
int main(void)
{
    struct node *head = NULL;
    unsigned long sum = 0;
    for (int i = 0; i < 100000; i++) {
        struct node *n = malloc(sizeof *n);
        n->s = malloc((size_t)(i % 300) + 1);
        memset(n->s, 'a' + i % 26, (size_t)(i % 300));
        n->s[i % 300] = 0;
        n->next = head;
        head = n;
        if (i % 3 == 0) {
            struct node *d = head;
            head = d->next;
            sum += strlen(d->s);
            free(d->s);
            free(d);
        }
    }
    char *sieve = calloc(2000000, 1);
    unsigned long primes = 0;
    for (unsigned long i = 2; i < 2000000; i++)
        if (!sieve[i]) {
            primes++;
            for (unsigned long j = i * i; j < 2000000; j += i)
                sieve[j] = 1;
        }
    while (head) {
        struct node *d = head;
        head = d->next;
        sum += strlen(d->s);
        free(d->s);
        free(d);
    }
    free(sieve);
    printf("sum=%lu primes=%lu\n", sum, primes);
    return 0;
}
EOF
    gcc -O2 -Wall -o prog prog.c
    echo "gcc=$?"
    ./prog
    echo "prog=$?"
}

prog_coreutils() {
    seq 1 100000 >random-source
    seq 1 200000 | sort -R --random-source=random-source | sort -n | uniq | wc -l
    seq 1 200000 | sort -R --random-source=random-source | md5sum
    seq 1 50000 | awk '{ print $1 % 1000, $1 }' | sort -k1,1n -k2,2nr | uniq -c -w 4 | tail -3
    seq 1 100000 | tr '0-9' 'a-j' | sort | md5sum
}

free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

prog_redis() {
    local port
    port=$(free_port) || return
    # The server inherits LD_PRELOAD (if set) from this run.
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize no --dir "$PWD" --logfile "$PWD/redis.log" &
    redis_pid=$!
    echo "$redis_pid" >>"$work/redis.pids"
    # This runs in run_once's subshell: kill the server on every way out.
    trap 'if [ -n "$redis_pid" ]; then kill -9 "$redis_pid" 2>/dev/null; fi' EXIT
    local up=0
    for _ in $(seq 1 100); do
        if redis-cli -p "$port" ping 2>/dev/null | grep -c PONG >/dev/null; then up=1; break; fi
        kill -0 "$redis_pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "up=$up"
    if [ "$up" != 1 ]; then
        cat redis.log >&2
        return 1
    fi
    if [ -n "${LD_PRELOAD:-}" ] && ! grep -q libslabdefrag "/proc/$redis_pid/maps"; then
        echo "redis-server is not running with libslabdefrag"
    fi
    redis-benchmark -p "$port" -q -n 20000 -t set,get,lpush,lpop 2>&1 | tr '\r' '\n' |
        grep 'requests per second' | sed 's/:.*//'
    echo "benchmark=${PIPESTATUS[0]}"
    local cli=(redis-cli -p "$port")
    "${cli[@]}" SET k1 hello
    "${cli[@]}" GET k1
    "${cli[@]}" SET big "$(head -c 100000 /dev/zero | tr '\0' x)" >/dev/null
    "${cli[@]}" STRLEN big
    for i in $(seq 1 50); do "${cli[@]}" INCR counter >/dev/null; done
    "${cli[@]}" GET counter
    "${cli[@]}" RPUSH lst a b c d e
    "${cli[@]}" LRANGE lst 0 -1
    "${cli[@]}" DEL k1
    "${cli[@]}" GET k1
    "${cli[@]}" DBSIZE
    "${cli[@]}" SHUTDOWN NOSAVE >/dev/null 2>&1
    local st
    wait "$redis_pid"
    st=$?
    redis_pid=
    echo "server-exit=$st"
    # A crash report in the log would mean the server died badly.
    if grep -q 'REDIS BUG REPORT\|crashed by signal' redis.log; then
        echo "redis-server crashed"
    fi
}

# ---- driver -------------------------------------------------------------

need_cmds() {
    case $1 in
        python) echo /usr/bin/python3 ;;
        git) echo git ;;
        sqlite) echo sqlite3 ;;
        perl) echo perl ;;
        gcc) echo gcc ;;
        coreutils) echo "seq sort uniq wc md5sum awk tr" ;;
        redis) echo "redis-server redis-cli redis-benchmark /usr/bin/python3" ;;
    esac
}

# run_once NAME MODE: run prog_NAME in a fresh directory; stdout, stderr
# and the status go to $work/NAME.MODE.{out,err,status}.
run_once() {
    local name=$1 mode=$2 dir="$work/$1.$2.d"
    mkdir -p "$dir"
    (
        cd "$dir" || exit 99
        if [ "$mode" = preload ]; then export LD_PRELOAD="$lib"; fi
        "prog_$name"
    ) >"$work/$name.$mode.out" 2>"$work/$name.$mode.err" &
    local pid=$! waited=0
    # A hung program is killed after $TIMEOUT seconds.
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$waited" -ge $((TIMEOUT * 10)) ]; then
            kill_redis
            pkill -9 -P "$pid" 2>/dev/null   # the run's own children, by parent id
            kill -9 "$pid" 2>/dev/null
            echo "TIMEOUT after ${TIMEOUT}s" >>"$work/$name.$mode.err"
            break
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    wait "$pid"
    echo $? >"$work/$name.$mode.status"
    kill_redis
}

check_program() {
    local name=$1 c missing=()
    for c in $(need_cmds "$name"); do
        command -v "$c" >/dev/null 2>&1 || missing+=("$c")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        local m setup_has=0
        for m in "${missing[@]}"; do
            case $SETUP_INSTALLS in *" $m "*|*" $m"$'\n'*) setup_has=1 ;; esac
        done
        if [ "$setup_has" = 1 ]; then
            echo "FAIL $name: ${missing[*]} not installed (scripts/setup installs it)"
            fail=$((fail + 1)); failed_names+=("$name")
        else
            echo "skip $name: ${missing[*]} not installed (not installed by scripts/setup)"
        fi
        return
    fi
    local t0=$SECONDS
    run_once "$name" plain
    run_once "$name" preload
    local why=()
    local sp sl
    sp=$(cat "$work/$name.plain.status")
    sl=$(cat "$work/$name.preload.status")
    [ "$sp" = "$sl" ] || why+=("exit status $sp without, $sl with LD_PRELOAD")
    if ! cmp -s "$work/$name.plain.out" "$work/$name.preload.out"; then
        why+=("stdout differs")
    fi
    if [ ! -s "$work/$name.plain.out" ]; then
        why+=("no output without LD_PRELOAD (the test itself is broken)")
    fi
    if grep -q '^slabdefrag: ' "$work/$name.preload.err"; then
        why+=("allocator report on stderr")
    fi
    if [ "${#why[@]}" -eq 0 ]; then
        echo "ok $name ($((SECONDS - t0))s)"
        pass=$((pass + 1))
    else
        echo "FAIL $name: $(IFS=';'; echo "${why[*]}")"
        fail=$((fail + 1)); failed_names+=("$name")
        echo "---- diff of stdout (without / with LD_PRELOAD):"
        diff "$work/$name.plain.out" "$work/$name.preload.out" | head -40
        echo "---- stderr with LD_PRELOAD (last 30 lines):"
        tail -30 "$work/$name.preload.err"
        echo "---- stderr without LD_PRELOAD (last 10 lines):"
        tail -10 "$work/$name.plain.err"
        echo "----"
    fi
}

# The library must really get loaded, or every comparison is vacuous.
# (grep -c reads to the end: with -q, cat could die of SIGPIPE under pipefail.)
if [ "$(LD_PRELOAD="$lib" cat /proc/self/maps 2>/dev/null | grep -c libslabdefrag)" -gt 0 ]; then
    echo "ok preload-active"
    pass=$((pass + 1))
else
    echo "FAIL preload-active: LD_PRELOAD=$lib does not load the library"
    fail=$((fail + 1)); failed_names+=(preload-active)
fi

names=("$@")
[ "${#names[@]}" -gt 0 ] || names=(python git sqlite perl gcc coreutils redis)
for n in "${names[@]}"; do
    if ! declare -F "prog_$n" >/dev/null; then
        echo "FAIL $n: no such program test"
        fail=$((fail + 1)); failed_names+=("$n")
        continue
    fi
    check_program "$n"
done

[ "$fail" -eq 0 ] || echo "failed: ${failed_names[*]}"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
