"""scripts/comparelib/redis_workload.py - the redis workloads: start
Debian's redis-server under an allocator, fill it with keys, delete some,
wait, and read INFO memory and /proc; also say whether the preloaded malloc
really is the one redis calls."""
import os
import random
import shutil
import tempfile
import time

from .redis_client import Redis, free_port, parse_info
from .runner import (RunResult, Sampler, describe_exit, finish, parse_output,
                     read_pss_kb, read_status, spawn, stop_and_reap, tail)
from .workloads import AGE_RUN

BATCH = 2000            # commands per pipeline


def run_redis(params, env, logbase, interval, timeout, progress, preload):
    """Start redis-server under env, fill, delete, wait, read INFO memory."""
    r = RunResult()
    exe = shutil.which('redis-server')
    if not exe:
        r.status = 'redis-server not found (apt-get install redis-server)'
        return r
    nkeys, wait = params['keys'], params['wait']
    port = free_port()
    tmpd = tempfile.mkdtemp(prefix='compare-redis-')
    argv = [exe, '--port', str(port), '--bind', '127.0.0.1',
            '--save', '', '--appendonly', 'no', '--daemonize', 'no',
            '--protected-mode', 'no', '--dir', tmpd, '--logfile', '']
    out_path, err_path = logbase + '.out', logbase + '.err'
    t0 = time.monotonic()
    try:
        p = spawn(argv, env, out_path, err_path)
    except OSError as e:
        r.status = 'cannot start redis-server: ' + e.strerror
        return r
    s = Sampler(p.pid, t0, interval)
    s.start()
    cli = None
    maxrss = None
    try:
        cli = connect(p, port, out_path, err_path)
        rng = random.Random(params.get('seed', 42))
        fill(cli, rng, nkeys)
        r.events.append(('fill_done', time.monotonic() - t0))
        info_full = parse_info(cli.call('INFO', 'memory'))
        delete(cli, rng, nkeys, params)
        r.events.append(('delete_done', time.monotonic() - t0))
        idle(cli, wait, t0, timeout)
        read_figures(r, cli, p, nkeys, info_full, params, preload)
        try:
            cli.sock.sendall(Redis.cmd('SHUTDOWN', 'NOSAVE'))
        except OSError:
            pass
        r.ok = True
        r.status = 'ok'
    except (OSError, RuntimeError, ConnectionError, ValueError) as e:
        r.status = 'redis workload failed: %s' % e
    finally:
        if cli:
            cli.close()
        # After SHUTDOWN NOSAVE give it 10 s; after an error, no grace.
        maxrss = stop_and_reap(p, 10 if r.ok else 0)
        shutil.rmtree(tmpd, ignore_errors=True)
    r.wall = time.monotonic() - t0
    s.stop()
    r.samples = s.samples
    # The library's own lines (event=shrink_pass) go to redis's stderr.
    lib_metrics, lib_events = parse_output([err_path], t0)
    r.events += lib_events
    finish(r, maxrss)
    return r


def connect(p, port, out_path, err_path):
    """A client of the server p once it answers PING (15 s at most)."""
    cli = None
    deadline = time.monotonic() + 15
    while True:
        if p.poll() is not None:
            raise RuntimeError('redis-server exited at start (%s): %s'
                               % (describe_exit(p.returncode),
                                  tail(out_path) or tail(err_path)))
        try:
            cli = Redis(port)
            cli.call('PING')
            return cli
        except (OSError, RuntimeError):
            if cli:
                cli.close()
                cli = None
            if time.monotonic() > deadline:
                raise RuntimeError('redis-server did not answer within 15 s')
            time.sleep(0.05)


def fill(cli, rng, nkeys):
    """SET key:0..nkeys-1, values of 8 B..2 KiB, log-uniform (many small,
    some large)."""
    blob = bytes(rng.getrandbits(8) for _ in range(4096))
    batch = []
    for k in range(nkeys):
        vl = int(2 ** rng.uniform(3, 11))
        off = rng.randrange(0, 4096 - vl)
        batch.append(Redis.cmd(b'SET', b'key:%d' % k, blob[off:off + vl]))
        if len(batch) == BATCH:
            cli.pipeline(batch)
            batch = []
    if batch:
        cli.pipeline(batch)


