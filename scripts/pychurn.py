#!/usr/bin/env python3
"""scripts/pychurn.py - a Python dict/str churn workload for scripts/compare.

Run it with PYTHONMALLOC=malloc (scripts/compare does), so that every
object goes through the C malloc under test instead of pymalloc's arenas.

  pychurn.py [N]      (default N = 300000)

1. Build a dict of N records: str key -> [str, bytes, small tuple]; value
   strings of 8..600 characters (slices of one random text).
2. Delete a random 85% of the keys, then churn: 3 rounds that insert N/10
   fresh records and delete as many random ones.
3. gc.collect(), hold 0.5 s, walk the survivors (live_bytes: every key
   and value is touched), print figures and exit.

stderr gets key=value lines for scripts/compare: live_bytes (an estimate:
sys.getsizeof of the dict, keys and values, not counting malloc overhead),
final_rss_kb (VmRSS read from /proc/self/status just before exiting),
final_pss_kb (Pss from /proc/self/smaps_rollup: a page mapped at two
addresses of the process - a mesh host and its alias - counts twice in
VmRSS once both are touched, once in Pss), rss_per_live, walk_minflt (the
minor page faults of the walk: with meshing, the first touch of each
alias page faults it in), and events fill_done, delete_done, churn_done,
slept (the 0.5 s hold's end, before the walk) and exit.
"""
import gc
import random
import resource
import sys
import time


def status_kb(field):
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(field + ':'):
                return int(line.split()[1])
    return -1


def rollup_kb(field):
    try:
        with open('/proc/self/smaps_rollup') as f:
            for line in f:
                if line.startswith(field + ':'):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def event(name):
    print('event=%s mono=%.6f' % (name, time.monotonic()), file=sys.stderr)


BLOB = ''.join(random.Random(7).choice('abcdefghijklmnopqrstuvwxyz') for _ in range(4096))


def record(rng, k):
    off = rng.randrange(0, 3400)
    s = BLOB[off:off + rng.randint(8, 600)]
    # Fresh objects (slices of BLOB are new strings; the bytes and the
    # tuple too), so every record is its own set of mallocs.
    return 'key:%d:%s' % (k, s[:12]), [s, s.encode() + b'!', (k, k * 2, s[:4])]


def live_bytes(d):
    total = sys.getsizeof(d)
    for k, v in d.items():
        total += sys.getsizeof(k) + sys.getsizeof(v)
        total += sum(sys.getsizeof(x) for x in v)
    return total


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300000
    rng = random.Random(42)
    event('start')
    d = {}
    for k in range(n):
        key, val = record(rng, k)
        d[key] = val
    peak = status_kb('VmRSS')
    event('fill_done')
    keys = list(d)
    rng.shuffle(keys)
    for key in keys[:int(len(keys) * 0.85)]:
        del d[key]
    del keys
    gc.collect()
    after_delete = status_kb('VmRSS')
    event('delete_done')
    nxt = n
    for _ in range(3):
        for _ in range(n // 10):
            key, val = record(rng, nxt)
            nxt += 1
            d[key] = val
        victims = rng.sample(list(d), n // 10)
        for key in victims:
            del d[key]
    gc.collect()
    event('churn_done')
    time.sleep(0.5)
    event('slept')
    flt = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    live = live_bytes(d)
    flt = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - flt
    final = status_kb('VmRSS')
    pss = rollup_kb('Pss')
    print('pychurn: %d records left; RSS %.1f MiB full, %.1f MiB after delete, '
          '%.1f MiB at the end; ~%.1f MiB live'
          % (len(d), peak / 1024, after_delete / 1024, final / 1024, live / 1048576))
    e = sys.stderr
    print('records_left=%d' % len(d), file=e)
    print('rss_full_kb=%d' % peak, file=e)
    print('rss_after_delete_kb=%d' % after_delete, file=e)
    print('live_bytes=%d' % live, file=e)
    print('rss_per_live=%.3f' % (final * 1024 / live), file=e)
    print('final_rss_kb=%d' % final, file=e)
    print('final_pss_kb=%d' % pss, file=e)
    print('walk_minflt=%d' % flt, file=e)
    print('peak_rss_kb=%d' % status_kb('VmHWM'), file=e)
    event('exit')


if __name__ == '__main__':
    main()
