/*
 * core/options.h - every option, from SLABDEFRAG_<NAME> environment
 * variables.  The table in core/options.c is the one place they are
 * declared and parsed; docs/options.md has the same table for users.
 */
#ifndef SD_CORE_OPTIONS_H
#define SD_CORE_OPTIONS_H

#include "fmt.h"

#include <stdint.h>

enum { SD_STATS_OFF, SD_STATS_TEXT, SD_STATS_JSON };

/* Debug letters, as the kernel's slub_debug. */
#define SD_DEBUG_F 0x1u   /* sanity checks on every operation */
#define SD_DEBUG_Z 0x2u   /* red zones */
#define SD_DEBUG_P 0x4u   /* poisoning */
#define SD_DEBUG_U 0x8u   /* store allocating/freeing call sites */
#define SD_DEBUG_T 0x10u  /* trace every operation */

struct sd_options {
    uint32_t decay_ms;             /* empty slabs / cached big blocks kept */
    uint32_t retain_empty;         /* empty slabs kept per cache */
    uint32_t min_partial;          /* partial slabs a shrink leaves alone */
    uint32_t shrink_interval_ms;   /* background shrinker period */
    uint32_t pass_budget_ms;       /* time bound of one background pass */
    uint32_t rss_limit_mb;         /* shrink when RSS exceeds this; 0 off */
    uint32_t background;           /* SD_BG_*: when the shrinker starts on
                                      its own */
    uint32_t psi;                  /* watch PSI and cgroup memory events */
    uint32_t stats;                /* SD_STATS_* at exit */
    uint32_t control;              /* serve the slabinfo socket */
    uint32_t pass_events;          /* "event=shrink_pass mono=S bytes=N" on
                                      stderr after a pass that released
                                      memory (scripts/compare's plots) */
    uint32_t debug;                /* SD_DEBUG_* letters */
    uint32_t mesh;                 /* mesh sparse malloc slabs (core/heapfile.h) */
    uint32_t mesh_max_maps;        /* mappings meshing may create; 0 = half
                                      of vm.max_map_count */
    uint32_t mesh_page_slabs;      /* meshing: a 32..2048 B class holding this
                                      many slabs gets 4/8 KiB ones (0: never) */
    uint32_t mesh_shuffle;         /* meshing: new slabs hand out objects
                                      in address order (0), from a random
                                      one on once a class shows a pattern
                                      (1), in a random order (2), from a
                                      random one on (3): MESH_ORDER_* */
    uint32_t percpu;               /* per-CPU caches where rseq allows (0:
                                      per-thread caches) */
    uint32_t percpu_kb;            /* per-CPU budget of the malloc classes */
    uint32_t harden;               /* encode and check free pointers
                                      (core/slab.h) */
    uint32_t thread_kb;            /* per-thread mode: a thread's ring slabs,
                                      all caches together */
    uint32_t mesh_barrier;         /* meshing: SD_BARRIER_* write barrier */
    uint32_t page_purge;           /* give back free pages of sparse slabs
                                      of big malloc classes */
    uint32_t prof;                 /* sampling heap profiler on (hooks/prof.c) */
    uint32_t prof_interval;        /* its mean sampling interval, bytes */
    char     debug_caches[256];    /* comma list of cache names; "" = all */
    char     prof_prefix[200];     /* profile at exit: <prefix>.<pid>.heap */
};

/* SLABDEFRAG_BACKGROUND: SD_BG_OFF, the shrinker starts only when
 * something needs it (hooks/shrinker.c); SD_BG_ON, at start-up, with a
 * full pass every interval; SD_BG_AUTO (the default), also when the
 * program starts its second thread, and then its interval passes give
 * back what has idled past the decay (retained empty slabs, free
 * extents) even while the program makes no allocator call. */
enum { SD_BG_OFF, SD_BG_ON, SD_BG_AUTO };

/* mesh_shuffle (classes/mesh.c, "Placement"). */
enum { MESH_ORDER_ADDRESS, MESH_ORDER_ADAPT, MESH_ORDER_PERMUTE, MESH_ORDER_ROTATE };

/* SLABDEFRAG_MESH_BARRIER: how a slab being meshed is write-protected
 * (core/heapfile.c). */
enum { SD_BARRIER_AUTO, SD_BARRIER_UFFD, SD_BARRIER_MPROTECT };

extern SD_HIDDEN struct sd_options sd_opt;

/* Parse the environment once (idempotent, does not allocate).  Bad values
 * are reported on stderr, one line each, and the default is kept. */
void options_init(void);
/* Does debugging apply to the cache of this name? */
int options_debug_wants(const char *cache_name);

#endif