def delete(cli, rng, nkeys, params):
    """DEL a params['delete'] share of the keys, random ones or (pattern
    'age') whole runs of AGE_RUN keys, in random order."""
    if params.get('pattern') == 'age':
        # Survivors clustered by age: whole runs of AGE_RUN keys set one
        # after another survive together (a cache whose old entries
        # expire, a session store), the others are deleted.
        victims = [k for run in range(0, nkeys, AGE_RUN)
                   if rng.random() < params['delete']
                   for k in range(run, min(run + AGE_RUN, nkeys))]
    else:
        victims = [k for k in range(nkeys) if rng.random() < params['delete']]
    rng.shuffle(victims)
    for i in range(0, len(victims), BATCH):
        cli.pipeline([Redis.cmd(b'DEL', b'key:%d' % k)
                      for k in victims[i:i + BATCH]])


def idle(cli, wait, t0, timeout):
    """wait s of PINGs (the allocator's background work may run)."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        time.sleep(0.1)
        cli.call('PING')
        if time.monotonic() - t0 > timeout:
            raise RuntimeError('timed out after %d s' % timeout)


def read_figures(r, cli, p, nkeys, info_full, params, preload):
    """r's metrics from INFO memory, DBSIZE and /proc of the server p."""
    info = parse_info(cli.call('INFO', 'memory'))
    dbsize = int(cli.call('DBSIZE'))
    st = read_status(p.pid)
    maps = ''
    try:
        with open('/proc/%d/maps' % p.pid) as f:
            maps = f.read()
    except OSError:
        pass
    used = int(info.get('used_memory', 0))
    rss = int(info.get('used_memory_rss', 0))
    je_alloc = int(info.get('allocator_allocated', 0) or 0)
    m = r.metrics
    m['keys_total'] = str(nkeys)
    m['keys_live'] = str(dbsize)
    m['used_memory_full'] = info_full.get('used_memory', '')
    m['used_memory'] = str(used)
    m['used_memory_rss'] = str(rss)
    m['mem_allocator'] = info.get('mem_allocator', '?')
    # Redis's own view: used_memory_rss / used_memory (INFO memory).
    m['mem_fragmentation_ratio'] = info.get('mem_fragmentation_ratio', '')
    m['jemalloc_allocated'] = str(je_alloc)
    if used:
        m['rss_per_used'] = '%.3f' % (rss / used)
        pss = read_pss_kb(p.pid)
        if pss:
            m['pss_per_used'] = '%.3f' % (pss * 1024 / used)
    if st:
        r.final_kb = st[0]
        m['final_rss_kb'] = str(st[0])
    reached = malloc_reaches(params['alloc'], preload, maps, used, je_alloc)
    m['malloc_reaches'] = reached.split()[0]
    r.note = reached


def malloc_reaches(alloc, preload, maps, used, je_alloc):
    """'yes (...)' or 'no (...)': whose malloc did redis call?  Debian's
    redis-server is linked with libjemalloc.so.2; LD_PRELOAD puts another
    malloc first in symbol lookup, but INFO's mem_allocator is fixed at
    compile time.  When malloc goes elsewhere, jemalloc's own statistics
    (mallctl, still jemalloc's) stay near zero while used_memory grows."""
    base = os.path.basename(preload) if preload else ''
    in_maps = bool(base) and base in maps
    if alloc == 'jemalloc':
        return 'yes (jemalloc: allocated %d of used %d)' % (je_alloc, used)
    if not in_maps:
        return 'no (%s not mapped)' % (base or 'nothing preloaded')
    if je_alloc > used // 4:
        return 'no (jemalloc still holds %d bytes)' % je_alloc
    return 'yes (%s mapped, jemalloc holds %d bytes)' % (base, je_alloc)
