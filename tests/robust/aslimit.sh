#!/usr/bin/env bash
# tests/robust/aslimit.sh - under an address-space limit, a program gets
# at least 90% of the memory it gets from glibc.
#
#   tests/robust/aslimit.sh LIBSLABDEFRAG.so ASLIMIT_PROG MIB MODE
#   tests/robust/aslimit.sh LIBSLABDEFRAG.so startup
#
# For each block size (1000 B, 8000 B, 300,000 B, 5 MB, and "mix": 16 B to
# 1 MiB, log-uniform) and each way of setting the limit (the program's own
# setrlimit(RLIMIT_AS) after start-up, and `ulimit -v` before it), runs
# ASLIMIT_PROG (tests/robust/aslimit_prog.c: allocates until malloc returns
# NULL, checks errno and the other entry points there, prints the MiB it
# got) plainly (glibc: the reference) and with LD_PRELOAD=LIB, and fails
# when slabdefrag's figure is below 90% of glibc's, or when a run fails or
# crashes.  MODE: percpu (the default options), perthread
# (SLABDEFRAG_PERCPU=0), mesh (SLABDEFRAG_MESH=1).
#
# "startup": under `ulimit -v 50000`, `ls /` and `python3 -c pass` start and
# end with status 0 under LIB, as they do plainly.
#
# Each line shows the ratio to glibc and the margin over the 90% line, in
# points and in MiB.  Figures vary with the size: a size class rounds a
# request up, and a slab's tail and a segment's header are address space
# too (sizes such as 12,000 B and 24,000 B, whose slabs leave a large tail,
# fall below 90%; the sizes here are not the worst).  Registered in
# tests/robust/meson.build (suite 'robust').
set -uo pipefail

lib=${1:?usage: aslimit.sh LIB PROG MIB MODE | LIB startup}
unset LD_PRELOAD 2>/dev/null || true
for v in $(env | sed -n 's/^\(SLABDEFRAG_[A-Z_]*\)=.*/\1/p'); do
    unset "$v"
done

if [ "${2:-}" = startup ]; then
    fails=0
    py=$(command -v /usr/bin/python3 || command -v python3 || true)
    for mode in "" SLABDEFRAG_PERCPU=0; do
        for cmd in "ls /" ${py:+"$py -c pass"}; do
            plain=$( (ulimit -v 50000; $cmd >/dev/null 2>&1); echo $?)
            ours=$( (ulimit -v 50000; env $mode LD_PRELOAD="$lib" $cmd >/dev/null 2>&1); echo $?)
            echo "ulimit -v 50000 ${mode:-(defaults)} $cmd: glibc $plain, slabdefrag $ours"
            if [ "$plain" = 0 ] && [ "$ours" != 0 ]; then
                echo "FAIL: $cmd under ulimit -v 50000 ended with $ours"
                fails=1
            fi
        done
    done
    exit $fails
fi

prog=${2:?usage: aslimit.sh LIB PROG MIB MODE}
mib=${3:?usage: aslimit.sh LIB PROG MIB MODE}
mode=${4:?usage: aslimit.sh LIB PROG MIB MODE}
case $mode in
    percpu)   menv= ;;
    perthread) menv=SLABDEFRAG_PERCPU=0 ;;
    mesh)     menv=SLABDEFRAG_MESH=1 ;;
    *) echo "aslimit.sh: unknown mode $mode" >&2; exit 2 ;;
esac

# MiB obtained by one run: $1 = "set" or "ulimit", $2 = size, then env.
run() {
    local how=$1 size=$2
    shift 2
    if [ "$how" = set ]; then
        env "$@" "$prog" "$mib" "$size" set
    else
        (ulimit -v $((mib * 1024)) && exec env "$@" "$prog" "$mib" "$size")
    fi
}

fails=0
for size in 1000 8000 300000 5000000 mix; do
    for how in set ulimit; do
        g=$(run "$how" "$size" X_ASLIMIT=glibc); grc=$?
        s=$(run "$how" "$size" $menv LD_PRELOAD="$lib"); src=$?
        if [ $grc != 0 ] || [ -z "$g" ]; then
            echo "FAIL: $size $how: the plain run failed ($grc)"
            fails=1
            continue
        fi
        if [ $src != 0 ] || [ -z "$s" ]; then
            echo "FAIL: $size $how $mode: the run under slabdefrag failed ($src)"
            fails=1
            continue
        fi
        pm=$((s * 1000 / g))                    # per mille of glibc's
        margin=$((pm - 900))
        sign=+
        [ $margin -lt 0 ] && { sign=-; margin=$((-margin)); }
        verdict=ok
        if [ $((s * 10)) -lt $((g * 9)) ]; then
            verdict=FAIL
            fails=1
        fi
        echo "$verdict: ${mib} MiB $how $mode, blocks of $size: glibc $g MiB, slabdefrag $s MiB" \
             "($((pm / 10)).$((pm % 10))%, margin $sign$((margin / 10)).$((margin % 10)) points," \
             "$((s - (g * 9 + 9) / 10)) MiB to spare)"
    done
done
exit $fails
