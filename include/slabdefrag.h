/*
 * include/slabdefrag.h - the one public header of slabdefrag.
 *
 * slabdefrag is a malloc replacement whose every allocation lives in a
 * SLUB-style per-size cache.  Programs that want memory back create typed
 * caches here and register get()/kick() callbacks; the allocator then empties
 * sparsely used slabs by asking the program to free or move the objects on
 * them (Christoph Lameter's 2007 slab defragmentation, in user space).
 *
 * Link with -lslabdefrag (pkg-config slabdefrag), or run under
 * LD_PRELOAD=libslabdefrag.so and resolve these symbols at run time.
 */
#ifndef SLABDEFRAG_H
#define SLABDEFRAG_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SLABDEFRAG_VERSION "0.1.0"

typedef struct sd_cache sd_cache;

/* Flags for sd_cache_create(). */
#define SD_HWCACHE_ALIGN 0x1UL  /* align objects to a 64-byte cache line */
#define SD_NO_MERGE      0x2UL  /* never alias this cache with another */
#define SD_CACHE_FLAGS   (SD_HWCACHE_ALIGN | SD_NO_MERGE)

struct sd_cache_ops {
    /*
     * Called with the slab locked, from the thread that vacates it (the
     * background shrinker, or the caller of sd_vacate()/sd_cache_shrink()).
     * Every object in objs[0..nr) is allocated, in address order, and frees
     * of objects on this slab wait until get() returns.  Take a reference on
     * each object you can handle; set the others to NULL.  Must not call the
     * allocator (malloc, free, sd_cache_*): doing so is reported by name on
     * stderr and aborts.  The return value is handed to kick().
     */
    void *(*get)(sd_cache *s, int nr, void **objs);
    /*
     * Called with no allocator lock held, by the same thread, after get().
     * Free or move every non-NULL object (allocate a new one, copy,
     * repoint, free the old), or just drop the references if private_data
     * says so.  May allocate and free freely.  Success is judged by what is
     * left on the slab afterwards.
     */
    void (*kick)(sd_cache *s, int nr, void **objs, void *private_data);
};

/*
 * Create a cache of objects of `size` bytes aligned to `align` (0: the
 * default 16; otherwise a power of two up to 4096).  `name` is copied (at
 * most 47 bytes are kept).  ctor, if given, runs on each object when its
 * slab is created (as in the kernel: objects must be freed in the
 * constructed state).  ops, if given, must have both get and kick.
 * Returns NULL with errno set: EINVAL for a bad argument, ENOMEM.
 * A cache with no ctor, no ops and no SD_NO_MERGE may be an alias of an
 * existing compatible cache (SLUB's cache merging).
 */
sd_cache *sd_cache_create(const char *name, size_t size, size_t align,
                          unsigned long flags, void (*ctor)(void *obj),
                          const struct sd_cache_ops *ops);

#define SD_CACHE_OPS(type, flags, ops)                                      \
    sd_cache_create(#type, sizeof(struct type), _Alignof(struct type),     \
                    (flags), NULL, (ops))
#define SD_CACHE(type, flags) SD_CACHE_OPS(type, flags, NULL)

/* Destroy a cache.  A cache that still has objects is reported on stderr
 * and its memory is left mapped (nothing live is unmapped). */
void sd_cache_destroy(sd_cache *s);

/* Allocate one object (NULL with errno ENOMEM on failure). */
void *sd_cache_alloc(sd_cache *s);
/* Free one object of this cache; a pointer of another cache is an error. */
void sd_cache_free(sd_cache *s, void *obj);

/* Release empty slabs, sort partial slabs fullest first and, for caches
 * with get/kick, vacate sparse slabs.  0, or a negative errno. */
int sd_cache_shrink(sd_cache *s);

/* Try to empty the one slab holding addr.  1: the slab is empty and
 * released to the OS; 0: not (any address is accepted). */
int sd_vacate(void *addr);

/* Shrink every cache, malloc classes included.  Returns the bytes returned
 * to the OS by this call. */
size_t sd_shrink_all(void);

/* 1: ptr (from malloc) sits on a sparse slab that moving it would help to
 * empty; 0: leave it where it is. */
int sd_defrag_hint(const void *ptr);
/* If sd_defrag_hint(ptr), a copy of the block in a fuller slab (ptr is
 * freed) and its address; otherwise ptr itself. */
void *sd_defrag_realloc(void *ptr);

/* Wake the background shrinker now (starting it if needed).  0 or a
 * negative errno. */
int sd_shrink_wake(void);

struct sd_cache_info {
    char   name[48];
    size_t object_size;        /* bytes the caller asked for */
    size_t slab_size;          /* bytes of one slab */
    size_t objects_per_slab;
    size_t slabs;              /* slabs the cache holds now */
    size_t partial_slabs;
    size_t objects_inuse;      /* objects handed out and not freed */
    unsigned long vacate_attempts, vacate_successes;
    unsigned long objects_kicked;     /* objects passed to kick() */
    unsigned long shrink_passes;
    size_t bytes_released;     /* bytes returned to the OS, ever */
    int    aliases;            /* other names merged into this cache */
};

/* Fill *out.  0, or -EINVAL for a NULL or unknown cache. */
int sd_cache_get_info(const sd_cache *s, struct sd_cache_info *out);
/* The live cache called `name`: a typed cache, or a malloc size class
 * ("malloc-64"); NULL if none, or if name is NULL. */
sd_cache *sd_cache_find(const char *name);
/* Print the slabinfo-style table of every cache to fd.  0 or -errno. */
int sd_stats_print(int fd);
/* The same figures as one JSON line (what SLABDEFRAG_STATS=json prints at
 * exit: per cache, "large", "shrinker", "cpu_caches", "mesh").  0 or -errno. */
int sd_stats_print_json(int fd);

#ifdef __cplusplus
}
#endif
#endif /* SLABDEFRAG_H */
