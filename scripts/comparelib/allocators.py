"""scripts/comparelib/allocators.py - the allocators scripts/compare knows,
the environment of the slabdefrag variants, and finding the system
allocators' libraries."""
import os
import re
import subprocess

from .common import say, die

LIBDIRS = ['/usr/lib/x86_64-linux-gnu', '/lib/x86_64-linux-gnu',
           '/usr/lib64', '/lib64', '/usr/lib', '/usr/local/lib']
SYSTEM_ALLOCATORS = [
    # name, library file names to look for (first found wins)
    ('jemalloc', ['libjemalloc.so.2']),
    ('glibc', ['libc.so.6']),
    ('mimalloc', ['libmimalloc.so.2', 'libmimalloc.so']),
    ('tcmalloc', ['libtcmalloc_minimal.so.4', 'libtcmalloc.so.4']),
]
ALLOCATOR_ORDER = ['slabdefrag', 'slabdefrag+mesh', 'jemalloc', 'glibc', 'mimalloc',
                   'tcmalloc']
# Rows that run libslabdefrag with extra environment.  The last four are
# only run when --allocators names them (new slabs in address order, or
# rotated from the start, against the default that rotates once a class
# shows a pattern; the per-thread fallback of the thread caches; the cost
# of hardening).
ALLOCATOR_ENV = {'slabdefrag+mesh': {'SLABDEFRAG_MESH': '1'},
                 'slabdefrag+mesh-noshuffle': {'SLABDEFRAG_MESH': '1',
                                               'SLABDEFRAG_MESH_SHUFFLE': '0'},
                 'slabdefrag+mesh-rotate': {'SLABDEFRAG_MESH': '1',
                                            'SLABDEFRAG_MESH_SHUFFLE': '3'},
                 'slabdefrag+perthread': {'SLABDEFRAG_PERCPU': '0'},
                 'slabdefrag+noharden': {'SLABDEFRAG_HARDEN': '0'}}
KNOWN_ALLOCATORS = (ALLOCATOR_ORDER[:2] + ['slabdefrag+mesh-noshuffle', 'slabdefrag+mesh-rotate',
                                           'slabdefrag+perthread', 'slabdefrag+noharden'] +
                    ALLOCATOR_ORDER[2:])
BASELINE = 'jemalloc'
# Another build of the library, side by side with this one (an older
# commit, say): BASE@TAG=PATH, BASE one of the slabdefrag rows (its
# environment), TAG letters, digits, '.', '-' or '_'; the row is BASE@TAG.
OTHER_BUILD = re.compile(r'^(slabdefrag[^@=]*)@([\w.-]+)=(.+)$')


def row_env(row):
    """The extra environment of a slabdefrag row (BASE@TAG: BASE's)."""
    return ALLOCATOR_ENV.get(row.split('@', 1)[0], {})


def find_system_lib(names):
    for n in names:
        for d in LIBDIRS:
            p = os.path.join(d, n)
            if os.path.exists(p):
                return p
    try:
        out = subprocess.run(['ldconfig', '-p'], capture_output=True, text=True).stdout
    except OSError:
        return None
    for n in names:
        m = re.search(r'\s%s\s.*=>\s*(\S+)' % re.escape(n), out)
        if m:
            return m.group(1)
    return None



def choose(want, lib):
    """{row name: library} for the allocators in want that exist (a missing
    one is skipped with a message), and their display order."""
    allocs = {}
    others = []
    for x in want:
        m = OTHER_BUILD.match(x)
        if m:
            base, tag, path = m.groups()
            if base not in KNOWN_ALLOCATORS:
                die('--allocators %s: %r is not a slabdefrag row (BASE@TAG=PATH, BASE one '
                    'of %s)' % (x, base, ','.join(k for k in KNOWN_ALLOCATORS
                                                   if k.startswith('slabdefrag'))), 2)
            if not os.path.isfile(path):
                die('--allocators %s: no library at %s' % (x, path), 2)
            row = base + '@' + tag
            if row in allocs:
                die('--allocators: row %s named twice' % row, 2)
            allocs[row] = os.path.abspath(path)
            others.append(row)
        elif x not in KNOWN_ALLOCATORS:
            die('unknown allocator %r (choose from %s, or BASE@TAG=PATH for another build)'
                % (x, ','.join(KNOWN_ALLOCATORS)), 2)
    for name in want:
        if OTHER_BUILD.match(name):
            continue
        if name.startswith('slabdefrag'):
            if os.path.exists(lib):
                allocs[name] = lib
            else:
                say('%s: %s not found (build it, or pass --lib); skipping it' % (name, lib))
        else:
            p = find_system_lib(dict(SYSTEM_ALLOCATORS)[name])
            if p:
                allocs[name] = p
            else:
                pkg = {'jemalloc': 'libjemalloc2', 'mimalloc': 'libmimalloc2.0',
                       'tcmalloc': 'libgoogle-perftools4', 'glibc': 'libc6'}[name]
                say('%s: library not found (apt-get install %s); skipping it' % (name, pkg))
    if not allocs:
        die('no allocator available')
    known = [x for x in KNOWN_ALLOCATORS if x in allocs]
    mine = sum(1 for x in known if x.startswith('slabdefrag'))
    return allocs, known[:mine] + others + known[mine:]
