"""scripts/comparelib/workloads.py - the bundled workload suite (bench/,
the demos, redis, python), its groups and --quick sizes, and whether a
workload can run here."""
import os
import shutil

from .common import ROOT

class Workload:
    """name; how to run it per allocator; figures to show in the table."""

    def __init__(self, name, desc, argv=None, kind='cmd', params=None,
                 extra=(), variants=None, env=None, speed=False):
        self.name, self.desc, self.kind = name, desc, kind
        self.argv = argv              # list, or dict allocator -> list
        self.params = params or {}
        # (metric key, header, higher_is_better, ratio): higher_is_better
        # None = no '*' mark; ratio = also a column of ratios to BASELINE.
        self.extra = [tuple(e) + (False,) * (4 - len(e)) for e in extra]
        # A speed workload reports its own timed phase as `time_s=`; the
        # geometric-mean summary line is taken over these.
        self.speed = speed
        self.variants = variants or {}  # extra row name -> (allocator, argv)
        self.env = env or {}

    def argv_for(self, alloc):
        if isinstance(self.argv, dict):
            return self.argv.get(alloc, self.argv.get('*'))
        return self.argv


def python_binary():
    # Debian's python3 (a real ELF) rather than a pyenv shim (a shell script).
    for cand in ('/usr/bin/python3', shutil.which('python3')):
        if cand and os.path.exists(cand):
            return os.path.realpath(cand)
    return None


QUICK_SET = ['throughput', 'frag']
AGE_RUN = 1000          # redis-age: keys that live and die together
MANYTHREADS_N = [2, 64, 256, 1024]
# bench/fork: (name suffix, heap MiB, --quick heap MiB)
FORK_SIZES = [('256m', 256, 16), ('1g', 1024, 32), ('4g', 4096, 64)]
# Names --workloads accepts for a set of workloads (see --list).
# percpu: the standard allocator benchmarks, one table each,
# plus the speed summary line (geometric mean of the time ratios).
GROUPS = {
    'percpu': ['larson', 'larson-mb', 'churn-1', 'churn-n', 'xthread', 'stchurn', 'sizemix',
               'batchfree'] +
              ['manythreads-%d' % n for n in MANYTHREADS_N],
    # large: blocks above 32 KiB, bench/large.c
    'large': ['large-touch', 'large-maps', 'large-mixed-1', 'large-mixed-2'],
    # fork: fork() with a big fragmented heap, bench/fork.c
    'fork': ['fork-%s' % t for t, _, _ in FORK_SIZES],
}


