/*
 * classes/cachesetup.c - setting the caches up: the malloc classes once
 * at start-up (cache_init, which also installs the fork handlers and
 * starts the per-CPU, meshing and debug layers), and the fields every
 * cache starts with (cache_setup, for cache_create too).  The lock order
 * is in classes/cache.c.
 */
#include "cache.h"

#include <string.h>

#include "debug.h"
#include "fmt.h"
#include "mesh.h"
#include "options.h"
#include "pcpu.h"
#include "segment.h"
#include "slab.h"
#include "tcache.h"

/* Page purging (classes/cache.c, "Pages of sparse slabs"): every malloc
 * class in slabs above one page.  From PURGE_EACH_FREE_SIZE a page holds
 * at most 8 objects and a slab at most 32, and each free into a sparse
 * slab looks for free pages; below it, only the shrinker's decay pass
 * does. */
#define PURGE_EACH_FREE_SIZE 512

void cache_setup(struct sd_cache *c, uint16_t id, const char *name,
                 uint32_t object_size, uint32_t size, uint32_t align)
{
    size_t n = strlen(name);
    if (n >= sizeof c->name)
        n = sizeof c->name - 1;
    memcpy(c->name, name, n);
    c->name[n] = 0;
    c->id = id;
    c->object_size = object_size;
    c->size = size;
    c->align = align;
    unsigned kind;
    sizeclass_geometry(size, &kind, &c->capacity);
    c->kind = (uint8_t)kind;
    c->refcount = 1;
    c->tagged = 1;
    c->list_lock = (sd_mutex)SD_MUTEX_INIT;
    list_init(&c->partial);
    list_init(&c->empty);
    c->debug = (uint8_t)(options_debug_wants(c->name) ? sd_opt.debug : 0);
    if (c->debug)
        debug_geometry(c);      /* red zone, free pointer, tracks: debug.h */
}

static const char *slab_name(const struct slab *s)
{
    const struct sd_cache *c = __atomic_load_n(&s->cache, __ATOMIC_RELAXED);
    return c ? c->name : "?";
}

void cache_init(void)
{
    static int done;
    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE))
        return;
    /* Before any allocator lock is taken: a fork from another thread while
     * this one holds a lock must already run our handlers. */
    fork_handlers_install();
    sd_mutex_lock(&sd_caches_lock);
    if (!done) {
        options_init();
        slab_harden_init(sd_opt.harden);    /* before the first slab */
        slab_cache_name = slab_name;
        sd_spin_deadlock_hook = tcache_deadlock_report;
        pcpu_init();                /* per-CPU or per-thread, once */
        mesh_init();                /* before the first segment */
        for (unsigned i = 0; i < SD_NCLASSES; i++) {
            char name[32];
            struct sd_cache *c = &sd_malloc_caches[i];
            sd_fmt(name, sizeof name, "malloc-%u", sizeclass_size[i]);
            cache_setup(c, (uint16_t)i, name, sizeclass_size[i],
                        sizeclass_size[i], SD_MIN_ALIGN);
            c->is_malloc = 1;
            if (!c->debug) {        /* debug_geometry placed a debug cache's */
                unsigned kind;
                sizeclass_malloc_geometry(c->size, &kind, &c->capacity);
                c->kind = (uint8_t)kind;
                c->page_purge = !sd_opt.page_purge ||
                                seg_kind_bytes(kind) <= (1u << SLAB_PAGE_SHIFT) ? PURGE_NONE :
                                c->size >= PURGE_EACH_FREE_SIZE ? PURGE_EACH_FREE :
                                PURGE_IN_PASSES;
            }
            mesh_geometry(c);       /* page-sized slabs when meshing */
            sd_caches[i] = c;
        }
        __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    }
    sd_mutex_unlock(&sd_caches_lock);
}