def suite(bench, quick):
    """All bundled workloads, with --quick sizes if quick.  The caller
    skips those whose program is missing (check_workload)."""
    W = []
    q = quick
    W.append(Workload(
        'throughput', 'malloc/free throughput: 1 thread, 2 threads, 1 producer/consumer pair',
        [os.path.join(bench, 'throughput'), '-t', '2', '-n', '1000000' if q else '5000000'],
        extra=[('st_ops_per_s', 'st Mops/s', True), ('mt_ops_per_s', 'mt Mops/s', True),
               ('xt_ops_per_s', 'xt Mops/s', True)]))
    W.append(Workload(
        'frag', 'allocate %s MiB of mixed sizes, free a random 90%%, hold %s s '
        '(non-cooperating)' % (('32', '0.5') if q else ('256', '2')),
        [os.path.join(bench, 'frag')] + (['-m', '32', '-H', '0.5'] if q else ['-m', '256', '-H', '2']),
        extra=[('rss_per_live', 'RSS/live', False)]))
    W.append(Workload(
        'burst', 'allocate %s blocks of 16..255 B, free a random 90%%, hold %s s; '
        'steady s = time after the frees until RSS settles (within 5%% of what the '
        'hold released)' % (('100k', '2') if q else ('1M', '8')),
        [os.path.join(bench, 'burst')] + (['-n', '100000', '-H', '2'] if q else ['-H', '8']),
        extra=[('rss_per_live', 'RSS/live', False), ('steady_s', 'steady s', None)]))
    hd = [os.path.join(bench, 'hintdemo'), '-n', '100000' if q else '1000000']
    W.append(Workload(
        'hintdemo', 'hash table of %s records, delete 85%%; under slabdefrag: '
        'sd_defrag_hint pass + sd_shrink_all (row slabdefrag-nodefrag: '
        'without them)' % ('100k' if q else '1M'),
        hd, variants={'slabdefrag-nodefrag': ('slabdefrag', hd + ['--no-defrag'])},
        extra=[('rss_per_live', 'RSS/live', False), ('moved', 'moved', None),
               ('shrunk_bytes', 'shrunk B', None)]))
    for demo in ('pathcache', 'kvstore'):
        coop = os.path.join(bench, 'demos', demo)
        plain = os.path.join(bench, 'demos', demo + '-malloc')
        if not os.path.exists(plain) and os.path.exists(coop):
            plain_argv = [coop, '--malloc']
        else:
            plain_argv = [plain]
        W.append(Workload(
            demo, 'cooperating demo bench/demos/%s: its plain-malloc build under every '
            'allocator%s' % (demo, '; row slabdefrag+coop = its get()/kick() build under '
                             'slabdefrag' if os.path.exists(coop) else ''),
            {'*': plain_argv}, kind='demo',
            variants={'slabdefrag+coop': ('slabdefrag', [coop])} if os.path.exists(coop) else {},
            extra=[('rss_per_live', 'RSS/live', False)]))
    # SQLite (contrib/sqlite): its own page cache under every allocator;
    # rows slabdefrag+sdpcache = the slabdefrag page cache module, without
    # and with a memory limit.
    contrib = os.path.join(os.path.dirname(bench), 'contrib', 'sqlite')
    sb = [os.path.join(contrib, 'sqlitebench')] + \
        (['-n', '30000', '-r', '20000', '--idle', '2'] if q else
         ['-n', '150000', '-r', '200000', '--idle', '10'])
    sdp = ['--module', os.path.join(contrib, 'libsdsqlite.so')]
    W.append(Workload(
        'sqlite', 'SQLite: 4 connections with 64 MiB caches fill %s rows of 40..600 B '
        '(WAL), read them at random, then 3 close, 90%% of rows deleted, idle %s s; '
        'live = bytes still cached (row slabdefrag+sdpcache: the page cache module '
        'of contrib/sqlite; -limit: with SLABDEFRAG_RSS_LIMIT_MB=%s)'
        % (('30k', '2', '16') if q else ('150k', '10', '64')),
        sb,
        variants={'slabdefrag+sdpcache': ('slabdefrag', sb + sdp),
                  'slabdefrag+sdpcache-limit':
                      ('slabdefrag', sb + sdp + ['--rss-limit-mb', '16' if q else '64'])},
        extra=[('time_s', 'time s', False, True), ('fill_rows_per_s', 'fill rows/s', True, True),
               ('read_per_s', 'reads/s', True, True), ('rss_per_live', 'RSS/live', False)]))
    # The standard allocator benchmarks (group percpu).  Speed workloads:
    # time is their own timed phase (time_s), with ratios to jemalloc.
    ncpu = os.cpu_count() or 1
    speed_extra = [('time_s', 'time s', False, True), ('ops_per_s', 'Mops/s', True, True)]
    W.append(Workload(
        'larson', 'Larson server simulation: %d lineage(s) x %s rounds (a new thread '
        'each) x %s replacements in %s slots of 16..1024 B; ~43%% of frees are '
        'of blocks other threads allocated'
        % ((ncpu,) + (('5', '2000', '1000') if q else ('250', '20000', '10000'))),
        [os.path.join(bench, 'larson'), '-t', str(ncpu)] +
        (['-S', '1000', '-r', '5', '-n', '2000'] if q else ['-r', '250', '-n', '20000']),
        extra=speed_extra + [('remote_free_pct', 'remote %', None)], speed=True))
    # mimalloc-bench's larson arguments (5000 blocks of 8..1000 B per
    # thread, each thread's life 100 x 5000 replacements, seed 4141), for
    # a fixed number of lifetimes instead of its 5 seconds.
    W.append(Workload(
        'larson-mb', 'Larson with mimalloc-bench\'s parameters: %d lineage(s) x %s thread '
        'lives x %s replacements in 5000 slots of 8..1000 B'
        % ((ncpu,) + (('2', '50k') if q else ('20', '500k'))),
        [os.path.join(bench, 'larson'), '-t', str(ncpu), '-S', '5000', '-m', '8', '-M', '1000',
         '-s', '4141'] + (['-r', '2', '-n', '50000'] if q else ['-r', '20', '-n', '500000']),
        extra=speed_extra + [('remote_free_pct', 'remote %', None)], speed=True))
    for tag, nt in (('1', 1), ('n', ncpu)):
        W.append(Workload(
            'churn-' + tag, 'random malloc/free churn, %s, %s replacements per thread, '
            'each thread in its own 2,000 blocks of 16..512 B'
            % ('1 thread' if tag == '1' else '%d threads (one per CPU)' % nt,
               '200k' if q else '25M'),
            [os.path.join(bench, 'churn'), '-t', str(nt), '-n', '200000' if q else '25000000'],
            extra=speed_extra + ([('shared_lines_pct', 'lines shared %', None),
                                  ('shared_pages_pct', 'pages shared %', None)]
                                 if nt > 1 else []), speed=True))
    W.append(Workload(
        'xthread', '%d producer/consumer pair(s): %s blocks of 16..512 B malloc\'d in '
        'one thread, freed in the other, in batches of 1000'
        % (max(1, ncpu // 2), '100k' if q else '5M'),
        [os.path.join(bench, 'xthread'), '-p', str(max(1, ncpu // 2)),
         '-n', '100000' if q else '5000000'],
        extra=speed_extra, speed=True))
    W.append(Workload(
        'stchurn', 'one thread, %s live blocks of 16..256 B, %s random replacements'
        % (('10k', '200k') if q else ('100k', '8M')),
        [os.path.join(bench, 'stchurn')] +
        (['-w', '10000', '-n', '200000'] if q else ['-w', '100000', '-n', '8000000']),
        extra=speed_extra, speed=True))
    W.append(Workload(
        'sizemix', '%d thread(s), each replacing random blocks of its 1024 slots, '
        '%s steps, sizes 4 B..32 KiB with P(size > x) ~ 4/x (glibc\'s benchmark mix)'
        % (ncpu, '200k' if q else '20M'),
        [os.path.join(bench, 'sizemix'), '-t', str(ncpu), '-n', '200000' if q else '20000000'],
        extra=speed_extra, speed=True))
    W.append(Workload(
        'batchfree', '%d thread(s) allocating batches of one size (16 B x 3000 .. 96 KiB x 1) '
        'and freeing four fifths at once, in and against allocation order; 1 block in 64 '
        'freed by another thread (sh6bench and sh8bench\'s patterns), %s batches each'
        % (2 * ncpu, '2000' if q else '60000'),
        [os.path.join(bench, 'batchfree'), '-t', str(2 * ncpu), '-n', '2000' if q else '60000'],
        extra=speed_extra, speed=True))
    # Blocks above 32 KiB (group large).
    lg = os.path.join(bench, 'large')
    maps_extra = [('maps', 'maps live', None), ('maps_end', 'maps end', None)]
    W.append(Workload(
        'large-touch', 'allocate %s blocks of 40..46 KiB, write a byte in each page, '
        'free them all' % ('20k' if q else '100k'),
        [lg, 'touch', '-n', '20000' if q else '100000'],
        extra=[('time_s', 'time s', False, True)] + maps_extra, speed=True))
    W.append(Workload(
        'large-maps', '%s live blocks of 40..120 KiB with as many freed between them; '
        'mappings, then pthread_create, mmap, dlopen' % ('30k' if q else '150k'),
        [lg, 'maps', '-n', '30000' if q else '150000'],
        extra=[('time_s', 'time s', False, True), ('maps', 'maps live', False),
               ('threads_ok', 'threads ok', None), ('dlopen_ok', 'dlopen ok', None)],
        speed=True))
    for nt in (1, 2):
        W.append(Workload(
            'large-mixed-%d' % nt, '%d thread(s), each 256 slots of 32 KiB..4 MiB '
            '(log-uniform), %s random steps: a quarter grow by realloc (1.25..2x), '
            'the rest free and malloc anew; every page written' % (nt, '4k' if q else '40k'),
            [lg, 'mixed', '-t', str(nt), '-n', '4000' if q else '40000'],
            extra=[('time_s', 'time s', False, True)] + maps_extra, speed=True))
    # fork() with a fragmented heap (group fork).
    for tag, mib, qmib in FORK_SIZES:
        W.append(Workload(
            'fork-' + tag, 'allocate %d MiB of 64..512 B blocks, free a random half, let '
            'meshing settle (at most %d s), then %d forks whose child exits at once and %d '
            'whose child writes 1%% of the live blocks; medians over those forks'
            % (qmib if q else mib, 15 if q else 60, 2 if q else 5, 2 if q else 5),
            [os.path.join(bench, 'fork'), '-m', str(qmib if q else mib),
             '-f', '2' if q else '5', '-S', '15' if q else '60'],
            extra=[('fork_ms', 'fork ms', False, True), ('fork_max_ms', 'max fork ms', None),
                   ('exit_ms', 'child exit ms', False, True),
                   ('child_dirty_kb', 'child dirty KiB', False),
                   ('child_pss_shmem_kb', 'child PSS shmem KiB', None),
                   ('settle_s', 'settle s', None), ('meshes', 'meshes', None)]))
    for nt in MANYTHREADS_N:
        W.append(Workload(
            'manythreads-%d' % nt, '%d threads each malloc %s blocks of 16..515 B, free those '
            'whose index is not a multiple of 16, park; RSS while all are parked '
            '(final = parked)' % (nt, '400' if q else '4000'),
            [os.path.join(bench, 'manythreads'), '-t', str(nt), '-n', '400' if q else '4000'],
            extra=[('live_mib', 'live MiB', None), ('rss_per_live', 'RSS/live', False),
                   ('heap_rss_per_live', '(RSS-base)/live', False)]))
    keys, wait = (30000, 1) if q else (300000, 10)
    redis_extra = [('rss_per_used', 'RSS/used_memory', False, True),
                   ('pss_per_used', 'PSS/used', False, True),
                   ('mem_fragmentation_ratio', 'frag ratio', False),
                   ('malloc_reaches', 'malloc reaches lib', None)]
    W.append(Workload(
        'redis', 'redis-server: SET %dk keys of 8 B..2 KiB, DEL a random 85%%, wait %d s'
        % (keys // 1000, wait),
        kind='redis', params={'keys': keys, 'delete': 0.85, 'wait': wait},
        extra=redis_extra))
    W.append(Workload(
        'redis-age', 'redis-server: SET %dk keys of 8 B..2 KiB, DEL 85%% in runs of %d keys '
        'set one after another (survivors clustered by age), wait %d s'
        % (keys // 1000, AGE_RUN, wait),
        kind='redis', params={'keys': keys, 'delete': 0.85, 'wait': wait, 'pattern': 'age'},
        extra=redis_extra))
    W.append(Workload(
        'python', 'python3 dict/str churn, %s records (PYTHONMALLOC=malloc)'
        % ('50k' if q else '300k'),
        [python_binary() or 'python3', os.path.join(ROOT, 'scripts', 'pychurn.py'),
         '50000' if q else '300000'],
        env={'PYTHONMALLOC': 'malloc'},
        # Its own final Pss: with meshing, a host page and its alias count
        # twice in VmRSS once the program has touched both (pychurn.py).
        extra=[('rss_per_live', 'RSS/live~', False), ('final_pss_kb', 'final PSS KiB', False, True)]))
    return W


def check_workload(w):
    """None if runnable, else a one-line reason to skip."""
    if w.kind == 'redis':
        return None if shutil.which('redis-server') else \
            'redis-server not installed (apt-get install redis-server)'
    exe = w.argv_for('*')[0] if isinstance(w.argv, dict) else w.argv[0]
    if os.sep in exe:
        if not os.path.exists(exe):
            return '%s not built' % os.path.relpath(exe, ROOT)
    elif not shutil.which(exe):
        return '%s not found in PATH' % exe
    return None
